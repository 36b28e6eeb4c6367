"""spark-fetch@ runs a job again, backing off, after a transient network error only (issue
25): the job's exit status for each kind of error, its status while systemd waits and after
it gives up, the line the laptop shows, and the unit file's restart settings."""

from __future__ import annotations

import configparser
import errno
import http.client
import json
import os
import socket
from pathlib import Path
from types import ModuleType

import pytest

from sparkdeploy.deploys.fetch.progress import job_line
from sparkdeploy.render import FILES
from tests.unit.test_fetch_job import fake_tools, load_job, part


@pytest.fixture
def job(tmp_path: Path) -> ModuleType:
    return load_job(tmp_path)


def transient_errors(job: ModuleType) -> list[BaseException]:
    return [
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        TimeoutError("timed out"),
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        http.client.IncompleteRead(b"abc", 10),
        socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
        OSError("the head answered 500 to /file: boom"),
        part("fetch_errors").TransientError("w.bin: the head sent 3 of its 5 bytes"),
        job.JobError(
            "hf download org/m failed (exit 1): huggingface_hub.errors.HfHubHTTPError: "
            "503 Server Error: Service Unavailable for url: https://huggingface.co/..."
        ),
        job.JobError("hf download org/m failed (exit 1): 429 Client Error: Too Many Requests"),
        job.JobError(
            "docker pull vllm/vllm-openai:v0.33.0 failed: Get https://registry-1.docker.io/v2/"
            "blobs/sha256:0123: net/http: TLS handshake timeout"
        ),
        job.JobError("docker pull x failed: read tcp 10.0.0.2:443: connection reset by peer"),
        job.JobError("docker pull x failed: toomanyrequests: You have reached your pull rate"),
    ]


def permanent_errors(job: ModuleType) -> list[BaseException]:
    return [
        job.JobError("hf download org/m failed (exit 1): 401 Client Error: Unauthorized"),
        job.JobError("hf download org/m failed (exit 1): 403 Forbidden: gated repo"),
        job.JobError("hf download org/m failed (exit 1): 404 Client Error. Repository Not Found"),
        job.JobError("docker pull x:y failed: manifest unknown"),
        job.JobError("docker pull x failed: pull access denied for x, repository does not exist"),
        job.JobError("not enough room: 66 GB needed, 10 GB free on /"),
        job.JobError("docker pull x failed: write /var/lib/docker/x: no space left on device"),
        OSError(errno.ENOSPC, "No space left on device"),
        job.JobError("w.bin: the head sent bytes whose sha256 is 00, not 11 as the deploy read"),
        job.JobError("docker pull x failed: filesystem layer verification failed for digest"),
        OSError("the head answered 404 to /file: no such file"),
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        part("fetch_errors").WaitedOut("the head (a) did not have x whole within 600 s: timed out"),
        ValueError("a bug"),
        job.JobError("something the job does not know"),
    ]


def test_network_errors_exit_75_and_the_rest_1(job: ModuleType):
    assert (job.TRANSIENT_EXIT, job.PERMANENT_EXIT) == (75, 1)
    for error in transient_errors(job):
        assert job.exit_status(error) == 75, error
    for error in permanent_errors(job):
        assert job.exit_status(error) == 1, error


def run_failing(job: ModuleType, jobs: Path, error: BaseException) -> tuple[int, dict]:
    """`spark-fetch run` of a model job whose work raises ``error``."""
    spec = type("Spec", (), {"kind": "model", "label": "model m"})()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(job, "read_spec", lambda job_id: spec)

        def fail(spec, status):
            raise error

        patch.setitem(job.KINDS, "model", fail)
        code = job.run("m-1")
    return code, json.loads((jobs / "m-1.status.json").read_text())


def test_a_transient_failure_says_retrying_and_exits_75(tmp_path: Path, capsys):
    job = load_job(tmp_path)
    code, status = run_failing(job, tmp_path, ConnectionResetError("Connection reset by peer"))
    assert code == 75
    assert status["state"] == "retrying"
    assert status["error"] == "ConnectionResetError: Connection reset by peer"
    assert "to be run again" in capsys.readouterr().out


def test_a_permanent_failure_says_failed_and_exits_1(tmp_path: Path):
    job = load_job(tmp_path)
    code, status = run_failing(job, tmp_path, job.JobError("401 Client Error: Unauthorized"))
    assert (code, status["state"]) == (1, "failed")
    with pytest.raises(ValueError):  # a bug: its traceback in the journal, exit 1
        run_failing(job, tmp_path, ValueError("a bug"))
    assert json.loads((tmp_path / "m-1.status.json").read_text())["state"] == "failed"


@pytest.mark.parametrize(
    "active, state",
    [
        ("activating", "retrying"),  # systemd waits to run it again (auto-restart)
        ("active", "retrying"),  # run again, not written its status yet
        ("failed", "failed"),  # systemd gave up (StartLimitBurst): the deploy reports it
    ],
)
def test_the_status_while_systemd_backs_off_and_when_it_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active: str, state: str
):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    job = load_job(jobs)
    fake_tools(tmp_path / "bin", active, "Connection reset by peer")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    written = {"id": "m-1", "state": "retrying", "error": "ConnectionResetError: reset"}
    (jobs / "m-1.status.json").write_text(json.dumps(written))
    found = job.job_status("m-1")
    assert found["state"] == state
    assert found["error"] == "ConnectionResetError: reset"


def test_the_laptop_shows_a_job_being_retried():
    line = job_line({"label": "model m", "state": "retrying", "error": "reset"}, False)
    assert line == "model m: a network error, to be tried again (reset)"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((FILES / "spark-fetch@.service").read_text())
    return parser


def test_the_unit_restarts_on_the_transient_status_only_backing_off_and_gives_up(job):
    service, section = unit()["Service"], unit()["Unit"]
    # only exit 75 restarts: not 1, not a signal (a SIGKILL'd job stays failed: test_fetch)
    assert service["Restart"] == "no"
    assert service["RestartForceExitStatus"] == str(job.TRANSIENT_EXIT)
    assert "RestartPreventExitStatus" not in service
    assert service["RestartSec"] == "10s"
    assert (service["RestartSteps"], service["RestartMaxDelaySec"]) == ("5", "5min")
    assert (section["StartLimitIntervalSec"], section["StartLimitBurst"]) == ("2h", "8")
    assert "StartLimitIntervalSec" not in service  # [Unit] keys since systemd 230
