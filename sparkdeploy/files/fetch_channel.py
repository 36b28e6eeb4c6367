"""
The copy channel between the head and the other Sparks, as a copy asks it: the run's token
(written root-only by the deploy over SSH, read at each use), and a GET to the head's server
with it, asked again while the head is busy or still fetching, within the deploy's wait.

May import: the standard library and the sibling modules fetch_spec, fetch_errors,
fetch_progress and fetch_names (shipped beside spark-fetch). Must not know: what is copied
(model files, the image tar), the server's side, or the deploy.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import stat
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

from fetch_errors import WaitedOut
from fetch_names import FILE_FLAGS
from fetch_progress import JOBS, Status
from fetch_spec import Head

# --- a pair or a switch: fetched once, copied over the QSFP link --------------------------
#
# The head fetches from the internet; every other Spark copies from the head over rail 1.
# The link is not trusted (issue 22: a host on a shared switch, or a compromised head, can
# answer on the head's address): the head's server binds its own fabric address, answers the
# other Sparks' fabric addresses only, and only with the run's token (a random secret the
# deploy wrote root-only on every Spark over SSH); it serves only regular files of the model
# folders the deploy planned, each once it is sealed, and the image. A copy writes only plain
# names inside its folder, no more bytes than declared, and keeps nothing whose sha256 (or
# image ID) differs from what the deploy read from the head over SSH (``digests``). The
# server stops when the deploy is done with it (or after IDLE seconds without a request).


JSON_LIMIT = 16 * 1024 * 1024  # bytes of a listing (or a tar's manifest) read at most
REQUEST_TIMEOUT = 60  # seconds a connection may stay silent
BUSY_WAIT = 5  # seconds before a copy asks a busy head (503) again


def token_file(job_id: str) -> str:
    """Where the deploy writes a job's token: a root-only (0700) folder beside the specs."""
    return str(JOBS / "private" / f"{job_id}.token")


def read_token(path: str) -> str:
    """The run's token (in ``path``, the spec's ``token_file``), read at each use (a later
    run writes a new one); "" when none."""
    try:
        fd = os.open(path, os.O_RDONLY | FILE_FLAGS)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return source.read(4096).decode(errors="replace").strip()


@contextlib.contextmanager
def head_get(
    head: Head, route: str, headers: dict[str, str] | None = None, **query: str
) -> Iterator[http.client.HTTPResponse]:
    """A GET to the head's server with the run's token (http.client: no redirect and no
    proxy is followed, so the token goes to the head's address only). A busy head (503) is
    asked again until the spec's wait_limit; any answer but 200 or 206 is an OSError."""
    deadline = time.monotonic() + float(head.wait_limit or 0)
    while True:
        connection = http.client.HTTPConnection(
            head.source, int(head.port), timeout=REQUEST_TIMEOUT
        )
        try:
            connection.request(
                "GET",
                f"{route}?{urllib.parse.urlencode(query)}",
                headers={
                    "Authorization": f"Bearer {read_token(head.token_file)}",
                    **(headers or {}),
                },
            )
            response = connection.getresponse()
            if response.status != 503 or time.monotonic() > deadline:
                if response.status not in (200, 206):
                    said = response.read(4096).decode(errors="replace").strip()
                    raise OSError(f"the head answered {response.status} to {route}: {said}")
                yield response
                return
        finally:
            connection.close()
        time.sleep(BUSY_WAIT)


def head_json(head: Head, route: str, **query: str) -> dict[str, Any]:
    with head_get(head, route, None, **query) as response:
        data = response.read(JSON_LIMIT + 1)
    if len(data) > JSON_LIMIT:
        raise OSError(f"the head's answer to {route} is over {JSON_LIMIT} bytes")
    found = json.loads(data)
    if not isinstance(found, dict):
        raise ValueError(f"the head's answer to {route} is not an object")
    return found


def wait_for_head(head: Head, status: Status, path: str, **query: str) -> dict:
    """The head's listing once the head has the thing whole (it may still be fetching),
    waiting at most the deploy's fetch_timeout."""
    deadline = time.monotonic() + float(head.wait_limit)
    while True:
        try:
            listing = head_json(head, path, **query)
        except (OSError, ValueError, http.client.HTTPException) as error:
            listing = {"ready": False, "error": str(error)}  # not up yet, or the link is down
        if listing.get("ready"):
            return listing
        if time.monotonic() > deadline:
            raise WaitedOut(
                f"the head ({head.source}) did not have {query} whole within "
                f"{head.wait_limit} s: {listing.get('error') or 'it is still fetching'}"
            )
        status.update(force=True, phase="waiting", error="")
        time.sleep(5)
