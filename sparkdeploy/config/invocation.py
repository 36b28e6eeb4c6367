"""
How the operator ran this deploy, so that the commands printed next (a failure block's
``next``, a status row's ``explained by``) work when pasted: ``spark-deploy diagnose
INVENTORY --limit NAME`` after the ``spark-deploy`` command, ``pyinfra -y inventory.py
diagnose.py --limit NAME`` in a checkout, with ``SPARK_INVENTORY=FILE`` in front when the
run's inventory is not the default one.

The only place that reads the two variables: ``SPARK_DEPLOY_CLI``, which the spark-deploy
command sets for its pyinfra child to the inventory as the operator named it, and
``SPARK_INVENTORY``, the inventory a ``pyinfra inventory.py ...`` run reads. Pure: no pyinfra
here (the command line sets them before pyinfra starts); nothing about what the commands do.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

DEFAULT_INVENTORY = "inventory/sparks.yml"  # what `pyinfra inventory.py` reads without one
INVENTORY_ENV = "SPARK_INVENTORY"
CLI_ENV = "SPARK_DEPLOY_CLI"  # set by spark-deploy for pyinfra: the inventory as typed
PROGRAM = "spark-deploy"
STATUS_JSON_ENV = "SPARK_STATUS_JSON"  # status: a file to write its JSON to, or - for stdout
# The runs that change nothing (or only their own result file): pasted, they run without
# asking; spark-deploy passes -y to status and diagnose itself.
READ_ONLY = ("status", "diagnose", "linktest")


def inventory_path(environ: Mapping[str, str] | None = None) -> str:
    """The inventory file a ``pyinfra inventory.py`` run reads."""
    environ = os.environ if environ is None else environ
    return environ.get(INVENTORY_ENV) or DEFAULT_INVENTORY


def command(tool: str, *options: str, environ: Mapping[str, str] | None = None) -> str:
    """The command line that runs ``tool`` (deploy, status, diagnose or linktest) with
    ``options`` on this run's inventory, in the form the operator ran this one."""
    environ = os.environ if environ is None else environ
    typed = environ.get(CLI_ENV, "")
    if typed:
        auto_yes = tool == "linktest"  # spark-deploy passes -y to status and diagnose
        words = [PROGRAM, tool, shlex.quote(typed), *options, *(["-y"] if auto_yes else [])]
        return " ".join(words)
    path = inventory_path(environ)
    prefix = (
        f"{INVENTORY_ENV}={shlex.quote(path)} "
        if os.path.normpath(path) != os.path.normpath(DEFAULT_INVENTORY)
        else ""
    )
    yes = ["-y"] if tool in READ_ONLY else []
    return " ".join([f"{prefix}pyinfra", *yes, "inventory.py", f"{tool}.py", *options])
