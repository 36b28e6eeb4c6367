"""
Three Sparks through a QSFP switch (three twins on the harness's switch, one bridge per
rail): the deploy converges, proves the jumbo path from every Spark to the head on every
rail, serves one model with SGLang across the three (ranks 0-2, tensor parallel 3, RDMA in
every container), and a second run changes nothing. A switch port that does not pass jumbo
frames is then found by the proof, before anything changes, naming the Spark behind it.
"""

from __future__ import annotations

import json

from tests.scenarios.conftest import assert_idempotent, take_chart
from tests.scenarios.test_engine import TOKEN_ENV, fabric_spark, models_answer, state
from tests.twins import harness

NAMES = ("clu-a", "clu-b", "clu-c")
UNIT = "spark-engine-sglang.service"
CONTAINER = "spark-engine-sglang"
HEAD_ADDRESS = harness.qsfp_plan(1)[0]["address"].split("/")[0]


def cluster_spark(node: int) -> dict:
    return fabric_spark(
        node,
        {"name": "sglang"},
        # the link test on the twins: small sizes, and a threshold a veth through a bridge in
        # a 2-core machine passes (the real one, 21.875 GB/s, is the default)
        link_test_sizes=["64K", "1M"],
        link_test_min_busbw=0.001,
    )


def container_args(twin: harness.Twin) -> list[str]:
    return json.loads(twin.exec(f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}").stdout)


def value(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


class TestThreeSparksOnASwitch:
    fabric = "switch"
    twins = {name: cluster_spark(node) for node, name in enumerate(NAMES, start=1)}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "[clu-a] spark-engine-health: ready after" in run.stderr
        for name in NAMES:  # every rank's own NCCL, the head's with its API
            assert f"[{name}] spark-engine-health: NCCL uses RDMA (NET/IB : Using" in run.stderr
        # the proof: the head pings every other Spark, each of them the head, on both rails
        assert "[clu-a] QSFP proven: " in run.stderr
        assert "jumbo path to clu-b, clu-c proven" in run.stderr, run.explain()
        for name in NAMES[1:]:
            assert f"[{name}] QSFP proven: " in run.stderr
        assert "jumbo path to clu-a proven" in run.stderr

    def test_idempotence(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(run)

    def test_every_spark_runs_its_rank_of_one_model(self, scenario):
        for rank, name in enumerate(NAMES):
            twin = scenario.twins[name]
            assert state(twin) == "active", name
            words = container_args(twin)
            assert value(words, "--nnodes") == "3"
            assert value(words, "--node-rank") == str(rank)
            assert value(words, "--dist-init-addr") == f"{HEAD_ADDRESS}:20000"
            assert value(words, "--tensor-parallel-size") == "3"
            env = twin.exec(f"docker inspect -f '{{{{json .Config.Env}}}}' {CONTAINER}").stdout
            own = harness.qsfp_plan(rank + 1)[0]["address"].split("/")[0]
            assert f"SGLANG_HOST_IP={own}" in env
            assert "NCCL_IB_GID_INDEX=3" in env and "SPARK_NNODES=3" in env
            assert f"SPARK_NODE_RANK={rank}" in env and "SPARK_PEER_ADDR" not in env
        assert '"id": "Mistral-Small-4-119B-2603-NVFP4"' in models_answer(scenario.twins["clu-a"])
        for name in NAMES[1:]:  # only the head answers the API
            assert models_answer(scenario.twins[name]) == ""

    def test_the_link_test_runs_on_every_spark_through_the_switch(self, scenario):
        run = scenario.deploy(env={"SPARK_LINK_TEST_WHILE_SERVING": "1"}, deploy="linktest.py")
        assert run.returncode == 0, run.explain()
        said = run.stdout + run.stderr
        print(said[said.find("--> Link test") :])  # the closing note quotes it
        assert "--> Link test: all_gather and all_reduce through torch.distributed (nccl)" in said
        assert f"3 Sparks, rendezvous at {HEAD_ADDRESS}:29500" in said
        for rank, name in enumerate(NAMES):
            [row] = [
                line.split() for line in said.splitlines() if line.split()[:2] == [name, str(rank)]
            ]
            assert "NET/IB" in row and "200000" in " ".join(row), row
        assert "PASS: all-gather bus bandwidth" in said and "GB/s at 1M >= 0.001 GB/s" in said
        assert take_chart(said).name == f"linktest-{NAMES[0]}.svg"
        for twin in scenario.twins.values():
            stored = json.loads(twin.exec("cat /var/lib/spark-deploy/linktest.json").stdout)
            assert stored["passed"] is True and stored["nodes"] == 3
        where = scenario.inventory.parent / "status.json"  # the matrix details only what is not ok
        status = scenario.deploy(deploy="status.py", env={"SPARK_STATUS_JSON": str(where)})
        assert status.returncode == 0, status.explain()
        rows = json.loads(where.read_text())["sparks"]
        for name in NAMES:
            [(state, detail)] = [
                (r["state"], r["detail"]) for r in rows[name] if r["check"] == "link test"
            ]
            assert state == "ok" and "passed" in detail and "all-gather busbw" in detail

    def test_a_switch_port_without_jumbo_frames_is_found_before_any_change(self, scenario):
        switch = scenario.switch
        assert switch is not None
        harness.set_port_mtu(switch, scenario.twins["clu-c"], 1500, rail=0)
        try:
            run = scenario.deploy(env=TOKEN_ENV)
            assert run.returncode != 0
            said = " ".join(run.stderr.split())  # the refusal wraps its lines
            assert "the QSFP path is not proven" in said, run.explain()
            # whichever end refuses first (the head, or clu-c), clu-c's rail 1 is named
            assert "clu-c enp1s0f0np0 192.168.100.3" in said
            assert "to a 8972-byte don't-fragment ping" in said
            assert "the switch ports' MTU must allow jumbo frames too" in said
            assert "clu-b enp1s0f0np0 192.168.100.2" not in said
            assert run.changed() == {}
            assert {state(scenario.twins[name]) for name in NAMES} == {"active"}
        finally:
            harness.set_port_mtu(switch, scenario.twins["clu-c"], harness.JUMBO_MTU, rail=0)
        run = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(run)
