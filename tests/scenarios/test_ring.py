"""
Three Sparks in a ring, cabled as NVIDIA's connect-three-sparks playbook cables them (port 0
of each to port 1 of the next, a veth pair per logical link) and addressed as it addresses
them (one /24 per cable): the deploy configures the four interfaces of every Spark, proves
the jumbo path on every link and the RoCE GID of every device, serves one model with SGLang
across the ring (the ranks meet on the management network), and a second run changes
nothing. Two cables swapped at one Spark are found by the proof, which names the swap.
"""

from __future__ import annotations

import json

import pytest

from tests.scenarios.conftest import assert_idempotent, take_chart
from tests.scenarios.test_engine import TOKEN_ENV, fabric_spark, models_answer, state
from tests.twins import harness
from tests.twins.fetched import internet_bytes

pytestmark = pytest.mark.twins

NAMES = ("ring-a", "ring-b", "ring-c")
CONTAINER = "spark-engine-sglang"
DEVICES = "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1"


def ring_spark(node: int, count: int = 3) -> dict:
    return fabric_spark(
        node,
        {"name": "sglang"},
        qsfp=harness.ring_plan(node, count),
        qsfp_topology="ring",
        management_interface="eth0",  # Docker's bridge: the twins' management network
        link_test_sizes=["64K", "1M"],
        link_test_min_busbw=0.001,
    )


def value(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def ring_connected(twin: harness.Twin) -> bool:
    """NetworkManager has all four QSFP interfaces of the twin connected."""
    states = [
        twin.exec(f"nmcli -t -g GENERAL.STATE device show {name}", check=False).stdout
        for port in harness.RING_PORTS
        for name in port
    ]
    return all(state.startswith("100") for state in states)


def recable(twins: list[harness.Twin], swapped_at: str | None = None) -> None:
    """Pull every cable of the ring and cable it again (`swapped_at`: that twin's two cables
    in each other's ports), then wait for NetworkManager to bring the interfaces back."""
    harness.unlink_ring(twins)
    harness.link_ring(twins, swapped_at=swapped_at)
    for twin in twins:
        harness.wait_for(lambda twin=twin: ring_connected(twin), f"{twin.name}'s ports", 60)


class TestThreeSparkRing:
    fabric = "ring"
    twins = {name: ring_spark(node) for node, name in enumerate(NAMES, start=1)}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        print(run.stderr[run.stderr.find("QSFP proven") - 200 :][:3000])  # the closing note
        for name in NAMES:
            assert f"[{name}] QSFP proven: " in run.stderr, run.explain()
            assert f"[{name}] spark-engine-health: NCCL uses RDMA (NET/IB : Using" in run.stderr
        assert "[ring-a] spark-engine-health: ready after" in run.stderr

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))

    def test_every_spark_has_four_profiles_and_the_ring_environment(self, scenario):
        for node, name in enumerate(NAMES, start=1):
            twin = scenario.twins[name]
            for entry in harness.ring_plan(node, 3):
                ifname = entry["interface"]
                shown = twin.exec(
                    f"nmcli -t -g ipv4.addresses,802-3-ethernet.mtu connection show qsfp-{ifname}"
                ).stdout.split()
                assert shown == [entry["address"], "9000"], (name, ifname)
            if name == NAMES[0]:  # the closing note: the profiles of one Spark of the ring
                fields = "NAME,DEVICE,STATE"
                print(twin.exec(f"nmcli -f {fields} connection show | grep qsfp-").stdout)
                keys = "ipv4.addresses,802-3-ethernet.mtu,ipv4.route-table,ipv4.routing-rules"
                for entry in harness.ring_plan(node, 3):
                    profile = f"qsfp-{entry['interface']}"
                    print(
                        profile, twin.exec(f"nmcli -t -f {keys} connection show {profile}").stdout
                    )
                print(twin.exec("ip rule show; ip route show table all | grep 192.168").stdout)
            env = twin.read("/etc/spark-deploy/nccl.env") or ""
            lines = [line for line in env.splitlines() if not line.startswith("#")]
            print(f"--- {name}: /etc/spark-deploy/nccl.env\n{env}")  # the closing note
            assert f"NCCL_IB_HCA={DEVICES}" in lines
            assert "NCCL_IB_SUBNET_AWARE_ROUTING=1" in lines
            assert "NCCL_ALGO=Ring" not in lines  # three Sparks are each other's neighbours
            head = scenario.twins[NAMES[0]].data["management_address"]
            assert f"SPARK_HEAD_ADDR={head}" in lines

    def test_every_rank_meets_the_head_on_the_management_network(self, scenario):
        head = scenario.twins[NAMES[0]].data["management_address"]
        for rank, name in enumerate(NAMES):
            twin = scenario.twins[name]
            assert state(twin) == "active", name
            words = json.loads(
                twin.exec(f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}").stdout
            )
            assert value(words, "--dist-init-addr") == f"{head}:20000"
            assert value(words, "--node-rank") == str(rank)
            env = twin.exec(f"docker inspect -f '{{{{json .Config.Env}}}}' {CONTAINER}").stdout
            assert "NCCL_SOCKET_IFNAME=eth0" in env and f"NCCL_IB_HCA={DEVICES}" in env
        assert '"id": "Mistral-Small-4-119B-2603-NVFP4"' in models_answer(scenario.twins[NAMES[0]])

    def test_the_link_test_runs_over_the_ring_and_status_has_a_row_per_cable(self, scenario):
        head = scenario.twins[NAMES[0]].data["management_address"]
        run = scenario.deploy(env={"SPARK_LINK_TEST_WHILE_SERVING": "1"}, deploy="linktest.py")
        assert run.returncode == 0, run.explain()
        said = run.stdout + run.stderr
        print(said[said.find("--> Link test") :])  # the closing note quotes it
        assert f"3 Sparks, rendezvous at {head}:29500" in said
        for rank, name in enumerate(NAMES):
            [row] = [
                line.split() for line in said.splitlines() if line.split()[:2] == [name, str(rank)]
            ]
            assert "NET/IB" in row, row
        assert "PASS: all-gather bus bandwidth" in said
        assert take_chart(said).name == f"linktest-{NAMES[0]}.svg"
        where = scenario.inventory.parent / "status.json"
        status = scenario.deploy(deploy="status.py", env={"SPARK_STATUS_JSON": str(where)})
        assert status.returncode == 0, status.explain()
        rows = json.loads(where.read_text())["sparks"]
        # NVIDIA's cabling: cable 1 a-b, cable 2 b-c, cable 3 c-a; each Spark is on two
        cables = {name: {r["check"]: r["state"] for r in rows[name]} for name in NAMES}
        assert {k: v for k, v in cables["ring-a"].items() if k.startswith("cable")} == {
            "cable 1": "ok",
            "cable 3": "ok",
        }
        assert {k for k in cables["ring-b"] if k.startswith("cable")} == {"cable 1", "cable 2"}
        assert cables["ring-c"]["link test"] == "ok"

    def test_two_cables_swapped_at_one_spark_are_refused_with_the_exchange_to_make(self, scenario):
        twins = list(scenario.twins.values())
        recable(twins, swapped_at="ring-a")
        try:
            run = scenario.deploy(env=TOKEN_ENV)
            assert run.returncode != 0
            said = " ".join(run.stderr.split())  # the refusal wraps its lines
            print(said[said.find("the ring is miscabled") - 120 :][:900])  # the closing note
            assert "the QSFP path is not proven" in said, run.explain()
            assert "ring-a port 0 is cabled to ring-c port 0" in said
            assert "exchange the cables in ring-a port 0 and ring-a port 1" in said
            assert run.changed() == {}
        finally:
            recable(twins)
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))


FOUR = ("four-a", "four-b", "four-c", "four-d")


class TestFourSparkRing:
    """Four Sparks in a ring (eugr's four-node ring: a /24 per logical link), vLLM across
    them with tensor parallel 4: NCCL's ring algorithm only, every link proven, the model
    and image fetched once by the head and passed along the ring to the opposite Spark."""

    fabric = "ring"
    twins = {
        name: {**ring_spark(node, 4), "engine": {"name": "vllm"}}
        for node, name in enumerate(FOUR, start=1)
    }

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        for name in FOUR:
            assert f"[{name}] QSFP proven: " in run.stderr, run.explain()
        # the Spark opposite the head shares no cable with it, and pings only its neighbours
        assert "jumbo path to four-b, four-d proven" in run.stderr
        assert "[four-a] spark-engine-health: ready after" in run.stderr
        # the head fetched from the internet once; the others copied over the cables, the
        # opposite Spark from four-b, which passed on what it copied from four-a
        assert internet_bytes(scenario.twins["four-a"]) > 0
        assert [internet_bytes(scenario.twins[name]) for name in FOUR[1:]] == [0, 0, 0]
        assert "[four-c] " in run.stderr and "(from four-b)" in run.stderr, run.explain()
        assert "(from four-a)" in run.stderr
        for twin in scenario.twins.values():
            env = twin.read("/etc/spark-deploy/nccl.env") or ""
            assert "\nNCCL_ALGO=Ring\n" in env and f"NCCL_IB_HCA={DEVICES}" in env

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
