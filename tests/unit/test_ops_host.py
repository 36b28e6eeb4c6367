"""Host operations (driver hold, drm override, reboot): facts in, commands or no-op reason out."""

from __future__ import annotations

import shlex
from unittest import mock

from sparkdeploy.config.paths import BOOT_MARKER, DRM_OVERRIDE_CONF
from sparkdeploy.deploys.host import reboot
from sparkdeploy.deploys.host.driver import held
from sparkdeploy.deploys.host.drm import override_absent
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.facts.preflight import SparkPreflight
from tests.unit.operations import Outcome, given, host_state, preflight, run, spark

DRIVER = "nvidia-driver-580-open"
REBOOT = "( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &"


def held_with(holds: set[str], packages: list[str]) -> Outcome:
    host = spark()
    given(host, SparkHostState, host_state(holds=frozenset(holds)))
    return run(held, host, packages=packages)


def test_packages_already_held_are_a_noop():
    outcome = held_with({DRIVER, "other"}, [DRIVER])
    assert outcome.commands == [] and outcome.noop == f"already held: {DRIVER}"


def test_only_the_packages_not_yet_held_are_held_in_the_order_given():
    outcome = held_with({DRIVER}, ["nvidia-driver-580-server", DRIVER, "nvidia-driver-580"])
    assert outcome.commands == ["apt-mark hold nvidia-driver-580-server nvidia-driver-580"]
    assert outcome.noop is None


def drm_with(override: bool) -> Outcome:
    host = spark()
    given(host, SparkPreflight, preflight(drm_override=override))
    return run(override_absent, host)


def test_an_absent_drm_override_is_a_noop():
    outcome = drm_with(False)
    assert outcome.commands == [] and outcome.noop == f"{DRM_OVERRIDE_CONF} is absent"


def test_the_drm_override_is_removed_and_a_reboot_recorded_as_pending():
    outcome = drm_with(True)
    assert outcome.commands == [
        f"rm -f {DRM_OVERRIDE_CONF} && mkdir -p /run/spark-deploy && "
        f"printf '%s\\n' '{DRM_OVERRIDE_CONF} was removed; CUDA sees only about 62 GB of "
        "memory until the Spark reboots' > /run/spark-deploy/reboot-pending && "
        "touch /run/reboot-required"
    ]
    assert outcome.noop is None


def marker(reason_word: str) -> str:
    return f"mkdir -p /run/spark-deploy && printf '%s\\n' {reason_word} > {BOOT_MARKER}"


def test_a_reboot_marks_the_boot_reboots_detached_then_waits_for_the_new_boot():
    host = spark()
    outcome = run(reboot.rebooted, host, reason="drm", timeout=120, interval=0.5)
    assert outcome.commands == [
        "call <lambda>",  # forget sudo's askpass file: the new boot has a new /tmp
        marker("drm"),
        REBOOT,
        "call _wait_for_new_boot",
    ]
    forget, wait = outcome.callbacks
    assert wait.args == (120, 0.5)
    with mock.patch.object(reboot, "remove_any_sudo_askpass_file") as remove:
        forget.function(host.state, host)
    remove.assert_called_once_with(host)


def test_the_reason_is_one_shell_word_in_the_marker_command():
    reason = 'it\'s "late"; $(touch /tmp/owned) `id` & done'
    command = run(reboot.rebooted, spark(), reason=reason).commands[1]
    assert command == marker(shlex.quote(reason))
    assert shlex.split(command)[6] == reason  # mkdir -p DIR && printf FORMAT REASON > ...
