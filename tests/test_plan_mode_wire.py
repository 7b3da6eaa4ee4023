"""Plan mode on a real provider's wire (the fake Anthropic and OpenAI servers of
fake_providers.py, over HTTP): what a planning turn sends (the tools it may call, a forced
write_todos, the plan and the mode in the instructions), what it refuses, and the executing
turn's request with every tool and the approved plan. Also the configuration that plan mode
needs, and Claude Code's permissionMode: plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.config import collect_config_errors, load_config
from parley.testing import ToolServer, call, parley_app
from tests.fake_providers import FakeProviders, serving_fake_providers

pytestmark = pytest.mark.anyio


def ops_tools() -> ToolServer:
    ops = ToolServer("ops")

    @ops.tool(read_only=True)
    async def inspect(target: str) -> str:
        """Look at a target."""
        return f"{target}: 3 tables"

    @ops.tool(destructive=True)
    async def migrate(target: str) -> str:
        """Change a target (a person approves it)."""
        return f"{target}: migrated"

    return ops


def planner(fake: FakeProviders, provider: str, choice: str) -> dict[str, Any]:
    model = (
        fake.anthropic_model()
        if provider == "anthropic"
        else {
            "provider": "openai",
            "name": "gpt-test",
            "base_url": fake.openai_url,
            "api_key_env": "FAKE_PROVIDER_KEY",
        }
    )
    return {
        "instructions": "You migrate carefully.",
        "model": model,
        "tools": ["write_todos"],
        "plan_mode": True,
        "plan_tool_choice": choice,
        "mcp_servers": ["ops"],
    }


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(t.get("name") or t["function"]["name"] for t in body.get("tools", []))


def instructions(body: dict[str, Any]) -> str:
    if "system" in body:
        return str(body["system"])
    return str(body["messages"][0]["content"])


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_forced_plan_then_an_approved_execution_on_the_wire(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    ops = ops_tools()
    async with serving_fake_providers() as fake, ops.serve():
        config = {"mcp_servers": {"ops": {**ops.entry, "tools": {"inspect": {"effect": "read"}}}}}
        agents = {"planner": planner(fake, provider, "required")}
        async with parley_app(config, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
            planned = await call(
                client, "start_session", agent="planner", message="back up users\nmigrate users"
            )
            plan_request = fake.requests[0].body
            done = await call(client, "execute_plan", session_id=planned["session_id"], revision=1)
            execute_request = fake.requests[-1].body

    assert planned["plan"]["status"] == "draft" and planned["mode"] == "planning"
    assert [t["content"] for t in planned["plan"]["todos"]] == ["back up users", "migrate users"]
    forced: dict[str, Any] = {"type": "tool", "name": "write_todos"}
    if provider == "openai":
        forced = {"type": "function", "function": {"name": "write_todos"}}
    assert plan_request["tool_choice"] == forced
    assert tool_names(plan_request) == ["ops__inspect", "write_todos"], "a planning turn offers reads only"
    assert "planning turn" in instructions(plan_request)
    # The executing turn: every tool, no forced choice, the approved plan and the mode in its instructions.
    assert "tool_choice" not in execute_request
    assert tool_names(execute_request) == ["ops__inspect", "ops__migrate", "write_todos"]
    said = instructions(execute_request)
    assert "revision 1" in said and "[pending] migrate users" in said and "carrying out" in said
    assert done["mode"] == "executing" and done["plan"]["status"] == "active"


async def test_a_write_tool_is_refused_while_planning_and_still_asks_when_executing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PROVIDER_KEY", "sk-test")
    ops = ops_tools()
    async with serving_fake_providers() as fake, ops.serve():
        config = {"mcp_servers": {"ops": {**ops.entry, "tools": {"inspect": {"effect": "read"}}}}}
        agents = {"planner": planner(fake, "anthropic", "auto")}
        async with parley_app(config, agents=agents, directory=tmp_path) as parley, parley.mcp() as client:
            message = 'call ops__inspect {"target": "users"}\ncall ops__migrate {"target": "users"}'
            planned = await call(client, "start_session", agent="planner", message=message)
            sid = planned["session_id"]
            assert ops.ran("migrate") == [] and len(ops.ran("inspect")) == 1
            drafted = await call(
                client, "send_message", session_id=sid, message="call write_todos " + _plan()
            )
            asked = await call(client, "execute_plan", session_id=sid, revision=1)
            # Approving the plan granted nothing else: the destructive call asks on its own.
            assert asked["status"] == "waiting_for_input", (
                asked["status"],
                asked["answer"],
                asked["tool_calls"],
            )
            [approval] = asked["pending"]
            assert approval["tool"] == "ops__migrate"
            decision = {"interrupt_id": approval["id"], "approved": True}
            done = await call(client, "approve", session_id=sid, decisions=[decision])

    statuses = {c["tool"]: c["status"] for c in planned["tool_calls"]}
    assert statuses == {"ops__inspect": "succeeded", "ops__migrate": "failed"}
    refusal = next(
        m
        for m in fake.requests[1].body["messages"][-1]["content"]
        if m.get("type") == "tool_result" and m.get("is_error")
    )
    assert "planning turn" in refusal["content"][0]["text"]
    assert planned.get("plan") is None, "a turn that wrote no plan leaves no draft"
    assert drafted["plan"]["status"] == "draft"
    assert done["status"] == "answered" and len(ops.ran("migrate")) == 1


def _plan() -> str:
    return '{"todos": [{"content": "call ops__migrate {\\"target\\": \\"users\\"}"}]}'


def project(tmp_path: Path, agent: dict[str, Any] | str, name: str = "a.yaml") -> Path:
    (tmp_path / "configs/agents").mkdir(parents=True)
    text = agent if isinstance(agent, str) else yaml.safe_dump(agent)
    (tmp_path / "configs/agents" / name).write_text(text)
    path = tmp_path / "parley.yaml"
    path.write_text(yaml.safe_dump({"storage": {"path": "p.db"}}))
    return path


def test_plan_mode_without_write_todos_is_c021(tmp_path: Path) -> None:
    [error] = collect_config_errors(project(tmp_path, {"name": "a", "plan_mode": True}))
    assert (error.code, error.field) == ("PARLEY-C021", "plan_mode")
    assert "write_todos" in str(error)


def test_a_forced_plan_tool_on_a_model_that_refuses_one_is_c021_naming_the_model(tmp_path: Path) -> None:
    agent = {
        "name": "a",
        "tools": ["write_todos"],
        "plan_mode": True,
        "plan_tool_choice": "required",
        "model": {
            "provider": "anthropic",
            "name": "claude-thinker",
            "api_key_env": "KEY",
            "options": {"thinking": {"type": "enabled", "budget_tokens": 2000}},
        },
    }
    [error] = collect_config_errors(project(tmp_path, agent))
    assert (error.code, error.field) == ("PARLEY-C021", "plan_tool_choice")
    assert "anthropic:claude-thinker" in str(error) and "plan_tool_choice: auto" in str(error)


def test_claude_codes_permission_mode_plan_is_plan_mode(tmp_path: Path) -> None:
    text = "---\nname: careful\ntools: Read, ask_user\npermissionMode: plan\n---\nPlan first.\n"
    config = load_config(project(tmp_path, text, "careful.md"), None)
    agent = config.agents["careful"]
    assert agent.plan_mode and agent.tools == ["ask_user", "write_todos"]
    assert ("PARLEY-C017", "permissionMode") not in [(n.code, n.field) for n in config.agent_notices]


async def test_a_claude_code_agent_with_permission_mode_plan_plans_first(tmp_path: Path) -> None:
    folder = tmp_path / ".claude" / "agents"
    folder.mkdir(parents=True)
    (folder / "careful.md").write_text(
        "---\nname: careful\ntools: ask_user\npermissionMode: plan\n---\nPlan first.\n"
    )
    config = {"agents_dir": str(folder)}
    async with parley_app(config, directory=tmp_path) as parley, parley.mcp() as client:
        plan = '/tool write_todos {"todos": [{"content": "look first"}]}'
        planned = await call(client, "start_session", agent="careful", message=plan)
    assert planned["mode"] == "planning" and planned["plan"]["status"] == "draft"
