"""
vLLM across two Sparks with Ray (the operator's choice: engine.args say
`--distributed-executor-backend ray`), on the twin pair: a Ray head unit on the first Spark, a Ray
worker unit on the second that waits for it and joins over the QSFP link, and the server in
the head's container with the Ray executor and tensor parallelism 2, health-checked. The
operator restarts the server alone; restarting the Ray head takes the server with it and the
worker rejoins by itself.
"""

from __future__ import annotations

from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import PREPARE, TOKEN_ENV, as_ops, models_answer, state, wait_for
from tests.twins import harness

SERVER = "spark-engine-vllm.service"
HEAD = "spark-engine-vllm-ray-head.service"
WORKER = "spark-engine-vllm-ray-worker.service"
HEAD_CONTAINER = "spark-engine-vllm-ray-head"
PORT = 8000
HEAD_ADDRESS, WORKER_ADDRESS = (harness.qsfp_plan(n)[0]["address"].split("/")[0] for n in (1, 2))
SERVER_PROCESS = "[e]ngine.py vllm serve"  # the brackets keep pgrep off its own shell
RAY_IMAGE = "scitrera/dgx-spark-vllm:0.16.0-t5"


def ray_spark(node: int) -> dict:
    return {
        **harness.MODEL,
        "sysfs_root": harness.TWIN_SYSFS,
        "qsfp": harness.qsfp_plan(node),
        "operator_user": "ops",
        # A Ray pair needs an image that ships Ray: scitrera's builds do; vllm/vllm-openai
        # since v0.18 and NGC since 26.05 do not (GB10 rules vllm-ray-*-in-image).
        # Ray by choice: without this flag a vLLM pair runs vLLM's own multi-node mode.
        "engine": {
            "name": "vllm",
            "image": RAY_IMAGE,
            "args": {"--distributed-executor-backend": "ray"},
        },
    }


def ray_status(twin: harness.Twin) -> str:
    return twin.exec(f"docker exec {HEAD_CONTAINER} ray status", check=False).stdout


def main_pid(twin: harness.Twin, unit: str) -> str:
    return twin.exec(f"systemctl show -p MainPID --value {unit}").stdout.strip()


def servers(twin: harness.Twin) -> int:
    return int(twin.exec(f"pgrep -fc '{SERVER_PROCESS}' || true").stdout.strip() or 0)


class TestVllmRayPair:
    twins = {"ray-a": ray_spark(1), "ray-b": ray_spark(2)}
    prepare = {"ray-a": PREPARE, "ray-b": PREPARE}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "[ray-a] spark-engine-health: ready after" in run.stderr
        assert "[ray-b] spark-engine-health" not in run.stderr  # the worker serves no API

    def test_idempotence(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(run)
        assert run.remote_commands() == {"ray-a": 3, "ray-b": 3}

    def test_the_cluster_spans_both_sparks_over_qsfp(self, scenario):
        head, worker = scenario.twins["ray-a"], scenario.twins["ray-b"]
        assert {state(head, HEAD), state(head, SERVER), state(worker, WORKER)} == {"active"}
        status = ray_status(head)
        assert " 0.0/2.0 GPU" in status and status.count(" 1 node_") == 2
        # the worker joined the head's GCS across the cable, from its own QSFP address
        joined = worker.exec(f"ss -Htn state established dst {HEAD_ADDRESS}:6379").stdout
        assert f"{WORKER_ADDRESS}:" in joined
        args = worker.exec(
            "docker inspect -f '{{json .Args}}' spark-engine-vllm-ray-worker"
        ).stdout.replace(" ", "")
        assert f'"--address","{HEAD_ADDRESS}:6379"' in args
        env = worker.exec(
            "docker inspect -f '{{json .Config.Env}}' spark-engine-vllm-ray-worker"
        ).stdout
        for expected in (
            "RAY_memory_monitor_refresh_ms=0",
            "NCCL_SOCKET_IFNAME=enp1s0f0np0",
            f"VLLM_HOST_IP={WORKER_ADDRESS}",
            "NCCL_IB_GID_INDEX=3",
        ):
            assert expected in env
        assert '"id": "Mistral-Small-4-119B-2603-NVFP4"' in models_answer(head, PORT)
        for twin, units in ((head, (HEAD, SERVER)), (worker, (WORKER,))):
            for unit in units:
                verify = twin.exec(
                    f"systemd-analyze verify /etc/systemd/system/{unit}", check=False
                )
                assert verify.returncode == 0, verify.stderr
                assert twin.exec(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"

    def test_operator_restarts_the_server_alone(self, scenario):
        head = scenario.twins["ray-a"]
        ray_head = main_pid(head, HEAD)
        restarted = as_ops(head, f"sudo -n systemctl restart {SERVER}")
        assert restarted.returncode == 0, restarted.stderr
        wait_for(lambda: models_answer(head, PORT), "the server after the operator's restart")
        assert main_pid(head, HEAD) == ray_head  # the Ray head went on
        assert servers(head) == 1  # the stop ended the old server in the container
        assert as_ops(head, "sudo -n systemctl restart ssh").returncode != 0

    def test_stopping_the_server_ends_it_in_the_container(self, scenario):
        head = scenario.twins["ray-a"]
        head.exec(f"systemctl stop {SERVER}")
        assert servers(head) == 0 and state(head, HEAD) == "active"
        head.exec(f"systemctl start {SERVER}")
        wait_for(lambda: models_answer(head, PORT), "the server back")

    def test_a_restarted_head_takes_the_server_and_the_worker_rejoins(self, scenario):
        head, worker = scenario.twins["ray-a"], scenario.twins["ray-b"]
        worker_pid = main_pid(worker, WORKER)
        restarted = as_ops(head, f"sudo -n systemctl restart {HEAD}")  # the operator may
        assert restarted.returncode == 0, restarted.stderr
        wait_for(
            lambda: main_pid(worker, WORKER) not in (worker_pid, "0"),
            "the worker to rejoin the new head",
            120,
        )
        wait_for(lambda: models_answer(head, PORT), "the server on the new cluster", 120)
        assert " 0.0/2.0 GPU" in ray_status(head)
        assert servers(head) == 1
