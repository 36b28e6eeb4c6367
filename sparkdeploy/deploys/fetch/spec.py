"""
The job specs of spark-fetch, as the deploy imports them: files/fetch_spec.py, the one
definition, which is shipped to the Spark beside spark-fetch (stdlib only, so it is loaded
here from its file rather than copied into the package). May import: render (where files/
is). Must not know: anything of pyinfra or of the deploy; it is the Spark's code.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from sparkdeploy.render import FILES


def _shipped_module(name: str) -> ModuleType:
    """files/<name>.py as the module ``name`` (registered first: its dataclasses read
    their module's namespace), once."""
    if name in sys.modules:
        return sys.modules[name]
    found = importlib.util.spec_from_file_location(name, FILES / f"{name}.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module


if TYPE_CHECKING:  # mypy reads files/fetch_spec.py itself (pyproject's files)
    from fetch_spec import (
        CopyImageSpec,
        CopyModelSpec,
        ImageSpec,
        JobSpec,
        ModelSpec,
        ServeSpec,
        SpecError,
    )
else:
    _spec = _shipped_module("fetch_spec")
    CopyImageSpec = _spec.CopyImageSpec
    CopyModelSpec = _spec.CopyModelSpec
    ImageSpec = _spec.ImageSpec
    JobSpec = _spec.JobSpec
    ModelSpec = _spec.ModelSpec
    ServeSpec = _spec.ServeSpec
    SpecError = _spec.SpecError

__all__ = [
    "CopyImageSpec",
    "CopyModelSpec",
    "ImageSpec",
    "JobSpec",
    "ModelSpec",
    "ServeSpec",
    "SpecError",
]
