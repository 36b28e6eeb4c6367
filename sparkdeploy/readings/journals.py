"""
The engine units' journals and the Spark's kernel log, read-only: the shell commands that
read them and their parsers. ``facts/journals.py`` runs them over SSH as facts; the MCP
server (``agent/``) runs them on the Spark.

Their sample output is in the docstrings of the facts that run them (``facts/journals.py``).
Every line they return is redacted (``escape.redact_lines``): engines log their arguments,
API key included (SGLang's ``server_args=ServerArgs(... api_key='...')``), and these lines go
to the MCP server's callers and the laptop's terminal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkdeploy.escape import redact_lines, shell

JOURNAL_MARK = "@@spark-deploy@@"  # starts the command's own lines; journal lines never do
UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainStatus",
    "NRestarts",
    "StateChangeTimestamp",
)


@dataclass(frozen=True)
class UnitJournal:
    unit: str
    properties: dict[str, str]  # `systemctl show` of UNIT_PROPERTIES
    lines: tuple[str, ...]  # the unit's last journal lines, oldest first

    @property
    def installed(self) -> bool:
        return self.properties.get("LoadState") == "loaded"

    @property
    def active(self) -> bool:
        return self.properties.get("ActiveState") == "active"

    def summary(self) -> str:
        """ "failed (exit-code, exit status 1) since Mon 2026-03-23 10:12:05 UTC, 3 restarts"."""
        if not self.installed:
            return f"not installed ({self.properties.get('LoadState') or 'unknown'})"
        get = self.properties.get
        state = f"{get('ActiveState', '?')} ({get('SubState', '?')}"
        if get("Result", "success") != "success":
            state += f", {get('Result')}, exit status {get('ExecMainStatus', '?')}"
        since = f" since {get('StateChangeTimestamp')}" if get("StateChangeTimestamp") else ""
        return f"{state}){since}, {get('NRestarts', '0')} restarts"


def units_command(units: tuple[str, ...], lines: int) -> str:
    """Each unit's state (``systemctl show``) and last ``lines`` journal lines (message text
    only; none read when ``lines`` is 0)."""
    properties = ",".join(UNIT_PROPERTIES)
    commands = []
    for unit in units:
        quoted = shell(unit)
        commands += [
            f"printf '{JOURNAL_MARK} unit %s\\n' {quoted}",
            f"systemctl show {quoted} -p {properties} | sed 's/^/{JOURNAL_MARK} state /'",
            *([f"journalctl -u {quoted} -n {int(lines)} --no-pager -q -o cat"] if lines else []),
        ]
    return "\n".join([*commands, "true"])


def parse_units(output: list[str]) -> list[UnitJournal]:
    found: list[tuple[str, dict[str, str], list[str]]] = []
    for line in output:
        kind, rest = "", ""
        if line.startswith(f"{JOURNAL_MARK} "):
            kind, _, rest = line[len(JOURNAL_MARK) + 1 :].partition(" ")
        if kind == "unit":
            found.append((rest.strip(), {}, []))
        elif kind == "state" and found:
            key, _, value = rest.partition("=")
            found[-1][1][key] = value.strip()
        elif found:
            found[-1][2].append(line)
    return [
        UnitJournal(unit, properties, tuple(redact_lines(lines)))
        for unit, properties, lines in found
    ]


# The boots whose kernel log is read: a wedged Spark is power-cycled, so what the driver
# logged before the wedge is in the previous boot, when the journal is kept on disk (the
# Spark of NVIDIA forum thread 366026 had 40 boots in it).
BOOTS = (("current boot", 0), ("previous boot", -1))
# Besides the kernel: nvidia-persistenced logs "Failed to query NVIDIA devices" at boot when
# the driver did not come up (syslog, not the kernel log).
HOST_IDENTIFIERS = ("nvidia-persistenced",)
IDENTIFIER_LINES = 20  # of each identifier per boot
# `journalctl -o short-iso`: "2026-11-20T08:01:12+00:00 spark-1 kernel: NVRM: ..."
SHORT_ISO = re.compile(r"^\S+ \S+ (?P<identifier>[^\s\[:]+)(\[\d+\])?: ")


@dataclass(frozen=True)
class BootLog:
    boot: str  # "current boot" or "previous boot"
    lines: tuple[str, ...]  # the kernel's last lines, then nvidia-persistenced's (short-iso)

    def where(self, line: str) -> str:
        """The log a line of this boot comes from: "kernel log, previous boot"."""
        match = SHORT_ISO.match(line)
        identifier = match.group("identifier") if match else "kernel"
        source = "kernel log" if identifier == "kernel" else f"{identifier} log"
        return f"{source}, {self.boot}"


def kernel_command(lines: int) -> str:
    """The last kernel lines of this boot and of the previous one (``journalctl -k``,
    bounded by ``lines`` per boot), each followed by nvidia-persistenced's last lines of
    that boot. Needs root, or the adm or systemd-journal group."""
    commands = []
    for boot, offset in BOOTS:
        read = f"journalctl -b {offset} --no-pager -q -o short-iso"
        commands += [
            f"printf '{JOURNAL_MARK} boot %s\\n' {shell(boot)}",
            f"{read} -k -n {int(lines)} 2>/dev/null",
            *(
                f"{read} -t {shell(name)} -n {IDENTIFIER_LINES} 2>/dev/null"
                for name in HOST_IDENTIFIERS
            ),
        ]
    return "\n".join([*commands, "true"])


def parse_kernel(output: list[str]) -> list[BootLog]:
    """A boot the journal does not hold (no persistent journal, a first boot) comes back
    with no lines."""
    found: list[tuple[str, list[str]]] = []
    for line in output:
        if line.startswith(f"{JOURNAL_MARK} boot "):
            found.append((line[len(JOURNAL_MARK) + 6 :].strip(), []))
        elif found:
            found[-1][1].append(line)
    return [BootLog(boot, tuple(redact_lines(lines))) for boot, lines in found]


@dataclass(frozen=True)
class Journals:
    units: list[UnitJournal]
    boots: list[BootLog]


def journals_command(units: tuple[str, ...], lines: int, kernel_lines: int) -> str:
    """Both in one command: the units' sections first, then the boots' (their marks tell
    them apart)."""
    return "\n".join([units_command(units, lines), kernel_command(kernel_lines)])


def parse_journals(output: list[str]) -> Journals:
    first_boot = next(
        (n for n, line in enumerate(output) if line.startswith(f"{JOURNAL_MARK} boot ")),
        len(output),
    )
    return Journals(parse_units(output[:first_boot]), parse_kernel(output[first_boot:]))
