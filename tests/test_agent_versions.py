"""Agent versions and live reload, without a subprocess: versions are content hashes, a turn runs
to its end on the definition it started with (in this process or another one, from the database),
and a reload serves what is valid, keeps what is not, and removes what is gone."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import yaml

from parley.config import AgentConfig, ModelSpec, load_config
from parley.config.auth import Members
from parley.core.ids import SessionId
from parley.core.records import Resolution
from parley.errors import AgentRemoved
from parley.runtime.access import LOCAL_PRINCIPAL
from parley.runtime.agent_catalog import AgentCatalog, definition_of, version_of
from parley.runtime.agent_reload import AgentReloader
from parley.runtime.model import ModelResponse, RequestedCall
from parley.runtime.service import SendRequest
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store
from parley.testing.model import ScriptedModelClient
from tests.driver_support import NO_WAIT, drive, service, started_session
from tests.support import TEST_DEADLINE_S, open_test_store

pytestmark = pytest.mark.anyio

ASKER = AgentConfig(
    name="asker",
    instructions="Version one.",
    model=ModelSpec(provider="scripted", name="s"),
    tools=["ask_user"],
)
ASKER_2 = ASKER.model_copy(update={"instructions": "Version two."})


def version(agent: AgentConfig) -> str:
    return version_of(definition_of(agent))


# ---------------------------------------------------------------------------- versions


def test_a_version_is_a_hash_of_the_whole_definition_and_survives_storage() -> None:
    people = ASKER.model_copy(
        update={"users": Members(principals=["alice"], scopes=["team"]), "version": "2.1"}
    )
    assert version(people) == version(AgentConfig.model_validate(definition_of(people)))
    assert len({version(ASKER), version(ASKER_2), version(people)}) == 3
    assert version(ASKER.model_copy(update={"version": "2.2"})) != version(ASKER)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """The database file the tests' processes share (each opens it with a connection of its own)."""
    return tmp_path / "parley.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[Store]:
    async with open_test_store(db_path) as opened:
        yield opened


async def session(store: Store, text: str) -> SessionId:
    return await started_session(store, ASKER.name, text)


ASK = RequestedCall(name="ask_user", arguments={"question": "go?"})


async def answer_pending(store: Store, sid: SessionId) -> None:
    [pending] = await store.list_interrupts(sid, pending_only=True)
    outcome = await SessionSteps(store).resolve_interrupt(
        sid, pending.id, Resolution(answer="yes"), "caller", time.time()
    )
    assert outcome.outcome == "resolved"


async def test_a_turn_finishes_on_the_version_it_started_with_and_the_next_turn_takes_the_new_one(
    store: Store,
) -> None:
    catalog = AgentCatalog({ASKER.name: ASKER}, store)
    model = ScriptedModelClient([ModelResponse(text="asking", tool_calls=(ASK,)), ModelResponse(text="done")])
    sid = await session(store, "first")
    await drive(store, catalog, model, sid, "proc_a")  # parks on the question
    catalog.replace({ASKER.name: ASKER_2})
    await answer_pending(store, sid)
    await drive(store, catalog, model, sid, "proc_a")
    await service(store, catalog).messages.send_message(
        LOCAL_PRINCIPAL, SendRequest(session_id=sid, message="second"), NO_WAIT
    )
    model.add(ModelResponse(text="again"))
    await drive(store, catalog, model, sid, "proc_a")
    model.assert_complete()
    assert [r.instructions for r in model.requests] == ["Version one.", "Version one.", "Version two."]
    assert [t.agent_version for t in await store.list_turns(sid)] == [version(ASKER), version(ASKER_2)]


async def test_another_process_resumes_a_turn_on_its_version_from_the_database(
    store: Store, db_path: Path
) -> None:
    model = ScriptedModelClient([ModelResponse(text="asking", tool_calls=(ASK,)), ModelResponse(text="done")])
    sid = await session(store, "first")
    await drive(store, AgentCatalog({ASKER.name: ASKER}, store), model, sid, "proc_a")
    await answer_pending(store, sid)
    # A second process, started after the file changed: it has never seen version one.
    async with open_test_store(db_path) as other:
        await drive(other, AgentCatalog({ASKER.name: ASKER_2}, other), model, sid, "proc_b")
    assert [r.instructions for r in model.requests] == ["Version one.", "Version one."]
    [turn] = await store.list_turns(sid)
    assert (turn.status, turn.answer, turn.agent_version) == ("answered", "done", version(ASKER))


async def test_a_removed_agents_turn_finishes_and_its_session_refuses_new_messages(store: Store) -> None:
    catalog = AgentCatalog({ASKER.name: ASKER}, store)
    model = ScriptedModelClient([ModelResponse(text="asking", tool_calls=(ASK,)), ModelResponse(text="done")])
    sid = await session(store, "first")
    await drive(store, catalog, model, sid, "proc_a")
    catalog.replace({})
    await answer_pending(store, sid)
    await drive(store, catalog, model, sid, "proc_a")
    [turn] = await store.list_turns(sid)
    assert (turn.status, turn.answer) == ("answered", "done")
    parley = service(store, catalog)
    with pytest.raises(AgentRemoved) as refused:
        await parley.messages.send_message(
            LOCAL_PRINCIPAL, SendRequest(session_id=sid, message="more"), NO_WAIT
        )
    assert "its agent 'asker' is no longer configured" in str(refused.value)
    details = await parley.reads.get_session(LOCAL_PRINCIPAL, sid)
    assert [t.agent_version for t in details.turns] == [version(ASKER)]


async def test_the_definition_is_stored_by_the_first_turn_on_it_only(store: Store) -> None:
    catalog = AgentCatalog({ASKER.name: ASKER}, store)
    first, store_it = catalog.for_new_turn(ASKER.name, 1.0)
    assert first is not None and store_it and first.definition == definition_of(ASKER)
    catalog.mark_stored(first)
    assert catalog.for_new_turn(ASKER.name, 2.0)[1] is False
    catalog.replace({ASKER.name: ASKER_2})
    assert catalog.for_new_turn(ASKER.name, 3.0)[1] is True
    assert catalog.for_new_turn("nobody", 3.0) == (None, False)


# ---------------------------------------------------------------------------- reload


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def md(name: str, body: str, **fields: object) -> str:
    return f"---\n{yaml.safe_dump({'name': name, 'tools': 'ask_user', **fields})}---\n{body}\n"


async def test_a_reload_serves_valid_changes_keeps_invalid_ones_and_removes_what_is_gone(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    config_path = tmp_path / "parley.yaml"
    write(config_path, yaml.safe_dump({"agents_dir": "agents", "storage": {"path": "p.db"}}))
    write(tmp_path / "agents/a.md", md("a", "A one."))
    write(tmp_path / "agents/b.yaml", yaml.safe_dump({"name": "b", "instructions": "B one."}))
    config = load_config(config_path, None)
    catalog = AgentCatalog(config.agents, store)
    reloaded: list[set[str]] = []
    reloader = AgentReloader(
        config_path, catalog, config.agent_files, {}, 1.0, on_reload=lambda now: reloaded.append(set(now))
    )
    a_one = catalog.version("a")

    write(tmp_path / "agents/a.md", md("a", "A two."))
    write(tmp_path / "agents/c.md", md("c", "C one."))
    (tmp_path / "agents/b.yaml").unlink()
    report = await reloader.reload()
    assert (report.added, report.changed, report.removed) == (["c"], ["a"], ["b"])
    assert catalog["a"].instructions == "A two." and catalog.version("a") != a_one
    assert set(catalog) == {"demo", "a", "c"} and reloaded == [{"demo", "a", "c"}]

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        write(tmp_path / "agents/a.md", md("a", "A three.", kinds=["nonsense"]))
        report = await reloader.reload()
    assert report.kept == ["a"] and catalog["a"].instructions == "A two."
    logged = caplog.text
    assert "PARLEY-C002" in logged and "kinds.0" in logged
    assert "PARLEY-C020" in logged and "keeps serving the version read before" in logged

    # parley.yaml's agent parts reload; the rest waits for a restart and says so.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        write(
            config_path,
            yaml.safe_dump(
                {
                    "agents_dir": "agents",
                    "storage": {"path": "p.db"},
                    "runtime": {"poll_interval_s": 0.2},
                    "default_model": {"provider": "openai", "name": "m", "base_url": "http://127.0.0.1:9/v1"},
                }
            ),
        )
        write(tmp_path / "agents/a.md", md("a", "A four."))
        report = await reloader.reload()
    assert catalog["c"].model.provider == "openai" and catalog["a"].instructions == "A four."
    assert sorted(report.changed) == ["a", "c"]
    assert "PARLEY-C019" in caplog.text and "runtime" in caplog.text


async def test_the_watcher_notices_a_changed_file_within_its_interval(tmp_path: Path, store: Store) -> None:
    config_path = tmp_path / "parley.yaml"
    write(config_path, yaml.safe_dump({"agents_dir": "agents", "storage": {"path": "p.db"}}))
    write(tmp_path / "agents/a.md", md("a", "A one."))
    config = load_config(config_path, None)
    catalog = AgentCatalog(config.agents, store)
    reloaded = anyio.Event()
    reloader = AgentReloader(
        config_path, catalog, config.agent_files, {}, 0.05, on_reload=lambda now: reloaded.set()
    )
    async with anyio.create_task_group() as tg:
        await tg.start(reloader.run)
        write(tmp_path / "agents/a.md", md("a", "A changed, and longer."))
        with anyio.fail_after(TEST_DEADLINE_S):
            await reloaded.wait()
        assert catalog["a"].instructions == "A changed, and longer."
        tg.cancel_scope.cancel()
