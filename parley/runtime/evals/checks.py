"""What an eval case's run showed (`Observed`, read from its session) and the assertions of its
`expect:` applied to it: each failed assertion is one line a person can act on. Pure: the
judge's verdict is asked for beforehand and handed in."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from parley.runtime.evals.dataset import ArgumentsMatch, Expect


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call the run made: its tool, arguments, status, and whether the agent was offered
    the tool (a call of a tool it was not offered is refused and does not count as called)."""

    name: str
    arguments: dict[str, Any]
    status: str
    offered: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judge's answer: PASS or FAIL, and why."""

    passed: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """A case's session once it came to rest."""

    session_id: str
    version: str
    turns: int
    turn_statuses: list[str]
    errors: list[str]
    tokens: int
    latency_s: float
    calls: list[Call]
    final_text: str | None
    result: Any = None
    waiting: bool = False  # it waits for a person (a question or an approval)
    verdict: Verdict | None = field(default=None)

    @property
    def tools(self) -> list[str]:
        return [c.name for c in self.calls if c.offered]


def failures(expect: Expect, run: Observed) -> list[str]:
    """Every assertion of `expect` that `run` fails, and the run's own failures (a turn that
    failed or was cancelled, a question no one answers); empty: the case passes."""
    found = _run_failures(run)
    called = set(run.tools)
    found += [f"tool_called: {name} was not called" for name in expect.tool_called if name not in called]
    found += [f"tool_not_called: {name} was called" for name in expect.tool_not_called if name in called]
    found += [problem for match in expect.arguments if (problem := _arguments(match, run.calls))]
    if expect.result_schema is not None:
        found += _result(expect.result_schema, run.result)
    text = run.final_text or ""
    found += [f"text_contains: the final text has no {s!r}" for s in expect.text_contains if s not in text]
    if expect.text_matches is not None and re.search(expect.text_matches, text) is None:
        found.append(f"text_matches: the final text does not match {expect.text_matches!r}")
    if expect.max_turns is not None and run.turns > expect.max_turns:
        found.append(f"max_turns: {run.turns} turns, more than {expect.max_turns}")
    if expect.max_tokens is not None and run.tokens > expect.max_tokens:
        found.append(f"max_tokens: {run.tokens} tokens, more than {expect.max_tokens}")
    if expect.judge is not None and run.verdict is not None and not run.verdict.passed:
        found.append(f"judge: FAIL: {run.verdict.reason}")
    return found


def _run_failures(run: Observed) -> list[str]:
    found = [
        f"turn {n} {status}" + (f": {error}" if error else "")
        for n, (status, error) in enumerate(zip(run.turn_statuses, run.errors, strict=True), start=1)
        if status not in ("answered", "completed")
    ]
    if run.waiting:
        found.append("the session waits for a person (a question or an approval), which an eval never gives")
    return found


def _arguments(match: ArgumentsMatch, calls: list[Call]) -> str | None:
    """None when some call of the tool matches; else what the calls of it were."""
    mine = [c for c in calls if c.name == match.tool and c.offered]
    if not mine:
        return f"arguments: {match.tool} was not called"
    for call in mine:
        if (match.subset is None or _holds(call.arguments, match.subset)) and all(
            key in call.arguments and re.search(pattern, _as_text(call.arguments[key])) is not None
            for key, pattern in (match.regex or {}).items()
        ):
            return None
    seen = "; ".join(json.dumps(c.arguments, sort_keys=True)[:200] for c in mine)
    return f"arguments: no call of {match.tool} matches (its calls: {seen})"


def _holds(value: Any, subset: Any) -> bool:
    """Whether `value` holds `subset`: an object every key of the subset with a value that holds
    its own; a list of the same length, item by item; anything else equal."""
    if isinstance(subset, dict):
        return isinstance(value, dict) and all(k in value and _holds(value[k], v) for k, v in subset.items())
    if isinstance(subset, list):
        return (
            isinstance(value, list)
            and len(value) == len(subset)
            and all(_holds(v, s) for v, s in zip(value, subset, strict=True))
        )
    return bool(value == subset)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _result(schema: dict[str, Any], result: Any) -> list[str]:
    if result is None:
        return ["result_schema: the session handed in no result"]
    errors = sorted(Draft202012Validator(schema).iter_errors(result), key=lambda e: list(e.path))
    return [
        f"result_schema: {'/'.join(str(p) for p in e.path) or '(the result)'}: {e.message}"
        for e in errors[:5]
    ]
