#!/usr/bin/env python3
"""
spark-fetch: the long work of a deploy (downloading a model folder, pulling an engine image
and reading it), run on the Spark as the systemd job ``spark-fetch@ID.service`` so that it
does not depend on the SSH session of the deploy that started it.

    spark-fetch run ID         the job itself (ExecStart of spark-fetch@.service)
    spark-fetch status ID...   one JSON line per job: its unit and its last progress
    spark-fetch digests JSON   the sha256 of sealed folders' files and images' IDs, which
                               the deploy reads from the head before the others copy

A job is described by the deploy in JOBS/ID.json (the spec) and writes JOBS/ID.status.json
(state, phase, bytes done and total, rate) at least every second while it works, so a
laptop can watch it, leave and come back. A job that fails says why in its status and its
journal; run again, it goes on from where it stopped: the files `hf download` finished are
kept and not fetched again, and so are the layers docker has (and, with the containerd image
store, the part of a layer it had). A file hf had not finished starts again: huggingface_hub
no longer resumes a partial file (PR #4306, "resuming a failed download is no longer
possible"; its 2.4.0 writes each to a new .incomplete file), so the job removes those
leftovers before it starts. Standard library only: the Spark's own python3.

This file is the command and its main; each part is a module shipped beside it (the deploy
installs them in LIB, config/paths.py: FETCH_MODULES), imported by name: fetch_errors (exit
statuses), fetch_progress (the status file, the disk check, commands' output), fetch_names
(names and paths inside a model folder), fetch_hub (a model from the Hub), fetch_docker (an
image pulled and read; docker_pull, its pull through the Docker Engine API), fetch_channel,
fetch_serve, fetch_copy and fetch_copy_image (the copy over the QSFP link), fetch_spec (the
job specs). It may import those and the standard library; it must not know the deploy
(sparkdeploy), which starts it over SSH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

# The modules shipped with spark-fetch (its parts, and fetch_spec.py, the job specs it shares
# with the deploy): in LIB on the Spark, a root-owned 0755 folder (config/paths.py: FETCH_LIB), or
# beside this file (files/, where the tests load it). Named here, not taken from the
# environment or the working folder: run as `python3 -I`, it finds them and nothing else.
LIB = "/usr/local/lib/spark-deploy"
for _folder in (os.path.dirname(os.path.realpath(__file__)), LIB):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

# The modules below are found through the folders above.
from fetch_channel import token_file  # noqa: E402
from fetch_copy import copy_model  # noqa: E402
from fetch_copy_image import copy_image  # noqa: E402
from fetch_docker import fetch_image  # noqa: E402
from fetch_errors import PERMANENT_EXIT, TRANSIENT_EXIT, JobError, exit_status  # noqa: E402
from fetch_hub import fetch_model  # noqa: E402
from fetch_progress import JOBS, Status  # noqa: E402
from fetch_serve import digests, serve  # noqa: E402
from fetch_spec import CopyImageSpec, CopyModelSpec, JobSpec, ServeSpec, SpecError  # noqa: E402

UNIT = "spark-fetch@{id}.service"


KINDS: dict[str, Callable[[Any, Status], None]] = {  # the spec's kind -> the job
    "model": fetch_model,
    "image": fetch_image,
    "copy-model": copy_model,
    "copy-image": copy_image,
    "serve": serve,
}


def read_spec(job_id: str) -> JobSpec:
    """The job's spec, with where its copy channel's secret is (never in the spec)."""
    spec = JobSpec.from_json((JOBS / f"{job_id}.json").read_text())
    if isinstance(spec, (CopyModelSpec, CopyImageSpec, ServeSpec)):
        spec = replace(spec, token_file=token_file(job_id))
    return spec


def run(job_id: str) -> int:
    try:
        spec = read_spec(job_id)
    except SpecError as error:  # written by another release: the status says so
        print(error, flush=True)
        Status(job_id, job_id).update(force=True, state="failed", error=str(error))
        return 1
    status = Status(job_id, spec.label)
    status.update(force=True, state="running", phase="start", started=time.time(), error="")
    try:
        KINDS[spec.kind](spec, status)
    except Exception as error:  # reported in the status, then as systemd shows it
        said = str(error) if isinstance(error, JobError) else f"{type(error).__name__}: {error}"
        code = exit_status(error)
        if code == TRANSIENT_EXIT:  # systemd runs it again (spark-fetch@.service)
            print(f"{said}\na network error: exit {code}, to be run again", flush=True)
            status.update(force=True, state="retrying", error=said)
            return code
        status.update(force=True, state="failed", error=said)
        if not isinstance(error, JobError):
            raise  # its traceback in the journal
        print(error, flush=True)
        return PERMANENT_EXIT
    status.update(force=True, state="done", phase="done", finished=time.time())
    return 0


WORKING = ("running", "retrying")  # states a job's status has while its unit runs it


def job_status(job_id: str) -> dict[str, Any]:
    # The unit's state first, then the status file: a job that stopped before the unit was
    # read wrote its last status before that. Read the other way round, a job that said
    # "done" and exited between the two reads looked killed (a scenario failed on that).
    unit = UNIT.format(id=job_id)
    show = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState", "--value"], capture_output=True, text=True
    )
    path = JOBS / f"{job_id}.status.json"
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        found = {"id": job_id, "state": "none"}
    found["unit"] = show.stdout.strip() or "inactive"
    # "retrying": a network error, and systemd waits to run it again (the unit is
    # activating, auto-restart) or has (active); else it gave up (StartLimitBurst).
    if found["unit"] not in ("active", "activating") and found.get("state") in WORKING:
        found["state"] = "failed"  # killed, or the Spark rebooted, before it could say so
        found["error"] = found.get("error") or f"{unit} stopped before it finished"
    if found.get("state") == "failed":
        journal = subprocess.run(
            ["journalctl", "-u", unit, "-n", "15", "--no-pager", "-o", "cat"],
            capture_output=True,
            text=True,
        )
        found["lines"] = journal.stdout.strip().splitlines()[-15:]
    return found


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        return run(argv[1])
    if len(argv) == 2 and argv[0] == "digests":
        print(json.dumps(digests(json.loads(argv[1]))))
        return 0
    if len(argv) >= 2 and argv[0] == "status":
        for job_id in argv[1:]:
            print(json.dumps(job_status(job_id)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
