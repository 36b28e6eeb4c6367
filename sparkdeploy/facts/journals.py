"""
The journal facts, read-only: each engine unit's state and last journal lines
(``EngineJournals``), the Spark's kernel log of this boot and the previous one
(``KernelLog``), and both in one round trip (``SparkJournals``, what the diagnosis reads).
The commands and their parsers are in ``readings/journals.py``, shared with the MCP server.
"""

from __future__ import annotations

from pyinfra.api import FactBase

from sparkdeploy.readings.journals import (
    JOURNAL_MARK,
    UNIT_PROPERTIES,
    BootLog,
    Journals,
    UnitJournal,
    journals_command,
    kernel_command,
    parse_journals,
    parse_kernel,
    parse_units,
    units_command,
)

__all__ = ["JOURNAL_MARK", "UNIT_PROPERTIES", "BootLog", "Journals", "UnitJournal"]


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
        return units_command(units, lines)

    def process(self, output: list[str]) -> list[UnitJournal]:
        return parse_units(output)


class KernelLog(FactBase):
    """
    Returns the last kernel lines of this boot and of the previous one (``journalctl -k``,
    bounded by ``lines`` per boot), each followed by nvidia-persistenced's last lines of
    that boot. A boot the journal does not hold (no persistent journal, a first boot) comes
    back with no lines. Read-only; needs root (or the adm group) on DGX OS.

    Sample output of the command::

        @@spark-deploy@@ boot current boot
        2026-11-21T08:00:03+00:00 spark-1 kernel: nvidia-nvlink: Nvlink Core is being initialized
        2026-11-21T08:00:09+00:00 spark-1 nvidia-persistenced[1187]: Started (1187)
        @@spark-deploy@@ boot previous boot
        2026-11-20T23:41:17+00:00 spark-1 kernel: NVRM: GPU 000f:01:00.0: RmInitAdapter failed! (0x62:0x1a:2631)

    .. code:: python

        [BootLog(boot="current boot", lines=("2026-11-21T08:00:03+00:00 spark-1 kernel: ...", ...)),
         BootLog(boot="previous boot", lines=(...))]
    """

    def command(self, lines: int) -> str:
        return kernel_command(lines)

    def process(self, output: list[str]) -> list[BootLog]:
        return parse_kernel(output)


class SparkJournals(FactBase):
    """
    Returns ``EngineJournals`` and ``KernelLog`` in one round trip: the engine units'
    sections first, then the boots' (their marks tell them apart).

    .. code:: python

        Journals(units=[UnitJournal(unit="spark-engine-sglang.service", ...)],
                 boots=[BootLog(boot="current boot", ...), BootLog(boot="previous boot", ...)])
    """

    def command(self, units: tuple[str, ...], lines: int, kernel_lines: int) -> str:
        return journals_command(units, lines, kernel_lines)

    def process(self, output: list[str]) -> Journals:
        return parse_journals(output)
