"""Titles by the model, for agents that opt in (`title_from_model: true`): one extra, short model
call on a session's first message, made in the background so no caller waits for it. The
session keeps no title meanwhile; when the call fails (or the agent runs on the demo model) the
title is the message's first words, as for every other agent (session_labels.proposed_title)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from parley.config import AgentConfig, ModelSpec
from parley.core.ids import SessionId
from parley.errors import StorageError
from parley.runtime.model import ChatMessage, ModelClient, ModelRequest
from parley.runtime.session_labels import proposed_title
from parley.storage.ports import Store

logger = logging.getLogger(__name__)

TITLE_INSTRUCTIONS = (
    "You name conversations. Reply with a title of at most eight words for the conversation that "
    "begins with the user's message: the title only, on one line, without quotes."
)
# The message is cut to this many characters for the title call (a title needs its beginning).
TITLE_INPUT_CHARS = 4000
# Title calls waiting at most; more are titled by their first words at once.
PENDING_MAX = 256


def wants_model_title(agent: AgentConfig | None) -> bool:
    return agent is not None and agent.title_from_model and agent.model.provider in ("anthropic", "openai")


@dataclass(frozen=True, slots=True)
class _Request:
    session_id: SessionId
    model: ModelSpec
    message: str


class ModelTitles:
    def __init__(
        self, store: Store, models: Callable[[ModelSpec, str], ModelClient], clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._models = models
        self._clock = clock
        self._send, self._receive = anyio.create_memory_object_stream[_Request](PENDING_MAX)

    def request(self, session_id: SessionId, agent: AgentConfig, message: str) -> bool:
        """Queue a title call; False when too many wait (the caller titles the session itself)."""
        try:
            self._send.send_nowait(_Request(session_id, agent.model, message))
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            return False
        return True

    async def title(self, request: _Request) -> str | None:
        """The model's title for the message, or its first words when the call fails."""
        spec = request.model
        try:
            response = await self._models(spec, "a title").complete(
                ModelRequest(
                    model=spec.name,
                    instructions=TITLE_INSTRUCTIONS,
                    messages=(ChatMessage(role="user", text=request.message[:TITLE_INPUT_CHARS]),),
                    tools=(),
                    options=dict(spec.options),
                )
            )
            found = proposed_title(response.text.strip().strip("\"'"))
        except Exception as exc:  # a title is a nicety: any failure falls back to the first words
            logger.warning(
                "session %s: the title call failed (%s); titled by its first words", request.session_id, exc
            )
            found = None
        return found or proposed_title(request.message)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        # Both ends close with the loop, so a stopped app leaves no stream open behind it.
        async with self._send, self._receive:
            async for request in self._receive:
                title = await self.title(request)
                if title is None:
                    continue
                try:
                    if await self._store.propose_title(request.session_id, title):
                        await self._store.record_event(
                            request.session_id, None, "session_updated", {"title": title}, self._clock()
                        )
                except StorageError as exc:
                    logger.warning("session %s: the title could not be stored: %s", request.session_id, exc)
