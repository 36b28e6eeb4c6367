"""Ray in the engine images as the twins have it: `docker run --entrypoint ray`, `docker exec`
into the head's container, the Ray stand-in forming a cluster over TCP, the stand-in vLLM
waiting for a GPU per tensor-parallel worker, and spark-ray-wait (files/) reading it all."""

from __future__ import annotations

import subprocess
import time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

import pytest

from tests.unit.test_engine_standin import (  # the same docker stand-in harness
    RAY_IMAGE,
    Docker,
    cleaned_up,
    free_port,
    refused,
    wait_serving,
)

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "twins" / "standins" / "engine"
RAY_WAIT_LOADER = SourceFileLoader(
    "spark_ray_wait", str(ROOT / "sparkdeploy" / "files" / "spark-ray-wait")
)
RAY_WAIT_SPEC = spec_from_loader(RAY_WAIT_LOADER.name, RAY_WAIT_LOADER)
if RAY_WAIT_SPEC is None:
    raise ImportError(f"cannot load {RAY_WAIT_LOADER.path}")
RAY_WAIT = module_from_spec(RAY_WAIT_SPEC)
RAY_WAIT_LOADER.exec_module(RAY_WAIT)


class RayDocker(Docker):
    """The docker stand-in with one GPU per node and the Ray state of the head in the test's
    own /tmp/ray."""

    def __init__(self, tmp: Path):
        super().__init__(tmp)
        self.env |= {
            "SPARK_TWIN_RAY_NODE_GPUS": "1",
            "SPARK_TWIN_RAY_STATE": str(tmp / "ray"),
        }

    def ray(self, name: str, *args: str) -> subprocess.Popen:
        return self.start(
            "--name",
            name,
            "--network",
            "host",
            "--entrypoint",
            "ray",
            RAY_IMAGE,
            "start",
            *args,
            "--disable-usage-stats",
            "--block",
        )

    def exec(self, *args: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [str(self.docker_path), "exec", *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.foreground.append(process)
        return process

    @property
    def docker_path(self) -> Path:
        return STANDINS / "docker"


@pytest.fixture
def docker(tmp_path):
    yield from cleaned_up(RayDocker(tmp_path))


def until(check, timeout: float = 15):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def gpus(docker: RayDocker) -> str:
    status = docker("exec", "ray-head", "ray", "status")
    return status.stdout if status.returncode == 0 else status.stderr


def test_a_ray_pair_forms_and_vllm_serves_on_it_through_docker_exec(docker, tmp_path, monkeypatch):
    gcs = free_port()
    docker.ray("ray-head", "--head", "--port", str(gcs), "--node-ip-address", "127.0.0.1")
    until(lambda: " 0.0/1.0 GPU" in gpus(docker))
    assert docker("inspect", "-f", "{{json .Config.Entrypoint}}", "ray-head").stdout == '["ray"]\n'

    port = free_port()
    pid_file = tmp_path / "serve.pid"
    server = docker.exec(
        "ray-head",
        "sh",
        "-c",
        f'echo $$ > {pid_file} && exec "$@"',
        "sh",
        "vllm",
        "serve",
        "--model",
        str(docker.model),
        "--port",
        str(port),
        "--tensor-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
    )
    time.sleep(2 * 0.5 + 1)
    assert refused(port)  # one GPU of two: vLLM waits for its placement group

    monkeypatch.setattr(RAY_WAIT, "DOCKER", str(docker.docker_path))
    for name, value in docker.env.items():
        monkeypatch.setenv(name, value)
    assert RAY_WAIT.gpus_joined("ray-head", 2) == (False, "the Ray cluster has 1 of 2 GPUs")

    worker = docker.ray(
        "ray-worker", "--address", f"127.0.0.1:{gcs}", "--node-ip-address", "127.0.0.1"
    )
    until(lambda: " 0.0/2.0 GPU" in gpus(docker))
    assert RAY_WAIT.gpus_joined("ray-head", 2) == (True, "the Ray cluster has 2 of 2 GPUs")
    assert wait_serving(port)["data"][0]["id"] == str(docker.model)

    # docker exec passes no signal on: the server is stopped by the pid it recorded
    subprocess.run(["kill", "-TERM", pid_file.read_text().strip()], check=True)
    output, _ = server.communicate(timeout=15)
    assert server.returncode == 0, output
    assert "Waiting for creating a placement group of specs" in output
    assert refused(port)

    # a worker whose head goes away exits 1, as `ray start --block` does when its raylet dies
    assert docker("stop", "ray-head").returncode == 0
    output, _ = worker.communicate(timeout=15)
    assert worker.returncode == 1 and "Some Ray subprocesses exited unexpectedly" in output


def test_what_docker_exec_started_ends_with_its_container(docker, tmp_path):
    docker.start("--name", "box", "--network", "host", "--entrypoint", "sleep", RAY_IMAGE, "300")
    until(lambda: "box Up" in " ".join(docker.names()))
    client = docker.exec("box", "sh", "-c", f"echo $$ > {tmp_path / 'pid'}; exec sleep 300")
    until(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text().strip())
    inner = int((tmp_path / "pid").read_text())
    client.kill()  # the exec client goes; what it started stays in the container
    client.wait()
    time.sleep(0.2)
    assert Path(f"/proc/{inner}").exists()
    assert docker("stop", "-t", "1", "box").returncode == 0
    until(
        lambda: (
            not Path(f"/proc/{inner}").exists()
            or Path(f"/proc/{inner}/stat").read_text().split(")")[1].split()[0] == "Z"
        )
    )


def test_docker_exec_errors_are_dockers(docker):
    missing = docker("exec", "nothing-here", "true")
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        "Error response from daemon: No such container: nothing-here",
    )
    docker.start("--name", "box", "--network", "host", "--entrypoint", "sleep", RAY_IMAGE, "300")
    until(lambda: "box Up" in " ".join(docker.names()))
    unknown = docker("exec", "box", "no-such-program")
    assert (
        unknown.returncode == 127
        and 'exec: "no-such-program": executable file not found' in unknown.stderr
    )
    docker("stop", "-t", "1", "box")
    stopped = docker("exec", "box", "true")
    assert stopped.returncode == 1 and "is not running" in stopped.stderr


def test_vllm_without_a_ray_cluster_fails_as_ray_init_does(docker):
    docker.start("--name", "box", "--network", "host", "--entrypoint", "sleep", RAY_IMAGE, "300")
    until(lambda: "box Up" in " ".join(docker.names()))
    served = docker(
        "exec",
        "box",
        "vllm",
        "serve",
        "--model",
        str(docker.model),
        "--tensor-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
    )
    assert served.returncode == 1
    assert "Could not find any running Ray instance" in served.stderr


def test_ray_wait_waits_for_a_port_and_gives_up_in_time(capsys):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        assert RAY_WAIT.main(["--address", f"127.0.0.1:{port}", "--timeout", "5"]) == 0
    assert "the Ray head answers on" in capsys.readouterr().out
    started = time.monotonic()
    assert RAY_WAIT.main(["--address", f"127.0.0.1:{port}", "--timeout", "1"]) == 1
    assert time.monotonic() - started < 6
    assert "gave up after" in capsys.readouterr().err


def test_ray_wait_reads_rays_own_status_format():
    status = """======== Autoscaler status: 2026-11-20 10:21:32.613207 ========
Node status
---------------------------------------------------------------
Active:
 1 node_61c8c1d2a5d8f0b3f35d2b37b8ea32c6e5cd3bb8f1a0d8f3b1f7a4d1
 1 node_b2e5a0c4d7f9e1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d3e5f7a9b1c3
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/40.0 CPU
 1.0/2.0 GPU
 0B/180.19GiB memory
 0B/79.22GiB object_store_memory

Demands:
 (no resource demands)
"""
    assert RAY_WAIT.GPU_LINE.search(status).group(1) == "2.0"
