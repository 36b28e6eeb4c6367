"""Every test under tests/scenarios boots Spark twins in Docker: it carries the `twins`
marker, so `pytest -m "not twins"` (`make unit`) runs everything that needs no Docker.

The suite sets its own environment: the caller's Hugging Face variables (HF_HUB_OFFLINE=1,
HF_ENDPOINT, HF_TOKEN ...) and the deploy's own laptop variables (SPARK_INVENTORY,
SPARK_API_KEY, SPARK_TRUST_HF_ENDPOINT ...) would change what the deploy and the fake Hub do,
so they are removed before any test runs; a test that needs one sets it itself.

`python3` on the PATH is the interpreter this suite runs on, never a version manager's shim:
the stand-ins (docker, the engine, ray, the registry) are `#!/usr/bin/env python3` scripts the
unit tests run over a thousand times, and pyenv's shim (bash running `pyenv exec`) added about
0.1 s of CPU to each. With `-m "not twins"` the scenarios are not even collected: all of them
carry the marker, and importing them cost every worker a second of a `make unit`.

Python caches compiled modules as an operator's laptop does: a caller's PYTHONDONTWRITEBYTECODE
(set on the CI machine kind) made every process compile what it imports from source. pytest
compiled each test module again in every worker with its assertion rewriting (collecting the
unit tests took 7.4-8.7 s with it, 3.6-5.0 s without, on 2 cores), and each run of a local
stand-in compiled its script's modules.
"""

import atexit
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parent / "scenarios"


# Prefixes of the caller's variables the suite must not inherit.
CALLER_PREFIXES = ("HF_", "HUGGING_FACE_", "HUGGINGFACE_", "SPARK_")


def pytest_configure(config: pytest.Config) -> None:
    for name in [name for name in os.environ if name.startswith(CALLER_PREFIXES)]:
        del os.environ[name]
    _bytecode_cached()
    _interpreter_first()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # Each pytest-xdist worker boots its own twins: a namespace of its own (harness.py),
        # so two workers never share, replace or wait on each other's twins.
        from tests.twins import harness

        os.environ[harness.NAMESPACE_ENV] = f"{harness.namespace()[:28]}-{worker}"
    config.addinivalue_line("markers", "twins: needs a Docker engine to boot Spark twins")
    config.addinivalue_line("markers", "slow: a unit test of several seconds (a wheel built)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SCENARIOS in item.path.parents:
            item.add_marker(pytest.mark.twins)
    items[:] = scheduled(items)


def scheduled(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items in the order pytest-xdist hands out their scopes (`make test` runs it with
    `--no-loadscope-reorder`): the twin scenarios first, those that boot the most twins and
    then have the most steps first, then the unit tests, whose quick scopes fill the workers'
    last minutes. xdist's own order (most tests first) put the unit modules, hundreds of
    tests each, ahead of every scenario, and the last scenarios to start were still running
    when the other workers had nothing left. The order within a scope is kept: a scenario's
    steps run as written."""
    scope_of = {id(item): _scope(item) for item in items}
    sizes: dict[str, int] = {}
    for item in items:
        sizes[scope_of[id(item)]] = sizes.get(scope_of[id(item)], 0) + 1

    def key(item: pytest.Item) -> tuple[bool, int, int]:
        twins = getattr(getattr(item, "cls", None), "twins", None)
        booted = len(twins) if isinstance(twins, dict) else 0
        return SCENARIOS not in item.path.parents, -booted, -sizes[scope_of[id(item)]]

    return sorted(items, key=key)  # stable: a scope's items stay together and in order


def _scope(item: pytest.Item) -> str:
    """xdist's `loadscope` unit: the class, else the module."""
    in_class = getattr(item, "cls", None) is not None
    return item.nodeid.rsplit("::", 1)[0] if in_class else item.nodeid.split("::")[0]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip the scenarios folder when the marker expression is `not twins` (`make unit`): every
    test in it would be deselected after its import anyway."""
    if collection_path == SCENARIOS and config.getoption("markexpr").split() == ["not", "twins"]:
        return True
    return None


def _bytecode_cached() -> None:
    """Write and read __pycache__ in this process (the test modules are imported after this
    file) and in every process it starts, xdist's workers included."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def _interpreter_first() -> None:
    """Put a folder holding only `python3`, this interpreter's own binary, first on the PATH,
    unless `python3` already is that binary (an xdist worker inherits the controller's)."""
    real = Path(sysconfig.get_config_var("BINDIR") or "") / "python3"
    found = shutil.which("python3")
    if not real.is_file() or (found and Path(found).resolve() == real.resolve()):
        return
    folder = Path(tempfile.mkdtemp(prefix="spark-tests-python-"))
    (folder / "python3").symlink_to(real.resolve())
    atexit.register(shutil.rmtree, folder, True)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
