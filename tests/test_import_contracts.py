"""Which part of parley may import which, read from the source with ast (nothing is imported):

- `parley.core` imports nothing of parley's outside core (the rules are pure);
- a module at the package root is a leaf (imports nothing of parley's), unless it puts the parts
  together: the composition root (app.py, stores.py) and the command line (cli*.py, __main__.py);
- `parley.storage` imports only core and the root leaves;
- `parley.runtime` never imports `parley.server`;
- `parley.client` imports nothing of the server side (server, runtime, storage, configuration);
- no import cycle between modules, nor between the parts (the subpackages, the command line's
  modules, cli*.py, as one, and each other module at the root).

Every import counts for the contracts, an `if TYPE_CHECKING:` one too; for the cycles, only the
imports that run (a type-only import cycles nothing)."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "parley"

# The modules at the package's root that put the parts together: the composition root
# (app.py and app_http.py: configuration -> store -> runtime -> server; stores.py: the
# configured backend opened) and the command line. Every other module at the root is a leaf, which any part may use.
COMPOSING = ("parley.app", "parley.app_http", "parley.stores", "parley.__main__")
# What the client must not import: the server side.
SERVER_SIDE = (
    "parley.server",
    "parley.runtime",
    "parley.storage",
    "parley.config",
    "parley.app",
    "parley.app_http",
    "parley.stores",
)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the parley module imported
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}{', type only' if self.type_only else ''})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(child) for child in ast.walk(node) if child is not node.test)
    return inside


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The parley modules `node` imports: `from a import b` is the module a.b when there is one."""
    known = modules()
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.level:
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        origin = ".".join([*base, node.module] if node.module else base)
    else:
        origin = node.module or ""
    submodules = [f"{origin}.{alias.name}" for alias in node.names if f"{origin}.{alias.name}" in known]
    names_only = len(submodules) < len(node.names)
    return [*submodules, *([origin] if names_only and origin in known else [])]


@functools.cache
def imports() -> tuple[Import, ...]:
    found = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        type_only = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found += [
                    Import(module, target, node.lineno, id(node) in type_only)
                    for target in _targets(module, path, node)
                    if target != module
                ]
    return tuple(found)


def _within(module: str, *parts: str) -> bool:
    return any(module == part or module.startswith(part + ".") for part in parts)


def _composes(module: str) -> bool:
    return module in COMPOSING or module.startswith("parley.cli")


@functools.cache
def root_leaves() -> frozenset[str]:
    """The package itself and the modules at its root that do not put the parts together."""
    return frozenset(
        module for module, path in modules().items() if path.parent == PACKAGE and not _composes(module)
    )


def test_the_scan_sees_the_imports() -> None:
    found = {(i.source, i.target) for i in imports()}
    assert ("parley.storage.sql.conditions", "parley.core.states") in found
    assert ("parley.server.tools", "parley.runtime.service") in found
    # `from parley.client import forms, tasks` imports the two modules, not the package.
    assert ("parley.client.calls", "parley.client.tasks") in found
    assert ("parley.client.calls", "parley.client") not in found


def test_core_imports_nothing_of_parley_outside_core() -> None:
    wrong = [
        str(i) for i in imports() if _within(i.source, "parley.core") and not _within(i.target, "parley.core")
    ]
    assert not wrong, "parley.core imports outside core:\n" + "\n".join(wrong)


def test_the_root_modules_are_the_composition_root_the_command_line_and_leaves() -> None:
    assert {"parley", "parley.errors", "parley.redaction", "parley.sdk_compat"} <= root_leaves()
    assert not root_leaves() & {"parley.app", "parley.stores", "parley.cli", "parley.cli_manage"}
    wrong = [str(i) for i in imports() if i.source in root_leaves() and i.target != "parley"]
    assert not wrong, (
        "a module at the package's root imports parley's parts; move it into the part it belongs "
        "to, or make it a leaf:\n" + "\n".join(wrong)
    )


def test_storage_imports_only_core_and_the_root_leaves() -> None:
    wrong = [
        str(i)
        for i in imports()
        if _within(i.source, "parley.storage")
        and not _within(i.target, "parley.storage", "parley.core")
        and i.target not in root_leaves()
    ]
    assert not wrong, "parley.storage imports above itself:\n" + "\n".join(wrong)


def test_the_runtime_never_imports_the_server() -> None:
    wrong = [
        str(i)
        for i in imports()
        if _within(i.source, "parley.runtime") and _within(i.target, "parley.server")
    ]
    assert not wrong, "parley.runtime imports parley.server:\n" + "\n".join(wrong)


def test_the_client_imports_nothing_of_the_server_side() -> None:
    wrong = [
        str(i) for i in imports() if _within(i.source, "parley.client") and _within(i.target, *SERVER_SIDE)
    ]
    assert not wrong, "parley.client imports the server side:\n" + "\n".join(wrong)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _runtime_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for i in imports():
        if not i.type_only:
            edges[i.source].add(i.target)
    return edges


def part(module: str) -> str:
    """The part a module belongs to: its subpackage, the command line (cli*), or the module
    itself at the root."""
    name = module.split(".")[1] if "." in module else ""
    if (PACKAGE / name).is_dir():
        return f"parley.{name}"
    if name.startswith("cli"):
        return "parley.cli*"
    return module


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    cycles = _cycles(_runtime_edges())
    assert not cycles, "modules that import each other (directly or around a loop):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_no_import_cycle_between_the_parts() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    witness: dict[tuple[str, str], Import] = {}
    for i in imports():
        if not i.type_only and part(i.source) != part(i.target):
            edges[part(i.source)].add(part(i.target))
            witness.setdefault((part(i.source), part(i.target)), i)
    cycles = _cycles(edges)
    shown = []
    for cycle in cycles:
        shown.append(" <-> ".join(cycle))
        shown += [f"  {witness[(a, b)]}" for a in cycle for b in cycle if (a, b) in witness]
    assert not cycles, "parts that import each other:\n" + "\n".join(shown)
