"""
The files pyinfra runs, inside the package so that `pip install .` brings them along:
inventory.py (the Sparks of $SPARK_INVENTORY), deploy.py, status.py, diagnose.py and
linktest.py. These are the only definitions: the spark-deploy command hands their paths to
pyinfra, and the files of the same names at the repository's root are shims that run them
(`pyinfra inventory.py deploy.py` there works as documented).
"""

from __future__ import annotations

import atexit
import gc
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparkdeploy.entry import pyinfra_costs

ENTRY = Path(__file__).resolve().parent
NAMES = ("inventory", "deploy", "status", "diagnose", "linktest")


def path(name: str) -> Path:
    """The packaged file ``name`` (one of NAMES)."""
    if name not in NAMES:
        raise ValueError(f"no packaged pyinfra file {name!r} (one of {', '.join(NAMES)})")
    return ENTRY / f"{name}.py"


def run(name: str, shim: str | None = None) -> dict[str, Any]:
    """Run the packaged file ``name`` as pyinfra runs a deploy file: its code afresh each
    time (pyinfra runs a deploy file once per host, an import would run it once), in a
    namespace of its own, which is returned (the inventory's ``sparks``). ``shim``: the
    repository's file that pyinfra ran and that called this (its ``__file__``)."""
    file = path(name)
    pyinfra_costs.apply()
    freeze_at_exit()
    module = _known_file(f"sparkdeploy.entry.{name}", str(file))
    if shim is not None:
        _known_file(f"sparkdeploy.entry.shim_{name}", shim)
    with _package_compiled():
        exec(compile(file.read_text(encoding="utf-8"), str(file), "exec"), module.__dict__)
    return module.__dict__


_FREEZING: list[bool] = []  # whether freeze_at_exit registered its handler in this process


def freeze_at_exit() -> None:
    """At the process's exit, leave the objects of the run to the exit itself instead of
    collecting them (``gc.freeze``, once per process). After the exit handlers, the
    interpreter clears every module and collects several times over what the run built (the
    inventory's pydantic models, pyinfra's state, the imported libraries): 0.16-0.20 s of a
    no-op run of the twin pair, against 0.02-0.03 s frozen (2026-11-27, this machine kind).
    Frozen objects are never collected, so their ``__del__`` does not run at exit, which
    Python never promised for objects alive at exit (object.__del__); the standard streams
    are still flushed, and exit handlers registered earlier (logging's flush, paramiko's
    thread join) still run, after this one."""
    if not _FREEZING:
        atexit.register(gc.freeze)
        _FREEZING.append(True)


@contextmanager
def _package_compiled() -> Iterator[None]:
    """Python's compiled-module cache for the modules imported while a packaged file runs
    (the package's own, which it imports; pyinfra's and the libraries' are cached by pip).
    pyinfra's CLI switches the cache off for its whole process, so that a deploy folder gets
    no __pycache__; from a checkout, every run then compiled the package afresh: about 0.2 s
    of CPU for the inventory's modules alone (2026-11-26, this machine). Restored after."""
    cached, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        yield
    finally:
        sys.dont_write_bytecode = cached


def _known_file(name: str, file: str) -> types.ModuleType:
    """A fresh module for ``file``, entered in sys.modules. pyinfra orders operations by
    their call stack (inspect.stack), and inspect looks for the module of each frame's file:
    for a file no module has, it walks every loaded module again, at every frame of every
    operation. The deploy file alone made that 300 walks of 1,800 modules, 0.4 s of a no-op
    run of the twin pair (2026-11-26)."""
    module = types.ModuleType(name)
    module.__file__ = file
    sys.modules[name] = module
    return module
