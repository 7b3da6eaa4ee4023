"""The composition root of `parley serve` opened and closed in-process, as `parley.testing` will."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest

from parley.app import running_app
from parley.config import load_config

pytestmark = pytest.mark.anyio


async def test_a_closed_app_leaves_no_stream_open_behind_it(tmp_path: Path) -> None:
    config = load_config(None, tmp_path / "parley.db")
    async with running_app(config) as app:
        assert (await app.health())["status"] == "ok"
    # An unclosed memory stream warns when collected; the suite turns warnings into errors.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
