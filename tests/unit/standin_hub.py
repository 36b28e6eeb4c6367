"""The stand-in Hub (tests/twins/standins/hf-hub/fake_hub.py) run for a unit test: on a free
loopback port, in a subprocess, stopped when the test is done."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

STANDIN = Path(__file__).resolve().parents[1] / "twins" / "standins" / "hf-hub"


@contextmanager
def running_hub(root: Path, log: Path, *options: str) -> Iterator[str]:
    """The Hub's URL while it serves the repos under ``root`` (its options after ``--log``)."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            str(STANDIN / "fake_hub.py"),
            "--root",
            str(root),
            "--port",
            "0",
            "--log",
            str(log),
            *options,
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = server.stdout.readline() if server.stdout else ""
        assert ready.startswith("fake_hub ready: hub=http://127.0.0.1:"), ready
        yield ready.split()[2].removeprefix("hub=")
    finally:
        server.terminate()
        server.wait(timeout=10)


def load(name: str) -> ModuleType:
    """A module of the stand-in Hub's folder (seed, fake_hub), loaded from its file."""
    spec = importlib.util.spec_from_file_location(f"hf_standin_{name}", STANDIN / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hf_environment(url: str, home: Path) -> dict[str, str]:
    """The environment the deploy gives `hf` (in a twin): this process's, without any HF_
    setting of the machine running the tests, pointed at the stand-in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(
        HF_ENDPOINT=url,
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        NO_COLOR="1",
    )
    return env
