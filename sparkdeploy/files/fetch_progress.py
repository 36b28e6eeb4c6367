"""
What a spark-fetch job shows while it works: its status file (JOBS/ID.status.json, rewritten
whole at least every second, with a rate), the disk check before it writes, and the commands
it runs with their output in its journal.

May import: the standard library and fetch_errors (shipped beside spark-fetch). Must not
know: what a job fetches (models, images, the copy channel) or the deploy; it only measures
and reports.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fetch_errors import JobError

JOBS = Path(os.environ.get("SPARK_FETCH_JOBS", "/var/lib/spark-deploy/fetch"))

# Free space the job leaves on a file system after what it will write (the deploy's margin:
# a full root file system stops journald and sshd's logins before the download fails).
RESERVE = 2 * 1024**3
RATE_WINDOW = 10.0  # seconds of samples the rate is averaged over


def human(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    raise AssertionError("unreachable")


class Status:
    """The job's status file, rewritten whole (temporary file + rename) at each update."""

    def __init__(self, job_id: str, label: str):
        self.path = JOBS / f"{job_id}.status.json"
        self.data: dict[str, Any] = {"id": job_id, "label": label, "state": "running"}
        self.samples: list[tuple[float, int]] = []
        self.written = 0.0

    def update(self, force: bool = False, **values: Any) -> None:
        self.data.update(values)
        now = time.time()
        if "done" in values:
            self.samples = [s for s in self.samples if now - s[0] <= RATE_WINDOW]
            self.samples.append((now, int(values["done"])))
            first = self.samples[0]
            span = now - first[0]
            self.data["rate"] = (self.samples[-1][1] - first[1]) / span if span > 0.5 else 0
        if force or now - self.written >= 1.0:
            self.data["updated"] = now
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(self.data) + "\n")
            temporary.replace(self.path)
            self.written = now


def free_bytes(path: str) -> tuple[str, int]:
    """The nearest existing folder at or above ``path``, and its free bytes."""
    folder = Path(path)
    while not folder.exists():
        folder = folder.parent
    stats = os.statvfs(folder)
    return str(folder), stats.f_bavail * stats.f_frsize


def check_room(what: str, path: str, need: int) -> None:
    folder, free = free_bytes(path)
    if need + RESERVE > free:
        raise JobError(
            f"not enough disk for {what}: it needs {human(need)} more at {folder}, "
            f"which has {human(free)} free (keeping {human(RESERVE)} spare); "
            "free some space (or choose another folder) and run the deploy again"
        )


def watch(command: list[str], sample: Callable[[], None], **popen: Any) -> tuple[int, list[str]]:
    """Run ``command`` (its output to the journal), calling ``sample`` every second; its
    exit code and last output lines."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )
    assert process.stdout is not None
    lines: list[str] = []
    os.set_blocking(process.stdout.fileno(), False)
    while True:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        chunk = process.stdout.read() if ready else None
        if chunk == "":  # end of its output: it has exited (or is about to)
            process.wait()
            sample()
            return process.returncode, lines
        for line in (chunk or "").splitlines():
            print(line, flush=True)
            lines = [*lines[-19:], line]
        sample()
