"""
The host-state fact's probes: one per feature host preparation manages, each the shell lines
that read it and the parser of what they print. The fact (``facts/host_state.py``) runs every
probe's lines in one round trip and hands each output line to the probe that owns its first
word (its kind); a line no probe owns is ignored.

A probe is a class (its docstring carries a sample of its output, which the tests parse) with:

- ``kinds``: the first words of the output lines it owns, disjoint from every other probe's;
- ``lines(query)``: its shell lines, from the fact's arguments (``HostQuery``);
- ``parse(lines)``: its value, from the lines it owns (each still starting with its kind).

Probes may import config, escape and render, never pyinfra or the fact that runs them: each
knows its feature and nothing of the others. The lines may read ``$home``, the operator's
home, which the fact sets first (``operator_home``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from sparkdeploy.escape import shell

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class HostQuery:
    """What the fact was asked to read: the operator, the managed files (``~/`` ones under
    the operator's home), the model folders (folder, repository@revision, tokenizer "1"/"0"
    triples), the units, the globs of the engine files written earlier, and the engine image."""

    user: str
    paths: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    owned_globs: tuple[str, ...] = ()
    image: str = ""


class Probe(Protocol[T_co]):
    @property
    def kinds(self) -> tuple[str, ...]: ...

    def lines(self, query: HostQuery) -> list[str]: ...

    def parse(self, lines: list[str]) -> T_co: ...


def operator_home(user: str) -> str:
    """The line that sets ``$home``, the operator's home, for the probes that read it."""
    return f"home=$(getent passwd {shell(user)} | cut -d: -f6)"


def kind_of(line: str) -> str:
    return line.partition(" ")[0]


def owned_lines(probe: Probe[object], output: list[str]) -> list[str]:
    """The lines of ``output`` whose kind ``probe`` owns, in order."""
    return [line for line in output if kind_of(line) in probe.kinds]


def fields(line: str) -> list[str]:
    """The words of ``line`` after its kind."""
    return line.partition(" ")[2].split()


def last_value(lines: list[str], kind: str) -> str | None:
    """What the last ``kind`` line says after its kind (stripped), None when there is none."""
    values = [line.partition(" ")[2].strip() for line in lines if kind_of(line) == kind]
    return values[-1] if values else None


def keyed_values(lines: list[str]) -> dict[str, str]:
    """``KIND KEY VALUE...`` lines as KEY -> VALUE (stripped; the last line of a key wins)."""
    found: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(" ")[2].partition(" ")
        found[key] = value.strip()
    return found


# The hash lock a venv was made from (knowledge/locks.py), kept in it once pip installed
# everything it lists (deploys/venv.py): read as its sha256, "" when absent.
LOCK_STAMP = "spark-deploy.lock"


def stamp_line(label: str, stamp: str) -> str:
    """`LABEL SHA256` of a venv's lock stamp (`LABEL ` alone when there is none)."""
    return f"printf '{label} %s\\n' \"$([ -f {stamp} ] && sha256sum < {stamp} | cut -d' ' -f1)\""
