"""The metric names each engine release exports (metrics.yaml, read from its wheel)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from sparkdeploy.knowledge import load_yaml

METRICS_FILE = Path(__file__).resolve().parent / "metrics.yaml"


@lru_cache(maxsize=1)
def metrics() -> dict[str, Any]:
    """metrics.yaml: per engine, the releases, source file, metric names and PromQL."""
    return load_yaml(METRICS_FILE)
