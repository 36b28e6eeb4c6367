"""
A venv of its own for a Python tool the deploy installs on a Spark (the ``hf`` command, the
MCP server): Ubuntu 24.04 refuses system-wide pip installs, and the system Python is left
alone.
"""

from __future__ import annotations

from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import host_state

PYTHON3_VENV = (
    "export DEBIAN_FRONTEND=noninteractive; "
    "apt-get install -y -q --no-install-recommends python3-venv "
    "|| { apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv; }"
)


def venv_commands(venv: str, packages: list[str]) -> list[str]:
    """The commands that make ``venv`` afresh with ``packages`` (python3-venv first, when
    the Spark lacks it)."""
    commands = [] if "python3-venv" in host_state().packages else [PYTHON3_VENV]
    # python3 -I: root's python never imports from the cwd or PYTHON* variables (issue 22).
    return [
        *commands,
        f"rm -rf {venv} && python3 -I -m venv {venv} && "
        f"{venv}/bin/pip install --quiet --disable-pip-version-check "
        + " ".join(shell(package) for package in packages),
    ]
