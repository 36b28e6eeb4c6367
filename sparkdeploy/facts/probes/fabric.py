"""The fabric guard probe: read whether it is wanted or not (to retire it)."""

from __future__ import annotations

from sparkdeploy.config.paths import FABRIC_GUARD, FABRIC_GUARD_TABLE, FABRIC_GUARD_UNIT
from sparkdeploy.facts.probes import HostQuery, keyed_values

FABRIC_LINES = (
    f"nft list table {FABRIC_GUARD_TABLE} >/dev/null 2>&1"
    " && echo 'fabric table 1' || echo 'fabric table 0'",
    f"{{ [ -e {FABRIC_GUARD} ] || [ -e {FABRIC_GUARD_UNIT} ]; }}"
    " && echo 'fabric present 1' || echo 'fabric present 0'",
)


class FabricGuard:
    """
    "table" 1 when its nftables table is loaded, "present" 1 when its file or unit is on the
    Spark.

    Sample output of the command::

        fabric table 1
        fabric present 1
    """

    kinds = ("fabric",)

    def lines(self, query: HostQuery) -> list[str]:
        return list(FABRIC_LINES)

    def parse(self, lines: list[str]) -> dict[str, str]:
        return keyed_values(lines)
