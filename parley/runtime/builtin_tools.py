"""Built-in tools an agent may enable by name. Their names are reserved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parley.core.machine import SET_RESULT_NAME
from parley.runtime.model import ToolSpec

MAX_TODOS = 100


class _Todo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=2000)
    status: Literal["pending", "in_progress", "completed"] = "pending"


class _WriteTodosArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    todos: list[_Todo] = Field(max_length=MAX_TODOS)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutcome:
    """What a tool call produced: the text the model sees, and whether it is an error."""

    text: str
    is_error: bool = False
    todos: list[dict[str, Any]] | None = None
    accepted_result: bool = False

    @property
    def status(self) -> Literal["succeeded", "failed"]:
        return "failed" if self.is_error else "succeeded"


WRITE_TODOS = ToolSpec(
    name="write_todos",
    description=(
        "Replace the session's plan with this list of todos. Each has 'content' and a 'status' "
        "(pending, in_progress or completed). The plan is shown by get_session."
    ),
    input_schema=_WriteTodosArgs.model_json_schema(),
)


class _AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(
        min_length=1, max_length=4000, description="The question, as the person will read it."
    )
    choices: list[str] | None = Field(
        None, max_length=50, description="Answers to pick from; without them any text answer is accepted."
    )
    allows_free_text: bool = Field(
        False, description="With choices: also accept an answer that is not one of them."
    )


class _DurableWaitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    duration_seconds: float = Field(gt=0, description="How long to wait.")
    reason: str = Field("", max_length=1000, description="Why, shown to whoever looks at the session.")


ASK_USER = ToolSpec(
    name="ask_user",
    description=(
        "Ask the person a question and wait for the answer (it may take long; the session waits durably). "
        "Give choices when the answer is one of a few options."
    ),
    input_schema=_AskUserArgs.model_json_schema(),
)
DURABLE_WAIT = ToolSpec(
    name="durable_wait",
    description="Pause this task for a while (survives restarts); you get a result when the time is up.",
    input_schema=_DurableWaitArgs.model_json_schema(),
)


BUILTIN_SPECS: dict[str, ToolSpec] = {t.name: t for t in (WRITE_TODOS, ASK_USER, DURABLE_WAIT)}
# Built-ins change only the session's own state and may be repeated safely.
BUILTIN_EFFECTS: dict[str, str] = {
    WRITE_TODOS.name: "idempotent_write",
    SET_RESULT_NAME: "idempotent_write",
    ASK_USER.name: "read",
    DURABLE_WAIT.name: "read",
}
RESERVED_NAMES = frozenset({*BUILTIN_SPECS, SET_RESULT_NAME})


def set_result_spec(result_schema: dict[str, Any]) -> ToolSpec:
    """Task sessions only: the arguments of set_result are the agent's result."""
    return ToolSpec(
        name=SET_RESULT_NAME,
        description=(
            "Finish this task: call once with the task's result as the arguments. If the result is "
            "rejected, read the problems, fix them and call again. The session ends when it is accepted."
        ),
        input_schema=result_schema,
    )


def run_set_result(arguments: dict[str, Any], result_schema: dict[str, Any]) -> ToolOutcome:
    validator = Draft202012Validator(result_schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        problems = "; ".join(
            f"{'/'.join(str(p) for p in e.path) or '(result)'}: {e.message}" for e in errors[:10]
        )
        return ToolOutcome(
            text=f"Result rejected: {problems}. Call set_result again with a corrected result.", is_error=True
        )
    return ToolOutcome(text="Result accepted; the task is complete.", accepted_result=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """What a built-in may depend on: the agent's enabled tools, the session kind, the result schema."""

    enabled: list[str]
    kind: str
    result_schema: dict[str, Any]

    def specs(self) -> tuple[ToolSpec, ...]:
        specs = [BUILTIN_SPECS[name] for name in self.enabled if name in BUILTIN_SPECS]
        if self.kind == "task":
            specs.append(set_result_spec(self.result_schema))
        return tuple(specs)


def _validation_text(tool: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        problems.append(f"{loc}: {err['msg']}")
    return f"Invalid arguments for {tool}: " + "; ".join(problems) + ". Fix them and call the tool again."


def parse_ask_user(arguments: dict[str, Any]) -> dict[str, Any] | ToolOutcome:
    """The question payload to store, or the error the model gets."""
    try:
        args = _AskUserArgs.model_validate(arguments)
    except ValidationError as exc:
        return ToolOutcome(text=_validation_text(ASK_USER.name, exc), is_error=True)
    choices = [c.strip() for c in args.choices or [] if c.strip()]
    return {
        "question": args.question,
        "choices": choices,
        "allows_free_text": args.allows_free_text or not choices,
    }


def parse_durable_wait(arguments: dict[str, Any], max_s: float) -> tuple[float, str] | ToolOutcome:
    try:
        args = _DurableWaitArgs.model_validate(arguments)
    except ValidationError as exc:
        return ToolOutcome(text=_validation_text(DURABLE_WAIT.name, exc), is_error=True)
    if args.duration_seconds > max_s:
        return ToolOutcome(
            text=f"duration_seconds may be at most {max_s:g}; wait in several steps if you must.",
            is_error=True,
        )
    return args.duration_seconds, args.reason


def run_write_todos(arguments: dict[str, Any]) -> ToolOutcome:
    try:
        args = _WriteTodosArgs.model_validate(arguments)
    except ValidationError as exc:
        return ToolOutcome(text=_validation_text(WRITE_TODOS.name, exc), is_error=True)
    todos = [t.model_dump() for t in args.todos]
    done = sum(1 for t in args.todos if t.status == "completed")
    return ToolOutcome(text=f"Plan saved: {len(todos)} item(s), {done} completed.", todos=todos)


def run_builtin(name: str, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
    """Run a built-in tool; an unknown or disabled tool is an error the model can read and correct."""
    offered = [spec.name for spec in context.specs()]
    if name not in offered:
        available = ", ".join(offered) or "none"
        return ToolOutcome(text=f"Unknown tool '{name}'. Tools you can call: {available}.", is_error=True)
    if name == SET_RESULT_NAME:
        return run_set_result(arguments, context.result_schema)
    if name in (ASK_USER.name, DURABLE_WAIT.name):
        # The driver handles these (an interrupt, a timer); reaching here means a bug.
        return ToolOutcome(text=f"Tool '{name}' cannot run directly.", is_error=True)
    if name == WRITE_TODOS.name:
        return run_write_todos(arguments)
    return ToolOutcome(text=f"Tool '{name}' is not implemented.", is_error=True)
