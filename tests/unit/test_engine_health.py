"""spark-engine-health's own wait against a real HTTP server on this machine: an engine that
lists its model and answers a one-token chat is ready; one that refuses the request, lists
but cannot answer, or never answers fails with the reason; command lines that cannot work are
refused. A bare engine (no --unit): no systemd is asked. The NCCL judgement is in
test_fabric.py, the key's way to the engine's container in the API-key scenario."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkdeploy.config.paths import HEALTH_FAILED
from tests.unit.test_fabric import health

CHAT = {"choices": [{"message": {"role": "assistant", "content": "OK"}}]}


def engine(models: tuple[int, dict], chat: tuple[int, dict]) -> type[BaseHTTPRequestHandler]:
    """A handler answering /v1/models and /v1/chat/completions with (status, body)."""

    class Engine(BaseHTTPRequestHandler):
        def answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 -- http.server's name
            self.answer(*models)

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.answer(*chat)

        def log_message(self, *args: object) -> None:
            pass

    return Engine


@pytest.fixture
def serve() -> Iterator:
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type[BaseHTTPRequestHandler]) -> int:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def check(port: int, *extra: str) -> int:
    return health.main(["--port", str(port), "--interval", "0.05", "--timeout", "0.5", *extra])


def test_an_engine_that_lists_and_answers_is_ready(serve, capsys):
    port = serve(engine((200, {"data": [{"id": "org/model"}]}), (200, CHAT)))
    assert check(port) == 0
    assert capsys.readouterr().out.startswith(
        "spark-engine-health: ready after 0s, serving org/model"
    )


def test_a_refused_request_fails_at_once_without_waiting(serve, capsys):
    port = serve(engine((401, {"error": "Unauthorized"}), (401, {})))
    assert health.main(["--port", str(port), "--timeout", "60"]) == 1  # not after 60 s
    said = capsys.readouterr().err
    assert "/v1/models refused the request without a key (HTTP 401)" in said


def test_a_model_listed_but_not_answering_fails_naming_it(serve, capsys):
    port = serve(engine((200, {"data": [{"id": "org/model"}]}), (500, {"error": "CUDA OOM"})))
    assert check(port) == 1
    said = capsys.readouterr().err
    assert "org/model listed, but a one-token chat completion failed: HTTP Error 500" in said


def test_an_engine_that_never_answers_fails_after_the_timeout(capsys):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert check(port) == 1
    captured = capsys.readouterr()
    waiting = f"waiting for http://127.0.0.1:{port}/v1/models (0s of 0s, engine active/running)"
    assert captured.out.count(waiting) == 1  # once: progress every 30 s
    assert f"no answer at http://127.0.0.1:{port}/v1/models after " in captured.err
    assert "Connection refused" in captured.err


@pytest.mark.parametrize(
    ("words", "refusal"),
    [
        (["--port", "1", "--key-file", "/k"], "--key-file needs --container"),
        (["--no-api", "--unit", "u"], "--no-api checks NCCL's network"),
        ([], "the following arguments are required: --port"),
    ],
)
def test_command_lines_that_cannot_work_are_refused(words, refusal, capsys):
    with pytest.raises(SystemExit) as exited:
        health.main(words)
    assert exited.value.code == 2
    assert refusal in capsys.readouterr().err


@pytest.fixture
def records(tmp_path, monkeypatch):
    """spark-engine-health's record folder in ``tmp_path``, and a unit without systemd: active,
    no journal."""
    folder = tmp_path / "health-failed"
    monkeypatch.setattr(health, "FAILED_DIR", str(folder))
    monkeypatch.setattr(health, "unit_state", lambda unit: ("active", "running", 0))
    monkeypatch.setattr(health, "journal", lambda unit, lines=40: "")
    return folder


def test_a_units_failed_check_is_recorded_and_a_passing_one_clears_it(serve, records):
    unit = "spark-engine-sglang.service"
    failing = serve(engine((200, {"data": [{"id": "m"}]}), (500, {})))
    assert check(failing, "--unit", unit) == 1
    record = records / unit
    assert record.read_text().endswith(" exit 1\n")
    assert oct(record.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in records.iterdir()] == [unit]  # no partial file left
    assert check(failing, "--unit", unit) == 1  # failing again keeps it
    serving = serve(engine((200, {"data": [{"id": "m"}]}), (200, CHAT)))
    assert check(serving, "--unit", unit) == 0
    assert not record.exists()
    assert check(serving, "--unit", unit) == 0  # nothing to clear: still fine


def test_a_check_that_ends_in_an_error_is_recorded_as_failed(records, tmp_path):
    empty = tmp_path / "key.yaml"
    empty.write_text("")
    unit = "spark-engine-vllm.service"
    with pytest.raises(SystemExit, match="no API key"):
        check(1, "--unit", unit, "--key-file", str(empty), "--container", "c")
    assert (records / unit).is_file()


@pytest.mark.parametrize("unit", ["", "../escape.service", ".hidden"])
def test_only_a_plain_unit_name_is_recorded(serve, records, unit):
    failing = serve(engine((401, {}), (401, {})))
    assert check(failing, "--unit", unit) == 1
    assert not records.exists() and not (records.parent / "escape.service").exists()


def test_the_record_folder_is_the_one_the_deploy_reads():
    assert health.FAILED_DIR == HEALTH_FAILED  # the script's default, no variable set
