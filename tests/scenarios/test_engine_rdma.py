"""
RDMA in the containers of an SGLang pair on two twins: every container carries the RDMA
devices and the memlock limit the deploy decided (as the stand-in docker recorded them), the
engine's NCCL logs NET/IB on both ranks and the health check says so; with the RDMA options
taken out of one twin's plan its NCCL falls back to sockets and the health check fails
naming the fallback and its cause.
"""

from __future__ import annotations

import json

from tests.scenarios.test_engine import TOKEN_ENV, pair_spark
from tests.twins import harness

UNIT = "spark-engine-sglang.service"
CONTAINER = "spark-engine-sglang"


def host_config(twin: harness.Twin) -> dict:
    return json.loads(twin.exec(f"docker inspect -f '{{{{json .HostConfig}}}}' {CONTAINER}").stdout)


def journal(twin: harness.Twin) -> str:
    return twin.exec(f"journalctl -u {UNIT} --no-pager -o cat").stdout


class TestSglangPairOverRdma:
    twins = {"rdma-a": pair_spark(1), "rdma-b": pair_spark(2)}

    def test_converge_on_rdma(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        for name in ("rdma-a", "rdma-b"):  # the head with its API, the other rank alone
            assert f"[{name}] spark-engine-health: NCCL uses RDMA (NET/IB : Using" in run.stderr
        assert "[rdma-a] spark-engine-health: ready after" in run.stderr

    def test_the_containers_carry_the_devices_and_limits(self, scenario):
        for node, name in enumerate(("rdma-a", "rdma-b"), start=1):
            twin = scenario.twins[name]
            assert (
                twin.exec(
                    "test -c /dev/infiniband/uverbs0 && test -c /dev/infiniband/rdma_cm"
                ).returncode
                == 0
            )
            config = host_config(twin)
            assert config["Devices"] == [
                {
                    "PathOnHost": "/dev/infiniband",
                    "PathInContainer": "/dev/infiniband",
                    "CgroupPermissions": "rwm",
                }
            ]
            assert {"Name": "memlock", "Soft": -1, "Hard": -1} in config["Ulimits"]
            assert config["CapAdd"] is None and config["Privileged"] is False
            address = harness.qsfp_plan(node)[0]["address"].split("/")[0]
            env = twin.exec(f"docker inspect -f '{{{{json .Config.Env}}}}' {CONTAINER}").stdout
            assert f"SGLANG_HOST_IP={address}" in env and "NCCL_DEBUG=INFO" in env
            assert (
                "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE; "
                f"OOB enp1s0f0np0:{address}<0>"
            ) in journal(twin)
            assert "NET/Socket" not in journal(twin)

    def test_without_the_rdma_options_the_check_fails_naming_the_fallback(self, scenario):
        run = scenario.deploy(
            env={**TOKEN_ENV, "SPARK_TWIN_WITHOUT_RDMA": "rdma-b"},
            deploy="tests/scenarios/deploys/without_rdma.py",
        )
        assert run.returncode != 0
        assert f"{UNIT} did not become healthy" in run.stderr, run.explain()
        assert "NCCL fell back to TCP sockets (NET/Socket) instead of RDMA" in run.stderr
        assert "the container cannot open the RDMA devices" in run.stderr
        assert "matches nccl-socket-fallback" in run.stderr
        twin = scenario.twins["rdma-b"]
        assert host_config(twin)["Devices"] == []
        assert "NCCL INFO Using network Socket" in journal(twin)
