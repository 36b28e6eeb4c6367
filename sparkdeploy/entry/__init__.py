"""
The files pyinfra runs, inside the package so that `pip install .` brings them along:
inventory.py (the Sparks of $SPARK_INVENTORY), deploy.py, status.py, diagnose.py and
linktest.py. These are the only definitions: the spark-deploy command hands their paths to
pyinfra, and the files of the same names at the repository's root are shims that run them
(`pyinfra inventory.py deploy.py` there works as documented).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ENTRY = Path(__file__).resolve().parent
NAMES = ("inventory", "deploy", "status", "diagnose", "linktest")


def path(name: str) -> Path:
    """The packaged file ``name`` (one of NAMES)."""
    if name not in NAMES:
        raise ValueError(f"no packaged pyinfra file {name!r} (one of {', '.join(NAMES)})")
    return ENTRY / f"{name}.py"


def run(name: str) -> dict[str, Any]:
    """Run the packaged file ``name`` as pyinfra runs a deploy file: its code afresh each
    time (pyinfra runs a deploy file once per host, an import would run it once), in a
    namespace of its own, which is returned (the inventory's ``sparks``)."""
    file = path(name)
    names: dict[str, Any] = {"__file__": str(file), "__name__": f"sparkdeploy.entry.{name}"}
    exec(compile(file.read_text(encoding="utf-8"), str(file), "exec"), names)
    return names
