"""The gai.conf probe: whether the line that makes getaddrinfo prefer IPv4 is there."""

from __future__ import annotations

from sparkdeploy.config.paths import GAI_CONF
from sparkdeploy.facts.probes import HostQuery, last_value

GAI_LINE_RE = r"^precedence[[:space:]]+::ffff:0:0/96[[:space:]]+100$"


class GaiIpv4:
    """
    True when gai.conf prefers IPv4.

    Sample output of the command::

        gai 1
    """

    kinds = ("gai",)

    def lines(self, query: HostQuery) -> list[str]:
        return [f"grep -qE '{GAI_LINE_RE}' {GAI_CONF} 2>/dev/null && echo 'gai 1' || echo 'gai 0'"]

    def parse(self, lines: list[str]) -> bool:
        return last_value(lines, "gai") == "1"
