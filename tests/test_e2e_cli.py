"""The `parley` command line: serve's terminal hint, configuration errors, reading the store."""

from __future__ import annotations

import os
import pty
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import yaml

from parley.config import DEMO_AGENT, AgentConfig
from tests.support import TEST_DEADLINE_S, Database, ServerProcess, call, running_server, write_config

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent


def _parley(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parley", *args],
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_the_store_commands_start_without_loading_the_engine() -> None:
    """`parley sessions`, `pending`, `db` and the like read the database: loading the command line
    leaves the MCP SDK, the web server and the session service unloaded, so they start in a
    fraction of the time `parley serve` takes."""
    probe = (
        "import sys, parley.cli; "
        "print(sorted(m for m in ('mcp', 'mcp_types', 'starlette', 'uvicorn', 'parley.app', "
        "'parley.runtime.service') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=TEST_DEADLINE_S, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_shipped_demo_agent_file_matches_the_built_in_agent() -> None:
    data = yaml.safe_load((REPO / "configs" / "agents" / "demo.yaml").read_text())
    assert AgentConfig.model_validate(data) == DEMO_AGENT


def test_serve_refuses_an_invalid_configuration_naming_file_and_field(tmp_path: Path) -> None:
    config = write_config(tmp_path, agents={"bad": {"model": {"provider": "gpt-9"}}})
    result = _parley("serve", "--config", str(config))
    assert result.returncode == 2
    assert "PARLEY-C003" in result.stderr
    assert "bad.yaml" in result.stderr and "model.provider" in result.stderr
    assert result.stdout == ""


def test_serve_with_a_database_under_a_regular_file_says_so_in_one_line_and_exits_non_zero(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    config = write_config(tmp_path, db_name="notes.txt/parley.db")
    result = _parley("serve", "--config", str(config))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in lines[0]
    assert "--db" in lines[0] and "storage.path" in lines[0]
    assert result.stdout == ""


def _without_root_powers() -> list[str]:
    """A command prefix under which file permissions apply (root ignores them), or [] as non-root."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot be made to apply")
    caps = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


def test_serve_on_a_read_only_database_says_so_in_one_line_and_exits_non_zero(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    config = write_config(folder)
    assert _parley("sessions", "list", env={"PARLEY_CONFIG": str(config)}).returncode == 0
    (folder / "parley.db").chmod(0o400)
    folder.chmod(0o500)
    try:
        result = subprocess.run(
            [*_without_root_powers(), sys.executable, "-m", "parley", "serve", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=TEST_DEADLINE_S,
            stdin=subprocess.DEVNULL,
        )
    finally:
        folder.chmod(0o700)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"parley: storage error: cannot start: the database {folder / 'parley.db'} is not writable "
        "(a read-only file, folder or disk, or the file was moved away): fix its permissions or put it back, "
        "then start parley again"
    ]


def test_a_fresh_default_data_folder_is_private_to_its_owner(tmp_path: Path) -> None:
    result = _parley("sessions", "list", env={"XDG_DATA_HOME": str(tmp_path), "PARLEY_DB": ""})
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE((tmp_path / "parley").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "parley" / "parley.db").stat().st_mode) == 0o600


def test_serve_on_a_terminal_prints_how_to_connect(tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    try:
        with subprocess.Popen(
            [sys.executable, "-m", "parley", "serve", "--db", str(tmp_path / "t.db")],
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            try:
                seen = ""
                assert process.stderr is not None
                for line in process.stderr:
                    seen += line
                    if "Waiting for MCP messages" in line:
                        break
                assert "claude mcp add parley" in seen
                assert str(tmp_path / "t.db") in seen
            finally:
                process.terminate()
                process.wait(timeout=TEST_DEADLINE_S)
        assert process.returncode == 0
    finally:
        os.close(primary)
        os.close(secondary)


async def test_sessions_list_and_show_read_the_store(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with running_server(config) as (_, client):
        outcome = await call(client, "start_session", agent="demo", message="for the record")
    sid = outcome["session_id"]
    listed = await anyio.to_thread.run_sync(_parley, "sessions", "--config", str(config), "list")
    assert listed.returncode == 0, listed.stderr
    assert sid in listed.stdout and "idle" in listed.stdout
    shown = await anyio.to_thread.run_sync(_parley, "sessions", "--config", str(config), "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert "for the record" in shown.stdout
    assert "You said: for the record (message 1 of this session)" in shown.stdout
    missing = await anyio.to_thread.run_sync(_parley, "sessions", "--config", str(config), "show", "ses_nope")
    assert missing.returncode == 1 and "no session" in missing.stderr


def test_a_reader_that_goes_away_ends_the_listing_quietly(tmp_path: Path) -> None:
    # `parley sessions list | head`: the pipe is closed before parley writes to it.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "parley", "sessions", "--db", str(tmp_path / "p.db"), "list"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TEST_DEADLINE_S,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.close(write_end)
    assert (listed.returncode, listed.stderr) == (141, "")


async def test_tools_publish_flat_input_schemas_output_schemas_and_annotations(tmp_path: Path) -> None:
    async with running_server(write_config(tmp_path)) as (_, client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= {
        "list_agents",
        "start_session",
        "send_message",
        "get_session",
        "list_sessions",
        "cancel_turn",
        "close_session",
    }
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert not {"oneOf", "anyOf", "allOf"} & set(tool.input_schema), tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None, tool.name
    assert tools["get_session"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert tools["send_message"].annotations.destructive_hint is False  # type: ignore[union-attr]
    assert tools["cancel_turn"].annotations.destructive_hint is True  # type: ignore[union-attr]
    session_id = tools["send_message"].input_schema["properties"]["session_id"]
    assert session_id["x-mcp-header"] == "Session-Id"


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
async def test_on_postgresql_even_debug_logging_has_no_pool_chatter_and_no_driver_debug_lines(
    tmp_path: Path, database: Database
) -> None:
    # The pool logs each checkout at INFO (several lines a second while idle); the driver's DEBUG
    # lines may carry users' messages. Neither belongs in parley's log at any level.
    config = write_config(tmp_path, database=database)
    async with ServerProcess(config, db=database.db_arg, log_level="DEBUG") as server:
        async with server.client() as client:
            outcome = await call(client, "start_session", agent="demo", message="a private message")
        assert outcome["status"] == "answered"
        await server.close_stdin()
        assert await server.wait_exit() == 0
        log = server.log()
    assert "stopped" in log
    chatter = re.findall(r"^.* (?:DEBUG|INFO) psycopg\.pool: .*$", log, re.MULTILINE)
    driver_debug = re.findall(r"^.* DEBUG psycopg[.:].*$", log, re.MULTILINE)
    assert chatter == [] and driver_debug == [], (chatter + driver_debug)[:5]


def test_db_migrate_on_sqlite_says_what_it_did_then_that_nothing_is_left(tmp_path: Path) -> None:
    from parley.storage.schema import LATEST

    path = tmp_path / "fresh.db"
    first, again = (_parley("db", "migrate", "--db", str(path)) for _ in range(2))
    assert first.stdout.strip() == f"{path}: migrated from schema version 0 to {LATEST}", first.stderr
    assert again.stdout.strip() == f"{path}: schema version {LATEST}, nothing to migrate", again.stderr
