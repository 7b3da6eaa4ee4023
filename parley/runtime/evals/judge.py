"""An LLM-judged rubric: one model call, outside any session, that answers PASS or FAIL with a
reason. The demo model judges deterministically (`demo_verdict`): PASS when the answer holds
every phrase the rubric quotes in double quotes (ignoring case), or, when it quotes none, when
the answer is not empty."""

from __future__ import annotations

import re
from collections.abc import Sequence

from parley.config.models import ModelSpec
from parley.errors import ModelError
from parley.runtime.evals.checks import Verdict
from parley.runtime.model import ChatMessage, ModelClient, ModelRequest

JUDGE_INSTRUCTION = (
    "You are an evaluation judge. You are given a rubric and an AI agent's conversation, between "
    "<rubric> and <answer> tags. Decide whether the agent's final answer meets the rubric. Reply "
    "with one line: PASS or FAIL, a colon, and a one-sentence reason."
)
_QUOTED = re.compile(r'"([^"]+)"')
_VERDICT = re.compile(r"\s*\**\s*(PASS|FAIL)\b\**[\s:.\-]*(.*)", re.IGNORECASE | re.DOTALL)


def judge_prompt(rubric: str, messages: Sequence[str], answer: str | None) -> str:
    said = "\n".join(f"- {m}" for m in messages)
    return (
        f"<rubric>\n{rubric}\n</rubric>\n\n<messages>\n{said}\n</messages>\n\n"
        f"<answer>\n{answer or ''}\n</answer>"
    )


async def judge(
    model: ModelClient, spec: ModelSpec, rubric: str, messages: Sequence[str], answer: str | None
) -> Verdict:
    """The judge's verdict; a failed call or an answer that is neither PASS nor FAIL fails."""
    request = ModelRequest(
        model=spec.name,
        instructions=JUDGE_INSTRUCTION,
        messages=(ChatMessage(role="user", text=judge_prompt(rubric, messages, answer)),),
        tools=(),
        options=dict(spec.options),
    )
    try:
        response = await model.complete(request)
    except ModelError as exc:
        return Verdict(False, f"the judge's model call failed ({exc})")
    return parse_verdict(response.text)


def parse_verdict(text: str) -> Verdict:
    found = _VERDICT.match(text)
    if found is None:
        return Verdict(False, f"the judge answered neither PASS nor FAIL: {' '.join(text.split())[:200]!r}")
    reason = " ".join(found.group(2).split()) or "(no reason given)"
    return Verdict(found.group(1).upper() == "PASS", reason)


def demo_verdict(prompt: str) -> str:
    """The demo model's answer to a judge prompt (see the module's docstring)."""
    rubric = _between(prompt, "rubric")
    answer = _between(prompt, "answer")
    phrases = _QUOTED.findall(rubric)
    if not phrases:
        return "PASS: the answer is not empty" if answer.strip() else "FAIL: the answer is empty"
    missing = [p for p in phrases if p.lower() not in answer.lower()]
    if missing:
        return "FAIL: the answer lacks " + ", ".join(f'"{p}"' for p in missing)
    return "PASS: the answer has " + ", ".join(f'"{p}"' for p in phrases)


def _between(text: str, tag: str) -> str:
    start, end = text.find(f"<{tag}>\n"), text.rfind(f"\n</{tag}>")
    return text[start + len(tag) + 3 : end] if 0 <= start < end else ""
