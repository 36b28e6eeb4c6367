"""Every test under tests/scenarios boots Spark twins in Docker: it carries the `twins`
marker, so `pytest -m "not twins"` (`make unit`) runs everything that needs no Docker.

The suite sets its own environment: the caller's Hugging Face variables (HF_HUB_OFFLINE=1,
HF_ENDPOINT, HF_TOKEN ...) and the deploy's own laptop variables (SPARK_INVENTORY,
SPARK_API_KEY, SPARK_TRUST_HF_ENDPOINT ...) would change what the deploy and the fake Hub do,
so they are removed before any test runs; a test that needs one sets it itself.
"""

import os
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


# Prefixes of the caller's variables the suite must not inherit.
CALLER_PREFIXES = ("HF_", "HUGGING_FACE_", "HUGGINGFACE_", "SPARK_")


def pytest_configure(config: pytest.Config) -> None:
    for name in [name for name in os.environ if name.startswith(CALLER_PREFIXES)]:
        del os.environ[name]
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # Each pytest-xdist worker boots its own twins: a namespace of its own (harness.py),
        # so two workers never share, replace or wait on each other's twins.
        from tests.twins import harness

        os.environ[harness.NAMESPACE_ENV] = f"{harness.namespace()[:28]}-{worker}"
    config.addinivalue_line("markers", "twins: needs a Docker engine to boot Spark twins")
    config.addinivalue_line("markers", "slow: a unit test of several seconds (a wheel built)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SCENARIOS in item.path.parents:
            item.add_marker(pytest.mark.twins)
