"""Engines across 2 to 8 Sparks on the QSFP fabric: ranks, the head, vLLM's own multi-node
mode or Ray by choice, and the tensor/pipeline layout checked against the node count."""

from __future__ import annotations

from typing import Any

import pytest

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.deploys.engine.units import description
from sparkdeploy.engine_plan.plan import EnginePlan, plan_sparks
from sparkdeploy.knowledge.flags import load_catalogue
from tests.twins import harness

MODEL = "Qwen/Qwen3-0.6B"


def sparks(count: int, engine: dict[str, Any] | None, **per_host: dict[str, Any]):
    """``count`` Sparks on the fabric (rail N of each in one subnet, as through a switch),
    all with ``engine`` unless ``per_host`` says otherwise for a Spark."""
    hosts = {}
    for node in range(1, count + 1):
        name = f"spark-{node}"
        keys: dict[str, Any] = {
            "ssh_host": f"{name}.local",
            "ssh_user": "nvidia",
            "model_repo": MODEL,
            "qsfp": harness.qsfp_plan(node),
        }
        if engine is not None:
            keys["engine"] = engine
        hosts[name] = SparkSettings(**(keys | per_host.get(name.replace("-", "_"), {})))
    return hosts


def plan(count: int, engine: dict[str, Any] | None, **per_host: dict[str, Any]):
    found = sparks(count, engine, **per_host)
    return plan_sparks(found, Topology.of(found))


def words(plan: EnginePlan) -> list[str]:
    return list(plan.main.command)


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_vllm_pair_runs_natively_one_unit_per_spark_both_ranks():
    plans, problems, warnings = plan(2, {"name": "vllm"})
    assert problems == []
    head, other = plans["spark-1"], plans["spark-2"]
    assert head.units == other.units == ("spark-engine-vllm.service",)
    assert (head.serves_api, other.serves_api) == (True, False)
    for rank, argv in enumerate((words(head), words(other))):
        native = argv[argv.index("--nnodes") : argv.index("--nnodes") + 12]
        assert native == [
            "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "192.168.100.1",
            "--master-port", "29501", "--distributed-executor-backend", "mp",
            "--tensor-parallel-size", "2",
        ]  # fmt: skip
        assert ("--headless" in argv) == (rank == 1)
        assert "--pipeline-parallel-size" not in argv  # 1, the engine's default
    assert description(other, other.main).endswith("rank 1 of 2 Sparks, no API")
    assert description(head, head.main).endswith("rank 0 of 2 Sparks, serving the API")


def test_vllm_on_three_sparks_is_tensor_parallel_three_by_default():
    plans, problems, _ = plan(3, {"name": "vllm"})
    assert problems == []
    assert [p.rank for p in plans.values()] == [0, 1, 2]
    for name, p in plans.items():
        argv = words(p)
        assert value(argv, "--nnodes") == "3" and value(argv, "--tensor-parallel-size") == "3"
        assert value(argv, "--master-addr") == "192.168.100.1"
        assert ("--headless" in argv) == (name != "spark-1")
    assert [p.serves_api for p in plans.values()] == [True, False, False]


def test_vllm_pipeline_parallel_three_as_a_recipe_says_it():
    plans, problems, _ = plan(3, {"name": "vllm", "args": {"-tp": 1, "-pp": 3}})
    assert problems == []
    for p in plans.values():
        argv = words(p)
        assert value(argv, "--tensor-parallel-size") == "1"
        assert value(argv, "--pipeline-parallel-size") == "3"
        assert "-tp" not in argv and "-pp" not in argv  # the canonical names
    # -pp alone: tensor parallel takes the Sparks the pipeline leaves
    plans, problems, _ = plan(4, {"name": "vllm", "args": {"-pp": 2}})
    assert problems == []
    assert value(words(plans["spark-4"]), "--tensor-parallel-size") == "2"


def test_sglang_on_four_sparks_ranks_each_and_names_the_head():
    plans, problems, _ = plan(4, {"name": "sglang", "args": {"--tp": 4}})
    assert problems == []
    catalogue = load_catalogue("sglang", plans["spark-1"].version)
    tp, pp = catalogue.canonical("--tp-size"), catalogue.canonical("--pp-size")
    for rank, p in enumerate(plans.values()):
        argv = words(p)
        assert value(argv, "--nnodes") == "4" and value(argv, "--node-rank") == str(rank)
        assert value(argv, "--dist-init-addr") == "192.168.100.1:20000"
        assert value(argv, tp) == "4" and pp not in argv and "--tp" not in argv
    plans, problems, _ = plan(4, {"name": "sglang", "args": {"--pp-size": 2}})
    assert problems == []
    argv = words(plans["spark-2"])
    assert (value(argv, tp), value(argv, pp)) == ("2", "2")


@pytest.mark.parametrize(
    ("engine", "args", "said"),
    [
        ("vllm", {"--tensor-parallel-size": 4}, "--tensor-parallel-size 4: tensor x pipeline "
         "parallel 4 x 1 = 4 GPUs"),
        ("vllm", {"-tp": 2, "-pp": 2}, "-tp 2 -pp 2: tensor x pipeline parallel 2 x 2 = 4 GPUs"),
        ("vllm", {"-pp": 2}, "-pp 2: tensor x pipeline parallel 3 x 2 = 6 GPUs"),
        ("sglang", {"--tp-size": 2}, "--tp-size 2: tensor x pipeline parallel 2 x 1 = 2 GPUs"),
    ],
)  # fmt: skip
def test_a_layout_that_is_not_one_gpu_per_spark_is_refused_naming_host_key_and_fix(
    engine, args, said
):
    plans, problems, _ = plan(3, {"name": engine, "args": args})
    assert len(problems) == 3  # every Spark of the three
    assert problems[0] == (
        f"host 'spark-1', key 'engine': {said}, but 3 Sparks serve this model with one GPU "
        "each; make the product 3 (for example tensor parallel 3, or tensor parallel 1 and "
        "pipeline parallel 3), or leave both out for tensor parallel across every Spark"
    )


def test_ray_by_choice_runs_ray_units_on_every_spark():
    ray = {"name": "vllm", "image": "scitrera/dgx-spark-vllm:0.20.1-t4",
           "args": {"--distributed-executor-backend": "ray"}}  # fmt: skip
    plans, problems, warnings = plan(3, ray)
    assert problems == []
    assert plans["spark-1"].units == (
        "spark-engine-vllm.service",
        "spark-engine-vllm-ray-head.service",
    )
    for name in ("spark-2", "spark-3"):
        assert plans[name].units == ("spark-engine-vllm-ray-worker.service",)
        assert plans[name].main.wait == ("--address", "192.168.100.1:6379")
    server = plans["spark-1"].main
    assert server.wait[-2:] == ("--gpus", "3")
    argv = list(server.command)
    assert value(argv, "--distributed-executor-backend") == "ray"
    assert value(argv, "--tensor-parallel-size") == "3" and "--nnodes" not in argv
    assert not any("ray" in w for w in warnings)  # this image ships Ray


def test_ray_with_an_image_known_to_have_no_ray_is_refused_on_the_laptop():
    ray = {"name": "vllm", "image": "nvcr.io/nvidia/vllm:26.05-py3",
           "args": {"--distributed-executor-backend": "ray"}}  # fmt: skip
    _, problems, _ = plan(2, ray)
    assert problems and all("[vllm-ray-missing-in-image]" in p for p in problems)
    assert "Drop --distributed-executor-backend ray from engine.args" in problems[0]
    # the same image without the flag: vLLM's own multi-node mode
    plans, problems, _ = plan(2, {"name": "vllm", "image": "nvcr.io/nvidia/vllm:26.05-py3"})
    assert problems == [] and "--headless" in words(plans["spark-2"])


def test_more_than_eight_sparks_are_refused():
    _, problems, _ = plan(9, {"name": "vllm"})
    assert problems == [
        "host 'spark-9', key 'engine': 9 Sparks with an engine on the fabric; one model is "
        "served across 8 Sparks at most. List 8 or fewer Sparks in this inventory"
    ]
    plans, problems, _ = plan(8, {"name": "vllm"})
    assert problems == [] and value(words(plans["spark-8"]), "--node-rank") == "7"


def test_sparks_whose_engines_differ_are_refused():
    _, problems, _ = plan(3, {"name": "vllm"}, spark_3={"engine": {"name": "sglang"}})
    assert problems == [
        "host 'spark-3', key 'engine': Sparks on the fabric serve one model with one engine; "
        "spark-1 runs vllm vllm/vllm-openai:v0.33.0, spark-3 runs sglang "
        "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a. Give all the same engine (under "
        "defaults:)"
    ]
    other = {"engine": {"name": "vllm", "args": {"--max-num-seqs": 4}}, "model_repo": "a/b"}
    _, problems, _ = plan(3, {"name": "vllm"}, spark_2=other)
    assert problems == [
        "host 'spark-2', key 'engine': Sparks on the fabric serve one model together, each rank "
        "with the same settings, but engine.args, model_repo differ from spark-1's. Set them "
        "once under defaults: (or alike on every Spark)"
    ]


def test_a_spark_without_the_engine_among_engines_on_the_fabric_is_refused():
    found = sparks(3, {"name": "vllm"})
    found["spark-2"] = found["spark-2"].model_copy(update={"engine": None})
    _, problems, _ = plan_sparks(found, Topology.of(found))
    assert problems == [
        "host 'spark-2', key 'engine': not set, but spark-1, spark-3 on the same QSFP fabric "
        "have one; Sparks on the fabric serve one model together with every Spark of the "
        "inventory as a rank (the first is the head). Give it the same engine (under "
        "defaults:), or keep engine: on one Spark only to serve there alone"
    ]
    # One engine on the fabric serves alone, as before.
    for name in ("spark-1", "spark-3"):
        found[name] = found[name].model_copy(update={"engine": None})
    found["spark-3"] = sparks(3, {"name": "vllm"})["spark-3"]
    plans, problems, _ = plan_sparks(found, Topology.of(found))
    assert problems == [] and plans["spark-3"].nodes == 1 and plans["spark-3"].serves_api


def test_sparks_off_the_fabric_each_serve_alone():
    found = {
        name: spark.model_copy(update={"qsfp": []})
        for name, spark in sparks(3, {"name": "vllm"}).items()
    }
    plans, problems, _ = plan_sparks(found, Topology.of(found))
    assert problems == []
    assert all(p.nodes == 1 and p.serves_api and "--nnodes" not in words(p) for p in plans.values())
