"""
Reboots: only when a change needs one and the inventory allows it; otherwise the run ends
with a plain per-host notice that a reboot is pending and why.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, StringCommand, deploy, operation
from pyinfra.connectors.util import clear_askpass_cache, remove_any_sudo_askpass_file

from sparkdeploy.config.invocation import command
from sparkdeploy.config.paths import BOOT_MARKER, RUN_DIR
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.host.drm import REASON as DRM_REASON
from sparkdeploy.escape import shell
from sparkdeploy.facts.preflight import preflight
from sparkdeploy.reports import notices
from sparkdeploy.reports.failures import expected


@contextmanager
def _quiet_paramiko():
    """paramiko logs a traceback for every refused attempt while sshd is down: expected here."""
    transport = logging.getLogger("paramiko.transport")
    level = transport.level
    transport.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        transport.setLevel(level)


def _after_no_answer(name: str) -> str:
    """What to do when the Spark did not come back, the deploy command in the run's form."""
    return f"the Spark's console (it does not answer SSH), then: {command('deploy')}"


@expected("reboot", then=(_after_no_answer,))
def _wait_for_new_boot(state, host, timeout: int, interval: float) -> None:
    with _quiet_paramiko():
        _reconnect_after_boot(host, timeout, interval)


def _reconnect_after_boot(host, timeout: int, interval: float) -> None:
    """Reconnect until the host answers and the boot marker (on tmpfs /run) is gone."""
    clear_askpass_cache(host)
    host.disconnect()
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        time.sleep(interval)
        host.connect(show_errors=False)
        if not host.connected:
            continue
        still_up, _ = host.run_shell_command(StringCommand("test", "-e", BOOT_MARKER))
        if not still_up:
            logger.info(
                f"{host.print_prefix}rebooted, back after {time.monotonic() - started:.0f}s"
            )
            return
        host.disconnect()  # the old boot is still shutting down
    raise OperationError(
        f"{host.name} did not come back from the reboot within {timeout}s "
        "(reboot_timeout); check its console, then run the deploy again"
    )


@operation(is_idempotent=False)
def rebooted(reason: str, timeout: int = 900, interval: float = 2.0):
    """
    Reboot the host and wait until it is back. The reboot is confirmed by a marker written
    under /run (a tmpfs) before it: the marker is gone only after a real boot.

    + reason: why the reboot is needed (written into the marker, shown in logs)
    + timeout: seconds to wait for the host to come back
    + interval: seconds between reconnection attempts

    **Example:**

    .. code:: python

        reboot.rebooted(
            name="Reboot to apply the drm override removal",
            reason="drm override removed",
            timeout=900,
        )
    """
    yield FunctionCommand(lambda state, host: remove_any_sudo_askpass_file(host), (), {})
    yield f"mkdir -p {RUN_DIR} && printf '%s\\n' {shell(reason)} > {BOOT_MARKER}"
    # Detached, so the SSH channel closes cleanly before the host goes down.
    yield "( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &"
    yield FunctionCommand(_wait_for_new_boot, (timeout, interval), {})


def pending_reason() -> str:
    """Why this host needs a reboot, counting what this run is about to change."""
    facts = preflight()
    return facts.reboot_pending or (DRM_REASON if facts.drm_override else "")


@deploy("Reboot when a change needs it")
def reboot_when_needed() -> None:
    spark: SparkSettings = host.data.spark
    reason = pending_reason()
    if not reason:
        return
    if spark.allow_reboot:
        rebooted(
            name="Reboot to apply the changes that need it",
            reason=reason,
            timeout=spark.reboot_timeout,
        )
    else:
        notices.add(
            host.name,
            f"REBOOT PENDING: {reason}. Reboot it (sudo reboot), or set allow_reboot: true "
            f"for {host.name} in the inventory and run the deploy again.",
        )
