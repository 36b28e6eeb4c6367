"""
Diagnosis of a Spark, read-only (``pyinfra inventory.py diagnose.py``): each engine unit's
state and last journal lines, and the kernel log of this boot and the previous one, from one
fact per Spark, matched against the known GB10 failure signatures
(knowledge/signatures.yaml). Every finding says where it was seen (the engine journal, the
kernel log of which boot). The report is printed per host after pyinfra's results.
"""

from __future__ import annotations

import logging

from pyinfra import host

from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.facts.journals import SparkJournals
from sparkdeploy.facts.store import gathered
from sparkdeploy.readings.diagnosis import (
    JOURNAL_LINES,
    KERNEL_LINES,
    TAIL_LINES,
    kernel_report,
    report,
)
from sparkdeploy.reports import notices

__all__ = ["TAIL_LINES", "diagnose_engines", "kernel_report", "report"]


def diagnose_engines() -> None:
    """Read every engine unit of the current host's plan, and its kernel log, and record
    their diagnosis as notices."""
    plan: EnginePlan | None = host.data.get("engine_plan")
    if plan is None:
        notices.add(
            host.name,
            "no engine: in the inventory for this Spark; only its kernel log is read",
            logging.INFO,
        )
    journals = gathered(
        host,
        SparkJournals,
        units=plan.units if plan is not None else (),
        lines=JOURNAL_LINES,
        kernel_lines=KERNEL_LINES,
    )
    for journal in journals.units:
        level, text = report(journal)
        notices.add(host.name, f"Diagnosis of {text}", level)
    level, text = kernel_report(journals.boots)
    notices.add(host.name, f"Diagnosis of {text}", level)
