"""The health probe: the units whose last health check failed (spark-engine-health records
them in HEALTH_FAILED), so that a deploy checks them again instead of taking "active" as
serving."""

from __future__ import annotations

from sparkdeploy.config.paths import HEALTH_FAILED
from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, fields


class FailedChecks:
    """
    The units, of those asked, whose last health check failed.

    Sample output of the command::

        unhealthy spark-engine-vllm.service
    """

    kinds = ("unhealthy",)

    def lines(self, query: HostQuery) -> list[str]:
        if not query.units:
            return []
        units = " ".join(shell(unit) for unit in query.units)
        return [
            f'for u in {units}; do if [ -f {shell(HEALTH_FAILED)}/"$u" ]; then'
            ' printf "unhealthy %s\\n" "$u"; fi; done'
        ]

    def parse(self, lines: list[str]) -> frozenset[str]:
        return frozenset(words[0] for words in map(fields, lines) if len(words) == 1)
