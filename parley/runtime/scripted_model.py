"""A ModelClient that plays back a script: for tests that need exact model behaviour.

Each call takes the next scripted item in order: a `ModelResponse` is returned, a
`ModelError` is raised (a failed provider call). Every request is recorded so a test
can check what the runtime offered the model. A call with nothing left in the script
fails the model call with a `ModelError` (so the turn records it) and is remembered;
`assert_complete()` then reports it, as it reports scripted items that were never used.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from anyio.lowlevel import checkpoint

from parley.errors import ModelError
from parley.runtime.model import ModelRequest, ModelResponse

ScriptItem = ModelResponse | ModelError


class ScriptedModelClient:
    """Returns queued responses in order and records the requests it was given."""

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
        return item

    def assert_complete(self) -> None:
        """Fail unless every scripted item was used and no call went past the script."""
        problems = []
        if self._script:
            problems.append(f"{len(self._script)} scripted item(s) were never used: {list(self._script)!r}")
        if self.unscripted_calls:
            problems.append(f"{self.unscripted_calls} model call(s) came after the script ran out")
        if problems:
            raise AssertionError("; ".join(problems))
