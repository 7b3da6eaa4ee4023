"""The effect policy (core/effect_policy.py) as a table: every effect x mishap x attempt count."""

from __future__ import annotations

import pytest

from parley.core.effect_policy import MAX_ATTEMPTS, Mishap, judge

EFFECTS = ["read", "idempotent_write", "non_idempotent_write", "unclassified"]

# (effect, mishap, attempts so far) -> retry, or the ending
TABLE = [
    ("read", Mishap.NOT_SENT, 1, "retry"),
    ("read", Mishap.NOT_SENT, MAX_ATTEMPTS, "failed"),
    ("read", Mishap.MAYBE_SENT, 1, "retry"),
    ("read", Mishap.MAYBE_SENT, MAX_ATTEMPTS, "failed"),
    ("read", Mishap.INTERRUPTED, 1, "retry"),
    ("read", Mishap.INTERRUPTED, MAX_ATTEMPTS, "failed"),
    ("read", Mishap.FATE_UNKNOWN, 1, "failed"),
    ("idempotent_write", Mishap.NOT_SENT, 1, "retry"),
    ("idempotent_write", Mishap.NOT_SENT, MAX_ATTEMPTS, "failed"),
    ("idempotent_write", Mishap.MAYBE_SENT, 1, "retry"),
    ("idempotent_write", Mishap.MAYBE_SENT, MAX_ATTEMPTS, "outcome_unknown"),
    ("idempotent_write", Mishap.INTERRUPTED, 2, "retry"),
    ("idempotent_write", Mishap.INTERRUPTED, MAX_ATTEMPTS, "outcome_unknown"),
    ("idempotent_write", Mishap.FATE_UNKNOWN, 1, "outcome_unknown"),
    *[(effect, Mishap.NOT_SENT, 1, "failed") for effect in ("non_idempotent_write", "unclassified")],
    *[
        (effect, mishap, 1, "outcome_unknown")
        for effect in ("non_idempotent_write", "unclassified")
        for mishap in (Mishap.MAYBE_SENT, Mishap.INTERRUPTED, Mishap.FATE_UNKNOWN)
    ],
]


@pytest.mark.parametrize(("effect", "mishap", "attempts", "expected"), TABLE)
def test_the_effect_policy_table(effect: str, mishap: Mishap, attempts: int, expected: str) -> None:
    verdict = judge(effect, mishap, attempts, "It broke.")
    if expected == "retry":
        assert verdict.retry and verdict.ending is None
        return
    assert not verdict.retry and verdict.ending == expected
    assert verdict.text.startswith("It broke.")
    if expected == "failed":
        assert "safe to call again" in verdict.text, "the model must know it may call again"
    else:
        assert "may or may not have taken effect" in verdict.text and effect in verdict.text


def test_every_effect_and_mishap_has_a_row() -> None:
    assert {(e, m) for e, m, _, _ in TABLE} == {(e, m) for e in EFFECTS for m in Mishap}
