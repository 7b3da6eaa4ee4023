"""Test tools from the npm registry (MCP servers, Node.js 22, the conformance suite, the
Inspector), installed once into a cache outside the checkout.

The cache is `$PARLEY_NPM_CACHE`, else `$XDG_CACHE_HOME/parley/npm`, else `~/.cache/parley/npm`:
a fresh clone (CI's) finds what an earlier run installed. Every package is pinned; upgrading one
is an explicit change of its pin here. The first test that needs a package runs `npm install`
(bounded by NPM_INSTALL_TIMEOUT_S); later runs reuse it. Without `node` and `npm` on PATH the
fixtures fail (CI has both), with a message saying so.

Import the fixtures into a test module (`from tests.npm_servers import everything_bin`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _cache_dir() -> Path:
    if os.environ.get("PARLEY_NPM_CACHE"):
        return Path(os.environ["PARLEY_NPM_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "parley" / "npm"


NPM_CACHE = _cache_dir()
# The machine's Node.js may be older than the suite and the Inspector need (>= 22): the npm
# package `node` ships a Node.js binary of its own.
NODE_PACKAGE, NODE_VERSION = "node", "22.23.3"
CONFORMANCE_PACKAGE, CONFORMANCE_VERSION = "@modelcontextprotocol/conformance", "0.1.16"
INSPECTOR_PACKAGE, INSPECTOR_VERSION = "@modelcontextprotocol/inspector", "2.12.0"
# The AI SDK whose chat protocol /v1/chat speaks (parley/server/ai_sdk_chat.py AI_SDK_VERSION).
AI_SDK_PACKAGE, AI_SDK_VERSION = "ai", "7.0.173"
# The previous major, which apps on Node.js 20 get from `npm install ai` (ai@7 needs Node.js 22):
# the newest 6.0.x, in a prefix of its own so that both versions are installed side by side.
AI_SDK6_VERSION = "6.0.325"
AI_SDK6_PREFIX = NPM_CACHE / "ai6"
# The accessibility engine the /ui tests run in Chromium (tests/test_e2e_ui_a11y.py).
AXE_PACKAGE, AXE_VERSION = "axe-core", "4.14.1"
EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything"
EVERYTHING_VERSION = "2026.8.31"
NPM_INSTALL_TIMEOUT_S = float(os.environ.get("PARLEY_NPM_INSTALL_TIMEOUT", "300"))
# Preloaded into server-everything's HTTP mode: its app.listen(PORT) binds every interface.
LOOPBACK_SHIM = Path(__file__).resolve().parent / "mcp_servers" / "loopback.cjs"
# Preloaded into server-everything to make its tasks outlive their MCP session (restart tests).
DURABLE_TASKS_SHIM = Path(__file__).resolve().parent / "mcp_servers" / "durable_tasks.mjs"


def _installed_version(prefix: Path, package: str) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def npm_install(package: str, version: str, prefix: Path = NPM_CACHE) -> Path:
    """Install `package@version` under `prefix` unless it is there already; return node_modules/.bin."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found on PATH: the tests of npm MCP servers need Node.js "
            f"and npm (to install {package}@{version} into {prefix})",
            pytrace=False,
        )
    prefix.mkdir(parents=True, exist_ok=True)
    # One install at a time into a prefix (two test runs may start together).
    with (prefix / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version(prefix, package) != version:
            _run_npm(prefix, package, version)
    return prefix / "node_modules" / ".bin"


def _run_npm(prefix: Path, package: str, version: str) -> None:
    command = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"{package}@{version}"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=NPM_INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(command)}` took longer than {NPM_INSTALL_TIMEOUT_S:g}s", pytrace=False)
    if done.returncode != 0 or _installed_version(prefix, package) != version:
        pytest.fail(
            f"`{' '.join(command)}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def everything_bin() -> Path:
    """The server-everything executable (`<bin> stdio` or `<bin> streamableHttp`)."""
    path = npm_install(EVERYTHING_PACKAGE, EVERYTHING_VERSION) / "mcp-server-everything"
    assert path.exists(), f"{path} is missing after installing {EVERYTHING_PACKAGE}"
    return path


def everything_sdk_module(binary: Path, module: str) -> Path:
    """A module of the TypeScript SDK that server-everything runs on (next to it in node_modules)."""
    package = binary.resolve().parents[1]  # .../@modelcontextprotocol/server-everything (dist/index.js)
    path = package.parent / "sdk" / module
    if not path.exists():  # npm may have nested the SDK under the server's own node_modules
        path = package / "node_modules" / "@modelcontextprotocol" / "sdk" / module
    assert path.exists(), f"the TypeScript SDK module {module} is not where server-everything can load it"
    return path


@pytest.fixture(scope="session")
def node22() -> Path:
    """A Node.js 22 binary (from the npm package `node`), whatever Node.js the machine has."""
    path = npm_install(NODE_PACKAGE, NODE_VERSION) / "node"
    done = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False)
    assert done.stdout.startswith("v22."), f"{path} is not Node.js 22: {done.stdout}{done.stderr}"
    return path


def _package_dir(package: str) -> Path:
    return NPM_CACHE / "node_modules" / package


@pytest.fixture(scope="session")
def conformance_cli(node22: Path) -> list[str]:
    """The command that runs the official MCP conformance suite (pinned) on Node.js 22."""
    npm_install(CONFORMANCE_PACKAGE, CONFORMANCE_VERSION)
    return [str(node22), str(_package_dir(CONFORMANCE_PACKAGE) / "dist" / "index.js")]


@pytest.fixture(scope="session")
def inspector_cli(node22: Path) -> list[str]:
    """The command that runs the MCP Inspector's CLI mode (pinned) on Node.js 22."""
    npm_install(INSPECTOR_PACKAGE, INSPECTOR_VERSION)
    launcher = _package_dir(INSPECTOR_PACKAGE) / "clients" / "launcher" / "build" / "index.js"
    return [str(node22), str(launcher), "--cli"]


@pytest.fixture(scope="session")
def ai_sdk_chat(node22: Path) -> list[str]:
    """The command that drives a chat with the AI SDK (pinned) on Node.js 22: append a scenario
    (tests/ai_sdk/chat_client.mjs)."""
    npm_install(AI_SDK_PACKAGE, AI_SDK_VERSION)
    script = Path(__file__).resolve().parent / "ai_sdk" / "chat_client.mjs"
    return [str(node22), str(script), str(_package_dir(AI_SDK_PACKAGE) / "dist" / "index.js")]


@pytest.fixture(scope="session")
def ai_sdk6_chat(node22: Path) -> list[str]:
    """The same chat driver on the AI SDK 6 (its own install under AI_SDK6_PREFIX, its own parser)."""
    npm_install(AI_SDK_PACKAGE, AI_SDK6_VERSION, AI_SDK6_PREFIX)
    script = Path(__file__).resolve().parent / "ai_sdk" / "chat_client.mjs"
    # Version 6 ships CommonJS as index.js and the ES module as index.mjs.
    module = AI_SDK6_PREFIX / "node_modules" / AI_SDK_PACKAGE / "dist" / "index.mjs"
    return [str(node22), str(script), str(module)]


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core (pinned) as the text of its browser script, to evaluate in a page."""
    npm_install(AXE_PACKAGE, AXE_VERSION)
    return (_package_dir(AXE_PACKAGE) / "axe.min.js").read_text()
