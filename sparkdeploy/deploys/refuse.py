"""
The one way a deploy says no while planning: ``refuse`` raises ``SparkRefused`` naming the
host, every problem and the fix, and stating that nothing was changed on any host (pyinfra
plans every host before it executes anything, so a refusal at planning stops the whole run
before its first change). Problems found in the inventory itself are refused earlier, before
any connection (config/errors.py).
"""

from __future__ import annotations

from typing import NoReturn

from pyinfra import host
from pyinfra.api import DeployError


class SparkRefused(DeployError):
    """The Spark may not be deployed to as it is; nothing was changed on any host."""


def refuse(problems: list[str], fix: str = "", lead: str = "") -> NoReturn:
    """
    Stop the run at planning: ``{lead}, nothing was changed on any host: {problems}. {fix}``.

    + problems: what is wrong, one sentence each (one inline, several as a list)
    + fix: what the operator does about it, when the problems do not say
    + lead: what happened (default ``<host> refused``)
    """
    lead = lead or f"{host.name} refused"
    if len(problems) == 1:
        text = f"{lead}, nothing was changed on any host: {problems[0].rstrip('.')}."
    else:
        text = f"{lead}, nothing was changed on any host:" + "".join(
            f"\n  - {problem}" for problem in problems
        )
    raise SparkRefused(f"{text} {fix}".rstrip())
