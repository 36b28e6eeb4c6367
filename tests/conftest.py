"""Every test under tests/scenarios boots Spark twins in Docker: it carries the `twins`
marker, so `pytest -m "not twins"` (`make unit`) runs everything that needs no Docker."""

from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "twins: needs a Docker engine to boot Spark twins")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SCENARIOS in item.path.parents:
            item.add_marker(pytest.mark.twins)
