"""The keyless, deterministic demo model: it decides only from the request it is given.

Grammar (one directive per line; other lines are plain text):
  /tool NAME {json-object}   call tool NAME with these arguments (several lines: several calls)
  /sleep SECONDS             the model call itself takes this long (0 to 3600)
  /result {json-object}      task sessions: hand in this result (set_result); when it is
                             rejected, the next /result line of the same message is tried
  /ask QUESTION | CHOICE | CHOICE   ask the person (ask_user); choices are optional
  /wait SECONDS REASON       pause durably (durable_wait)
  /fail N | /fail forever    the next N model calls for this message fail with a transient error
                             (counted in this process), so retries and failed turns can be tried
Plan mode: forced to write the plan (plan_tool_choice: required), it writes one todo per line of
the message; executing an approved plan, it runs the directives its pending todos hold, then
marks every todo completed.
As an eval's judge (parley/runtime/evals/judge.py), it passes an answer that holds every phrase
the rubric quotes in double quotes.
Plain text is answered with "You said: <text> (message <n> of this session)", where n counts
the user messages in the request. Once tool results follow the message, the answer quotes
each result. A directive is recognised only at the start of a line; later issues add more
directives in the same form.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from parley.errors import ModelError
from parley.runtime.attachments import describe, with_descriptions
from parley.runtime.compaction import COMPACTION_INSTRUCTION
from parley.runtime.evals.judge import JUDGE_INSTRUCTION, demo_verdict
from parley.runtime.model import ChatMessage, ModelRequest, ModelResponse, RequestedCall

MAX_SLEEP_S = 3600.0
KNOWN_DIRECTIVES = ("/tool", "/sleep", "/result", "/ask", "/wait", "/fail")
FOREVER = -1
SET_RESULT = "set_result"


@dataclass(slots=True)
class _Parsed:
    text_lines: list[str] = field(default_factory=list)
    calls: list[RequestedCall] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    sleep_s: float = 0.0
    fail_times: int = 0
    problems: list[str] = field(default_factory=list)


def _parse(text: str) -> _Parsed:
    parsed = _Parsed()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line.startswith("/") or line.startswith("//"):
            if line:
                parsed.text_lines.append(line)
            continue
        word, _, rest = line.partition(" ")
        directive = _DIRECTIVES.get(word)
        if directive is None:
            parsed.problems.append(
                f"line {lineno}: unknown directive {word}; known: {', '.join(KNOWN_DIRECTIVES)}"
            )
            continue
        problem = directive(parsed, rest.strip())
        if problem is not None:
            parsed.problems.append(f"line {lineno}: {problem}")
    return parsed


# Each directive reads its rest of the line into `parsed`, or says what is wrong with it.


def _sleep(parsed: _Parsed, rest: str) -> str | None:
    try:
        seconds = float(rest)
    except ValueError:
        return f"/sleep needs a number of seconds, got '{rest}'"
    if not 0 <= seconds <= MAX_SLEEP_S or math.isnan(seconds):
        return f"/sleep takes 0 to {MAX_SLEEP_S:g} seconds, got {rest}"
    parsed.sleep_s += seconds
    return None


def _result(parsed: _Parsed, rest: str) -> str | None:
    try:
        value = json.loads(rest) if rest else None
    except json.JSONDecodeError as exc:
        return f"the value of /result is not JSON ({exc.msg})"
    if not isinstance(value, dict):
        return '/result needs a JSON object, e.g. /result {"summary": "..."}'
    parsed.results.append(value)
    return None


def _fail(parsed: _Parsed, rest: str) -> str | None:
    if rest == "forever":
        parsed.fail_times = FOREVER
    elif rest.isdigit():
        parsed.fail_times = int(rest)
    else:
        return f"/fail takes a number of calls or 'forever', got '{rest}'"
    return None


def _ask(parsed: _Parsed, rest: str) -> str | None:
    question, *choices = [part.strip() for part in rest.split("|")]
    if not question:
        return "/ask needs a question, e.g. /ask Deploy now? | yes | no"
    arguments: dict[str, Any] = {"question": question}
    if [c for c in choices if c]:
        arguments["choices"] = [c for c in choices if c]
    parsed.calls.append(RequestedCall(name="ask_user", arguments=arguments))
    return None


def _wait(parsed: _Parsed, rest: str) -> str | None:
    seconds_text, _, reason = rest.partition(" ")
    try:
        seconds = float(seconds_text)
    except ValueError:
        return "/wait needs a number of seconds, e.g. /wait 60 cool down"
    arguments = {"duration_seconds": seconds, "reason": reason.strip()}
    parsed.calls.append(RequestedCall(name="durable_wait", arguments=arguments))
    return None


def _tool(parsed: _Parsed, rest: str) -> str | None:
    name, _, args_text = rest.partition(" ")
    if not name:
        return "/tool needs a tool name, e.g. /tool write_todos {...}"
    try:
        arguments = json.loads(args_text) if args_text.strip() else {}
    except json.JSONDecodeError as exc:
        return f"the arguments of /tool {name} are not JSON ({exc.msg})"
    if not isinstance(arguments, dict):
        return f"the arguments of /tool {name} must be a JSON object"
    parsed.calls.append(RequestedCall(name=name, arguments=arguments))
    return None


_DIRECTIVES: dict[str, Callable[[_Parsed, str], str | None]] = {
    "/sleep": _sleep,
    "/result": _result,
    "/fail": _fail,
    "/ask": _ask,
    "/wait": _wait,
    "/tool": _tool,
}


def _estimate_tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


def _request_chars(request: ModelRequest) -> int:
    total = len(request.instructions)
    for message in request.messages:
        total += len(message.text)
        total += sum(len(call.name) + len(json.dumps(call.arguments)) for call in message.tool_calls)
    total += sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in request.tools)
    return total


def _quote_results(results: list[ChatMessage]) -> str:
    lines = []
    for i, result in enumerate(results, start=1):
        state = "error" if result.is_error else "ok"
        lines.append(f"{i}. {result.tool_name} ({state}): {result.text}")
    return "Tool results:\n" + "\n".join(lines)


def _summarize(request: ModelRequest) -> str:
    """A compaction summary: the user's words, shortened, oldest first (deterministic)."""
    said = []
    for message in request.messages[:-1]:  # the last one is the request to summarize
        if message.role == "user":
            text = " ".join(with_descriptions(message).split())
            said.append(text[:60] + ("..." if len(text) > 60 else ""))
    return "Earlier the user said: " + " | ".join(said)


def _plan_calls(
    request: ModelRequest, parsed: _Parsed, results: list[ChatMessage]
) -> tuple[RequestedCall, ...]:
    """Plan mode on the demo model. Forced to write the plan, it writes one todo per line of the
    message. Executing an approved plan, it first runs the directives its pending todos hold (a
    todo such as '/tool files__write {...}'), then marks every todo completed."""
    forced = request.tool_choice == "write_todos" and not results
    if forced and not any(c.name == "write_todos" for c in parsed.calls):
        lines = parsed.text_lines or ["Answer the message"]
        todos = [{"content": line} for line in lines]
        return (RequestedCall(name="write_todos", arguments={"todos": todos}),)
    if request.mode != "executing" or not request.todos or parsed.calls:
        return ()
    if any(m.tool_name == "write_todos" for m in results):
        return ()  # the statuses are written: answer
    calls: list[RequestedCall] = []
    if not results:
        for todo in request.todos:
            if todo.get("status") != "completed":
                calls += _parse(str(todo.get("content", ""))).calls
    if calls:
        return tuple(calls)
    done = [{"content": todo.get("content", ""), "status": "completed"} for todo in request.todos]
    return (RequestedCall(name="write_todos", arguments={"todos": done}),)


class DemoModelClient:
    """A model that needs no key and answers the same request the same way every time
    (except for /fail, which counts the failures it simulated in this process)."""

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.instructions == COMPACTION_INSTRUCTION:
            return self._respond(request, _summarize(request))
        if request.instructions == JUDGE_INSTRUCTION and request.messages:
            # As an eval's judge: a verdict by a fixed rule, so evals on the demo model repeat.
            return self._respond(request, demo_verdict(request.messages[-1].text))
        user_positions = [i for i, m in enumerate(request.messages) if m.role == "user"]
        if not user_positions:
            return self._respond(request, "There is no message to answer yet.")
        last = user_positions[-1]
        user = request.messages[last]
        after = request.messages[last + 1 :]
        parsed = _parse(user.text)
        if parsed.fail_times:
            key = hashlib.sha256(repr(request.messages[: last + 1]).encode()).hexdigest()
            done = self._failures.get(key, 0)
            if parsed.fail_times == FOREVER or done < parsed.fail_times:
                self._failures[key] = done + 1
                raise ModelError(f"demo: simulated transient failure number {done + 1}", transient=True)
        first_call_for_message = not after
        if first_call_for_message and parsed.sleep_s > 0:
            await anyio.sleep(parsed.sleep_s)

        said = " ".join(parsed.text_lines)
        heard = f"You said: {said} (message {len(user_positions)} of this session)" if said else ""
        if user.attachments:
            # The demo model sees no pictures: it reads what each attachment is, as any model
            # that cannot take a kind does.
            heard = "\n".join([heard, *(describe(a) for a in user.attachments)]).strip()
        if parsed.problems:
            text = "I could not follow your directives:\n" + "\n".join(f"- {p}" for p in parsed.problems)
            return self._respond(request, "\n\n".join(part for part in (heard, text) if part))

        results = [m for m in after if m.role == "tool"]
        offered = {t.name for t in request.tools}
        planned = _plan_calls(request, parsed, results)
        if planned:
            names = ", ".join(c.name for c in planned)
            return self._respond(request, f"Calling {names}.", planned)
        result_calls = [m for m in results if m.tool_name == SET_RESULT]
        if parsed.results and SET_RESULT in offered:
            # Hand in the first /result at once; after a rejection, try the next one.
            if not result_calls or (result_calls[-1].is_error and len(result_calls) < len(parsed.results)):
                value = parsed.results[len(result_calls)]
                calls = [] if result_calls else list(parsed.calls)
                calls.append(RequestedCall(name=SET_RESULT, arguments=value))
                return self._respond(request, "Handing in the result.", tuple(calls))
        elif parsed.results and not after:
            text = "I can only hand in a result in a task session; this session offers no set_result tool."
            return self._respond(request, "\n\n".join(part for part in (heard, text) if part))
        if parsed.calls and not results:
            if not offered:
                names = ", ".join(c.name for c in parsed.calls)
                text = f"I was offered no tools on this call, so I answer without calling {names}."
                return self._respond(request, "\n\n".join(part for part in (heard, text) if part))
            names = ", ".join(c.name for c in parsed.calls)
            return self._respond(request, f"Calling {names}.", tuple(parsed.calls))
        if results:
            return self._respond(
                request, "\n\n".join(part for part in (heard, _quote_results(results)) if part)
            )
        if not heard:
            heard = f"You sent only directives (message {len(user_positions)} of this session)."
        return self._respond(request, heard)

    @staticmethod
    def _respond(request: ModelRequest, text: str, calls: tuple[RequestedCall, ...] = ()) -> ModelResponse:
        out_chars = len(text) + sum(len(c.name) + len(json.dumps(c.arguments)) for c in calls)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            input_tokens=_estimate_tokens(_request_chars(request)),
            output_tokens=_estimate_tokens(out_chars),
        )
