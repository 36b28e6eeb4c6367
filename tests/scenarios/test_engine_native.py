"""
vLLM across two Sparks in its own multi-node mode, without Ray, on the twin pair: one unit per
Spark (`vllm serve --nnodes 2 --node-rank R --master-addr <head>`, the other rank
`--headless`), RDMA in both containers, the API on the head only, and a second run changes
nothing. Asking for Ray with the official image, which has no `ray`, is then refused by the
check of the image on the Spark before any unit changes, and the pair goes on serving.
"""

from __future__ import annotations

import json

from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import TOKEN_ENV, fabric_spark, models_answer, state
from tests.twins import harness

UNIT = "spark-engine-vllm.service"
CONTAINER = "spark-engine-vllm"
IMAGE = "vllm/vllm-openai:v0.33.0"  # no Ray in it (tests/twins/standins/images.json)
PORT = 8000
HEAD_ADDRESS = harness.qsfp_plan(1)[0]["address"].split("/")[0]


def native_spark(node: int) -> dict:
    return fabric_spark(node, {"name": "vllm", "image": IMAGE})


def container_args(twin: harness.Twin) -> list[str]:
    return json.loads(twin.exec(f"docker inspect -f '{{{{json .Args}}}}' {CONTAINER}").stdout)


def engine_units(twin: harness.Twin) -> list[str]:
    listed = twin.exec("systemctl list-units --all --plain --no-legend 'spark-engine-*'").stdout
    return sorted(line.split()[0] for line in listed.splitlines() if line.strip())


class TestVllmPairNative:
    twins = {"nat-a": native_spark(1), "nat-b": native_spark(2)}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "[nat-a] spark-engine-health: ready after" in run.stderr
        assert "[nat-b] spark-engine-health: ready" not in run.stderr  # headless: no API
        for name in ("nat-a", "nat-b"):
            assert f"[{name}] spark-engine-health: NCCL uses RDMA (NET/IB : Using" in run.stderr

    def test_idempotence(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(run)

    def test_one_unit_per_spark_each_with_its_rank(self, scenario):
        for rank, name in enumerate(("nat-a", "nat-b")):
            twin = scenario.twins[name]
            assert engine_units(twin) == [UNIT], name  # no Ray head, no Ray worker
            assert state(twin, UNIT) == "active"
            words = container_args(twin)
            at = words.index("--nnodes")
            assert words[at : at + 8] == [
                "--nnodes", "2", "--node-rank", str(rank),
                "--master-addr", HEAD_ADDRESS, "--master-port", "29501",
            ]  # fmt: skip
            assert words[words.index("--distributed-executor-backend") + 1] == "mp"
            assert ("--headless" in words) == (rank > 0)
        assert '"id": "Mistral-Small-4-119B-2603-NVFP4"' in models_answer(
            scenario.twins["nat-a"], PORT
        )
        assert models_answer(scenario.twins["nat-b"], PORT) == ""

    def test_ray_with_an_image_without_ray_is_refused_before_any_unit_changes(self, scenario):
        units = {
            name: twin.read(f"/etc/systemd/system/{UNIT}") for name, twin in scenario.twins.items()
        }
        for twin in scenario.twins.values():
            twin.data = {
                **twin.data,
                "engine": {
                    **twin.data["engine"],
                    "args": {"--distributed-executor-backend": "ray"},
                },
            }
        scenario.write_inventory()
        try:
            run = scenario.deploy(env=TOKEN_ENV)
            assert run.returncode != 0
            assert "has no `ray` program" in run.stderr, run.explain()
            assert "--distributed-executor-backend ray" in run.stderr
            for name, twin in scenario.twins.items():
                assert twin.read(f"/etc/systemd/system/{UNIT}") == units[name]
                assert engine_units(twin) == [UNIT] and state(twin, UNIT) == "active"
        finally:
            for node, twin in enumerate(scenario.twins.values(), start=1):
                twin.data = native_spark(node)
            scenario.write_inventory()
