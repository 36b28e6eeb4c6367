"""RDMA in the twins' containers: the NCCL stand-in's choice of network (engine/nccl.py), the
docker stand-in's --device/--cap-add/--privileged (recorded, checked against the host's
devices, passed to the container process) and the stand-in engine's NCCL lines across nodes."""

from __future__ import annotations

import importlib.util
import json
import sys
from unittest import mock

import pytest

from tests.unit.test_engine_standin import (
    PLAIN_IMAGE,
    SGLANG,
    STANDINS,
    VLLM_IMAGE,
    Docker,
    cleaned_up,
    free_port,
    wait_serving,
)


def load_nccl():
    spec = importlib.util.spec_from_file_location("spark_twin_nccl", STANDINS / "engine/nccl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # As the engine loads it (nothing written beside the stand-ins); the worker's own setting
    # comes back after.
    with mock.patch.object(sys, "dont_write_bytecode", True):
        spec.loader.exec_module(module)
    return module


nccl = load_nccl()
RDMA = {
    "SPARK_TWIN_DEVICES": "/dev/infiniband",
    "SPARK_TWIN_ULIMITS": "memlock=-1:-1",
    "SPARK_TWIN_CAPS": "",
    "SPARK_TWIN_PRIVILEGED": "0",
    "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
    "NCCL_SOCKET_IFNAME": "lo",
}
INFO = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


# --- nccl.transport ----------------------------------------------------------------------


def test_rdma_devices_and_unlimited_memlock_give_ib_on_the_named_devices():
    assert nccl.transport(RDMA) == ("IB", "[0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE")


@pytest.mark.parametrize(
    "given",
    [
        {"SPARK_TWIN_DEVICES": "/dev/infiniband/uverbs0:/dev/infiniband/rdma_cm"},
        {"SPARK_TWIN_ULIMITS": "stack=67108864:67108864,memlock=-1:-1"},
        {"SPARK_TWIN_ULIMITS": "", "SPARK_TWIN_CAPS": "IPC_LOCK"},  # pins past the limit
        {"SPARK_TWIN_DEVICES": "", "SPARK_TWIN_ULIMITS": "", "SPARK_TWIN_PRIVILEGED": "1"},
    ],
    ids=["one-uverbs-device", "other-limits-too", "ipc-lock", "privileged"],
)
def test_other_ways_to_rdma(given):
    assert nccl.transport(RDMA | given)[0] == "IB"


@pytest.mark.parametrize(
    "given, reason",
    [
        ({"SPARK_TWIN_DEVICES": ""}, "NET/IB : No device found."),
        ({"SPARK_TWIN_DEVICES": "/dev/nvidia0"}, "NET/IB : No device found."),
        ({"SPARK_TWIN_ULIMITS": ""}, "ibv_reg_mr_iova2 failed with error Cannot allocate memory"),
        ({"SPARK_TWIN_ULIMITS": "memlock=8192:8192"}, "Cannot allocate memory"),
        ({"SPARK_TWIN_ULIMITS": "memlock=-1:8192"}, "Cannot allocate memory"),
    ],
    ids=["no-devices", "other-devices", "no-memlock", "docker-default", "soft-only"],
)
def test_without_devices_or_memlock_nccl_runs_over_sockets_and_says_why(given, reason):
    network, why = nccl.transport(RDMA | given)
    assert network == "Socket" and reason in why


def test_ib_init_lines_only_at_info_with_init_or_net():
    lines = nccl.init_lines(RDMA | INFO, host="spark-1", pid=77)
    assert lines == [
        "spark-1:77:90 [0] NCCL INFO NCCL_IB_HCA set to rocep1s0f0,roceP2p1s0f0",
        "spark-1:77:90 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE"
        "; OOB lo:127.0.0.1<0>",
        "spark-1:77:90 [0] NCCL INFO Using network IB",
    ]
    assert nccl.init_lines(RDMA) == []  # NCCL_DEBUG unset: NCCL prints nothing
    assert nccl.init_lines(RDMA | {"NCCL_DEBUG": "WARN"}) == []
    assert nccl.init_lines(RDMA | {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"}) == []
    assert nccl.init_lines(RDMA | {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "^INIT"})  # NET
    assert nccl.init_lines(RDMA | {"NCCL_DEBUG": "INFO"})  # default subsystems have INIT


def test_socket_init_lines_say_what_nccl_says_without_the_devices():
    lines = nccl.init_lines(RDMA | INFO | {"SPARK_TWIN_DEVICES": ""}, host="spark-2", pid=61)
    assert lines == [
        "spark-2:61:74 [0] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
        "spark-2:61:74 [0] transport/net_ib.cc:148 NCCL WARN NET/IB : Unable to open device "
        "rocep1s0f0",
        "spark-2:61:74 [0] NCCL INFO NET/IB : No device found.",
        "spark-2:61:74 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
        "spark-2:61:74 [0] NCCL INFO Using network Socket",
    ]
    warned = nccl.init_lines(RDMA | {"NCCL_DEBUG": "WARN", "SPARK_TWIN_DEVICES": ""})
    assert [line.split(" NCCL ")[1][:4] for line in warned] == ["WARN", "WARN"]


# --- the docker stand-in -----------------------------------------------------------------


@pytest.fixture
def docker(tmp_path):
    made = Docker(tmp_path)
    devices = tmp_path / "devroot" / "dev" / "infiniband"
    devices.mkdir(parents=True)
    for name in ("uverbs0", "uverbs1", "rdma_cm"):  # a folder stands in for the device nodes
        (devices / name).write_text("")
    made.env["SPARK_TWIN_DEVICE_ROOT"] = str(tmp_path / "devroot")
    yield from cleaned_up(made)


def container_env(docker, *options: str) -> dict[str, str]:
    done = docker("run", "--rm", *options, PLAIN_IMAGE, "sh", "-c", "env")
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_devices_limits_capabilities_and_privileges_are_recorded_and_passed(docker):
    options = (
        "--device=/dev/infiniband",
        "--ulimit=memlock=-1:-1",
        "--ulimit",
        "stack=67108864",
        "--cap-add",
        "IPC_LOCK",
    )
    done = docker("run", "-d", "--name", "rdma", *options, PLAIN_IMAGE, "sleep", "30")
    assert done.returncode == 0, done.stderr
    config = json.loads(docker("inspect", "-f", "{{json .HostConfig}}", "rdma").stdout)
    assert config["Devices"] == [
        {
            "PathOnHost": "/dev/infiniband",
            "PathInContainer": "/dev/infiniband",
            "CgroupPermissions": "rwm",
        }
    ]
    assert config["Ulimits"] == [
        {"Name": "memlock", "Hard": -1, "Soft": -1},
        {"Name": "stack", "Hard": 67108864, "Soft": 67108864},
    ]
    assert (config["CapAdd"], config["Privileged"]) == (["IPC_LOCK"], False)
    env = container_env(docker, *options)
    assert env["SPARK_TWIN_DEVICES"] == "/dev/infiniband"
    assert env["SPARK_TWIN_ULIMITS"] == "memlock=-1:-1,stack=67108864:67108864"
    assert (env["SPARK_TWIN_CAPS"], env["SPARK_TWIN_PRIVILEGED"]) == ("IPC_LOCK", "0")
    assert nccl.transport(env)[0] == "IB"


def test_a_plain_container_has_nothing_and_privileged_is_said(docker):
    plain = container_env(docker)
    assert (plain["SPARK_TWIN_DEVICES"], plain["SPARK_TWIN_ULIMITS"]) == ("", "")
    assert nccl.transport(plain)[0] == "Socket"
    privileged = container_env(docker, "--privileged")
    assert privileged["SPARK_TWIN_PRIVILEGED"] == "1"
    mapped = container_env(docker, "--device", "/dev/infiniband/uverbs0:/dev/ib0:rw")
    assert mapped["SPARK_TWIN_DEVICES"] == "/dev/ib0"


def test_a_device_missing_on_the_host_stops_the_start_as_dockerd_does(docker):
    # The image first: an image not yet in the store shared by the tests is pulled before
    # the start, and the pull's lines come before dockerd's (this test run first once).
    assert docker("pull", "-q", PLAIN_IMAGE).returncode == 0
    done = docker("run", "--name", "nodev", "--device=/dev/infiniband/uverbs9", PLAIN_IMAGE, "true")
    assert done.returncode == 125
    assert done.stderr == (
        "docker: Error response from daemon: error gathering device information while adding "
        'custom device "/dev/infiniband/uverbs9": no such file or directory\n\n'
        "Run 'docker run --help' for more information\n"
    )
    assert docker("inspect", "-f", "{{.State.Status}}", "nodev").stdout == "created\n"


def test_a_relative_device_path_is_refused_by_the_client(docker):
    done = docker("run", "--rm", "--device", "infiniband", PLAIN_IMAGE, "true")
    assert done.returncode == 125
    assert 'invalid argument "infiniband" for "--device" flag: bad format for path' in done.stderr


# --- the stand-in engine across nodes ----------------------------------------------------


def run_rank(docker, *options: str, nodes: int = 2) -> str:
    """A SGLang rank with NCCL logging on, until it serves; its output."""
    port = free_port()
    env = ["--env=NCCL_DEBUG=INFO", "--env=NCCL_SOCKET_IFNAME=lo", "--env=NCCL_IB_HCA=rocep1s0f0"]
    run = docker.start(
        "--name", "rank", "--rm", "--network", "host", *env, *options, *docker.mount(), *SGLANG,
        "--port", str(port), "--nnodes", str(nodes), "--node-rank", "0",
        "--dist-init-addr", "127.0.0.1:20000", "--tp-size", str(nodes),
    )  # fmt: skip
    wait_serving(port)
    assert docker("stop", "rank").returncode == 0
    output, _ = run.communicate(timeout=10)
    return output


def test_a_rank_with_rdma_logs_net_ib_before_it_loads(docker):
    output = run_rank(docker, "--device=/dev/infiniband", "--ulimit=memlock=-1:-1")
    assert "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE; OOB lo:127.0.0.1<0>" in output
    assert "NCCL INFO Using network IB" in output and "NET/Socket" not in output
    assert output.index("Using network IB") < output.index("Load weight begin")


def test_a_rank_without_the_devices_falls_back_to_sockets(docker):
    output = run_rank(docker, "--ulimit=memlock=-1:-1")
    assert "NCCL WARN Call to ibv_open_device failed" in output
    assert "NCCL INFO NET/IB : No device found." in output
    assert "NCCL INFO Using network Socket" in output and "NET/IB : Using" not in output


def test_one_spark_logs_no_nccl_network(docker):
    assert "NCCL INFO" not in run_rank(docker, "--device=/dev/infiniband", nodes=1)


def test_vllm_alone_logs_no_nccl_network(docker):
    port = free_port()
    done = docker("run", "-d", "--name", "alone", "--network", "host", "--env=NCCL_DEBUG=INFO",
                  *docker.mount(), VLLM_IMAGE, "/model", "--port", str(port))  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_serving(port)
    assert "NCCL INFO" not in docker("logs", "alone").stdout
