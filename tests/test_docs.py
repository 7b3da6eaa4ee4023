"""The guides' code is the code CI runs: every code block of a guide is in its example files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUIDES = {
    "docs/testing.md": [
        "examples/testing/test_refunds_agent.py",
        "examples/testing/agents/refunds.md",
        "examples/testing/agents/night-refunds.yaml",
    ],
}
BLOCK = re.compile(r"```(?:python|markdown|yaml)\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_every_code_block_of_a_guide_is_in_its_examples(guide: str) -> None:
    examples = "\n".join((REPO / path).read_text() for path in GUIDES[guide])
    blocks = BLOCK.findall((REPO / guide).read_text())
    assert blocks, f"{guide} has no code blocks"
    for block in blocks:
        assert block in examples, f"{guide}: this block is not in {GUIDES[guide]}:\n{block}"
