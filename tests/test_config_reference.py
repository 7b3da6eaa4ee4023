"""Every field of every configuration model has a description, and the generated references
(docs/_hooks/, built into the site by docs/_hooks/reference.py) show what a reader looks for: each
field of parley.yaml and of an agent file with its YAML path, type, bounds and default; each
`parley` command with its options; each published tool with its arguments. The site build itself
is tests/test_docs_site.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal, cast

import pytest
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "_hooks"))

import reference
from cli_reference import cli_reference
from config_reference import (
    ROOTS,
    Root,
    config_models,
    configuration_reference,
    section_text,
    sections,
    undocumented_fields,
)
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from tools_reference import tools_reference

from parley.config import AgentConfig, ServerConfigFile
from parley.config.base import Strict
from parley.server.tools import TOOLS


def test_every_field_of_every_configuration_model_has_a_description() -> None:
    missing = undocumented_fields(config_models())
    assert not missing, (
        "these configuration fields have no description; give each one Field(description=...), "
        f"saying what it does, its unit and what it accepts: {', '.join(missing)}"
    )


def test_every_configuration_model_is_part_of_parley_yaml_or_of_an_agent_file() -> None:
    shown = {section.model for root in ROOTS for section in sections(root.model)}
    hidden = [m.__qualname__ for m in config_models() if m not in shown and m.model_fields]
    assert not hidden, f"models of parley/config/ the configuration reference does not reach: {hidden}"


class _Bare(BaseModel):
    documented: int = Field(1, description="A count.")
    bare: str = ""


def test_a_field_without_a_description_is_named_and_fails_the_site_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert undocumented_fields([_Bare]) == [f"{__name__}._Bare.bare"]
    monkeypatch.setattr(reference, "ROOTS", (Root("x.yaml", _Bare, "x", "A file."),))
    with pytest.raises(PluginError, match=rf"these have none: {__name__}\._Bare\.bare"):
        reference.on_files(Files([]), cast(Any, None))


@pytest.fixture(scope="module")
def page() -> str:
    return configuration_reference()


def test_each_field_has_its_yaml_path_type_bounds_and_default(page: str) -> None:
    assert "| `storage.pool_size` | `int`<br>≥ 1, ≤ 1000 | `10` | PostgreSQL: connections" in page
    assert '| `storage.schema` | `str` | `"public"` |' in page  # the YAML key, not the Python name
    assert '| `storage.synchronous` | `"normal" | "full"` | `"normal"` |' in page
    assert "| `http.allowed_hosts` | `list[str]` | `[]` |" in page
    assert "| `auth.oauth.issuer` | `str` | required |" in page
    assert "| `mcp_servers.<name>.call_timeout_s` | `float`<br>> 0, ≤ 86400 | `60` |" in page
    assert "| `limits.principals.<name>.running_turns` | `int | null`<br>≥ 1, ≤ 100000 | `null` |" in page
    # An agent file's fields, from the top of the file.
    assert "| `name` | `str`<br>matches `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$` | required |" in page
    assert '| `kinds` | `list["chat" | "task"]`<br>at least 1 item | `["chat"]` |' in page
    assert "| `mcp_servers[].include` | `list[str] | null` | `null` |" in page


def test_a_nested_model_has_a_section_its_fields_link_to(page: str) -> None:
    assert "| `storage` | [StorageConfig](#server-storageconfig) | its fields' defaults |" in page
    assert "### `storage` {#server-storageconfig}" in page
    assert "| `auth.tokens` | `list[`[StaticToken](#server-statictoken)`]` | `[]` |" in page
    assert "### `auth.tokens[]` {#server-statictoken}" in page
    # A model used in several places is described once, under its shortest path.
    assert "### `default_model` {#server-modelspec}" in page
    assert "Also at `models.<name>`, `model_aliases.<name>`." in page
    assert page.count("{#agent-modelspec}") == 1


def test_every_field_of_both_files_is_in_the_reference(page: str) -> None:
    for model in (ServerConfigFile, AgentConfig):
        for section in sections(model):
            for name, info in section.model.model_fields.items():
                key = info.alias or name
                path = f"{section.paths[0]}.{key}" if section.paths[0] else key
                assert f"| `{path}` |" in page, path


def test_the_command_line_part_lists_every_command_and_its_options() -> None:
    text = cli_reference()
    for command in ("serve", "chat", "check", "token new", "db migrate", "db copy", "sessions list"):
        assert f"### `parley {command}`" in text, command
    assert "| `--offline` |  | check the files only" in text
    assert "| `--log-format LOG_FORMAT` | `text` |" in text and "one of text, json" in text
    # A group's own options belong to each of its commands.
    assert text.split("### `parley sessions list`", 1)[1].split("###", 1)[0].count("`--owner OWNER`") == 1


def test_the_tools_reference_shows_every_published_tool_with_its_arguments() -> None:
    text = tools_reference()
    for entry in TOOLS:
        assert f"## `{entry.name}` {{#{entry.name.replace('_', '-')}}}" in text, entry.name
    assert "| `agent` | `string` | yes |  | Name of the agent, from list_agents. |" in text
    assert "| `wait_seconds` | `number | null`<br>≥ 0 | no | `null` |" in text
    assert (
        "`readOnlyHint: true`, `idempotentHint: true`, `openWorldHint: false` (read-only, idempotent" in text
    )
    assert "Runs as an MCP task: yes" in text
    assert "**Result** (`TurnOutcomeView`)" in text
    assert "| `pending` | `array[`[PendingView](#type-pendingview)`]` | no |" in text
    assert "### `PendingView` {#type-pendingview}" in text


class _Kinds(Strict):
    mode: Literal["text", "json"] = Field("text", description="How.")
    sizes: dict[str, list[int]] = Field(default_factory=dict, description="Sizes.")


def test_types_read_as_written_in_yaml() -> None:
    (section,) = sections(_Kinds)
    text = section_text(ROOTS[0], section, {_Kinds: "k"})
    assert '| `mode` | `"text" | "json"` | `"text"` | How. |' in text
    assert "| `sizes` | `dict[str, list[int]]` | `{}` | Sizes. |" in text
