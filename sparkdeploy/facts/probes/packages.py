"""The packages probe: installed driver packages (and python3-venv, nftables) with their
versions, and which of them are held; read without sudo, so the status fact runs the same
lines. A hold is dpkg's selection state, the first letter of ``db:Status-Abbrev`` ("hi":
held, installed), which is what `apt-mark hold` sets and `apt-mark showhold` lists: one
dpkg-query reads both, where `apt-mark showhold` cost a second program (48 ms a twin, and
apt's cache on a Spark) in every run's host-state round trip."""

from __future__ import annotations

from sparkdeploy.facts.probes import HostQuery, fields, kind_of

# `pkg NAME VERSION` and `hold NAME` lines.
PACKAGE_LINES = (
    "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'"
    " 'nvidia-driver-*' python3-venv nftables 2>/dev/null"
    ' | awk \'$1 ~ /^[ih]i/ {print "pkg", $2, $3} $1 ~ /^hi/ {print "hold", $2}\'',
)


def parse_packages(output: list[str]) -> tuple[dict[str, str], frozenset[str]]:
    """The `pkg` and `hold` lines of PACKAGE_LINES: package -> version, and the held ones."""
    packages: dict[str, str] = {}
    holds: set[str] = set()
    for line in output:
        kind, words = kind_of(line), fields(line)
        if kind == "pkg" and len(words) == 2:
            packages[words[0]] = words[1]
        elif kind == "hold" and words:
            holds.add(words[0])
    return packages, frozenset(holds)


class Packages:
    """
    Installed package -> version, and the held packages.

    Sample output of the command::

        pkg nvidia-driver-580-open 580.95.05-0ubuntu1
        pkg python3-venv 3.12.3-0ubuntu2
        hold nvidia-driver-580-open
    """

    kinds = ("pkg", "hold")

    def lines(self, query: HostQuery) -> list[str]:
        return list(PACKAGE_LINES)

    def parse(self, lines: list[str]) -> tuple[dict[str, str], frozenset[str]]:
        return parse_packages(lines)
