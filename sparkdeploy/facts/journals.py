"""
The engine journals fact: each engine unit's state and last journal lines, read-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from sparkdeploy.escape import shell

JOURNAL_MARK = "@@spark-deploy@@"  # starts the fact's own lines; journal lines never do
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


class EngineJournals(FactBase):
    """
    Returns, in one round trip, the state and the last journal lines of each engine unit.
    Read-only: ``systemctl show`` and ``journalctl`` (message text only, ``-o cat``).

    Sample output of the command::

        @@spark-deploy@@ unit spark-engine-sglang.service
        @@spark-deploy@@ state LoadState=loaded
        @@spark-deploy@@ state ActiveState=failed
        @@spark-deploy@@ state SubState=failed
        @@spark-deploy@@ state Result=exit-code
        @@spark-deploy@@ state ExecMainStatus=1
        @@spark-deploy@@ state NRestarts=3
        @@spark-deploy@@ state StateChangeTimestamp=Mon 2026-03-23 10:12:05 UTC
        [2026-03-23 10:12:03 TP0] Load weight begin. avail mem=119.62 GB
        RuntimeError: CUDA error: invalid device function
        spark-engine-sglang.service: Failed with result 'exit-code'.

    .. code:: python

        [UnitJournal(unit="spark-engine-sglang.service",
                     properties={"LoadState": "loaded", "ActiveState": "failed", ...},
                     lines=("[2026-03-23 10:12:03 TP0] Load weight begin. ...", ...))]
    """

    def command(self, units: tuple[str, ...], lines: int) -> str:
        properties = ",".join(UNIT_PROPERTIES)
        commands = []
        for unit in units:
            quoted = shell(unit)
            commands += [
                f"printf '{JOURNAL_MARK} unit %s\\n' {quoted}",
                f"systemctl show {quoted} -p {properties} | sed 's/^/{JOURNAL_MARK} state /'",
                f"journalctl -u {quoted} -n {int(lines)} --no-pager -q -o cat",
            ]
        return "\n".join([*commands, "true"])

    def process(self, output: list[str]) -> list[UnitJournal]:
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
        return [UnitJournal(unit, properties, tuple(lines)) for unit, properties, lines in found]
