"""
Upgrades that roll back (engine.rollback): the last engine configuration that passed its
health check is kept on the Spark by spark-engine-rollback, and put back when a changed one
does not become healthy, so the Spark keeps serving while the run fails with the diagnosis
of the new configuration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import StringCommand, operation

from sparkdeploy.config.paths import ENGINE_HEALTH, ROLLBACK_BIN
from sparkdeploy.engine_plan.files import engine_config_files
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import host_state


@dataclass(frozen=True)
class Keep:
    """What makes up one engine configuration for spark-engine-rollback: the units it
    starts, the words of its health check and its files."""

    units: tuple[str, ...]
    health: tuple[str, ...]
    files: tuple[str, ...]

    def save(self) -> StringCommand:
        """Keep the configuration on the Spark as the last good one."""
        units = [word for unit in self.units for word in ("--unit", unit)]
        health = json.dumps(list(self.health))
        return StringCommand(ROLLBACK_BIN, "save", *map(shell, units), "--health", shell(health),
                             *map(shell, self.files))  # fmt: skip

    def restore(self, why: str) -> StringCommand:
        """Go back to the last good configuration, stopping this one's units first."""
        stop = [word for unit in self.units for word in ("--stop", unit)]
        return StringCommand(ROLLBACK_BIN, "restore", "--why", shell(why), *map(shell, stop))


def keep_of(plan: EnginePlan, health: list[str]) -> Keep | None:
    """The configuration of ``plan`` as spark-engine-rollback keeps it, or None when the plan
    is not rolled back (engine.rollback false, or Sparks serving one model together)."""
    if not plan.rollback:
        return None
    return Keep(
        units=tuple(service.unit for service in plan.services),
        health=tuple(health),
        files=tuple(engine_config_files(plan)),
    )


@operation()
def kept_before_change(keep: Keep | None, unit: str, changing: bool):
    """
    Keep the configuration that serves now as the last good one before the deploy changes
    it, when none is kept yet (an engine deployed before rollback existed, or kept state
    lost): it is kept only if it passes its health check now.

    + keep: the configuration as spark-engine-rollback keeps it (None: no rollback)
    + unit: the engine's main unit
    + changing: this run changes the engine's unit, environment or shipped files

    **Example:**

    .. code:: python

        kept_before_change(keep=keep, unit="spark-engine-sglang.service", changing=True)
    """
    state = host_state()
    if keep is None:
        host.noop("engine.rollback is off, or Sparks serve the model together")
        return
    if state.kept or not changing:
        host.noop("a last good configuration is kept" if state.kept else "nothing changes")
        return
    if state.units.get(unit, ("inactive", ""))[0] != "active":
        host.noop(f"{unit} is not running: nothing that serves now to keep")
        return
    check = StringCommand(ENGINE_HEALTH, *map(shell, keep.health))
    yield StringCommand(
        "if", check, ">/dev/null; then", keep.save(), "; else echo",
        shell("spark-engine-rollback: what serves now is not healthy: not kept"), "; fi",
    )  # fmt: skip
