"""Every third-party module parley/ imports is declared in pyproject.toml: a package that is only
there because another one pulls it in (httpx2 through mcp, h11 through uvicorn) goes away the
day that one stops needing it. Read from the source with ast, without importing parley."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "parley"

# Import name -> distribution, where the distribution is not the import name with `_` as `-`.
# A dotted key covers that module and everything below it (the longest key wins).
DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "jwt": "pyjwt",
    "opentelemetry": "opentelemetry-api",
    "opentelemetry.sdk": "opentelemetry-sdk",
    "opentelemetry.exporter.otlp.proto.http": "opentelemetry-exporter-otlp-proto-http",
}
# Extras whose packages parley/ itself may import (behind an ImportError that names the extra);
# the `test` extra is for the repository's own tests, never for parley/.
RUNTIME_EXTRAS = {"otel"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of(module: str) -> str:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:end])) in DISTRIBUTION_OF:
            return DISTRIBUTION_OF[prefix]
    return _normal(parts[0])


@functools.cache
def _trees() -> tuple[tuple[Path, ast.Module], ...]:
    return tuple((path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py")))


def third_party_imports() -> dict[str, set[str]]:
    """Each imported module outside the standard library and parley -> the files importing it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top != "parley":
                    found[module].add(str(path.relative_to(ROOT)))
    return found


def _declared() -> dict[str, str]:
    """Each declared distribution -> where (`dependencies` or `extra <name>`)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    where: dict[str, str] = {}
    for extra in sorted(RUNTIME_EXTRAS):
        for spec in project["optional-dependencies"][extra]:
            where[_requirement_name(spec)] = f"extra {extra}"
    for spec in project["dependencies"]:
        where[_requirement_name(spec)] = "dependencies"
    return where


def _requirement_name(spec: str) -> str:
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    assert name, f"not a requirement: {spec!r}"
    return _normal(name.group(1))


def test_the_scan_sees_the_imports() -> None:
    found = third_party_imports()
    assert {"mcp", "anyio", "pydantic", "yaml"} <= {module.split(".")[0] for module in found}


def test_every_module_parley_imports_is_declared() -> None:
    declared = _declared()
    missing = sorted(
        f"{distribution_of(module)} (import {module}: {', '.join(sorted(files)[:3])})"
        for module, files in third_party_imports().items()
        if distribution_of(module) not in declared
    )
    assert not missing, "parley/ imports packages pyproject.toml does not declare:\n" + "\n".join(missing)


def test_the_mapping_names_the_distribution_that_provides_each_module() -> None:
    """The mapping above stays honest: the distribution named installs the module imported."""
    providers = importlib.metadata.packages_distributions()
    wrong = []
    for module in third_party_imports():
        top = module.split(".")[0]
        names = {_normal(name) for name in providers.get(top, [])}
        if distribution_of(module) not in names:
            wrong.append(f"{module}: {distribution_of(module)} is not among {sorted(names)}")
    assert not wrong, "\n".join(wrong)


def test_a_module_of_an_extra_is_imported_only_where_it_may_be_missing() -> None:
    """A package of an extra is imported inside a function (telemetry.py), never at a module's top,
    so parley starts without the extra installed."""
    declared = _declared()
    at_top = []
    for path, tree in _trees():
        for node in tree.body:
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            at_top += [
                f"{path.relative_to(ROOT)}: {module}"
                for module in modules
                if declared.get(distribution_of(module), "dependencies") != "dependencies"
            ]
    assert not at_top, "\n".join(at_top)
