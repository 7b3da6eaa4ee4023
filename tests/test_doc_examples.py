"""The documentation's examples work as written.

- Every ```yaml block of docs/ and README.md passes `parley check --offline` (its function, in
  this process), with a dummy value in each environment variable it names (`${NAME}`, and the
  variables of `*_env` fields). A block says what it is on its first line: `# parley.yaml` (a
  server configuration, whole or some of its top-level keys) or `# configs/agents/<name>.yaml` (an
  agent file, whole or some of one agent's fields: a missing name is <name>, and the MCP servers
  and model alias it names are declared in a parley.yaml next to it). A yaml block with neither
  line fails, saying so. A block whose first line is `# an eval dataset` is an eval dataset
  (docs/evals.md): it must load as `parley eval` loads one, its judge a model named `judge`.
- Every shell block marked runnable runs: an HTML comment line `<!-- runnable -->` right before
  a ```sh (or ```bash) fence (blank lines between them allowed). It runs with
  `bash -e -o pipefail` in a new temporary folder, the virtual environment's bin first on PATH
  and a data folder of its own, and must exit 0 within RUN_TIMEOUT_S. That starts processes,
  so those tests are in the e2e layer.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.cli import _cmd_check, build_parser
from parley.config.env import ENV_REF
from parley.runtime.evals.dataset import DatasetError, load_dataset

REPO = Path(__file__).resolve().parent.parent
RUNNABLE = "<!-- runnable -->"
SERVER_FILE = "# parley.yaml"
EVAL_DATASET = "# an eval dataset"
# An agent file in an agents folder (configs/agents/, or the examples' own folders).
AGENT_FILE = re.compile(r"# ((?:[\w.-]+/)*agents/([A-Za-z0-9][A-Za-z0-9_.-]*)\.ya?ml)")
SHELLS = ("sh", "bash")
# A fence at any indentation (inside a list item too), closed by one at the same indentation.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
# Long enough to pass as a token too (auth.tokens[].token_env wants 24 characters or more).
DUMMY = "dummy-value-of-a-doc-example-0123456789"
# The credential store's key variables (credentials.key_env, previous_keys_env) hold a key.
KEY_FIELDS = frozenset({"key_env", "previous_keys_env"})
DUMMY_KEY = base64.urlsafe_b64encode(b"k" * 32).decode()
RUN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Block:
    """A fenced code block of a document: where it starts, its language and text, and whether
    it is marked runnable."""

    document: str
    line: int
    language: str
    text: str
    runnable: bool

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def documents(root: Path) -> list[Path]:
    return [*sorted(root.glob("docs/**/*.md")), root / "README.md"]


def code_blocks(text: str, document: str) -> list[Block]:
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        indent = match.group("indent")
        body = "".join(
            row[len(indent) :] if row.startswith(indent) else row
            for row in match.group("body").splitlines(keepends=True)
        )
        blocks.append(Block(document, line, match.group("lang"), body, before == RUNNABLE))
    return blocks


def doc_blocks(root: Path = REPO) -> Iterator[Block]:
    for path in documents(root):
        yield from code_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(root)))


# ---------------------------------------------------------------- yaml blocks: parley check


class NotAConfiguration(Exception):
    """A yaml block whose first line does not say which file it is."""


def env_names(text: str, data: Any) -> dict[str, str]:
    """The environment variables a configuration reads (${NAME} and the values of *_env fields),
    each with a dummy value: a credential key's is a key (32 bytes, URL-safe base64)."""
    names = {m.group(1): DUMMY for m in ENV_REF.finditer(text) if m.group(1)}

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            for key, inner in item.items():
                if str(key) in KEY_FIELDS:
                    for name in inner if isinstance(inner, list) else [inner]:
                        names[str(name)] = DUMMY_KEY
                elif str(key).endswith("_env") and isinstance(inner, str):
                    names[inner] = DUMMY
                walk(inner)
        elif isinstance(item, list):
            for inner in item:
                walk(inner)

    walk(data)
    return names


def _parsed(text: str) -> Any:
    """The block's YAML, or None when it is not YAML (parley check then says why)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _server_names(data: dict[str, Any]) -> list[str]:
    refs = data.get("mcp_servers") or []
    names = [r if isinstance(r, str) else r.get("server") for r in refs if isinstance(r, str | dict)]
    return [n for n in names if isinstance(n, str)]


def write_example(block: Block, folder: Path) -> tuple[Path, str | None]:
    """Write the files `block` stands for into `folder`: the parley.yaml to check, and the name of
    the agent it defines (None for a server configuration).

    Raises:
        NotAConfiguration: its first line names neither kind of file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    first = block.text.split("\n", 1)[0].strip()
    data = _parsed(block.text)
    mapping = data if isinstance(data, dict) else {}
    if first == SERVER_FILE:
        config = folder / "parley.yaml"
        config.write_text(block.text, encoding="utf-8")
        folders = mapping.get("agents_dir", [])
        for name in [folders] if isinstance(folders, str) else folders:
            if isinstance(name, str) and not Path(name).is_absolute():
                (folder / name).mkdir(parents=True, exist_ok=True)
        return config, None
    agent_file = AGENT_FILE.fullmatch(first)
    if agent_file is None:
        raise NotAConfiguration(
            f"{block}: a yaml block's first line says which file it is: '{SERVER_FILE}' or "
            f"'# configs/agents/NAME.yaml' (or another agents/ folder; got {first!r})"
        )
    name = mapping.get("name", agent_file.group(2))
    text = block.text if "name" in mapping else f"{block.text.rstrip()}\nname: {name}\n"
    (folder / agent_file.group(1)).parent.mkdir(parents=True, exist_ok=True)
    (folder / agent_file.group(1)).write_text(text, encoding="utf-8")
    base: dict[str, Any] = {
        "agents_dir": str(Path(agent_file.group(1)).parent),
        "mcp_servers": {server: {"command": "not-started-offline"} for server in _server_names(mapping)},
    }
    alias = mapping.get("model")
    if isinstance(alias, str) and alias != "inherit":
        base["model_aliases"] = {alias: {"provider": "demo", "name": "demo"}}
    config = folder / "parley.yaml"
    config.write_text(yaml.safe_dump(base), encoding="utf-8")
    return config, str(name)


def check_offline(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`parley check --offline CONFIG` in this process: its exit code and what it printed."""
    capsys.readouterr()
    code = _cmd_check(build_parser().parse_args(["check", "--offline", str(config)]))
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def check_example(
    block: Block, folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str | None:
    """Why `block` fails `parley check --offline`, or None when it passes."""
    config, agent = write_example(block, folder)
    for name, value in env_names(block.text, _parsed(block.text)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PARLEY_CONFIG", raising=False)
    code, printed = check_offline(config, capsys)
    if code != 0:
        return f"{block}: parley check --offline exits {code}:\n{printed}\n--- the block:\n{block.text}"
    if agent is not None and not re.search(
        rf"agent\(s\) \(([^)]*, )?{re.escape(agent)}(, [^)]*)?\)", printed
    ):
        return f"{block}: the agent {agent} is not among those checked:\n{printed}"
    return None


YAML_BLOCKS = [b for b in doc_blocks() if b.language == "yaml"]


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=str)
def test_every_yaml_block_of_the_docs_passes_parley_check(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if block.text.split("\n", 1)[0].strip() == EVAL_DATASET:
        try:
            load_dataset(str(block), block.text, ["judge"])
        except DatasetError as exc:
            pytest.fail(str(exc), pytrace=False)
        return
    try:
        problem = check_example(block, tmp_path, monkeypatch, capsys)
    except NotAConfiguration as exc:
        problem = str(exc)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def _block(text: str) -> Block:
    return Block("synthetic.md", 1, "yaml", text, runnable=False)


def test_the_check_passes_a_server_subset_and_an_agent_subset_with_what_they_lack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _block(
        "# parley.yaml\nagents_dir: [configs/agents, .claude/agents]\n"
        "mcp_servers:\n"
        "  tracker: {url: http://127.0.0.1:9/mcp, headers: {Authorization: 'Bearer ${TRACKER_TOKEN}'}}\n"
        "auth:\n  mode: tokens\n  tokens: [{name: ci-bot, token_env: CI_TOKEN_FOR_THE_TEST}]\n"
    )
    agent = _block(
        "# configs/agents/helper.yaml\nmodel: sonnet\n"
        "mcp_servers:\n  - time\n  - {server: tracker, include: [search]}\n"
    )
    assert check_example(server, tmp_path / "server", monkeypatch, capsys) is None
    assert check_example(agent, tmp_path / "agent", monkeypatch, capsys) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("storage:\n  path: parley.db\n", "first line says which file it is"),
        ("# an agent file\nname: x\n", "first line says which file it is"),
    ],
)
def test_a_yaml_block_that_does_not_say_which_file_it_is_fails(text: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(NotAConfiguration, match=says):
        write_example(_block(text), tmp_path)


def test_a_wrong_field_in_a_yaml_block_fails_with_parley_checks_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _block("# parley.yaml\nruntime:\n  poll_intervl_s: 1\n")
    agent = _block("# configs/agents/helper.yaml\ntools: [no_such_tool]\n")
    server_problem = check_example(server, tmp_path / "server", monkeypatch, capsys)
    agent_problem = check_example(agent, tmp_path / "agent", monkeypatch, capsys)
    assert server_problem is not None and "runtime.poll_intervl_s: unknown field" in server_problem
    assert agent_problem is not None and "tools.0: unknown built-in tool 'no_such_tool'" in agent_problem


# ---------------------------------------------------------------- shell blocks marked runnable


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run a shell block as the test runs it: bash -e, in `folder`, the venv's bin first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PARLEY_CONFIG", "PARLEY_DB")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_DATA_HOME"] = str(folder / ".data")
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", block.text],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def _failure(block: Block, ran: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{block}: exits {ran.returncode}\n--- the block:\n{block.text}"
        f"--- stdout:\n{ran.stdout}--- stderr:\n{ran.stderr}"
    )


@pytest.mark.e2e
def test_every_runnable_shell_block_of_the_docs_exits_0(tmp_path: Path) -> None:
    marked = [b for b in doc_blocks() if b.runnable]
    assert all(b.language in SHELLS for b in marked), [str(b) for b in marked if b.language not in SHELLS]
    failures = []
    for number, block in enumerate(marked):
        ran = run_block(block, tmp_path / str(number))
        if ran.returncode != 0:
            failures.append(_failure(block, ran))
    assert not failures, "\n\n".join(failures)


SYNTHETIC = """\
# A page with shell blocks

<!-- runnable -->
```sh
parley --version > version.txt
grep -q '^parley ' version.txt
parley check --offline
```

Not marked, so never run:

```sh
exit 1
```

<!-- runnable -->
```bash
false
echo "not reached"
```

1. In a list:

    <!-- runnable -->
    ```sh
    echo indented > indented.txt
    ```
"""


@pytest.mark.e2e
def test_a_runnable_block_runs_in_its_own_folder_and_a_failing_command_fails_it(tmp_path: Path) -> None:
    blocks = code_blocks(SYNTHETIC, "synthetic.md")
    assert [(b.line, b.language, b.runnable) for b in blocks] == [
        (4, "sh", True),
        (12, "sh", False),
        (17, "bash", True),
        (25, "sh", True),
    ]
    first, _, failing, indented = blocks
    ran = run_block(first, tmp_path / "first")
    assert ran.returncode == 0, _failure(first, ran)
    assert (tmp_path / "first" / "version.txt").read_text().startswith("parley ")
    ran = run_block(failing, tmp_path / "failing")
    assert ran.returncode != 0 and "not reached" not in ran.stdout
    ran = run_block(indented, tmp_path / "indented")
    assert ran.returncode == 0 and (tmp_path / "indented" / "indented.txt").read_text() == "indented\n"
