"""Upgrades that roll back: spark-engine-rollback run for real on files in a temporary folder
(systemctl and the health check replaced by scripts that log what they were asked), and the
deploy's side, facts in and commands out."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.paths import ENGINE_HEALTH, ROLLBACK_BIN
from sparkdeploy.deploys.engine.rollback import Keep, keep_of, kept_before_change
from sparkdeploy.deploys.engine.serve import _check_health as checked_health
from sparkdeploy.engine_plan.files import engine_config_files
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.facts.status import SparkStatus
from sparkdeploy.reports.status import Row, config_row
from tests.unit.operations import given, host_state, run, spark
from tests.unit.samples import docstring_sample
from tests.unit.test_engine_files import FILES, inventory, laptop, plan  # noqa: F401 -- fixture

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sparkdeploy" / "files" / "spark-engine-rollback"
UNIT = "spark-engine-sglang.service"
WORDS = ["--port", "30000", "--unit", UNIT, "--timeout", "1800"]


class Spark:
    """A folder standing for the Spark's files, with logging systemctl and health scripts."""

    def __init__(self, root: Path, healthy: bool = True) -> None:
        self.root = root
        self.state = root / "state"
        self.log = root / "calls.log"
        bin_dir = root / "bin"
        bin_dir.mkdir()
        self.write_script(bin_dir / "systemctl", 'echo "systemctl $*" >> ' + str(self.log))
        self.health = bin_dir / "health"
        self.write_script(
            self.health,
            f'echo "health $*" >> {self.log}; echo "ready in 1 s"; exit {0 if healthy else 1}',
        )
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SPARK_ROLLBACK_STATE": str(self.state),
            "SPARK_ENGINE_HEALTH": str(self.health),
        }
        self.unit = root / "etc" / UNIT
        self.env_file = root / "etc" / "spark-engine-sglang.env"
        self.unit.parent.mkdir()
        self.unit.write_text("ExecStart=docker run good:1\n")
        self.env_file.write_text("A=1\n")

    @staticmethod
    def write_script(path: Path, body: str) -> None:
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def rollback(self, *words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *words],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )

    def save(self) -> subprocess.CompletedProcess[str]:
        return self.rollback(
            "save",
            "--unit",
            UNIT,
            "--health",
            json.dumps(WORDS),
            str(self.unit),
            str(self.env_file),
        )

    def state_now(self) -> dict[str, Any]:
        return json.loads(self.rollback("state").stdout)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def spark_files(tmp_path: Path) -> Spark:
    return Spark(tmp_path)


def test_nothing_kept_means_nothing_to_go_back_to(spark_files: Spark):
    assert spark_files.state_now() == {"kept": None, "rollback": None}
    done = spark_files.rollback("restore", "--why", "crash")
    assert done.returncode == 3 and "nothing to go back to" in done.stdout
    assert spark_files.calls() == []


def test_a_kept_configuration_is_live_until_a_file_changes(spark_files: Spark):
    assert spark_files.save().returncode == 0
    kept = spark_files.state_now()["kept"]
    assert kept["units"] == [UNIT] and kept["live"] is True
    spark_files.unit.write_text("ExecStart=docker run bad:2\n")
    assert spark_files.state_now()["kept"]["live"] is False


def test_the_copies_are_root_only_and_the_manifest_readable(spark_files: Spark):
    spark_files.save()
    folder = (spark_files.state / "last-good").resolve()
    assert stat.S_IMODE((folder / "files").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "manifest.json").stat().st_mode) == 0o644


def test_saving_the_same_configuration_again_changes_nothing(spark_files: Spark):
    spark_files.save()
    first = (spark_files.state / "last-good").resolve()
    again = spark_files.save()
    assert "is this one" in again.stdout
    assert (spark_files.state / "last-good").resolve() == first
    spark_files.env_file.write_text("A=2\n")
    spark_files.save()
    second = (spark_files.state / "last-good").resolve()
    assert second != first and not first.exists()  # the previous copy is gone


def test_a_file_the_configuration_does_not_have_yet_is_not_kept(spark_files: Spark):
    absent = spark_files.root / "etc" / "00-chat.jinja"
    done = spark_files.rollback(
        "save", "--unit", UNIT, "--health", json.dumps(WORDS), str(spark_files.unit), str(absent)
    )
    assert done.returncode == 0
    manifest = json.loads((spark_files.state / "last-good" / "manifest.json").read_text())
    assert [item["path"] for item in manifest["files"]] == [str(spark_files.unit)]


def test_restore_puts_the_files_back_restarts_and_checks(spark_files: Spark):
    spark_files.save()
    spark_files.unit.write_text("ExecStart=docker run bad:2\n")
    spark_files.unit.chmod(0o600)
    done = spark_files.rollback("restore", "--why", f"{UNIT}: no-kernel-image-sm121")
    assert done.returncode == 0, done.stderr
    assert spark_files.unit.read_text() == "ExecStart=docker run good:1\n"
    assert stat.S_IMODE(spark_files.unit.stat().st_mode) == 0o644  # as it was kept
    assert spark_files.calls() == [
        "systemctl daemon-reload",
        f"systemctl enable {UNIT}",
        f"systemctl restart {UNIT}",
        "health " + " ".join(WORDS),
    ]
    record = spark_files.state_now()["rollback"]
    assert record["healthy"] is True and record["why"] == f"{UNIT}: no-kernel-image-sm121"
    assert spark_files.state_now()["kept"]["live"] is True


def test_restore_stops_units_the_good_configuration_does_not_have(spark_files: Spark):
    spark_files.save()
    spark_files.rollback("restore", "--why", "x", "--stop", "spark-engine-vllm.service")
    assert spark_files.calls()[0] == "systemctl disable --now spark-engine-vllm.service"


def test_a_restored_configuration_that_fails_its_check_says_so(tmp_path: Path):
    unhealthy = Spark(tmp_path, healthy=False)
    unhealthy.save()
    done = unhealthy.rollback("restore", "--why", "crash")
    assert done.returncode == 1
    assert unhealthy.state_now()["rollback"]["healthy"] is False


def test_an_interrupted_save_leaves_the_kept_configuration_whole(spark_files: Spark):
    spark_files.save()
    (spark_files.state / "config-leftover").mkdir()  # a save that stopped before its rename
    assert spark_files.state_now()["kept"]["live"] is True


# --- the deploy's side ----------------------------------------------------------------------

KEEP = Keep(units=(UNIT,), health=tuple(WORDS), files=("/etc/a.env", f"/etc/systemd/system/{UNIT}"))


def test_keep_commands_escape_every_word():
    assert KEEP.save().get_raw_value() == (
        f"{ROLLBACK_BIN} save --unit {UNIT} --health "
        f"'{json.dumps(WORDS)}' /etc/a.env /etc/systemd/system/{UNIT}"
    )
    assert KEEP.restore("it's broken").get_raw_value() == (
        f"{ROLLBACK_BIN} restore --why 'it'\"'\"'s broken' --stop {UNIT}"
    )


def test_a_single_spark_keeps_its_env_units_and_shipped_files(laptop):  # noqa: F811
    planned = plan(laptop, **FILES)
    keep = keep_of(planned, WORDS)
    assert keep is not None and keep.files == tuple(engine_config_files(planned))
    assert keep.files[:2] == (
        "/etc/spark-deploy/spark-engine-vllm.env",
        "/etc/systemd/system/spark-engine-vllm.service",
    )
    assert len(keep.files) == 3 and keep.units == ("spark-engine-vllm.service",)
    assert keep_of(plan(laptop, rollback=False), WORDS) is None


def test_sparks_serving_one_model_together_are_not_rolled_back(laptop):  # noqa: F811
    plans = inventory(laptop, {"name": "vllm"}, pair=True).engine_plans
    assert [keep_of(p, WORDS) for p in plans.values() if p is not None] == [None, None]


def before_change(kept: bool, active: str, changing: bool, keep: Keep | None = KEEP):
    host = spark()
    given(host, SparkHostState, host_state(kept=kept, units={UNIT: (active, "enabled")}))
    return run(kept_before_change, host, keep=keep, unit=UNIT, changing=changing)


def test_what_serves_is_kept_before_it_changes_when_nothing_is_kept():
    outcome = before_change(kept=False, active="active", changing=True)
    assert outcome.commands == [
        f"if {ENGINE_HEALTH} {' '.join(WORDS)} >/dev/null; then {KEEP.save().get_raw_value()} "
        "; else echo 'spark-engine-rollback: what serves now is not healthy: not kept' ; fi"
    ]


@pytest.mark.parametrize(
    "kept, active, changing, keep, reason",
    [
        (True, "active", True, KEEP, "a last good configuration is kept"),
        (False, "active", False, KEEP, "nothing changes"),
        (False, "inactive", True, KEEP, f"{UNIT} is not running: nothing that serves now to keep"),
        (False, "active", True, None, "engine.rollback is off, or Sparks serve the model together"),
    ],
)
def test_nothing_is_kept_before_a_change_otherwise(kept, active, changing, keep, reason):
    outcome = before_change(kept=kept, active=active, changing=changing, keep=keep)
    assert outcome.commands == [] and outcome.noop == reason


# --- the health check keeps, or rolls back -------------------------------------------------


# The check itself, raising: pyinfra runs it through reports.failures.expected, which turns
# the raise into a failed operation without a traceback (tests/unit/test_failures.py).
_check_health = inspect.unwrap(checked_health)


class FakeHost:
    """The host given to a FunctionCommand: answers run_shell_command from a script."""

    name = "spark-1"
    print_prefix = "[spark-1] "

    def __init__(self, *answers: tuple[bool, str]) -> None:
        self.answers = list(answers)
        self.commands: list[str] = []

    def run_shell_command(self, command, _sudo=False):
        self.commands.append(command.get_raw_value())
        ok, text = self.answers.pop(0)
        output = SimpleNamespace(output=text, stdout=text, stderr="")
        return ok, output


def test_a_healthy_configuration_is_kept():
    host = FakeHost((True, "ready in 3 s"), (True, "kept"))
    _check_health(None, host, UNIT, WORDS, keep=KEEP)
    assert host.commands == [f"{ENGINE_HEALTH} {' '.join(WORDS)}", KEEP.save().get_raw_value()]


def test_an_unhealthy_configuration_is_rolled_back_and_the_run_fails_with_its_diagnosis():
    crash = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    host = FakeHost(
        (False, crash),
        (True, "spark-engine-rollback: going back to the configuration kept at T\nready in 2 s"),
    )
    with pytest.raises(OperationError) as failed:
        _check_health(None, host, UNIT, WORDS, keep=KEEP)
    message = str(failed.value)
    assert host.commands[1].startswith(f"{ROLLBACK_BIN} restore --why ")
    assert "no-kernel-image-sm121" in host.commands[1]
    assert crash in message and "Rolled back" in message and "ready in 2 s" in message


def test_without_a_kept_configuration_the_failure_says_there_was_nothing_to_go_back_to():
    host = FakeHost(
        (False, "boom"), (False, "no good configuration was kept: nothing to go back to")
    )
    with pytest.raises(OperationError, match="nothing to roll back to"):
        _check_health(None, host, UNIT, WORDS, keep=KEEP)


def test_without_rollback_a_failure_runs_nothing_more():
    host = FakeHost((False, "boom"))
    with pytest.raises(OperationError, match="did not become healthy"):
        _check_health(None, host, UNIT, WORDS)
    assert len(host.commands) == 1


# --- the status table ----------------------------------------------------------------------

STATUS = SparkStatus().process(docstring_sample(SparkStatus))
KEPT = {"live": True, "saved": "T1", "units": [UNIT]}


def config(folder: Path, said: dict | None) -> list[Row]:
    return config_row(plan(folder), dataclasses.replace(STATUS, rollback=said))


def test_the_status_sample_reads_the_kept_configuration():
    assert STATUS.rollback is not None and STATUS.rollback["kept"]["live"] is True


def test_status_says_which_configuration_is_live(laptop):  # noqa: F811
    assert config(laptop, {"kept": KEPT, "rollback": None}) == [
        Row("config", "ok", "live = last good (kept T1)")
    ]
    changed = config(laptop, {"kept": {**KEPT, "live": False}, "rollback": None})
    assert changed[0].state == "WARN" and "live differs from the last good" in changed[0].detail
    nothing = config(laptop, {"kept": None, "rollback": None})
    assert nothing[0].state == "WARN" and "nothing kept yet" in nothing[0].detail
    assert config_row(plan(laptop, rollback=False), STATUS) == []


def test_status_shows_the_last_rollback_and_fails_when_it_did_not_help(laptop):  # noqa: F811
    back = {"time": "T2", "why": f"{UNIT}: no-kernel-image-sm121", "to": "T1", "healthy": True}
    [row] = config(laptop, {"kept": KEPT, "rollback": back})
    assert row.state == "ok" and row.detail == (
        f"live = last good (kept T1); rolled back T2 ({UNIT}: no-kernel-image-sm121): healthy again"
    )
    [row] = config(laptop, {"kept": KEPT, "rollback": {**back, "healthy": False}})
    assert row.state == "FAIL" and row.detail.endswith("NOT healthy")
