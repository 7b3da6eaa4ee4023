"""The one redaction function: what it removes from provider text, and what it leaves alone."""

from __future__ import annotations

import pytest

from parley.redaction import REDACTED, redact

KEY = "k3y-Value-0123456789"


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        (f"invalid key {KEY}", KEY),
        ("Authorization: Bearer abcdef123456.xyz", "abcdef123456.xyz"),
        ("header x-api-key: zzzzzzzzzz rejected", "zzzzzzzzzz"),
        ('{"api_key": "q1w2e3r4t5y6"}', "q1w2e3r4t5y6"),
        ("api-key=AAAAAAAAAAAA&x=1", "AAAAAAAAAAAA"),
        ("use sk-ant-api03-abcdefgh instead", "sk-ant-api03-abcdefgh"),
        ("got sk-proj-ABCDEFGH12", "sk-proj-ABCDEFGH12"),
    ],
)
def test_credentials_are_removed(text: str, gone: str) -> None:
    cleaned = redact(text, [KEY])
    assert gone not in cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "anthropic answered HTTP 429: slow down.",
        "the task was skipped (sk- prefix missing)",
        "Bearer of bad news",
        "",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text, [KEY, None, "short"]) == text
