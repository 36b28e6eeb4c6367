"""
A venv of its own for a Python tool the deploy installs on a Spark (the ``hf`` command, the
MCP server): Ubuntu 24.04 refuses system-wide pip installs, and the system Python is left
alone. What goes in is a hash lock (knowledge/locks.py): every package pinned, wheels only,
each checked against the sha256 PyPI lists, so root's pip runs no sdist's build and takes no
release the lock does not name.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import FileUploadCommand, OperationError

from sparkdeploy.facts.host_state import host_state
from sparkdeploy.knowledge.locks import Lock, LockError, pip_install, read_lock

PYTHON3_VENV = (
    "export DEBIAN_FRONTEND=noninteractive; "
    "apt-get install -y -q --no-install-recommends python3-venv "
    "|| { apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv; }"
)
# The lock a venv was made from, kept in it once pip succeeded: the host-state fact reads its
# sha256, so a venv is made again only when its lock changed.
LOCK_STAMP = "spark-deploy.lock"


def shipped_lock(tool: str, version: str) -> Lock:
    """The shipped lock, or the deploy stops before anything is written."""
    try:
        return read_lock(tool, version)
    except LockError as error:
        raise OperationError(str(error)) from None


def venv_commands(venv: str, lock: Lock) -> list[str | FileUploadCommand]:
    """The commands that make ``venv`` afresh from ``lock`` (python3-venv first, when the
    Spark lacks it): the lock is uploaded beside the stamp and becomes it only after pip
    installed everything it lists."""
    commands: list[str | FileUploadCommand] = (
        [] if "python3-venv" in host_state().packages else [PYTHON3_VENV]
    )
    staged = f"{venv}/{LOCK_STAMP}.new"
    return [
        *commands,
        f"rm -rf {venv} && python3 -I -m venv {venv}",
        FileUploadCommand(StringIO(lock.text), staged),
        f"{pip_install(venv, staged)} && mv -f {staged} {venv}/{LOCK_STAMP}",
    ]
