"""The files pyinfra runs (sparkdeploy/entry): each run is a module inspect can find, so
pyinfra's ordering of operations by their call stack does not walk every loaded module at
every frame."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeploy import entry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restored_modules():
    before = dict(sys.modules)
    yield
    for name in set(sys.modules) - set(before):
        del sys.modules[name]


def frame_of(file: Path):
    """A frame of code compiled as ``file``, as pyinfra runs a deploy file."""
    return eval(compile("__import__('sys')._getframe()", str(file), "eval"))  # noqa: S307


def test_a_file_run_by_pyinfra_has_a_module(tmp_path: Path, restored_modules):
    shim = tmp_path / "deploy.py"
    assert inspect.getmodule(frame_of(shim)) is None  # no module: inspect walked them all
    module = entry._known_file("sparkdeploy.entry.shim_test", str(shim))
    assert inspect.getmodule(frame_of(shim)) is module
    assert sys.modules["sparkdeploy.entry.shim_test"] is module


def test_the_packaged_file_and_the_shim_that_ran_it_are_both_known(
    tmp_path: Path, restored_modules
):
    shim = tmp_path / "inventory.py"
    names: dict = {"__file__": str(shim)}  # as pyinfra's exec_file gives a file it runs
    code = "from sparkdeploy.entry import run\nran = run('inventory', __file__)"
    environ = {
        "SPARK_INVENTORY": str(Path("examples/sglang-pair.yml").resolve()),
        "HF_HUB_OFFLINE": "1",  # the model class from the cache only: no request
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in environ.items():
            patch.setenv(key, value)
        exec(compile(code, str(shim), "exec"), names)  # noqa: S102
    assert "sparks" in names["ran"]
    packaged = entry.path("inventory")
    assert inspect.getmodule(frame_of(packaged)) is sys.modules["sparkdeploy.entry.inventory"]
    assert inspect.getmodule(frame_of(shim)) is sys.modules["sparkdeploy.entry.shim_inventory"]


def test_modules_imported_while_a_file_runs_are_cached_and_pyinfras_setting_comes_back(
    tmp_path: Path, restored_modules, monkeypatch: pytest.MonkeyPatch
):
    for name in ("during", "after"):
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as pyinfra_cli.main sets it
    with entry._package_compiled():
        __import__("during")
    __import__("after")
    assert sys.dont_write_bytecode is True
    cached = sorted(p.name.split(".")[0] for p in (tmp_path / "__pycache__").iterdir())
    assert cached == ["during"]


def test_a_run_leaves_its_objects_to_the_exit_registering_once():
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen at exit', gc.get_freeze_count() > 0))\n"
        "from sparkdeploy import entry\n"
        "before = atexit._ncallbacks()\n"
        "entry.freeze_at_exit()\n"
        "entry.freeze_at_exit()\n"
        "added = atexit._ncallbacks() - before\n"
        "print('handlers added', added, 'frozen now', gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.splitlines() == ["handlers added 1 frozen now False", "frozen at exit True"]
