"""The configuration reference (reference/configuration.md), written from the pydantic models of
parley/config/ when the site is built: parley.yaml and an agent file, every field, nested model
by nested model, with its YAML path, type, bounds, default and description."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from cli_reference import cli_reference
from markdown_text import anchor, cell, code, prose, table, value
from pydantic import BaseModel
from pydantic.fields import FieldInfo

import parley.config
from parley.config import AgentConfig, ServerConfigFile

INTRO = """\
# Configuration reference

This page is written from parley's configuration models (`parley/config/`) each time the site is
built, so it matches the code it was built with.

- **parley.yaml** configures the server: storage, HTTP, authentication, MCP servers, limits.
  `parley serve --config parley.yaml` (or `PARLEY_CONFIG`) reads it.
- **An agent file** defines one agent: a YAML file, or the front matter of a Markdown file, in a
  folder of `agents_dir`.

A path such as `mcp_servers.<name>.url` is the field `url` of each entry under `mcp_servers`;
`[]` stands for each item of a list. A field left out takes its default; `null` leaves it unset.
Every file may write `${NAME}` for the value of an environment variable (`$$` for a `$`).
`parley check` checks a configuration without serving it.
"""


@dataclass
class Section:
    """A model and the YAML paths where it appears (the first one names its section)."""

    model: type[BaseModel]
    paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Root:
    """A file the reference describes: its title, its top-level model, and its heading ids' prefix."""

    title: str
    model: type[BaseModel]
    prefix: str
    summary: str


ROOTS = (
    Root("parley.yaml", ServerConfigFile, "server", "The server's configuration file."),
    Root(
        "Agent files",
        AgentConfig,
        "agent",
        "The fields of one agent, in a YAML file or a Markdown file's front matter.",
    ),
)


def config_models() -> list[type[BaseModel]]:
    """Every pydantic model defined in a module of parley/config/."""
    found: list[type[BaseModel]] = []
    for info in pkgutil.iter_modules(parley.config.__path__):
        module = importlib.import_module(f"parley.config.{info.name}")
        found += [
            item
            for item in vars(module).values()
            if inspect.isclass(item) and issubclass(item, BaseModel) and item.__module__ == module.__name__
        ]
    return found


def undocumented_fields(models: list[type[BaseModel]]) -> list[str]:
    """`module.Model.field` for each field of `models` without a description."""
    return [
        f"{model.__module__}.{model.__qualname__}.{name}"
        for model in models
        for name, info in model.model_fields.items()
        if not (info.description or "").strip()
    ]


def sections(root: type[BaseModel]) -> list[Section]:
    """`root` and the models nested in it, depth first, each once with every path it is at."""
    found: dict[type[BaseModel], Section] = {}

    def visit(model: type[BaseModel], path: str) -> None:
        if model in found:
            found[model].paths.append(path)
            return
        found[model] = Section(model, [path])
        for name, info in model.model_fields.items():
            key = f"{path}.{yaml_key(name, info)}" if path else yaml_key(name, info)
            for nested, suffix in nested_models(info.annotation):
                visit(nested, key + suffix)

    visit(root, "")
    for section in found.values():  # named by its shortest path: default_model, not model_aliases.<name>
        section.paths.sort(key=len)
    return list(found.values())


def yaml_key(name: str, info: FieldInfo) -> str:
    return info.alias or name


def nested_models(annotation: Any) -> Iterator[tuple[type[BaseModel], str]]:
    """The models an annotation holds, each with the path suffix that reaches one of them."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        yield annotation, ""
        return
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        for arg in args:
            yield from nested_models(arg)
    elif origin in (list, tuple) and args:
        for model, suffix in nested_models(args[0]):
            yield model, "[]" + suffix
    elif origin is dict and len(args) == 2:
        for model, suffix in nested_models(args[1]):
            yield model, ".<name>" + suffix


_NAMES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}


def plain_type(annotation: Any) -> str | None:
    """The type as text (`int`, `list[str]`, `"text" | "json"`), or None when it holds a model."""
    if annotation is Any:
        return "any"
    if annotation in _NAMES:
        return _NAMES[annotation]
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(value(arg) for arg in args)
    parts = [plain_type(arg) for arg in args if arg is not Ellipsis]
    if any(part is None for part in parts):
        return None
    if origin in (Union, types.UnionType):
        return " | ".join(str(part) for part in parts)
    if origin in (list, tuple):
        return f"list[{parts[0]}]"
    if origin is dict:
        return f"dict[{', '.join(str(part) for part in parts)}]"
    raise ValueError(f"no readable name for the type {annotation!r}")


def type_cell(annotation: Any, anchors: dict[type[BaseModel], str]) -> str:
    """The type as Markdown: a code span, with a link to each nested model's section."""
    plain = plain_type(annotation)
    if plain is not None:
        return code(plain)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{anchors[annotation]})"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return " \\| ".join(type_cell(arg, anchors) for arg in args)
    if origin in (list, tuple):
        return f"`list[`{type_cell(args[0], anchors)}`]`"
    if origin is dict:
        return f"`dict[{plain_type(args[0])}, `{type_cell(args[1], anchors)}`]`"
    raise ValueError(f"no readable name for the type {annotation!r}")


def _collection(annotation: Any) -> bool:
    """Whether a length bound counts items (a list, a mapping), not characters."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_collection(arg) for arg in get_args(annotation))
    return origin in (list, tuple, dict)


def bounds(info: FieldInfo) -> list[str]:
    """The field's constraints in words: ≥ 1, ≤ 1000, at most 64 characters..."""
    said: list[str] = []
    unit = "item" if _collection(info.annotation) else "character"
    for item in info.metadata:
        if isinstance(item, annotated_types.Gt):
            said.append(f"> {value(item.gt)}")
        elif isinstance(item, annotated_types.Ge):
            said.append(f"≥ {value(item.ge)}")
        elif isinstance(item, annotated_types.Lt):
            said.append(f"< {value(item.lt)}")
        elif isinstance(item, annotated_types.Le):
            said.append(f"≤ {value(item.le)}")
        elif isinstance(item, annotated_types.MinLen):
            said.append(f"at least {item.min_length} {unit}{'s' if item.min_length != 1 else ''}")
        elif isinstance(item, annotated_types.MaxLen):
            said.append(f"at most {item.max_length} {unit}{'s' if item.max_length != 1 else ''}")
        elif isinstance(pattern := getattr(item, "pattern", None), str):
            said.append(f"matches {code(pattern)}")
    return said


def default_cell(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    made = info.get_default(call_default_factory=True, validated_data={})
    if isinstance(made, BaseModel):
        return "its fields' defaults"
    return code(value(made))


def field_rows(section: Section, anchors: dict[type[BaseModel], str]) -> list[list[str]]:
    rows = []
    for name, info in section.model.model_fields.items():
        key = yaml_key(name, info)
        path = f"{section.paths[0]}.{key}" if section.paths[0] else key
        kind = type_cell(info.annotation, anchors)
        said = bounds(info)
        if said:
            kind += "<br>" + ", ".join(said)
        rows.append([code(path), kind, default_cell(info), cell(info.description or "")])
    return rows


def section_text(root: Root, section: Section, anchors: dict[type[BaseModel], str]) -> str:
    model = section.model
    lines = []
    if section.paths[0]:
        lines.append(f"### {code(section.paths[0])} {{#{anchors[model]}}}\n")
        doc = inspect.getdoc(model) if model.__doc__ else None
        lines.append(f"*{model.__name__}*" + (f": {prose(' '.join(doc.split()))}" if doc else "") + "\n")
    others = [p or "(top level)" for p in section.paths[1:]]
    if others:
        lines.append("Also at " + ", ".join(code(p) for p in others) + ".\n")
    lines.append(table(["Field", "Type", "Default", "Description"], field_rows(section, anchors)))
    return "\n".join(lines)


def root_text(root: Root) -> str:
    found = sections(root.model)
    anchors = {s.model: anchor(root.prefix, s.model.__name__) for s in found}
    parts = [f"## {root.title} {{#{anchors[root.model]}}}\n\n{root.summary}"]
    parts += [section_text(root, s, anchors) for s in found]
    return "\n\n".join(parts)


def configuration_reference() -> str:
    """The page's Markdown. Raises ValueError naming each field without a description."""
    models = [s.model for root in ROOTS for s in sections(root.model)]
    missing = undocumented_fields(models)
    if missing:
        raise ValueError(f"configuration fields without a description: {', '.join(missing)}")
    return "\n\n".join([INTRO, *(root_text(root) for root in ROOTS), cli_reference()]) + "\n"
