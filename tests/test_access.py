"""Who may do what, by table: the access rules (runtime/access.py), fair use per principal
(runtime/fair_use.py) and the configuration of auth, limits, users and approvers."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from parley.config import AgentConfig, AgentLimits, collect_config_errors, load_config
from parley.config.auth import LimitsConfig, Members, token_digest
from parley.core.changes import Admission, Usage, UsageScope
from parley.errors import RateLimited, SessionLimitReached, SessionNotFound
from parley.runtime.access import (
    ADMIN,
    LOCAL_PRINCIPAL,
    USE,
    Principal,
    cli_principal,
    decision_verdict,
    may_see,
    may_use,
)
from parley.runtime.audit import REFUSED_PER_MINUTE, RefusalBudget
from parley.runtime.decisions import Decision
from parley.runtime.fair_use import FairUse
from parley.runtime.service import QuestionAnswer, SendRequest, StartRequest
from parley.storage.ports import Store
from tests.driver_support import NO_WAIT, service
from tests.support import open_test_store
from tests.test_config import assert_names, only_error, project

pytestmark = pytest.mark.anyio

ALICE = Principal(id="alice", scopes=frozenset({USE}), authenticated=True)
BOB = Principal(id="bob", scopes=frozenset({USE}), authenticated=True)
PERSON = Principal(id="pat", scopes=frozenset({USE, "org:approver"}), authenticated=True)
OPS = Principal(id="ops", scopes=frozenset({ADMIN}), authenticated=True)


@dataclass(frozen=True)
class Agent:
    approver: Literal["caller", "human"] = "caller"
    users: Members | None = None
    approvers: Members | None = None


def test_a_session_is_seen_by_its_owner_and_admins_only() -> None:
    assert may_see(ALICE, "alice") and may_see(OPS, "alice") and may_see(cli_principal("root"), "alice")
    assert not may_see(BOB, "alice")
    assert not may_see(LOCAL_PRINCIPAL, "alice")


def test_users_limit_an_agent_to_principals_and_scopes_and_admins() -> None:
    open_agent = Agent()
    restricted = Agent(users=Members(principals=["alice"], scopes=["org:approver"]))
    assert may_use(BOB, open_agent)
    assert may_use(ALICE, restricted) and may_use(PERSON, restricted) and may_use(OPS, restricted)
    assert not may_use(BOB, restricted)


WITH_APPROVERS = Members(principals=["pat"])
BY_SCOPE = Members(scopes=["org:approver"])

# (agent, who, owner, path) -> verdict
VERDICTS: list[tuple[Agent, Principal, str, Literal["tool", "person"], str]] = [
    # approver: caller, nobody named: the owner decides either way; others know nothing.
    (Agent(), ALICE, "alice", "tool", "allowed"),
    (Agent(), ALICE, "alice", "person", "allowed"),
    (Agent(), BOB, "alice", "tool", "not_found"),
    (Agent(), OPS, "alice", "tool", "allowed"),
    # approver: human, nobody named: as before (the person's answer, never the tools).
    (Agent(approver="human"), ALICE, "alice", "tool", "human_only"),
    (Agent(approver="human"), ALICE, "alice", "person", "allowed"),
    (Agent(approver="human"), LOCAL_PRINCIPAL, "local", "tool", "human_only"),
    # approvers named: only they decide (whatever approver says), whoever owns the session.
    (Agent(approvers=WITH_APPROVERS), ALICE, "alice", "tool", "approvers_only"),
    (Agent(approvers=WITH_APPROVERS), ALICE, "alice", "person", "approvers_only"),
    (Agent(approver="human", approvers=WITH_APPROVERS), ALICE, "alice", "person", "approvers_only"),
    (Agent(approvers=WITH_APPROVERS), PERSON, "alice", "tool", "allowed"),
    (Agent(approvers=BY_SCOPE), PERSON, "alice", "tool", "allowed"),
    (Agent(approvers=WITH_APPROVERS), BOB, "alice", "tool", "not_found"),
    (Agent(approvers=WITH_APPROVERS), OPS, "alice", "tool", "allowed"),
    # Without authentication nobody can be an approver: a person's answer only, as approver: human.
    (Agent(approvers=Members(principals=["local"])), LOCAL_PRINCIPAL, "local", "tool", "human_only"),
    (Agent(approvers=WITH_APPROVERS), LOCAL_PRINCIPAL, "local", "person", "allowed"),
]


@pytest.mark.parametrize(("agent", "who", "owner", "path", "verdict"), VERDICTS)
def test_who_may_decide_an_interrupt(
    agent: Agent, who: Principal, owner: str, path: Literal["tool", "person"], verdict: str
) -> None:
    assert decision_verdict(who, agent, owner, path) == verdict


# ---------------------------------------------------------------------------- fair use


def _used(**counts: tuple[int, float]) -> Usage:
    """A principal's usage: by what is counted, (how many, when the oldest was)."""
    return Usage(counts={k: n for k, (n, _) in counts.items()}, oldest={k: t for k, (_, t) in counts.items()})


def test_messages_over_the_minute_budget_are_refused_saying_when_to_retry() -> None:
    fair = FairUse(LimitsConfig(messages_per_minute=2))
    claim = fair.claim(ALICE, new_session=False, message=True, now=30)
    assert claim is not None and claim.scope == UsageScope(
        owner="alice", since=-30, admissions=True, running=False
    )
    assert claim.admit(_used(messages=(1, 0)), starts_turn=True) == [Admission("alice", "messages", -30)]
    with pytest.raises(RateLimited) as refused:
        claim.admit(_used(messages=(2, 0)), starts_turn=True)
    assert refused.value.retry_after_s == 30
    assert "Try again in 30 s" in str(refused.value) and "limits.messages_per_minute = 2" in str(
        refused.value
    )
    assert fair.claim(ALICE, new_session=True, message=False, now=30) is None  # nothing else is limited


def test_running_turns_are_counted_only_for_a_message_that_starts_one() -> None:
    fair = FairUse(LimitsConfig(running_turns=2, principals={"ops": {"running_turns": 5}}))
    claim = fair.claim(ALICE, new_session=False, message=True, now=0)
    # No minute's budget is set: only the running sessions are read.
    assert claim is not None and claim.scope == UsageScope(
        owner="alice", since=-60, admissions=False, running=True
    )
    busy = Usage(counts={}, oldest={}, running=2)
    assert claim.admit(busy, starts_turn=False) == []  # queues behind a running turn
    with pytest.raises(RateLimited, match=r"limits\.running_turns = 2"):
        claim.admit(busy, starts_turn=True)
    ops = fair.claim(OPS, new_session=False, message=True, now=0)
    assert ops is not None and ops.admit(busy, starts_turn=True) == []


def test_per_principal_limits_fall_back_to_the_defaults_field_by_field() -> None:
    limits = LimitsConfig(
        running_turns=3, messages_per_minute=10, principals={"bot": {"messages_per_minute": 100}}
    )
    assert (limits.of("bot").running_turns, limits.of("bot").messages_per_minute) == (3, 100)
    assert limits.of("alice") == limits


def test_new_sessions_over_the_minute_budget_are_refused_saying_when_to_retry() -> None:
    fair = FairUse(LimitsConfig(sessions_per_minute=1, messages_per_minute=1))
    claim = fair.claim(ALICE, new_session=True, message=True, now=100)
    assert claim is not None
    with pytest.raises(RateLimited, match=r"limits\.sessions_per_minute = 1") as refused:
        claim.admit(_used(sessions=(1, 100)), starts_turn=True)
    assert refused.value.retry_after_s == 60 and "Try again in 60 s" in str(refused.value)
    admitted = claim.admit(_used(), starts_turn=True)
    assert admitted == [Admission("alice", "sessions", 40), Admission("alice", "messages", 40)]


def test_multi_user_modes_limit_each_principal_unless_limits_says_otherwise() -> None:
    unset = LimitsConfig()
    assert unset.for_auth("none") == unset  # one local user: nothing changes
    for mode in ("tokens", "oauth"):
        defaults = unset.for_auth(mode)
        assert (defaults.running_turns, defaults.sessions_per_minute, defaults.messages_per_minute) == (
            4,
            30,
            None,
        )
    # limits: changes them field by field; null turns one off; principals fall back to the result.
    own = LimitsConfig.model_validate(
        {"running_turns": 10, "sessions_per_minute": None, "principals": {"bot": {"messages_per_minute": 5}}}
    ).for_auth("tokens")
    assert (own.running_turns, own.sessions_per_minute) == (10, None)
    assert (own.of("bot").running_turns, own.of("bot").messages_per_minute) == (10, 5)


# ---------------------------------------------------------------------------- refused attempts in the audit


async def _trail(store: Store, principal: str) -> list[tuple[str, str | None, str | None, Any]]:
    """(action, session_id, target, detail) of `principal`'s refused entries, oldest first."""
    entries = await store.list_audit(None, principal, None, 1000)
    return [(e.action, e.session_id, e.target, e.detail) for e in reversed(entries) if e.outcome == "refused"]


async def test_attempts_on_another_principals_session_are_refused_as_not_found_and_audited(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    agent = AgentConfig(name="demo", instructions="Help.", limits=AgentLimits(max_turns=1))
    async with open_test_store(tmp_path / "parley.db") as store:
        parley = service(store, {"demo": agent})
        started = await parley.messages.start_session(
            ALICE, StartRequest(agent="demo", message="one"), NO_WAIT
        )
        sid = started.session_id
        caplog.set_level(logging.INFO, logger="parley.runtime.audit")
        attempts: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("approve", lambda: parley.decisions.approve(BOB, sid, [Decision("int_1", True, None)], NO_WAIT)),
            (
                "answer",
                lambda: parley.decisions.answer_question(BOB, sid, QuestionAnswer("int_2", "yes"), NO_WAIT),
            ),
            ("cancel", lambda: parley.lifecycle.cancel_turn(BOB, sid, NO_WAIT)),
            ("delete_session", lambda: parley.lifecycle.delete_session(BOB, sid)),
            (
                "message",
                lambda: parley.messages.send_message(BOB, SendRequest(session_id=sid, message="hi"), NO_WAIT),
            ),
        ]
        for _, attempt in attempts:
            with pytest.raises(SessionNotFound):
                await attempt()
        trail = await _trail(store, "bob")
        assert [(a, s, t) for a, s, t, _ in trail] == [
            ("approve", None, "int_1"),
            ("answer", None, "int_2"),
            ("cancel", None, None),
            ("delete_session", None, None),
            ("message", None, None),
        ], "alice's own trail (and get_session's decisions) never shows a stranger's attempts"
        assert all(d["reason"] == "not_found" and d["session"] == sid for *_, d in trail)
        assert "a session of alice" in trail[0][3]["error"]
        assert f"refused approve by bob on session {sid} (int_1)" in caplog.text
        # Alice's message over the agent's one turn is refused, and recorded too.
        with pytest.raises(SessionLimitReached):
            await parley.messages.send_message(ALICE, SendRequest(session_id=sid, message="two"), NO_WAIT)
        assert [(a, s, d["reason"]) for a, s, _, d in await _trail(store, "alice")] == [
            ("message", sid, "turn_limit")
        ]
        assert (await parley.reads.get_session(ALICE, sid)).session.status != "closed"


async def test_a_flood_of_refused_attempts_fills_at_most_a_minutes_budget_of_entries(tmp_path: Path) -> None:
    async with open_test_store(tmp_path / "parley.db") as store:
        parley = service(store, {"demo": AgentConfig(name="demo", instructions="Help.")})
        unknown = "ses_" + "0" * 32
        for _ in range(REFUSED_PER_MINUTE + 20):
            with pytest.raises(SessionNotFound):
                await parley.lifecycle.close_session(BOB, unknown, 0)
        with pytest.raises(SessionNotFound):
            await parley.lifecycle.close_session(ALICE, unknown, 0)
        assert len(await _trail(store, "bob")) == REFUSED_PER_MINUTE
        assert len(await _trail(store, "alice")) == 1, "the budget is per principal"
    budget = RefusalBudget(per_minute=2)
    assert [budget.admit("bob", t) for t in (0, 1, 2, 3)] == [0, 0, None, None]
    assert budget.admit("bob", 61) == 2, "the first entry after a flood says how many were left out"


# ---------------------------------------------------------------------------- configuration


def _auth(tmp_path: Path, auth: dict[str, Any], http: dict[str, Any] | None = None) -> Path:
    return project(tmp_path, {"auth": auth, **({"http": http} if http else {})})


def test_static_tokens_are_kept_as_hashes_also_when_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "parley_" + "e" * 43
    monkeypatch.setenv("CI_TOKEN", token)
    config = load_config(
        _auth(
            tmp_path,
            {
                "mode": "tokens",
                "tokens": [
                    {"name": "alice", "sha256": token_digest("parley_" + "a" * 43)},
                    {"name": "ci", "token_env": "CI_TOKEN", "scopes": ["parley:use", "parley:metrics"]},
                ],
            },
        ),
        None,
    )
    assert [(t.name, t.digest.hex()) for t in config.tokens] == [
        ("alice", token_digest("parley_" + "a" * 43)),
        ("ci", token_digest(token)),
    ]
    assert token not in repr(config)


@pytest.mark.parametrize(
    ("auth", "http", "field", "says"),
    [
        ({"mode": "tokens"}, None, "auth", "needs at least one entry under tokens"),
        (
            {"mode": "tokens", "tokens": [{"name": "a", "sha256": "abc"}]},
            None,
            "auth.tokens.0.sha256",
            "64 lowercase hex",
        ),
        (
            {"mode": "tokens", "tokens": [{"name": "a", "sha256": "0" * 64, "token_env": "X"}]},
            None,
            "auth.tokens.0",
            "not both",
        ),
        (
            {"mode": "tokens", "tokens": [{"name": "local", "sha256": "0" * 64}]},
            None,
            "auth.tokens.0.name",
            "reserved",
        ),
        (
            {"mode": "tokens", "tokens": [{"name": "a", "sha256": "0" * 64, "scopes": ["admin"]}]},
            None,
            "auth.tokens.0.scopes",
            "unknown scope",
        ),
        ({"mode": "oauth"}, None, "auth", "needs an oauth section"),
        ({"mode": "oauth", "oauth": {"issuer": "https://a.example"}}, None, "auth.oauth", "give jwks_url"),
        (
            {"mode": "oauth", "oauth": {"issuer": "https://a.example", "jwks_url": "https://a.example/k"}},
            None,
            "http.public_url",
            "auth mode oauth needs the URL clients use",
        ),
        (
            {
                "mode": "oauth",
                "oauth": {
                    "issuer": "https://a.example",
                    "jwks_url": "https://a.example/k",
                    "algorithms": ["HS256"],
                },
            },
            {"public_url": "https://p.example/mcp"},
            "auth.oauth.algorithms",
            "never 'none' or a shared-secret HS*",
        ),
        ({"mode": "none"}, {"public_url": "ftp://p.example/mcp"}, "http.public_url", "http(s) URL"),
        ({"mode": "none"}, {"allowed_hosts": ["https://p.example"]}, "http.allowed_hosts.0", "not a URL"),
        (
            {"mode": "none"},
            {"trusted_proxies": ["proxy.internal"]},
            "http.trusted_proxies.0",
            "IP address or network",
        ),
    ],
)
def test_a_wrong_auth_or_http_field_is_named_with_the_fix(
    tmp_path: Path, auth: dict[str, Any], http: dict[str, Any] | None, field: str, says: str
) -> None:
    path = _auth(tmp_path, auth, http)
    error = only_error(path)
    assert_names(error, error.code, path, field)
    assert says in error.problem, error.problem


def test_an_unset_token_env_is_an_error_of_check_and_of_serving_only(tmp_path: Path) -> None:
    path = _auth(tmp_path, {"mode": "tokens", "tokens": [{"name": "a", "token_env": "PARLEY_NO_SUCH_VAR"}]})
    [error] = collect_config_errors(path)
    assert_names(error, "PARLEY-C011", path, "auth.tokens.0.token_env")
    assert "PARLEY_NO_SUCH_VAR is not set" in error.problem
    # The CLI's other commands (pending, approve, audit) need no token.
    config = load_config(path, None)
    assert config.tokens == () and [str(e) for e in config.token_problems] == [str(error)]


def test_an_agent_names_its_users_and_approvers_by_principal_or_scope(tmp_path: Path) -> None:
    path = project(
        tmp_path,
        {},
        deployer={"name": "deployer", "approvers": {"principals": ["pat"]}, "users": {"scopes": ["org:dev"]}},
        empty={"name": "empty", "approvers": {}},
    )
    error = only_error(path)
    assert error.field == "approvers" and "at least one principal or scope" in error.problem


def test_parley_token_new_prints_a_token_once_and_the_entry_that_holds_only_its_hash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from parley.cli import main

    assert main(["token", "new", "ci-bot", "--scopes", "parley:use,parley:metrics"]) == 0
    out = capsys.readouterr().out
    [token] = re.findall(r"^  (parley_\S+)$", out, re.MULTILINE)
    [entry_line] = [line.strip()[2:] for line in out.splitlines() if line.strip().startswith("- {")]
    entry = yaml.safe_load(entry_line)
    assert entry == {
        "name": "ci-bot",
        "sha256": token_digest(token),
        "scopes": ["parley:metrics", "parley:use"],
    }
    assert entry_line.count(token) == 0 and len(token) >= 40
    assert main(["token", "new", "local"]) == 2
    assert "reserved" in capsys.readouterr().err


def test_a_non_loopback_bind_needs_authentication_or_insecure_bind() -> None:
    from parley.errors import ConfigError
    from parley.server.http import check_bind

    check_bind("0.0.0.0", insecure_bind=False, authenticated=True)
    check_bind("0.0.0.0", insecure_bind=True, authenticated=False)
    with pytest.raises(ConfigError, match=r"auth\.mode"):
        check_bind("0.0.0.0", insecure_bind=False, authenticated=False)


def test_forwarded_headers_are_believed_only_from_the_configured_proxies() -> None:
    from parley.config import HttpConfig
    from parley.server.http import uvicorn_config

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never called")

    assert uvicorn_config(app, HttpConfig()).proxy_headers is False
    behind = uvicorn_config(app, HttpConfig(trusted_proxies=["10.0.0.0/8"]))
    assert behind.proxy_headers is True and behind.forwarded_allow_ips == ["10.0.0.0/8"]
