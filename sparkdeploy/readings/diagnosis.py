"""
The diagnosis of a Spark's engines, read-only: each unit's state and last journal lines, and
the kernel log of this boot and the previous one (``readings/journals.py``), matched against
the known GB10 failure signatures (knowledge/signatures.yaml). Every finding says where it was
seen (the engine journal, the kernel log of which boot), its rule, cause, fix and source.
``diagnose.py`` prints it per host after pyinfra's results; the MCP server answers with it.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sparkdeploy.knowledge.signatures import ENGINE_JOURNAL, KERNEL_LOG, Diagnosis, diagnose
from sparkdeploy.readings.journals import BootLog, UnitJournal

JOURNAL_LINES = 300  # read per unit: a failed start of SGLang or vLLM fits with its traceback
KERNEL_LINES = 1000  # read per boot: the driver's lines of a wedge, or of its start at boot
TAIL_LINES = 15  # shown when no signature matched
INDENT = "    "  # pyinfra indents the first line of a notice by as much


def _finding(diagnosis: Diagnosis) -> list[str]:
    signature = diagnosis.signature
    if signature.rule:
        rule = f" (GB10 rule {signature.rule})"
    else:
        rule = " (no GB10 rule prevents it" + (" yet)" if signature.rule_needed else ")")
    rows = [
        ("rule id", signature.id + rule),
        ("seen", diagnosis.line.strip()),
        ("where", diagnosis.where),
        ("cause", signature.cause),
        ("fix", signature.fix),
    ]
    if signature.prevented_by:
        rows.append(("prevent", signature.prevented_by))
    if signature.rule_needed:
        rows.append(("missing", f"GB10 rule: {signature.rule_needed}"))
    if signature.sources:
        rows.append(("source", "; ".join(str(source) for source in signature.sources)))
    return [f"{INDENT * 2}{label:<8} {text}" for label, text in rows]


def unit_findings(journal: UnitJournal) -> list[Diagnosis]:
    """The signatures in one installed unit's journal lines (every scope: NCCL and the
    engines report some host faults there)."""
    return diagnose("\n".join(journal.lines), ENGINE_JOURNAL) if journal.installed else []


def report(
    journal: UnitJournal, lines: int = JOURNAL_LINES, found: list[Diagnosis] | None = None
) -> tuple[int, str]:
    """The log level and text of one unit's diagnosis (``found``: its ``unit_findings``,
    when the caller has them already)."""
    head = f"{journal.unit}: {journal.summary()}"
    if not journal.installed:
        return logging.WARNING, f"{head}; run the deploy to install it"
    level = logging.INFO if journal.active else logging.WARNING
    found = unit_findings(journal) if found is None else found
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


def kernel_findings(boots: list[BootLog]) -> list[Diagnosis]:
    """The host signatures in each boot's lines, each tagged with the log and boot it was in."""
    found = []
    for boot in boots:
        for diagnosis in diagnose("\n".join(boot.lines), KERNEL_LOG, scopes=("host",)):
            found.append(replace(diagnosis, where=boot.where(diagnosis.line)))
    return found


def kernel_report(
    boots: list[BootLog], lines: int = KERNEL_LINES, found: list[Diagnosis] | None = None
) -> tuple[int, str]:
    """The log level and text of the kernel log's diagnosis (``found``: its
    ``kernel_findings``, when the caller has them already)."""
    read = " and ".join(
        f"{len(boot.lines)} lines of the {boot.boot}"
        + ("" if boot.lines else " (not in the journal)")
        for boot in boots
    )
    head = f"the kernel log (the last {lines} kernel lines per boot, with nvidia-persistenced's)"
    found = kernel_findings(boots) if found is None else found
    if found:
        body = [f"{INDENT}{len(found)} known GB10 host failure signature(s) in {read}:"]
        for diagnosis in found:
            body += _finding(diagnosis)
        return logging.WARNING, "\n".join([f"{head}:", *body])
    if not any(boot.lines for boot in boots):
        return logging.INFO, f"{head}: no lines (is the journal there and readable?)"
    return logging.INFO, f"{head}: no known GB10 host failure signature in {read}"
