"""Match an engine's log against the known GB10 failure signatures (signatures.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

SIGNATURES_FILE = Path(__file__).resolve().parent / "signatures.yaml"


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: re.Pattern
    cause: str
    fix: str
    rule: str = ""


@dataclass(frozen=True)
class Diagnosis:
    signature: Signature
    line: str  # the log line that matched

    def __str__(self) -> str:
        rule = f" (GB10 rule {self.signature.rule})" if self.signature.rule else ""
        return (
            f"matches {self.signature.id}{rule}: {self.signature.cause} "
            f"Fix: {self.signature.fix}\n    seen: {self.line.strip()}"
        )


@lru_cache(maxsize=1)
def signatures() -> tuple[Signature, ...]:
    entries = yaml.safe_load(SIGNATURES_FILE.read_text(encoding="utf-8"))
    return tuple(
        Signature(
            entry["id"],
            re.compile(entry["pattern"], re.IGNORECASE),
            entry["cause"],
            entry["fix"],
            entry.get("rule", ""),
        )
        for entry in entries
    )


def diagnose(log: str) -> list[Diagnosis]:
    """Every signature found in ``log``, each with the first line it matched, in file order."""
    lines = log.splitlines()
    found = []
    for signature in signatures():
        line = next((line for line in lines if signature.pattern.search(line)), None)
        if line is not None:
            found.append(Diagnosis(signature, line))
    return found
