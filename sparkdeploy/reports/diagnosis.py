"""
Diagnosis of the engine units, read-only (``pyinfra inventory.py diagnose.py``): each unit's
state and last journal lines, from one fact per Spark, matched against the known GB10 failure
signatures (knowledge/signatures.yaml). The report is printed per host after pyinfra's results.
"""

from __future__ import annotations

import logging

from pyinfra import host

from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.facts.journals import EngineJournals, UnitJournal
from sparkdeploy.facts.store import gathered
from sparkdeploy.knowledge.signatures import Diagnosis, diagnose
from sparkdeploy.reports import notices

JOURNAL_LINES = 300  # read per unit: a failed start of SGLang or vLLM fits with its traceback
TAIL_LINES = 15  # shown when no signature matched
INDENT = "    "  # pyinfra indents the first line of a notice by as much


def _finding(diagnosis: Diagnosis) -> list[str]:
    signature = diagnosis.signature
    rows = [
        (
            "rule id",
            signature.id
            + (
                f" (GB10 rule {signature.rule})"
                if signature.rule
                else " (no GB10 rule prevents it)"
            ),
        ),
        ("seen", diagnosis.line.strip()),
        ("cause", signature.cause),
        ("fix", signature.fix),
    ]
    return [f"{INDENT * 2}{label:<8} {text}" for label, text in rows]


def report(journal: UnitJournal, lines: int = JOURNAL_LINES) -> tuple[int, str]:
    """The log level and text of one unit's diagnosis."""
    head = f"{journal.unit}: {journal.summary()}"
    if not journal.installed:
        return logging.WARNING, f"{head}; run the deploy to install it"
    level = logging.INFO if journal.active else logging.WARNING
    found = diagnose("\n".join(journal.lines))
    read = f"its last {len(journal.lines)} journal lines"
    if found:
        earlier = (
            " (the unit runs now: they may be from an earlier start)" if journal.active else ""
        )
        body = [f"{INDENT}{len(found)} known GB10 failure signature(s) in {read}{earlier}:"]
        for diagnosis in found:
            body += _finding(diagnosis)
        return logging.WARNING, "\n".join([head, *body])
    if not journal.lines:
        return level, f"{head}; no journal lines"
    tail = journal.lines[-TAIL_LINES:]
    body = [
        f"{INDENT}no known GB10 failure signature in {read} (of {lines} read); "
        f"the last {len(tail)}:",
        *(f"{INDENT * 2}| {line}" for line in tail),
    ]
    return level, "\n".join([head, *body])


def diagnose_engines() -> None:
    """Read every engine unit of the current host's plan and record its diagnosis as a notice."""
    plan: EnginePlan | None = host.data.get("engine_plan")
    if plan is None:
        notices.add(
            host.name,
            "no engine: in the inventory for this Spark; nothing to diagnose",
            logging.INFO,
        )
        return
    for journal in gathered(host, EngineJournals, units=plan.units, lines=JOURNAL_LINES):
        level, text = report(journal)
        notices.add(host.name, f"Diagnosis of {text}", level)
