"""The warm pyinfra of the scenarios (tests/twins/warm.py) answers as the `pyinfra` command
does: same exit status and output, each run with its own environment."""

from __future__ import annotations

import os
import subprocess

from tests.twins.harness import ROOT
from tests.twins.runner import PYINFRA
from tests.twins.warm import WarmPyinfra, entry_imports

ARGS = ["-y", "inventory.py", "deploy.py"]


def test_a_warm_run_answers_as_the_pyinfra_command_with_each_runs_environment(tmp_path):
    first, second = (
        {**os.environ, "SPARK_INVENTORY": str(tmp_path / name)} for name in ("a.yml", "b.yml")
    )
    real = subprocess.run(
        [str(PYINFRA), *ARGS], env=first, cwd=ROOT, capture_output=True, text=True
    )
    assert real.returncode != 0 and str(tmp_path / "a.yml") in real.stderr, real.stderr
    warm = WarmPyinfra(PYINFRA, ROOT)
    try:
        assert warm.run(ARGS, first, ROOT, timeout=120) == (
            real.returncode,
            real.stdout,
            real.stderr,
        )
        # The same server, another run: that run's environment, not the first one's.
        status, _, stderr = warm.run(ARGS, second, ROOT, timeout=120)
        assert status == real.returncode
        assert stderr == real.stderr.replace(str(tmp_path / "a.yml"), str(tmp_path / "b.yml"))
    finally:
        warm.close()


def test_the_preload_is_what_the_entry_files_import():
    names = entry_imports()
    assert names[0] == "pyinfra_cli.main"
    assert "sparkdeploy.deploys.qsfp.proof" in names  # entry/deploy.py
    assert "sparkdeploy.inventory.load_inventory" in names  # entry/inventory.py: a name
    assert "sparkdeploy.reports.status" in names  # entry/status.py
