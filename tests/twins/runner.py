"""Run the real deploy (`pyinfra inventory.py deploy.py`) and read what it did."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.twins.harness import ROOT, TRUST_HUB_ENV
from tests.twins.warm import WarmPyinfra

PYINFRA = Path(sys.executable).with_name("pyinfra")
WARM = WarmPyinfra(PYINFRA, ROOT)  # started at its first run, one per test worker
REMOTE_COMMAND = re.compile(r"^\[(?P<host>[\w.-]+)\] >>> ", re.M)


@dataclass
class DeployRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def results(self) -> dict:
        try:
            return json.loads(self.stdout)["results"] or {}
        except (json.JSONDecodeError, KeyError):
            return {}

    def _hosts_in(self, outcome: str) -> dict[str, list[str]]:
        by_host: dict[str, list[str]] = {}
        for op in self.results.get("operations", []):
            for host in op[outcome]:
                by_host.setdefault(host, []).append(op["name"])
        return by_host

    def changed(self) -> dict[str, list[str]]:
        """Host -> names of the operations that reported a change on it."""
        return self._hosts_in("success")

    def errors(self) -> dict[str, list[str]]:
        """Host -> names of the operations that failed on it."""
        return self._hosts_in("error")

    def remote_commands(self) -> dict[str, int]:
        """Host -> number of commands run over SSH (facts and operations), from -vv output."""
        counts: dict[str, int] = {}
        for match in REMOTE_COMMAND.finditer(self.stderr):
            counts[match["host"]] = counts.get(match["host"], 0) + 1
        return counts

    def explain(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_deploy(
    inventory: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    deploy: str = "deploy.py",
    warm: bool = False,
) -> DeployRun:
    """`pyinfra -y --json -vv inventory.py deploy.py` against the given inventory file; in a
    child of the warm interpreter when `warm` (tests/twins/warm.py: the same run without
    its imports), else as the `pyinfra` command."""
    started = time.monotonic()
    spec = _deploy(inventory, extra, env, deploy)
    if warm:
        status, stdout, stderr = WARM.run(spec["args"][1:], spec["env"], spec["cwd"], 1800)
        return DeployRun(status, stdout, stderr, time.monotonic() - started)
    done = subprocess.run(**spec, capture_output=True, text=True, timeout=1800)
    return DeployRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def start_deploy(
    inventory: Path, *extra: str, env: dict[str, str] | None = None, deploy: str = "deploy.py"
) -> subprocess.Popen[str]:
    """The same deploy, started in the background in a process group of its own (so that a
    test can take the laptop away in the middle: kill the group)."""
    return subprocess.Popen(
        **_deploy(inventory, extra, env, deploy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _deploy(
    inventory: Path, extra: tuple[str, ...], env: dict[str, str] | None, deploy: str
) -> dict[str, Any]:
    command = [str(PYINFRA), "-y", "--json", "-vv", "inventory.py", deploy, *extra]
    environment = {
        **os.environ,
        "SPARK_INVENTORY": str(inventory),
        **TRUST_HUB_ENV,
        **(env or {}),
    }
    return {"args": command, "cwd": ROOT, "env": environment}
