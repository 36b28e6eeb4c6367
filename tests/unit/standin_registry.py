"""The twins' stand-in registry (tests/twins/standins/registry/registry.py) run on this machine
for the docker stand-in's unit tests: on a free loopback port, with its request log, rate file
and missing-images list in a temporary folder. Its blobs (some 50 MB of gzip'd layers, 1.5 s
to make) are made once into .cache/standin-registry and shared by every registry of every
run and xdist worker: the registry remakes them itself when images.json or its own code
changes, and a lock keeps two registries from making them at once."""

from __future__ import annotations

import atexit
import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOB_CACHE = ROOT / ".cache" / "standin-registry"
REGISTRY = ROOT / "tests" / "twins" / "standins" / "registry" / "registry.py"
# What `nvidia-ctk runtime configure --runtime=docker` writes (NVIDIA Container Toolkit
# install guide, "Configuring Docker"), as the twin image has it.
NVIDIA_DAEMON_JSON = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}


class StandinRegistry:
    """A running registry stand-in and the files that steer it."""

    def __init__(self, root: Path, cache: Path | None = None):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.cache = cache or BLOB_CACHE
        self.cache.mkdir(parents=True, exist_ok=True)
        self.log = root / "registry.log"
        self.rate = root / "rate"
        self.missing = root / "missing-images"
        with open(self.cache.parent / f"{self.cache.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # until this registry has made or checked them
            self.process, self.url = self._start()

    def _start(self) -> tuple[subprocess.Popen[str], str]:
        """The registry process and its URL, once it listens (its blobs are made by then)."""
        process = subprocess.Popen(
            [
                sys.executable,
                str(REGISTRY),
                "--cache",
                str(self.cache),
                "--port",
                "0",
                "--log",
                str(self.log),
                "--rate-file",
                str(self.rate),
                "--missing",
                str(self.missing),
            ],  # fmt: skip
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        line = process.stdout.readline()  # "registry listening on HOST:PORT"
        if not line:
            raise RuntimeError("the registry stand-in did not start")
        return process, "http://" + line.split()[-1]

    def requests(self) -> list[list[str]]:
        """The request log: METHOD PATH STATUS BYTES_SENT RANGE, one list a request."""
        if not self.log.exists():
            return []
        return [line.split(" ") for line in self.log.read_text().splitlines()]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()

    def docker_env(self, store: Path) -> dict[str, str]:
        """The docker stand-in's variables for this registry and an image store; daemon.json
        with the NVIDIA runtime (so `--gpus all` works) and no CDI folder."""
        daemon = self.root / "daemon.json"
        if not daemon.exists():
            daemon.write_text(json.dumps(NVIDIA_DAEMON_JSON, indent=4))
        return {
            "SPARK_TWIN_REGISTRY_URL": self.url,
            "SPARK_TWIN_DOCKER_IMAGES": str(store),
            "SPARK_TWIN_DOCKER_DAEMON_JSON": str(daemon),
            "SPARK_TWIN_CDI_DIRS": str(self.root / "no-cdi"),
        }


_SHARED: list[StandinRegistry] = []


def shared() -> StandinRegistry:
    """One registry (and image store) for every docker stand-in test of this process."""
    if not _SHARED:
        root = Path(tempfile.mkdtemp(prefix="standin-registry-"))
        registry = StandinRegistry(root)
        _SHARED.append(registry)

        def stop() -> None:
            registry.stop()
            shutil.rmtree(root, ignore_errors=True)

        atexit.register(stop)
    return _SHARED[0]
