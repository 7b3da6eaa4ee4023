"""What a published parley says about itself: the MCP registry entry (`server.json`), the
distribution's metadata (pyproject.toml) and the licence agree with each other and with what the
registry checks before it lists a server.

`tests/schemas/mcp-registry-server-2025-12-11.schema.json` is the registry's server.json schema,
byte for byte as published at its `$id`
(https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json), taken on
2026-12-02 from the repository behind that address (modelcontextprotocol/static,
`schemas/2025-12-11/server.schema.json` at a9ba437d9fbbe92076a24b20d56449ac7c7786ac); see
`tests/schemas/SOURCE.md`. Building and installing the distribution is `.ci/package-check`'s
work, not this module's: these tests read files only."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import parley

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "tests" / "schemas" / "mcp-registry-server-2025-12-11.schema.json"
SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"
# The Apache License 2.0 exactly as the Apache Software Foundation publishes it
# (https://www.apache.org/licenses/LICENSE-2.0.txt; Debian's /usr/share/common-licenses/Apache-2.0)
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
# The registry's limit on a server's description (the schema's maxLength, said here too so that a
# longer one fails with this module's message)
DESCRIPTION_LIMIT = 100


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _server() -> dict[str, Any]:
    server: dict[str, Any] = _json(ROOT / "server.json")
    return server


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def _validator() -> jsonschema.protocols.Validator:
    schema = _json(SCHEMA_FILE)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _pypi_package() -> dict[str, Any]:
    packages: list[dict[str, Any]] = [p for p in _server()["packages"] if p["registryType"] == "pypi"]
    assert len(packages) == 1, _server()["packages"]
    return packages[0]


def test_the_vendored_registry_schema_is_the_published_copy() -> None:
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == SCHEMA_SHA256, (
        f"{SCHEMA_FILE.name} was edited: copy the published file again and update tests/schemas/SOURCE.md"
    )


def test_server_json_is_valid_for_the_registry_schema_it_names() -> None:
    server = _server()
    assert server["$schema"] == _json(SCHEMA_FILE)["$id"]
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(server)]
    assert errors == []


def test_the_schema_refuses_what_the_registry_refuses() -> None:
    """The validation above is not vacuous: a description over the limit, a name without a
    namespace, and a package pinned to `latest` are each refused."""
    validator = _validator()
    too_long = {**_server(), "description": "x" * (DESCRIPTION_LIMIT + 1)}
    no_namespace = {**_server(), "name": "parley"}
    latest = {**_server(), "packages": [{**_pypi_package(), "version": "latest"}]}
    for bad in (too_long, no_namespace, latest):
        assert not validator.is_valid(bad), bad


def test_the_description_fits_the_registry() -> None:
    description = _server()["description"]
    assert 0 < len(description) <= DESCRIPTION_LIMIT, (
        f"server.json's description is {len(description)} characters; the registry takes {DESCRIPTION_LIMIT}"
    )


def test_every_version_is_the_distributions() -> None:
    version = _project()["version"]
    assert parley.__version__ == version, "parley/__init__.py's __version__ differs from pyproject.toml's"
    assert _server()["version"] == version, "server.json's version differs from pyproject.toml's"
    for package in _server()["packages"]:
        assert package["version"] == version, package


def test_the_registry_entry_installs_this_distribution_and_serves_over_stdio() -> None:
    """The PyPI package is this distribution, run over stdio with `serve`; a runner that starts a
    package by its name (`uvx parley-sessions serve`) finds a command of that name."""
    package = _pypi_package()
    project = _project()
    assert package["identifier"] == project["name"]
    assert package["registryBaseUrl"] == "https://pypi.org"  # the only PyPI the registry takes
    assert package["transport"] == {"type": "stdio"}
    assert [argument["value"] for argument in package["packageArguments"]] == ["serve"]
    scripts = project["scripts"]
    assert scripts[package["identifier"]] == scripts["parley"] == "parley.cli:run"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("<!-- mcp-name: io.github.parley-mcp/parley -->\n", True),
        ("mcp-name: io.github.parley-mcp/parley\n", True),
        ("<!-- mcp-name: io.github.parley-mcp/parley-->", True),
        ("mcp-name: io.github.parley-mcp/parley.", False),  # glued to a full stop
        ("mcp-name: io.github.parley-mcp/parley-pro\n", False),  # another server's name
        ("mcp-name:io.github.parley-mcp/parley\n", False),
    ],
)
def test_the_ownership_token_is_read_as_the_registry_reads_it(text: str, found: bool) -> None:
    assert _has_ownership_token(text, "io.github.parley-mcp/parley") is found


def test_the_readme_proves_ownership_of_the_pypi_package() -> None:
    """The registry lists a PyPI package only if its description (the README, on PyPI) carries
    `mcp-name: <server.json's name>` followed by a boundary; an HTML comment hides it."""
    name = _server()["name"]
    assert _project()["readme"] == "README.md"
    assert _has_ownership_token((ROOT / "README.md").read_text(), name), (
        f"README.md needs the line <!-- mcp-name: {name} --> for the MCP registry"
    )


def test_the_licence_is_the_standard_apache_2_0_text() -> None:
    project = _project()
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256


def _has_ownership_token(text: str, name: str) -> bool:
    """`mcp-name: NAME` not continued by a name's character, unless that starts a comment's end
    (the registry's rule: a longer name does not prove this one)."""
    token = re.escape(f"mcp-name: {name}")
    return re.search(token + r"(?:$|(?=[^A-Za-z0-9._/-])|(?=--!?>))", text) is not None
