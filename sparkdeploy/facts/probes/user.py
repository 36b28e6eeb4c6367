"""The user probe: the operator's home and group, and the home of the SSH login user (the
private upload staging lives there)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, last_value


@dataclass(frozen=True)
class Homes:
    user_home: str
    user_group: str
    ssh_home: str


class UserHomes:
    """
    The operator's home (``$home``, set by the fact) and group, and the SSH user's home.

    Sample output of the command::

        user /home/nvidia nvidia
        sshhome /home/nvidia
    """

    kinds = ("user", "sshhome")

    def lines(self, query: HostQuery) -> list[str]:
        return [
            f'printf "user %s %s\\n" "$home" "$(id -gn {shell(query.user)} 2>/dev/null)"',
            'printf "sshhome %s\\n" "$(getent passwd "${SUDO_USER:-$(id -un)}" | cut -d: -f6)"',
        ]

    def parse(self, lines: list[str]) -> Homes:
        home, _, group = (last_value(lines, "user") or "").partition(" ")
        return Homes(home, group, last_value(lines, "sshhome") or "")
