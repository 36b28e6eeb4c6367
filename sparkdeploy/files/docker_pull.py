"""
spark-fetch's image pull through the Docker Engine API: ``POST /images/create`` on the
daemon's unix socket, whose answer is a stream of JSON messages, one per line, each with
the layer's 12-digit ``id``, a ``status`` and, while bytes move, ``progressDetail``
``{current, total}``; a message with ``errorDetail`` (or ``error``) is the pull failing.
The bytes are read from those numbers, not from the bars the docker CLI draws on a
terminal (files/fetch_docker.py: PullProgress, what spark-fetch falls back to when the
socket cannot be reached). The docker CLI stays for everything else.

Shipped to the Spark beside spark-fetch (config/paths.py: FETCH_MODULES, in the root-owned
0755 folder spark-fetch puts on its sys.path) and found beside it in files/ by the tests.
May import: the standard library only (the Spark's own python3). Must not know: the
deploy, pyinfra, or spark-fetch's other parts (fetch_docker.py imports it).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from typing import Any

SOCKET = "/var/run/docker.sock"
# The Engine API version asked for: 1.41 is Docker 20.10, older than any Spark's; the
# daemon answers a lower version than its own in that version's terms.
API = "/v1.41/images/create"
# Seconds without a message before the pull is given up as silent (a layer of several GB
# still reports its bytes every fraction of a second).
SILENCE = 600
DOCKER_HUB = "https://index.docker.io/v1/"  # the key `docker login` gives Docker Hub
# The statuses after which a layer's bytes are all there.
FINISHED = ("Verifying Checksum", "Download complete", "Pull complete", "Already exists")
QUIET = ("Downloading", "Extracting")  # their lines are the bars: counted, not printed


class PullError(Exception):
    """The daemon said the pull failed (its ``errorDetail``), or refused the request."""


class Unreachable(Exception):
    """The daemon's socket could not be reached: no pull was asked for."""


class UnixConnection(http.client.HTTPConnection):
    """HTTP on a unix socket (the daemon's), with http.client's chunked decoding."""

    def __init__(self, path: str, timeout: float = SILENCE):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def registry_of(image: str) -> str:
    """The registry ``image`` comes from, as ``docker login`` keys it (Docker Hub's URL for
    a name whose first part is not a host)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def login_host(key: str) -> str:
    """The registry an ``auths`` key of a docker config names (``https://nvcr.io/v2/``,
    ``nvcr.io``): its host, or Docker Hub's key."""
    host = urllib.parse.urlsplit(key if "//" in key else f"//{key}").netloc
    return DOCKER_HUB if host in ("index.docker.io", "docker.io", "registry-1.docker.io") else host


def registry_auth(image: str, auths: dict[str, dict[str, str]]) -> str:
    """The ``X-Registry-Auth`` header for ``image`` from the logins of a docker
    config's ``auths`` (base64 ``user:password``, or an identity token); "" when none
    matches (an anonymous pull)."""
    want = registry_of(image)
    for key, entry in auths.items():
        if login_host(key) != want:
            continue
        if entry.get("identitytoken"):
            login = {"identitytoken": entry["identitytoken"], "serveraddress": key}
        else:
            user, _, password = base64.b64decode(entry.get("auth") or "").decode().partition(":")
            login = {"username": user, "password": password, "serveraddress": key}
        return base64.urlsafe_b64encode(json.dumps(login).encode()).decode()
    return ""


class LayerCount:
    """The bytes of a pull: per layer (the 12 digits docker shows), its size (the
    manifest's when known), the bytes downloaded so far, and the layers it has whole. Fed
    by the Engine API's messages (LayerBytes) or by the CLI's bars (fetch_job.PullProgress)."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = dict(sizes)
        self.current: dict[str, int] = {}
        self.finished: set[str] = set()
        self.lines: list[str] = []  # the last status lines, for a failure's message

    @property
    def done(self) -> int:
        return sum(
            self.sizes.get(layer, 0) if layer in self.finished else self.current.get(layer, 0)
            for layer in set(self.sizes) | set(self.current)
        )

    @property
    def total(self) -> int | None:
        return sum(self.sizes.values()) or None


class LayerBytes(LayerCount):
    """The bytes of a pull as the daemon's JSON messages count them."""

    def feed(self, message: dict[str, Any]) -> str | None:
        """Count one message; the line it says (None for a bar's bytes); an error raises."""
        if message.get("errorDetail") or message.get("error"):
            detail = message.get("errorDetail") or {}
            raise PullError(str(detail.get("message") or message.get("error")))
        layer, status = str(message.get("id") or ""), str(message.get("status") or "")
        detail = message.get("progressDetail") or {}
        if status == "Downloading" and layer:
            self.current[layer] = int(detail.get("current") or 0)
            if detail.get("total"):
                self.sizes.setdefault(layer, int(detail["total"]))
        elif status in FINISHED and layer:
            self.finished.add(layer)
            self.sizes.setdefault(layer, self.current.get(layer, 0))
        if status in QUIET or not status:
            return None
        line = f"{layer}: {status}" if layer else status
        self.lines = [*self.lines, line][-20:]
        return line


def messages(image: str, auth: str = "", path: str = "") -> Iterator[dict[str, Any]]:
    """Ask the daemon on ``path`` to pull ``image``; its messages as they come. Unreachable
    when nothing answers on the socket (before anything was asked), PullError when the
    daemon refuses the request; a connection lost midway raises http.client's or
    socket's error (a network error: spark-fetch's job is run again)."""
    path = path or SOCKET
    connection = UnixConnection(path)
    try:
        connection.connect()
    except OSError as error:
        raise Unreachable(f"the Docker daemon's socket {path}: {error}") from error
    headers = {"X-Registry-Auth": auth} if auth else {}
    query = urllib.parse.urlencode({"fromImage": image})
    try:
        connection.request("POST", f"{API}?{query}", headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise PullError(refusal(response.status, response.read()))
        while line := response.readline():
            if line.strip():
                yield json.loads(line)
    finally:
        connection.close()


def refusal(status: int, body: bytes) -> str:
    """The daemon's answer to a request it refused: its ``message``, and the status."""
    try:
        said = json.loads(body).get("message")
    except (ValueError, AttributeError):
        said = None
    return f"{said or body.decode(errors='replace').strip() or 'no message'} (HTTP {status})"
