"""
Match an engine's journal, or a Spark's kernel log, against the known GB10 failure
signatures (signatures.yaml).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, cast

from sparkdeploy.knowledge import load_yaml

SIGNATURES_FILE = Path(__file__).resolve().parent / "signatures.yaml"

Scope = Literal["engine", "host"]
SCOPES: tuple[Scope, ...] = ("engine", "host")
ENGINE_JOURNAL = "engine journal"
KERNEL_LOG = "kernel log"


@dataclass(frozen=True)
class Source:
    """Where a signature is known from: an address or a report, and when, as it says."""

    ref: str
    date: str = ""

    def __str__(self) -> str:
        return f"{self.ref} ({self.date})" if self.date else self.ref


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    rule: str = ""  # the GB10 rule (gb10_rules.yaml) that prevents it
    scope: Scope = "engine"  # where the cause and the fix are: the engine or the Spark
    sources: tuple[Source, ...] = ()
    prevented_by: str = ""  # another part of the deploy that prevents it
    rule_needed: str = ""  # the GB10 rule that would prevent it, in words


@dataclass(frozen=True)
class Diagnosis:
    signature: Signature
    line: str  # the log line that matched
    where: str = ENGINE_JOURNAL  # the log it was seen in

    def __str__(self) -> str:
        rule = f" (GB10 rule {self.signature.rule})" if self.signature.rule else ""
        return (
            f"matches {self.signature.id}{rule}: {self.signature.cause} "
            f"Fix: {self.signature.fix}\n    seen in the {self.where}: {self.line.strip()}"
        )


def _text(entry: dict, key: str) -> str:
    return " ".join(str(entry.get(key) or "").split())


def _signature(entry: dict) -> Signature:
    scope = entry.get("scope", "engine")
    if scope not in SCOPES:
        raise ValueError(f"signature {entry['id']}: scope {scope!r} is not one of {SCOPES}")
    return Signature(
        id=entry["id"],
        pattern=re.compile(entry["pattern"], re.IGNORECASE),
        cause=_text(entry, "cause"),
        fix=_text(entry, "fix"),
        rule=entry.get("rule", ""),
        scope=cast(Scope, scope),
        sources=tuple(
            Source(str(source["ref"]), str(source.get("date", "")))
            for source in entry.get("sources") or ()
        ),
        prevented_by=_text(entry, "prevented_by"),
        rule_needed=_text(entry, "rule_needed"),
    )


@lru_cache(maxsize=1)
def signatures() -> tuple[Signature, ...]:
    entries = load_yaml(SIGNATURES_FILE)
    return tuple(_signature(entry) for entry in entries)


def diagnose(
    log: str, where: str = ENGINE_JOURNAL, scopes: tuple[Scope, ...] = SCOPES
) -> list[Diagnosis]:
    """Every signature of ``scopes`` found in ``log`` (seen in ``where``), each with the first
    line it matched, in file order. An engine journal is matched against every signature
    (NCCL and the engines report some host faults there), a kernel log against the host
    ones."""
    lines = log.splitlines()
    found = []
    for signature in signatures():
        if signature.scope not in scopes:
            continue
        line = next((line for line in lines if signature.pattern.search(line)), None)
        if line is not None:
            found.append(Diagnosis(signature, line, where))
    return found
