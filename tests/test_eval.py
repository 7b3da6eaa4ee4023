"""`parley eval`: a dataset's cases run as eval sessions on an agent version, beside a baseline;
the report as a table, JSON and JUnit; exit 1 on a regression, 2 on a bad dataset; a rerun
resumes the sessions an interrupted eval started. In-process, on the demo model."""

from __future__ import annotations

import getpass
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from parley.app import running_app
from parley.cli import build_parser, main
from parley.cli_common import load_from_args
from parley.cli_eval import EvalRequest, evaluate
from parley.runtime.access import session_starter
from parley.runtime.evals.dataset import load_dataset
from parley.runtime.evals.judge import parse_verdict
from parley.testing import call, eventually, parley_app, write_config

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "evals"
HELPER = {
    "instructions": "Keep a todo list.",
    "tools": ["write_todos"],
    "kinds": ["chat", "task"],
    "model": {"provider": "demo", "name": "demo"},
}


def demo_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The documented demo (examples/evals), copied so its database is the test's."""
    folder = tmp_path / "evals"
    shutil.copytree(EXAMPLES, folder)
    return folder / "demo.yaml", folder / "parley.yaml"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["eval", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def outcomes(report: dict[str, Any]) -> dict[str, bool]:
    return {case["name"]: case["passed"] for case in report["cases"]}


def test_the_demo_dataset_gives_the_expected_table_and_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset, config = demo_copy(tmp_path)
    junit = tmp_path / "junit.xml"
    assert (
        main(["eval", str(dataset), "--config", str(config), "--agent", "helper", "--junit", str(junit)]) == 0
    )
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["case", "candidate", "tokens", "latency", "tool", "calls"]
    assert [row.split()[:2] for row in table[2:6]] == [
        ["greets", "PASS"],
        ["plans", "PASS"],
        ["remembers", "PASS"],
        ["reports", "PASS"],
    ]
    assert table[-1] == "4 cases: 4 passed, 0 failed; 0 failing cases"
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "0"

    # helper-lite lost write_todos: the case that needs it regresses, the others do not.
    lite = ["--agent", "helper-lite", "--baseline", "helper", "--junit", str(junit), "--json"]
    code = main(["eval", str(dataset), "--config", str(config), *lite])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert outcomes(report) == {"greets": True, "plans": False, "remembers": True, "reports": True}
    plans = next(c for c in report["cases"] if c["name"] == "plans")
    assert plans["regression"] and plans["answers"] == "differ"
    assert "tool_called: write_todos was not called" in plans["candidate"]["failed"]
    assert plans["baseline"]["tool_calls"] == ["write_todos"] and plans["candidate"]["tool_calls"] == []
    assert report["summary"]["regressions"] == ["plans"]
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert list(cases) == ["greets", "plans", "remembers", "reports"]
    failure = cases["plans"].find("failure")
    assert failure is not None and "write_todos was not called" in (failure.text or "")
    assert all(cases[name].find("failure") is None for name in ("greets", "remembers", "reports"))


def test_a_stored_version_is_the_baseline_of_the_agent_as_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The candidate is the agent file as changed now; the baseline, the version it replaced."""
    dataset, _ = demo_copy(tmp_path)
    config = write_config(tmp_path, {"models": {"judge": {"provider": "demo"}}}, agents={"helper": HELPER})
    code, first = run_json(capsys, str(dataset), "--config", str(config), "--agent", "helper")
    assert code == 0 and all(outcomes(first).values())
    v1 = first["candidate"]["version"]
    write_config(
        tmp_path, {"models": {"judge": {"provider": "demo"}}}, agents={"helper": {**HELPER, "tools": []}}
    )

    code, compared = run_json(
        capsys, str(dataset), "--config", str(config), "--agent", "helper", "--baseline", v1
    )
    assert code == 1 and compared["summary"]["regressions"] == ["plans"]
    assert compared["baseline"]["version"] == v1 and compared["candidate"]["version"] != v1
    sessions = [c["candidate"]["session_id"] for c in first["cases"]]
    assert [c["baseline"]["session_id"] for c in compared["cases"]] == sessions, (
        "the baseline's runs are the first eval's sessions (same dataset, case and version)"
    )
    code, pinned = run_json(capsys, str(dataset), "--config", str(config), "--agent", f"helper@{v1}")
    assert code == 0 and pinned["candidate"]["label"] == f"helper@{v1}"


def test_a_replay_case_runs_the_recorded_session_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {}, agents={"helper": HELPER})

    async def record() -> str:
        async with parley_app(config) as parley, parley.mcp() as client:
            message = '/tool write_todos {"todos": [{"content": "ship"}]}'
            started = await call(client, "start_session", agent="helper", message=message)
            return str(started["session_id"])

    original = anyio.run(record)
    dataset = tmp_path / "replays.yaml"
    expect = {
        "tool_called": "write_todos",
        "arguments": [{"tool": "write_todos", "regex": {"todos": "ship"}}],
    }
    dataset.write_text(yaml.safe_dump({"cases": [{"name": "ships", "replay": original, "expect": expect}]}))
    code, report = run_json(capsys, str(dataset), "--config", str(config), "--agent", "helper")
    assert code == 0 and outcomes(report) == {"ships": True}
    replay = report["cases"][0]["candidate"]["session_id"]
    assert replay != original
    code, again = run_json(capsys, str(dataset), "--config", str(config), "--agent", "helper")
    assert code == 0 and again["cases"][0]["candidate"]["session_id"] == replay, "a rerun reuses the replay"

    async def listed() -> tuple[list[str], list[str]]:
        # With auth: none the sessions an eval starts are the local person's, as /ui lists them.
        async with parley_app(config) as parley, parley.mcp() as client:
            page = await call(client, "list_sessions", tag="eval")
            async with (await parley.http()).client() as http:
                v1 = (await http.get("/v1/sessions", params={"tag": "eval"})).json()["sessions"]
            return [s["session_id"] for s in page["sessions"]], [s["session_id"] for s in v1]

    over_mcp, over_v1 = anyio.run(listed)
    assert over_mcp == over_v1 == [replay]


# Each case fails exactly one assertion, on the demo model (and the demo model as the judge).
FAILING_CASES: list[tuple[dict[str, Any], str]] = [
    (
        {"name": "says_goodbye", "messages": ["hello"], "expect": {"text_contains": "goodbye"}},
        "text_contains: the final text has no 'goodbye'",
    ),
    (
        {"name": "opens_with_goodbye", "messages": ["hello"], "expect": {"text_matches": "^Goodbye"}},
        "text_matches: the final text does not match '^Goodbye'",
    ),
    (
        {"name": "in_one_turn", "messages": ["one", "two"], "expect": {"max_turns": 1}},
        "max_turns: 2 turns, more than 1",
    ),
    (
        {"name": "cheaply", "messages": ["hello"], "expect": {"max_tokens": 1}},
        "max_tokens: {tokens} tokens, more than 1",
    ),
    (
        {
            "name": "reports_text",
            "kind": "task",
            "messages": ['/result {"summary": 3}'],
            "expect": {"result_schema": {"type": "object", "properties": {"summary": {"type": "string"}}}},
        },
        "result_schema: summary: 3 is not of type 'string'",
    ),
    (
        {"name": "reports_nothing", "messages": ["hello"], "expect": {"result_schema": {"type": "object"}}},
        "result_schema: the session handed in no result",
    ),
    (
        {
            "name": "judged",
            "messages": ["hello"],
            "expect": {"judge": {"model": "judge", "rubric": 'The answer says "goodbye".'}},
        },
        'judge: FAIL: the answer lacks "goodbye"',
    ),
]


def test_each_assertion_that_fails_is_named_in_the_table_json_and_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a baseline every failing case is a regression (exit 1); each names the assertion it
    failed, the judge's FAIL with the judge's reason."""
    config = write_config(tmp_path, {"models": {"judge": {"provider": "demo"}}}, agents={"helper": HELPER})
    passing = {"name": "greets", "messages": ["hello"], "expect": {"text_contains": "You said: hello"}}
    dataset = tmp_path / "failing.yaml"
    dataset.write_text(yaml.safe_dump({"cases": [passing, *(case for case, _ in FAILING_CASES)]}))
    junit = tmp_path / "junit.xml"
    argv = [str(dataset), "--config", str(config), "--agent", "helper"]

    code, report = run_json(capsys, *argv, "--junit", str(junit))
    assert code == 1
    failing = [str(case["name"]) for case, _ in FAILING_CASES]
    assert outcomes(report) == {"greets": True, **dict.fromkeys(failing, False)}
    by_name = {c["name"]: c["candidate"] for c in report["cases"]}
    expected = {
        str(case["name"]): why.format(tokens=by_name[case["name"]]["tokens"]) for case, why in FAILING_CASES
    }
    assert {name: by_name[name]["failed"] for name in failing} == {n: [why] for n, why in expected.items()}
    assert by_name["judged"]["judge"] == {"passed": False, "reason": 'the answer lacks "goodbye"'}
    assert report["summary"] == {"cases": 8, "passed": 1, "failed": 7, "regressions": failing}
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["greets"].find("failure") is None
    for name, why in expected.items():
        failure = cases[name].find("failure")
        assert failure is not None and failure.get("message") == why, name

    assert main(["eval", *argv]) == 1
    table = capsys.readouterr().out.splitlines()
    # Each case's row, then one indented line per assertion it failed.
    rows = [line.split()[:2] for line in table[2:-1] if not line.startswith(" ")]
    assert rows == [["greets", "PASS"], *([name, "FAIL"] for name in failing)]
    notes = [line.strip() for line in table[2:-1] if line.startswith(" ")]
    assert notes == [f"candidate: {why}" for why in expected.values()]
    assert table[-1] == f"8 cases: 1 passed, 7 failed; 7 failing cases ({', '.join(failing)})"


BAD = [
    (
        {"cases": [{"name": "a", "messages": ["hi"], "expect": {"max_turns": 0}}]},
        "case 'a': expect.max_turns:",
    ),
    (
        {"cases": [{"name": "b", "messages": ["hi"], "expect": {"tool_calld": "x"}}]},
        "case 'b': expect.tool_calld:",
    ),
    (
        {"cases": [{"name": "c", "replay": "ses_" + "0" * 32, "messages": ["hi"]}]},
        "case 'c': (the case): give either",
    ),
    ({"cases": [{"name": "d", "replay": "yesterday"}]}, "case 'd': replay: must be a session's id"),
    (
        {"cases": [{"name": "e", "messages": ["x"], "expect": {"text_matches": "("}}]},
        "case 'e': expect.text_matches:",
    ),
    ({"cases": [{"messages": ["x"]}]}, "case 1 (cases[0]): name: Field required"),
    (
        {
            "cases": [
                {"name": "f", "messages": ["x"], "expect": {"judge": {"model": "nobody", "rubric": "r"}}}
            ]
        },
        "case 'f': expect.judge.model: 'nobody' is not under models:",
    ),
    ({"cases": []}, "cases: List should have at least 1 item"),
]


@pytest.mark.parametrize(("body", "named"), BAD)
def test_a_bad_dataset_is_refused_with_the_case_and_field_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any], named: str
) -> None:
    config = write_config(tmp_path, {}, agents={"helper": HELPER})
    dataset = tmp_path / "bad.yaml"
    dataset.write_text(yaml.safe_dump(body))
    assert main(["eval", str(dataset), "--config", str(config), "--agent", "helper"]) == 2
    err = capsys.readouterr().err
    assert named in err, err
    assert not (tmp_path / "parley.db").exists(), "nothing ran"


def test_a_judge_answers_pass_or_fail_with_a_reason() -> None:
    assert parse_verdict("PASS: it greets") == parse_verdict("**pass** - it greets")
    assert parse_verdict("FAIL: rude").passed is False and parse_verdict("FAIL: rude").reason == "rude"
    maybe = parse_verdict("Maybe.")
    assert not maybe.passed and "neither PASS nor FAIL" in maybe.reason


def test_an_interrupted_eval_resumes_with_the_sessions_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The eval is cancelled in this process once its first case's session exists (the engine
    then stops where it is, as at a crash); the same command run again finishes the eval on the
    sessions already started, with the same pass/fail per case."""
    dataset, config = demo_copy(tmp_path)
    argv = ["eval", str(dataset), "--config", str(config), "--agent", "helper", "--concurrency", "1"]
    text = dataset.read_text()

    async def interrupted() -> list[str]:
        server = load_from_args(build_parser().parse_args(argv))
        owner = session_starter(getpass.getuser(), server.auth.mode).id
        checked = load_dataset(str(dataset), text, list(server.models))
        request = EvalRequest(path=str(dataset), text=text, dataset=checked, agent="helper", concurrency=1)
        started: list[str] = []
        async with running_app(server) as app:

            async def one_started() -> bool:
                page = await app.store.list_sessions(owner, None, None, None, 100)
                started[:] = [s.id for s in page.sessions if "eval" in s.tags]
                return bool(started)

            async with anyio.create_task_group() as tg:
                tg.start_soon(evaluate, app, server, request)
                await eventually(one_started, "the eval's first session")
                tg.cancel_scope.cancel()
        return started

    before = anyio.run(interrupted)
    assert len(before) == 1, "with --concurrency 1, one case had started"
    code, resumed = run_json(capsys, *argv[1:])
    assert code == 0 and outcomes(resumed) == {
        "greets": True,
        "plans": True,
        "remembers": True,
        "reports": True,
    }
    assert resumed["cases"][0]["candidate"]["session_id"] == before[0], "the started session was reused"
    code, again = run_json(capsys, *argv[1:])
    assert outcomes(again) == outcomes(resumed)
    assert [c["candidate"]["session_id"] for c in again["cases"]] == [
        c["candidate"]["session_id"] for c in resumed["cases"]
    ]


def test_fair_use_limits_the_sessions_an_eval_and_a_replay_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset, _ = demo_copy(tmp_path)
    limited = {"models": {"judge": {"provider": "demo"}}, "limits": {"sessions_per_minute": 2}}
    config = write_config(tmp_path, limited, agents={"helper": HELPER})
    code, report = run_json(
        capsys, str(dataset), "--config", str(config), "--agent", "helper", "--concurrency", "1"
    )
    assert code == 1 and outcomes(report) == {
        "greets": True,
        "plans": True,
        "remembers": False,
        "reports": False,
    }
    [refused] = report["cases"][2]["candidate"]["failed"]
    assert refused.startswith("did not run:") and "limits.sessions_per_minute = 2" in refused
    first = report["cases"][0]["candidate"]["session_id"]
    assert main(["replay", first, "--config", str(config)]) == 1
    assert "limits.sessions_per_minute = 2" in capsys.readouterr().err, "a replay is a session started too"
