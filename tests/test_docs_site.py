"""The documentation site builds with `mkdocs build --strict` from mkdocs.yml and docs/, in this
process, with no warning (a page the nav names that is missing, a broken link or anchor); and the
references docs/_hooks/reference.py generates are pages of the built site, never files in docs/."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from parley.server.tools import TOOLS

REPO = Path(__file__).resolve().parent.parent


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass(frozen=True)
class Built:
    site: Path
    warnings: list[str]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The site, built once for the module's tests, and what mkdocs warned about on the way."""
    site_dir = tmp_path_factory.mktemp("site")
    records = _Records()
    logger = logging.getLogger("mkdocs")
    logger.addHandler(records)
    try:
        build(load_config(str(REPO / "mkdocs.yml"), site_dir=str(site_dir), strict=True))
    except Abort:
        pass  # strict mode stops at the end on the warnings, which the first test lists
    finally:
        logger.removeHandler(records)
    return Built(site_dir, [f"{r.levelname}: {r.getMessage()}" for r in records.records])


def test_the_site_builds_strictly_without_a_warning(built: Built) -> None:
    if built.warnings:
        pytest.fail("mkdocs build --strict warns:\n" + "\n".join(built.warnings), pytrace=False)
    assert (built.site / "index.html").is_file()


def test_the_tools_reference_is_a_page_naming_every_tool(built: Built) -> None:
    page = (built.site / "reference" / "tools" / "index.html").read_text(encoding="utf-8")
    for entry in TOOLS:
        assert f'id="{entry.name.replace("_", "-")}"' in page, entry.name
        assert f"<code>{entry.name}</code>" in page, entry.name


def test_the_configuration_reference_is_a_page_with_known_fields(built: Built) -> None:
    page = (built.site / "reference" / "configuration" / "index.html").read_text(encoding="utf-8")
    for path in (
        "storage.pool_size",
        "http.max_request_bytes",
        "runtime.agent_reload_s",
        "mcp_servers.&lt;name&gt;.call_timeout_s",
        "auth.tokens[].sha256",
        "limits.max_model_calls_per_turn",
        "parley check",
    ):
        assert f"<code>{path}</code>" in page, path


def test_the_generated_references_are_not_files_in_docs(built: Built) -> None:
    assert not (REPO / "docs" / "reference").exists()
