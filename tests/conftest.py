"""Every test under tests/scenarios boots Spark twins in Docker: it carries the `twins`
marker, so `pytest -m "not twins"` (`make unit`) runs everything that needs no Docker.

The suite sets its own environment: the caller's Hugging Face variables (HF_HUB_OFFLINE=1,
HF_ENDPOINT, HF_TOKEN ...) and the deploy's own laptop variables (SPARK_INVENTORY,
SPARK_API_KEY, SPARK_TRUST_HF_ENDPOINT ...) would change what the deploy and the fake Hub do,
so they are removed before any test runs; a test that needs one sets it itself.

`python3` on the PATH is the interpreter this suite runs on, in a venv with no packages: never
a version manager's shim, nor the base interpreter with its site-packages. The stand-ins
(docker, the engine, ray, the registry) are `#!/usr/bin/env python3` scripts the unit tests
start some 270 times; pyenv's shim (bash running `pyenv exec`) added about 0.1 s of CPU to
each, the base interpreter's .pth files another 0.05 s. With `-m "not twins"` the scenarios
are not even collected: all of them carry the marker, and importing them cost every worker a
second of a `make unit`.

Python caches compiled modules as an operator's laptop does: a caller's PYTHONDONTWRITEBYTECODE
(set on the CI machine kind) made every process compile what it imports from source. pytest
compiled each test module again in every worker with its assertion rewriting (collecting the
unit tests took 7.4-8.7 s with it, 3.6-5.0 s without, on 2 cores), and each run of a local
stand-in compiled its script's modules.
"""

import atexit
import json
import os
import shutil
import sys
import tempfile
import venv
from collections import Counter
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
# What each scenario scope took in a whole run (worker seconds: setup, steps and teardown; 4
# workers on the 2-core machine kind; first recorded 2026-11-26), so that `scheduled` hands
# out the longest first. `SCENARIO_SECONDS=write make test` records them again (the scopes
# that ran get their new sum: record from whole runs, not from a -k selection).
SECONDS_FILE = Path(__file__).resolve().parent / "scenario_seconds.json"
_taken: dict[str, float] = {}


INTERPRETER_PREFIX = "spark-tests-python-"  # the stand-ins' interpreter (_interpreter_first)
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


def scheduled(
    items: list[pytest.Item], seconds: dict[str, float] | None = None
) -> list[pytest.Item]:
    """The items in the order pytest-xdist hands out their scopes (`make test` runs it with
    `--no-loadscope-reorder`): the twin scenarios first, the longest first by the seconds
    each took last time (`seconds`, else SECONDS_FILE), then those that boot the most twins
    and have the most steps; then the unit tests, whose quick scopes fill the workers' last
    minutes. A scenario with no seconds recorded (a new one) goes ahead of the others: its
    cost is unknown. xdist's own order (most tests first) put the unit modules, hundreds of
    tests each, ahead of every scenario, and the order by twins alone started a one-twin
    scenario of 130 s among the last. The order within a scope is kept: a scenario's steps
    run as written."""
    taken = _recorded_seconds() if seconds is None else seconds
    unknown = max(taken.values(), default=0.0) + 1.0
    sizes = Counter(_scope(item.nodeid) for item in items)

    def key(item: pytest.Item) -> tuple[bool, float, int, int]:
        scope = _scope(item.nodeid)
        if SCENARIOS not in item.path.parents:
            return True, 0.0, 0, -sizes[scope]
        twins = getattr(getattr(item, "cls", None), "twins", None)
        booted = len(twins) if isinstance(twins, dict) else 0
        return False, -taken.get(scope, unknown), -booted, -sizes[scope]

    return sorted(items, key=key)  # stable: a scope's items stay together and in order


def _recorded_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(SECONDS_FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}  # no record: the order by twins and steps


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With SCENARIO_SECONDS=write, add up each scenario scope's seconds (in the process
    that sees every report: xdist's controller, or pytest alone)."""
    if os.environ.get("SCENARIO_SECONDS") != "write" or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.nodeid.startswith("tests/scenarios/"):
        scope = _scope(report.nodeid)
        _taken[scope] = _taken.get(scope, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The scopes that ran get their new seconds; the others keep theirs."""
    if _taken:
        recorded = {**_recorded_seconds(), **_taken}
        rounded = {scope: round(taken, 1) for scope, taken in sorted(recorded.items())}
        SECONDS_FILE.write_text(json.dumps(rounded, indent=1) + "\n")


def _scope(nodeid: str) -> str:
    """xdist's `loadscope` unit of a test, as xdist splits its node id: the class, else the
    module."""
    return nodeid.rsplit("::", 1)[0]


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
    """Put a venv of this interpreter with no packages at all (the standard library's `venv`,
    without pip) first on the PATH, unless its `python3` already is first (an xdist worker
    inherits the controller's PATH). A stand-in then starts as on a twin, from the standard
    library alone, and skips the base interpreter's site-packages: their .pth files (here the
    sandbox's, which imports certifi at every start) took 0.07 s of each start, 0.02 s in
    the venv (`python3 -c pass`, 2026-11-27)."""
    found = shutil.which("python3")
    if found and Path(found).parent.parent.name.startswith(INTERPRETER_PREFIX):
        return
    folder = Path(tempfile.mkdtemp(prefix=INTERPRETER_PREFIX))
    atexit.register(shutil.rmtree, folder, True)
    venv.EnvBuilder(symlinks=True, with_pip=False).create(folder)
    os.environ["PATH"] = f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
