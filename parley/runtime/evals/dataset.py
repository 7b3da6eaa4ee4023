"""An eval dataset (YAML), validated strictly: its cases are sessions to replay (`replay:`) or
scripted conversations (`messages:`), each with the assertions (`expect:`) its run must meet.
Every error names the case and the field, so a bad dataset is refused before anything runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from parley.core.ids import is_session_id


class DatasetError(ValueError):
    """A dataset that cannot run: every problem, each naming its case and field."""

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{path}: " + "; ".join(self.problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgumentsMatch(_Strict):
    """Some call of `tool` whose arguments hold `subset` (every key with an equal value, nested
    objects compared the same way) and whose fields match `regex` (field -> pattern, searched in
    the field's value as text)."""

    tool: str = Field(min_length=1)
    subset: dict[str, Any] | None = None
    regex: dict[str, str] | None = None

    @field_validator("regex")
    @classmethod
    def _patterns(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, pattern in (value or {}).items():
            _compiled(pattern, f"regex.{name}")
        return value

    @model_validator(mode="after")
    def _something(self) -> ArgumentsMatch:
        if self.subset is None and self.regex is None:
            raise ValueError(
                "give subset (values the arguments hold) or regex (a pattern per field), or both"
            )
        return self


class Judge(_Strict):
    """An LLM-judged rubric: the model (a name under `models:` of parley.yaml) answers PASS or
    FAIL with a reason."""

    model: str = Field(min_length=1)
    rubric: str = Field(min_length=1)


class Expect(_Strict):
    """What a case's run must show; every assertion given must hold."""

    tool_called: list[str] = Field(default_factory=list)
    tool_not_called: list[str] = Field(default_factory=list)
    arguments: list[ArgumentsMatch] = Field(default_factory=list)
    result_schema: dict[str, Any] | None = None
    text_contains: list[str] = Field(default_factory=list)
    text_matches: str | None = None
    max_turns: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=0)
    judge: Judge | None = None

    @field_validator("tool_called", "tool_not_called", "text_contains", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("text_matches")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            _compiled(value, "text_matches")
        return value

    @field_validator("result_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                Draft202012Validator.check_schema(value)
            except SchemaError as exc:
                raise ValueError(f"is not a valid JSON schema: {exc.message}") from None
        return value


class Case(_Strict):
    """One case: a session to replay, or a scripted conversation (a task's with `kind: task`
    and `inputs`)."""

    name: str = Field(min_length=1, max_length=200)
    replay: str | None = None
    messages: list[str] | None = None
    kind: Literal["chat", "task"] | None = None
    inputs: dict[str, Any] | None = None
    expect: Expect = Field(default_factory=Expect)

    @field_validator("replay")
    @classmethod
    def _session(cls, value: str | None) -> str | None:
        if value is not None and not is_session_id(value):
            raise ValueError("must be a session's id (ses_ and 32 hex digits), as list_sessions shows")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Case:
        if (self.replay is None) == (self.messages is None):
            raise ValueError("give either replay (a session to replay) or messages (a scripted conversation)")
        if self.replay is not None and (self.kind is not None or self.inputs is not None):
            raise ValueError(
                "kind and inputs belong to scripted cases (messages); a replay keeps the session's"
            )
        if self.messages is not None and not self.messages:
            raise ValueError("messages: give at least one message")
        return self


class Dataset(_Strict):
    description: str | None = None
    cases: list[Case] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Dataset:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}; give each case its own name")
            seen.add(case.name)
        return self


def load_dataset(path: str, text: str, models: Sequence[str] = ()) -> Dataset:
    """The dataset `text` (read from `path`), checked; `models`: the names a judge may use."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DatasetError(path, [f"is not valid YAML: {exc}"]) from None
    if not isinstance(raw, dict):
        raise DatasetError(path, ["must be a mapping with a list of cases (cases: [...])"])
    try:
        dataset = Dataset.model_validate(raw)
    except ValidationError as exc:
        raise DatasetError(path, [_problem(raw, error) for error in exc.errors()]) from None
    problems = [
        f"case {case.name!r}: expect.judge.model: {case.expect.judge.model!r} is not under models: of "
        f"parley.yaml ({', '.join(models) or 'none is configured'}); name one there"
        for case in dataset.cases
        if case.expect.judge is not None and case.expect.judge.model not in models
    ]
    if problems:
        raise DatasetError(path, problems)
    return dataset


def _problem(raw: dict[str, Any], error: Any) -> str:
    """One validation error as `case 'NAME': field.path: message`."""
    loc = list(error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
        index = loc[1]
        cases = raw.get("cases")
        case = cases[index] if isinstance(cases, list) and index < len(cases) else None
        name = case.get("name") if isinstance(case, dict) else None
        who = f"case {name!r}" if isinstance(name, str) else f"case {index + 1} (cases[{index}])"
        field = ".".join(str(part) for part in loc[2:]) or "(the case)"
        return f"{who}: {field}: {message}"
    return f"{'.'.join(str(part) for part in loc) or '(the dataset)'}: {message}"


def _compiled(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{where}: {pattern!r} is not a regular expression ({exc})") from None
