"""The units probe: whether each unit host preparation manages is active and enabled."""

from __future__ import annotations

from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, fields


class Units:
    """
    Unit -> (is-active, is-enabled), "absent" when systemd does not know it.

    Sample output of the command::

        unit spark-engine-sglang.service active enabled
    """

    kinds = ("unit",)

    def lines(self, query: HostQuery) -> list[str]:
        return [
            f'printf "unit %s %s %s\\n" {shell(unit)}'
            f' "$(systemctl is-active {shell(unit)})"'
            f' "$(systemctl is-enabled {shell(unit)} 2>/dev/null || echo absent)"'
            for unit in query.units
        ]

    def parse(self, lines: list[str]) -> dict[str, tuple[str, str]]:
        units: dict[str, tuple[str, str]] = {}
        for words in map(fields, lines):
            if len(words) == 3:
                units[words[0]] = (words[1], words[2])
        return units
