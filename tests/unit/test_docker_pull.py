"""
spark-fetch's image pull through the Docker Engine API (files/docker_pull.py): the JSON
messages of ``POST /images/create`` counted as bytes (in the shape dockerd 28 sends them,
errors included), the request on a unix socket (a fake daemon in the test), the registry
login it carries, and spark-fetch's use of it (files/fetch_docker.py: pull).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import socket
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sparkdeploy.render import FILES
from tests.unit.test_fetch_job import load_job, part


def load_pull() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docker_pull", FILES / "docker_pull.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pull = load_pull()
IMAGE = "vllm/vllm-openai:v0.33.0"


def downloading(layer: str, current: int, total: int) -> dict[str, Any]:
    bar = "[=>     ]  1MB/45.6MB"  # the bar the CLI would draw: not read
    return {"status": "Downloading", "progressDetail": {"current": current, "total": total},
            "progress": bar, "id": layer}  # fmt: skip


# dockerd's messages for a pull of two layers (its JSON stream, one object per line).
STREAM: list[dict[str, Any]] = [
    {"status": "Pulling from vllm/vllm-openai", "id": "v0.33.0"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "0123456789ab"},
    {"status": "Already exists", "progressDetail": {}, "id": "fedcba987654"},
    downloading("0123456789ab", 1_049_000, 45_600_000),
    downloading("0123456789ab", 22_800_000, 45_600_000),
    {"status": "Verifying Checksum", "progressDetail": {}, "id": "0123456789ab"},
    {"status": "Download complete", "progressDetail": {}, "id": "0123456789ab"},
    {
        "status": "Extracting",
        "progressDetail": {"current": 32768, "total": 45_600_000},
        "progress": "[>   ]",
        "id": "0123456789ab",
    },  # fmt: skip
    {"status": "Pull complete", "progressDetail": {}, "id": "0123456789ab"},
    {"status": "Digest: sha256:" + "a" * 64},
    {"status": "Status: Downloaded newer image for vllm/vllm-openai:v0.33.0"},
]
DENIED = {
    "errorDetail": {"message": "pull access denied for vllm/nope, repository does not exist"},
    "error": "pull access denied for vllm/nope, repository does not exist",
}


# --- the messages as bytes ------------------------------------------------------------------


def test_the_bytes_come_from_progress_detail_and_bars_are_not_lines():
    progress = pull.LayerBytes({})
    shown = [progress.feed(message) for message in STREAM[:4]]
    assert shown == [
        "v0.33.0: Pulling from vllm/vllm-openai",
        "0123456789ab: Pulling fs layer",
        "fedcba987654: Already exists",
        None,  # a Downloading message: counted, not printed
    ]
    # a layer already there has no size in the messages: the manifest gives it
    assert (progress.done, progress.total) == (1_049_000, 45_600_000)
    for message in STREAM[4:]:
        progress.feed(message)
    assert (progress.done, progress.total) == (45_600_000, 45_600_000)
    assert progress.lines[-1] == "Status: Downloaded newer image for vllm/vllm-openai:v0.33.0"
    assert not any("Extracting" in line or "Downloading" in line for line in progress.lines)


def test_the_manifests_sizes_are_the_total_and_a_layer_already_there_counts_whole():
    progress = pull.LayerBytes({"0123456789ab": 45_600_123, "fedcba987654": 2_500_001})
    assert (progress.done, progress.total) == (0, 48_100_124)
    progress.feed(STREAM[2])
    progress.feed(downloading("0123456789ab", 1_000_000, 45_600_000))
    assert progress.done == 2_500_001 + 1_000_000
    assert progress.total == 48_100_124  # the message's total does not replace the manifest's


@pytest.mark.parametrize("message", [DENIED, {"error": DENIED["error"]}])
def test_an_error_message_is_the_pull_failing_with_the_daemons_words(message):
    progress = pull.LayerBytes({})
    progress.feed(STREAM[0])
    with pytest.raises(pull.PullError, match="^pull access denied for vllm/nope"):
        progress.feed(message)


# --- the registry login ------------------------------------------------------------------------


def login_of(header: str) -> dict[str, str]:
    return json.loads(base64.urlsafe_b64decode(header))


def basic(user: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_the_login_sent_is_the_one_of_the_images_registry():
    auths = {
        "https://index.docker.io/v1/": basic("hub-user", "hub-pass"),
        "nvcr.io": basic("$oauthtoken", "nvapi-key:with-colon"),
        "https://ghcr.io": {"identitytoken": "tok"},
    }
    nvcr = login_of(pull.registry_auth("nvcr.io/nvidia/vllm:26.01-py3", auths))
    assert nvcr == {"username": "$oauthtoken", "password": "nvapi-key:with-colon",
                    "serveraddress": "nvcr.io"}  # fmt: skip
    assert login_of(pull.registry_auth(IMAGE, auths))["username"] == "hub-user"
    assert login_of(pull.registry_auth("ghcr.io/o/i:1", auths)) == {
        "identitytoken": "tok",
        "serveraddress": "https://ghcr.io",
    }
    assert pull.registry_auth("quay.io/o/i:1", auths) == ""  # no login: anonymous
    assert pull.registry_of("localhost:5000/i:1") == "localhost:5000"


# --- the request, on a fake daemon's unix socket ------------------------------------------


class FakeDaemon:
    """One answer on a unix socket: ``status`` and ``body``, chunked in the given pieces (a
    JSON line cut between two chunks, as a real stream can be); the request it read."""

    def __init__(self, path: Path, status: int, pieces: list[bytes]):
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(1)
        self.status, self.pieces, self.request = status, pieces, b""
        self.thread = threading.Thread(target=self.answer, daemon=True)
        self.thread.start()

    def answer(self) -> None:
        client, _ = self.server.accept()
        with client, contextlib.suppress(OSError):  # the reader may close first
            while b"\r\n\r\n" not in self.request:
                self.request += client.recv(65536)
            head = f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\n"
            client.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            for piece in self.pieces:
                client.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            client.sendall(b"0\r\n\r\n")
        self.server.close()


def stream_pieces(messages: list[dict[str, Any]]) -> list[bytes]:
    text = b"".join(json.dumps(m).encode() + b"\r\n" for m in messages)
    return [text[i : i + 37] for i in range(0, len(text), 37)]


def test_the_pull_is_asked_of_the_daemon_on_its_socket_with_the_login(tmp_path):
    daemon = FakeDaemon(tmp_path / "docker.sock", 200, stream_pieces(STREAM))
    got = list(pull.messages(IMAGE, auth="TOKEN", path=str(tmp_path / "docker.sock")))
    assert got == STREAM
    request = daemon.request.decode()
    assert request.startswith(
        "POST /v1.41/images/create?fromImage=vllm%2Fvllm-openai%3Av0.33.0 HTTP/1.1\r\n"
    )
    assert "\r\nX-Registry-Auth: TOKEN\r\n" in request


def test_a_refused_request_says_what_the_daemon_said_and_no_socket_is_unreachable(tmp_path):
    FakeDaemon(tmp_path / "docker.sock", 404, [b'{"message":"manifest unknown"}'])
    with pytest.raises(pull.PullError, match=r"^manifest unknown \(HTTP 404\)$"):
        list(pull.messages(IMAGE, path=str(tmp_path / "docker.sock")))
    with pytest.raises(pull.Unreachable, match="the Docker daemon's socket .*nothing.sock"):
        list(pull.messages(IMAGE, path=str(tmp_path / "nothing.sock")))


# --- spark-fetch's pull -----------------------------------------------------------------------


@pytest.fixture
def job(tmp_path: Path, monkeypatch) -> ModuleType:
    """spark-fetch's part that pulls (files/fetch_docker.py), as spark-fetch imported it."""
    load_job(tmp_path)
    module = part("fetch_docker")
    monkeypatch.setattr(module, "layer_sizes", lambda image: {})
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    return module


def daemon_at(job: ModuleType, tmp_path: Path, monkeypatch, messages: list[dict]) -> None:
    FakeDaemon(tmp_path / "docker.sock", 200, stream_pieces(messages))
    monkeypatch.setattr(job.docker_pull, "SOCKET", str(tmp_path / "docker.sock"))


def test_spark_fetch_pulls_through_the_engine_and_writes_the_bytes_to_its_status(
    job, tmp_path, monkeypatch, capsys
):
    daemon_at(job, tmp_path, monkeypatch, STREAM)
    status = job.Status("image-x", "image x")
    job.pull(IMAGE, status)
    written = json.loads(status.path.read_text())
    assert (written["phase"], written["done"], written["total"]) == ("pull", 45_600_000, 45_600_000)
    printed = capsys.readouterr().out
    assert "0123456789ab: Pull complete" in printed and "Downloading" not in printed


@pytest.mark.parametrize(
    ("said", "exit_code"),
    [
        ("pull access denied for vllm/nope, repository does not exist", 1),
        ('Get "https://registry-1.docker.io/v2/": net/http: TLS handshake timeout', 75),
        ("read tcp 10.0.0.2:51234->104.18.1.1:443: read: connection reset by peer", 75),
    ],
)
def test_an_error_in_the_stream_fails_the_job_and_a_network_one_is_tried_again(
    job, tmp_path, monkeypatch, said, exit_code
):
    daemon_at(job, tmp_path, monkeypatch, [*STREAM[:4], {"errorDetail": {"message": said},
                                                         "error": said}])  # fmt: skip
    with pytest.raises(job.JobError) as caught:
        job.pull(IMAGE, job.Status("image-x", "image x"))
    assert str(caught.value) == f"docker pull {IMAGE} failed: {said}"
    assert part("fetch_errors").exit_status(caught.value) == exit_code


def test_without_the_daemons_socket_spark_fetch_pulls_with_the_cli_on_a_terminal(
    job, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(job.docker_pull, "SOCKET", str(tmp_path / "absent.sock"))
    cli: list[str] = []
    monkeypatch.setattr(job, "pull_on_terminal", lambda image, status, sizes: cli.append(image))
    job.pull(IMAGE, job.Status("image-x", "image x"))
    assert cli == [IMAGE]
    assert "absent.sock" in capsys.readouterr().out


def test_the_login_comes_from_the_private_docker_config(job, tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"nvcr.io": basic("u", "p")}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert job.docker_logins() == {"nvcr.io": basic("u", "p")}
    monkeypatch.delenv("DOCKER_CONFIG")
    assert job.docker_logins() == {}


def test_the_module_is_shipped_where_spark_fetch_looks_and_managed_as_the_deploys():
    from sparkdeploy.config.paths import FETCH_LIB, FETCH_MODULES, host_files
    from tests.unit.operations import spark

    assert "docker_pull" in FETCH_MODULES
    assert load_job(Path("/nonexistent")).LIB == FETCH_LIB
    managed = {f.path: f.mode for f in host_files(spark().data.spark)}
    assert managed[f"{FETCH_LIB}/docker_pull.py"] == "644"
