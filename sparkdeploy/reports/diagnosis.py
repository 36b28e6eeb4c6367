"""
Diagnosis of a Spark, read-only (``pyinfra inventory.py diagnose.py``): each engine unit's
state and last journal lines, and the kernel log of this boot and the previous one, from one
fact per Spark, matched against the known GB10 failure signatures
(knowledge/signatures.yaml). Every finding says where it was seen (the engine journal, the
kernel log of which boot). The report is printed per host after pyinfra's results; an
engine unit that FAILs (not installed, failed, or stopped with a known failure signature)
fails its Spark, so pyinfra exits 1 and the failure block names it.
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
    unit_findings,
)
from sparkdeploy.readings.journals import UnitJournal
from sparkdeploy.reports import notices
from sparkdeploy.reports.failures import judged

__all__ = ["TAIL_LINES", "diagnose_engines", "kernel_report", "report", "unit_failure"]


def unit_failure(journal: UnitJournal) -> str:
    """What FAILs in one engine unit's diagnosis ("" when nothing does): the unit is not
    installed, has failed, or is stopped with a known GB10 failure signature in its journal
    (a unit stopped on purpose, for a GPU service, has none); then the lines that matched."""
    head = f"{journal.unit}: {journal.summary()}"
    if not journal.installed:
        return f"{head}; run the deploy to install it"
    if journal.active:
        return ""
    found = unit_findings(journal)
    if not found and journal.properties.get("ActiveState") != "failed":
        return ""
    return "\n".join([head, *(diagnosis.line.strip() for diagnosis in found)])


def judge_units(name: str, units: list[UnitJournal]) -> None:
    """Fail this Spark (pyinfra exits 1) when an engine unit of it FAILs, pointing to the
    unit's whole journal."""
    failed = [journal for journal in units if unit_failure(journal)]
    judged(
        name="Judge the diagnosis",
        failed="\n".join(unit_failure(journal) for journal in failed),
        then=[f"journalctl -u {journal.unit} -n 300   (on {name})" for journal in failed],
    )


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
    judge_units(host.name, list(journals.units))
