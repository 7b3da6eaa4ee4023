"""A model that plays back a script: for tests that need exact model behaviour.

Each call takes the next scripted item in order:
- a `ModelResponse` is returned as it is;
- a `Reply` (`reply(...)`, `calls_tool(...)`) streams its text in chunks through the request's
  `on_text`, after its delay, and returns its text and tool calls;
- a `ModelError` is raised (a failed provider call; `transient=True` is retried by the turn).

Every request is recorded, so a test can check what parley offered the model. A call with
nothing left in the script fails with a `ModelError` (so the turn records it) and is
remembered; `assert_complete()` then reports it, as it reports items never used.

`HeldModel` is the demo model with calls a test holds: a call for a message containing a chosen
word waits in the model call until the test releases it, so a turn runs for as long as the test
needs to look at it, and no test sleeps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

from parley.errors import ModelError
from parley.runtime.model import ModelClient, ModelRequest, ModelResponse, RequestedCall


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted model answer: its text (streamed as `chunks` when given), the tools it calls,
    and how long the call takes."""

    text: str = ""
    tool_calls: tuple[RequestedCall, ...] = ()
    chunks: tuple[str, ...] = ()
    delay_s: float = 0.0
    input_tokens: int = 10
    output_tokens: int = 5


def reply(text: str, *, chunks: Sequence[str] = (), delay_s: float = 0.0) -> Reply:
    """An answer with no tool calls; `chunks` (which must join to `text`) are streamed one by one."""
    if chunks and "".join(chunks) != text:
        raise ValueError("the chunks of a reply must join to its text")
    return Reply(text=text, chunks=tuple(chunks), delay_s=delay_s)


def calls_tool(
    name: str, arguments: dict[str, Any] | None = None, *, text: str = "", delay_s: float = 0.0
) -> Reply:
    """An answer that calls the tool `name` (as the agent sees it: `server__tool` for an MCP
    server's tool, or a built-in such as `ask_user`)."""
    return Reply(
        text=text, tool_calls=(RequestedCall(name=name, arguments=dict(arguments or {})),), delay_s=delay_s
    )


ScriptItem = ModelResponse | Reply | ModelError


class ScriptedModel:
    """Returns scripted items in order and records the requests it was given."""

    def __init__(self, script: Iterable[ScriptItem] = ()) -> None:
        self._script: deque[ScriptItem] = deque(script)
        self.requests: list[ModelRequest] = []
        self.unscripted_calls = 0

    def add(self, *items: ScriptItem) -> None:
        """Append more items to the script."""
        self._script.extend(items)

    @property
    def remaining(self) -> int:
        """How many scripted items have not been used yet."""
        return len(self._script)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        # Behave like a real client: a model call is a point where the task may be cancelled.
        await checkpoint()
        self.requests.append(request)
        if not self._script:
            self.unscripted_calls += 1
            raise ModelError(
                f"the scripted model has no response left for call {len(self.requests)} "
                f"(it was scripted for {len(self.requests) - self.unscripted_calls})"
            )
        item = self._script.popleft()
        if isinstance(item, ModelError):
            raise item
        if isinstance(item, ModelResponse):
            return item
        return await _play(item, request)

    def assert_complete(self) -> None:
        """Fail unless every scripted item was used and no call went past the script."""
        problems = []
        if self._script:
            problems.append(f"{len(self._script)} scripted item(s) were never used: {list(self._script)!r}")
        if self.unscripted_calls:
            problems.append(f"{self.unscripted_calls} model call(s) came after the script ran out")
        if problems:  # raised, not asserted: it must hold under python -O too
            raise AssertionError("; ".join(problems))


async def _play(item: Reply, request: ModelRequest) -> ModelResponse:
    if item.delay_s:
        await anyio.sleep(item.delay_s)
    if request.on_text is not None:
        for chunk in item.chunks:
            await request.on_text(chunk)
    return ModelResponse(
        text=item.text,
        tool_calls=item.tool_calls,
        input_tokens=item.input_tokens,
        output_tokens=item.output_tokens,
        provider="scripted",
        model=request.model,
        finish_reason="tool_use" if item.tool_calls else "end_turn",
    )


# The name the unit tests of the driver have always used.
ScriptedModelClient = ScriptedModel


class Hold:
    """Model calls held for one word: each call whose last user message contains it waits (in
    the model call, so its turn is "running") until the test calls `release()`; later calls with
    the word pass at once."""

    def __init__(self, word: str) -> None:
        self.word = word
        self.calls = 0
        self._entered = anyio.Event()
        self._released = anyio.Event()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    async def wait_held(self, timeout_s: float | None = None) -> None:
        """Wait until a model call is held here (at most `timeout_s`, default the tests' deadline)."""
        from parley.testing.waiting import DEADLINE_S

        with anyio.fail_after(DEADLINE_S if timeout_s is None else timeout_s):
            await self._entered.wait()

    def release(self) -> None:
        """Let every held call (and every later one) go on to its answer."""
        self._released.set()

    async def _hold(self) -> None:
        self.calls += 1
        self._entered.set()
        await self._released.wait()


class HeldModel:
    """A model (parley's demo model unless given another) whose calls a test can hold: `hold(word)`
    makes every call for a message containing `word` wait in the model call until the test
    releases it, so the test sees the turn running for as long as it needs, then lets it finish at
    once, without sleeping. A held call can be cancelled like any model call."""

    def __init__(self, inner: ModelClient | None = None) -> None:
        if inner is None:
            from parley.runtime.demo_model import DemoModelClient

            inner = DemoModelClient()
        self.inner = inner
        self._holds: list[Hold] = []

    def hold(self, word: str) -> Hold:
        """Hold every call whose last user message contains `word` until the returned hold is released."""
        if not word:
            raise ValueError("a hold needs a word to look for")
        held = Hold(word)
        self._holds.append(held)
        return held

    def release_all(self) -> None:
        for held in self._holds:
            held.release()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        users = [m for m in request.messages if m.role == "user"]
        if users:
            text = users[-1].text
            for held in list(self._holds):
                if not held.released and held.word in text:
                    await held._hold()
        return await self.inner.complete(request)
