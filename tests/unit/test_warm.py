"""The warm pyinfra of the scenarios (tests/twins/warm.py) answers as the `pyinfra` command
does: same exit status and output, each run with its own environment."""

from __future__ import annotations

import os
import subprocess

from tests.twins.harness import ROOT
from tests.twins.runner import PYINFRA
from tests.twins.warm import WarmPyinfra


def test_a_warm_run_answers_as_the_pyinfra_command_with_each_runs_environment(tmp_path):
    warm = WarmPyinfra(PYINFRA, ROOT)
    args = ["-y", "inventory.py", "deploy.py"]
    try:
        for name in ("first.yml", "second.yml"):
            env = {**os.environ, "SPARK_INVENTORY": str(tmp_path / name)}
            real = subprocess.run(
                [str(PYINFRA), *args], env=env, cwd=ROOT, capture_output=True, text=True
            )
            status, stdout, stderr = warm.run(args, env, ROOT, timeout=120)
            assert real.returncode != 0, real.stderr
            assert (status, stdout, stderr) == (real.returncode, real.stdout, real.stderr)
            assert str(tmp_path / name) in stderr  # this run's inventory, not the last one's
    finally:
        warm.close()
