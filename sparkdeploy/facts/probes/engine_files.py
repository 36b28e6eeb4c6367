"""The engine-files probe: the engine units, sudoers and Prometheus files the deploy wrote
earlier (owned), and the files matching those names in shared folders that it did not write
(foreign: no managed header on their first line, an admin's own, never removed)."""

from __future__ import annotations

from sparkdeploy.config.paths import MANAGED_HEADER, SHARED_FOLDERS
from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, fields, kind_of


class EngineFiles:
    """
    The files matching the engine globs: (owned, foreign).

    Sample output of the command::

        owned /etc/systemd/system/spark-engine-sglang.service
        owned /etc/sudoers.d/spark-deploy-spark-engine-sglang
        owned /etc/spark-deploy/prometheus/spark-engine-sglang.rules.yml
        foreign /etc/sudoers.d/spark-deploy-admin
    """

    kinds = ("owned", "foreign")

    def lines(self, query: HostQuery) -> list[str]:
        if not query.owned_globs:
            return []
        return [
            f"for f in {' '.join(query.owned_globs)}; do"
            ' [ -e "$f" ] || continue; case "$f" in'
            f" {'|'.join(folder + '*' for folder in SHARED_FOLDERS)})"
            f' head -n 1 "$f" | grep -qF {shell(MANAGED_HEADER)}'
            ' || { printf "foreign %s\\n" "$f"; continue; };; esac;'
            ' printf "owned %s\\n" "$f"; done'
        ]

    def parse(self, lines: list[str]) -> tuple[frozenset[str], frozenset[str]]:
        found: dict[str, set[str]] = {"owned": set(), "foreign": set()}
        for line in lines:
            if words := fields(line):
                found[kind_of(line)].add(words[0])
        return frozenset(found["owned"]), frozenset(found["foreign"])
