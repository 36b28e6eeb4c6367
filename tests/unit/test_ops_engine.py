"""Engine operations (keeping a unit serving, retiring files no longer planned): the units
and owned files of the host-state fact in, commands or no-op reason out."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from sparkdeploy.deploys.engine.serve import (
    HEALTH_TIMEOUT,
    _check_health,
    leaving_ray,
    retired,
    serving,
)
from sparkdeploy.facts.host_state import SparkHostState
from tests.unit.operations import Outcome, given, host_state, run, spark
from tests.unit.test_engine_clusters import plan as plan_cluster

UNIT = "spark-engine-sglang.service"
HEALTH = "call _check_health"
ENABLE, START, RESTART = (f"systemctl {verb} {UNIT}" for verb in ("enable", "start", "restart"))


def with_units(operation: Any, units: dict[str, tuple[str, str]], **arguments: Any) -> Outcome:
    host = spark()
    given(host, SparkHostState, host_state(units=units))
    return run(operation, host, **arguments)


# --- serving ---------------------------------------------------------------------------


def serving_with(state: tuple[str, str] | None, **arguments: Any) -> Outcome:
    """serving on a host where UNIT is (is-active, is-enabled), or unknown when None."""
    units = {UNIT: state} if state else {}
    return with_units(serving, units, **{"unit": UNIT, "port": 30000, **arguments})


def test_an_enabled_running_unit_is_a_noop():
    outcome = serving_with(("active", "enabled"))
    assert outcome.commands == [] and outcome.noop == f"{UNIT} is enabled and running"


@pytest.mark.parametrize(
    "state, arguments, commands",
    [
        (None, {}, [ENABLE, START, HEALTH]),
        (("inactive", "enabled"), {}, [START, HEALTH]),
        (("failed", "disabled"), {}, [ENABLE, START, HEALTH]),
        (("active", "disabled"), {}, [ENABLE, HEALTH]),
        (("active", "enabled"), {"restart": True}, [RESTART, HEALTH]),
        (("inactive", "enabled"), {"restart": True}, [START, HEALTH]),
        (("active", "enabled"), {"follows": True}, [HEALTH]),
        (None, {"health": False}, [ENABLE, START]),
        (("active", "enabled"), {"restart": True, "health": False}, [RESTART]),
    ],
    ids=[
        "unknown",
        "stopped",
        "failed-disabled",
        "running-disabled",
        "restart",
        "restart-stopped",
        "follows",
        "unknown-no-health",
        "restart-no-health",
    ],
)
def test_a_unit_is_enabled_started_or_restarted_then_checked(
    state: tuple[str, str] | None, arguments: dict[str, bool], commands: list[str]
):
    outcome = serving_with(state, **arguments)
    assert outcome.commands == commands and outcome.noop is None


def test_the_health_check_gets_the_unit_port_and_timeout():
    default = serving_with(None).callbacks
    asked = serving_with(None, port=8000, timeout=60).callbacks
    assert [(c.function, c.args) for c in default + asked] == [
        (
            _check_health,
            (UNIT, ["--port", "30000", "--unit", UNIT, "--timeout", str(HEALTH_TIMEOUT)]),
        ),
        (_check_health, (UNIT, ["--port", "8000", "--unit", UNIT, "--timeout", "60"])),
    ]


# --- retired ---------------------------------------------------------------------------

VLLM = "/etc/systemd/system/spark-engine-vllm.service"
SUDOERS = "/etc/sudoers.d/spark-deploy-spark-engine-vllm"
RULES = "/etc/spark-deploy/prometheus/spark-engine-vllm.rules.yml"


def retired_with(paths: list[str]) -> Outcome:
    return with_units(retired, {}, paths=paths)


def test_nothing_to_retire_is_a_noop():
    outcome = retired_with([])
    assert outcome.commands == [] and outcome.noop == "no retired engine files"


def test_a_unit_is_stopped_disabled_and_its_container_removed_before_the_files_go():
    outcome = retired_with([VLLM, SUDOERS, RULES])
    assert outcome.commands == [
        "systemctl disable --now spark-engine-vllm.service || true",
        "/usr/bin/docker rm -f spark-engine-vllm >/dev/null 2>&1 || true",
        f"rm -f {VLLM}",
        f"rm -f {SUDOERS}",
        f"rm -f {RULES}",
        "systemctl daemon-reload",
    ]
    assert outcome.noop is None


def test_files_that_are_not_units_are_only_removed():
    assert retired_with([SUDOERS, RULES]).commands == [f"rm -f {SUDOERS}", f"rm -f {RULES}"]


def test_a_path_to_remove_is_one_shell_word():
    path = "/etc/sudoers.d/spark-deploy-it's $(id) mine"
    [command] = retired_with([path]).commands
    assert command == f"rm -f {shlex.quote(path)}" and shlex.split(command) == ["rm", "-f", path]


def test_the_unit_and_container_of_a_retired_path_are_quoted():
    unit = "spark-engine-it's$(id).service"
    commands = retired_with([f"/etc/systemd/system/{unit}"]).commands
    assert shlex.quote(unit) in commands[0]
    assert shlex.quote(unit.removesuffix(".service")) in commands[1]


def test_retiring_the_ray_units_of_a_vllm_pair_that_turned_native_is_said():
    old = [
        "/etc/sudoers.d/spark-deploy-spark-engine-vllm-ray-head",
        "/etc/systemd/system/spark-engine-vllm-ray-head.service",
    ]
    plans, _, _ = plan_cluster(2, {"name": "vllm"})
    said = leaving_ray(plans["spark-1"], old)
    assert said.startswith("vLLM across the Sparks now runs its own multi-node mode")
    assert "spark-engine-vllm-ray-head.service retired" in said
    assert "--distributed-executor-backend: ray" in said
    ray_plans, _, _ = plan_cluster(
        2, {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}
    )
    assert leaving_ray(ray_plans["spark-1"], old) == ""  # Ray kept: nothing to say
    assert leaving_ray(plans["spark-1"], old[:1]) == ""  # no unit retired
    sglang, _, _ = plan_cluster(2, {"name": "sglang"})
    assert leaving_ray(sglang["spark-1"], old) == ""
