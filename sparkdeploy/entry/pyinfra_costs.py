"""
Two per-operation costs of pyinfra 3.10.0, answered the same way without them. Measured on a
no-op run of the twin pair in a warm interpreter (imports done), 8 runs each, alternating:
0.78-1.09 CPU-s before, 0.57-0.76 after; 1.54-1.88 s wall before, 1.42-1.64 after
(2026-11-26, the 2-core machine kind the suite runs on).

- The operation order (``pyinfra.api.util.get_operation_order_from_stack``). In CLI mode
  pyinfra orders operations by the line numbers of their call stack. It builds
  ``inspect.stack()``, which reads every frame's source line, then calls ``getframeinfo`` on
  every frame again, and keeps only each frame's file name and line number. A frame has both
  (``f_code.co_filename``, ``f_lineno``): ``operation_order`` walks the frames for them and
  returns the same list. (``getframeinfo`` names a frame by ``getsourcefile``, which differs
  from ``co_filename`` only for code compiled from a .pyc path: none in a deploy.)
- The global arguments (``pyinfra.api.arguments.all_global_arguments``): the type hints of
  one fixed class, evaluated by ``typing.get_type_hints`` for every operation and fact.
  ``global_arguments`` evaluates them once.

``apply`` installs both only on the release they were read from (PYINFRA): with any other,
pyinfra's own code runs, and tests/unit/test_pyinfra_costs.py, which compares each answer
with pyinfra's own, fails until someone reads the new release.

May import: pyinfra and the standard library. Must not know: the deploy.
"""

from __future__ import annotations

import sys
from functools import cache
from types import FrameType
from typing import Any

import pyinfra
import pyinfra.api.arguments
import pyinfra.api.facts
import pyinfra.api.operation
import pyinfra.api.util

PYINFRA = "3.10.0"  # the release these answers were read from (requirements.txt pins it)
# The modules whose names `apply` rebinds (`operation` and `facts` imported them by name).
_OPERATION = sys.modules["pyinfra.api.operation"]
_ARGUMENTS = sys.modules["pyinfra.api.arguments"]
_FACTS = sys.modules["pyinfra.api.facts"]
_ALL_GLOBAL_ARGUMENTS = pyinfra.api.arguments.all_global_arguments  # pyinfra's own


def operation_order(state: Any) -> list[int]:
    """What ``get_operation_order_from_stack(state)`` returns when called from the same
    frame: the line numbers of the caller's stack from the deploy file on (pyinfra's own
    frames left out), after the CLI's file number."""
    frames: list[FrameType | None] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    # pyinfra's function sees its own frame last (a pyinfra frame, never counted); where no
    # frame is the deploy file's, only that one is left, so nothing is counted.
    frames.append(None)
    start = 0
    deploy_file = state.current_deploy_filename
    if deploy_file:
        files = [found.f_code.co_filename if found is not None else None for found in frames]
        start = files.index(deploy_file) if deploy_file in files else len(frames) - 1
    numbers = [state.current_op_file_number] if pyinfra.is_cli else []
    install = pyinfra.api.util.PYINFRA_INSTALL_DIR
    numbers += [
        found.f_lineno
        for found in frames[start:]
        if found is not None and not found.f_code.co_filename.startswith(install)
    ]
    return numbers


@cache
def _global_arguments() -> tuple[tuple[str, type], ...]:
    return tuple(_ALL_GLOBAL_ARGUMENTS())


def global_arguments() -> list[tuple[str, type]]:
    """``all_global_arguments()``, evaluated once (a fresh list each call, as pyinfra's)."""
    return list(_global_arguments())


def apply() -> bool:
    """Install both on pyinfra PYINFRA (True), leave any other release alone (False)."""
    if pyinfra.__version__ != PYINFRA:
        return False
    _OPERATION.get_operation_order_from_stack = operation_order  # type: ignore[attr-defined]
    _ARGUMENTS.all_global_arguments = global_arguments  # type: ignore[attr-defined]
    _FACTS.all_global_arguments = global_arguments  # type: ignore[attr-defined]
    return True
