"""
Prometheus alerts for an engine (``engine.alerts``): what to alert on, decided with the plan,
and the metric names the pinned release really exports (knowledge/metrics.yaml, read from its wheel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkdeploy.knowledge.metrics import metrics


@dataclass(frozen=True)
class AlertPlan:
    engine: str
    version: str
    threshold: float  # accept rate below which the speculative alert fires
    window: str  # Prometheus duration the rate is averaged over
    speculative: bool  # only then is there an accept rate to watch


def template_values(alerts: AlertPlan, unit: str, port: int, spark: str) -> dict[str, Any]:
    """What templates/prometheus-*.yml.j2 render, for the unit serving the API on ``port``."""
    engine = metrics()[alerts.engine]
    job = unit.removesuffix(".service")
    promql = {
        key: " ".join(engine[key].split()).replace("{job}", job).replace("{window}", alerts.window)
        for key in ("accept_rate", "active")
    }
    return {
        "unit": unit,
        "job": job,
        "port": port,
        "spark": spark,
        "engine": alerts.engine,
        "version": alerts.version,
        "source": engine["source"],
        "threshold": alerts.threshold,
        "window": alerts.window,
        "speculative": alerts.speculative,
        **promql,
    }
