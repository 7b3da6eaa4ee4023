from __future__ import annotations

import pytest

# Modules named test_e2e_* start real processes (parley serve, MCP servers, npm tools). Everything
# else is the fast layer: `pytest -m "not e2e"` runs it alone, with no subprocess.
E2E_PREFIX = "test_e2e_"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name.startswith(E2E_PREFIX):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
