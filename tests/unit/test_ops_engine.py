"""Engine operations (keeping a unit serving, retiring files no longer planned): the units
and owned files of the host-state fact in, commands or no-op reason out."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

import pytest

from sparkdeploy.deploys.engine.serve import (
    HEALTH_TIMEOUT,
    _check_health,
    foreign_files_notice,
    leaving_ray,
    retired,
    serving,
)
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.render import STAMP, TEMPLATES
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


def test_a_running_unit_whose_last_check_failed_is_checked_again_not_restarted():
    host = spark()
    running = {UNIT: ("active", "enabled")}
    given(host, SparkHostState, host_state(units=running, unhealthy=frozenset({UNIT})))
    outcome = run(serving, host, unit=UNIT, port=30000)
    assert outcome.commands == [HEALTH] and outcome.noop is None
    # another unit's failed check leaves this one alone
    other = frozenset({"spark-engine-vllm.service"})
    given(host, SparkHostState, host_state(units=running, unhealthy=other))
    assert run(serving, host, unit=UNIT, port=30000).noop == f"{UNIT} is enabled and running"


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
        "rm -f /var/lib/spark-deploy/health-failed/spark-engine-vllm.service",
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


# --- what the deploy owns: only files it wrote (issue 22) --------------------------------


def owned_lines(tmp_path, monkeypatch) -> list[str]:
    """The host-state fact's owned/foreign lines, its loop run by sh over a shared folder
    holding the deploy's sudoers file, an admin's own and a unit in a folder of the deploy."""
    from sparkdeploy.facts.probes import engine_files as fact

    shared, own = tmp_path / "sudoers.d", tmp_path / "spark-deploy"
    shared.mkdir()
    own.mkdir()
    (shared / "spark-deploy-spark-engine-vllm").write_text(
        "# Managed by spark-deploy: nvidia may start, stop ...\nnvidia ALL=...\n"
    )
    (shared / "spark-deploy-mine").write_text("# my own rule\n%admins ALL=(ALL) ALL\n")
    (own / "spark-engine-vllm.rules.yml").write_text("groups: []\n")
    monkeypatch.setattr(fact, "SHARED_FOLDERS", (f"{shared}/",))
    globs = (f"{shared}/spark-deploy-*", f"{own}/spark-engine-*.yml")
    text = SparkHostState().command("nvidia", (), (), owned_globs=globs)
    [loop] = [line for line in text.splitlines() if 'printf "owned' in line]
    done = subprocess.run(["sh", "-c", loop], capture_output=True, text=True, check=True)
    return sorted(line.replace(str(tmp_path), "") for line in done.stdout.splitlines())


def test_an_admins_own_file_with_the_deploys_name_is_not_the_deploys(tmp_path, monkeypatch):
    assert owned_lines(tmp_path, monkeypatch) == [
        "foreign /sudoers.d/spark-deploy-mine",
        "owned /spark-deploy/spark-engine-vllm.rules.yml",
        "owned /sudoers.d/spark-deploy-spark-engine-vllm",
    ]
    state = SparkHostState().process(
        ["owned /etc/sudoers.d/spark-deploy-x", "foreign /etc/sudoers.d/spark-deploy-mine"]
    )
    assert state.owned == {"/etc/sudoers.d/spark-deploy-x"}
    assert state.foreign == {"/etc/sudoers.d/spark-deploy-mine"}


def test_the_templates_that_write_into_shared_folders_start_with_the_header():
    from sparkdeploy.config.paths import MANAGED_HEADER
    from sparkdeploy.render import render

    texts = [
        render("engine-sudoers.j2", user="nvidia", unit="u.service", unit_base="u"),
        render("gpu-switch-sudoers.j2", user="nvidia", holder="tts", switch="/usr/sbin/s"),
    ]
    assert all(text.startswith(MANAGED_HEADER) for text in texts)
    for name in ("engine.service.j2", "gpu-service.service.j2"):
        first = (TEMPLATES / name).read_text().splitlines()[0]
        assert first.startswith("{{ managed }}"), name  # render.STAMP
    assert STAMP.startswith(MANAGED_HEADER)


def test_the_admins_file_left_in_place_is_said_once():
    said = foreign_files_notice(["/etc/sudoers.d/spark-deploy-mine"])
    assert said.startswith("left in place: /etc/sudoers.d/spark-deploy-mine: named like")
    assert "no '# Managed by spark-deploy' first line" in said


def test_the_model_check_runs_isolated_from_the_cwd_and_environment():
    text = SparkHostState().command("nvidia", (), ("/opt/models/x",))
    assert "python3 -I -c " in text and "python3 -c " not in text
