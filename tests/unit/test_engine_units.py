"""The rendered engine units and sudoers files, for both engines, on one Spark and a pair."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from sparkdeploy.deploys.engine.units import unit_text
from sparkdeploy.escape import systemd_word
from sparkdeploy.inventory import build_inventory
from sparkdeploy.render import render
from tests.unit.hostile import read_unit

PAIR_QSFP = [
    [
        {"interface": "enp1s0f0np0", "address": f"192.168.100.{n}/24"},
        {"interface": "enP2p1s0f0np0", "address": f"192.168.101.{n}/24"},
    ]
    for n in (1, 2)
]


def inventory(engine: dict, pair: bool = False):
    sparks: dict[str, dict[str, Any]] = {"s1": {"ssh_host": "a"}}
    if pair:
        sparks = {f"s{n}": {"ssh_host": f"h{n}", "qsfp": PAIR_QSFP[n - 1]} for n in (1, 2)}
    return build_inventory(
        {
            "defaults": {
                "ssh_user": "nvidia",
                "engine": engine,
                "model_repo": "mistralai/Mistral-Small-4-119B-2603-NVFP4",
                "model_base_repo": "mistralai/Mistral-Small-4-119B-2603",
                "draft_model_repo": "mistralai/Mistral-Small-4-119B-2603-eagle",
            },
            "sparks": sparks,
        },
        "inventory/sparks.yml",
    )


# vLLM with Ray across the Sparks: by choice, as published Ray recipes say it.
RAY_VLLM = {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}


def exec_start(unit: str) -> list[str]:
    [line] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def rendered(name: str, engine: dict, pair: bool = False) -> str:
    """The unit of the main service (the server, or a Ray worker) of Spark ``name``."""
    inv = inventory(engine, pair)
    plan = inv.engine_plans[name]
    return unit_text(plan, plan.main, inv.sparks[name], f"/etc/spark-deploy/{plan.name}.env")


def units(name: str, engine: dict, pair: bool = False) -> dict[str, str]:
    """Every unit of Spark ``name``'s plan, by unit name."""
    inv = inventory(engine, pair)
    plan = inv.engine_plans[name]
    return {
        service.unit: unit_text(plan, service, inv.sparks[name], "/etc/x.env")
        for service in plan.services
    }


def directive(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]


def test_sglang_single_node_unit():
    unit = rendered("s1", {"name": "sglang"})
    words = exec_start(unit)
    # the image is on the Spark before the unit is written: the unit never pulls
    assert words[:5] == ["/usr/bin/docker", "run", "--pull", "never", "--name"]
    assert "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a" in words
    image = words.index("lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a")
    assert words[image + 1 : image + 4] == ["python3", "-m", "sglang.launch_server"]
    assert "--rm" not in words and "--restart" not in words and "-d" not in words
    assert words[words.index("--attention-backend") + 1] == "triton"
    assert words[words.index("--speculative-eagle-topk") + 1] == "1"
    assert words[words.index("--host") + 1] == "127.0.0.1"
    assert "--nnodes" not in words and "EnvironmentFile=/etc/spark-deploy/nccl.env" not in unit
    assert "ExecStartPre=/usr/local/sbin/spark-memory-guard 70 300" in unit
    assert (
        "ExecStartPre=/usr/local/sbin/spark-model-check --verify "
        "/opt/models/Mistral-Small-4-119B-2603-NVFP4 "
        "mistralai/Mistral-Small-4-119B-2603-NVFP4@main 1"
    ) in unit
    assert "ExecStopPost=-/usr/local/sbin/spark-memory-guard 70 300" in unit
    assert "ExecStartPre=-/usr/bin/docker rm -f spark-engine-sglang" in unit
    assert "Restart=on-failure" in unit and "WantedBy=multi-user.target" in unit


def test_sglang_pair_units_name_the_head_over_qsfp():
    head = exec_start(rendered("s1", {"name": "sglang"}, pair=True))
    worker_unit = rendered("s2", {"name": "sglang"}, pair=True)
    worker = exec_start(worker_unit)
    for words, rank in ((head, "0"), (worker, "1")):
        assert words[words.index("--nnodes") + 1] == "2"
        assert words[words.index("--node-rank") + 1] == rank
        assert words[words.index("--dist-init-addr") + 1] == "192.168.100.1:20000"
    assert "EnvironmentFile=/etc/spark-deploy/nccl.env" in worker_unit
    assert "/etc/spark-deploy/nccl.env" in worker  # --env-file for the container too


def test_vllm_single_node_unit_uses_the_image_entrypoint():
    inv = inventory({"name": "vllm"})
    plan = inv.engine_plans["s1"]
    assert plan.units == ("spark-engine-vllm.service",)
    words = exec_start(unit_text(plan, plan.main, inv.sparks["s1"], "/etc/spark-deploy/x.env"))
    image = words.index("vllm/vllm-openai:v0.33.0")
    assert words[image + 1] == "--model"
    assert words[words.index("--gpu-memory-utilization") + 1] == "0.8"
    assert dict(plan.env)["TORCH_CUDA_ARCH_LIST"] == "12.1a"
    assert dict(plan.env)["VLLM_SKIP_P2P_CHECK"] == "1"
    spec = words[words.index("--speculative-config") + 1]
    assert json.loads(spec)["method"] == "eagle"  # one JSON word, quoted for systemd


def test_vllm_pair_runs_one_server_unit_per_spark_and_only_the_head_serves():
    """vLLM's own multi-node mode: no Ray, one `docker run` unit per Spark; rank 0 serves the
    API, rank 1 runs the same server --headless."""
    inv = inventory({"name": "vllm"}, pair=True)
    head, worker = inv.engine_plans["s1"], inv.engine_plans["s2"]
    assert head.units == worker.units == ("spark-engine-vllm.service",)
    assert head.serves_api and not worker.serves_api
    spark = inv.sparks["s1"]
    words = {
        rank: exec_start(unit_text(plan, plan.main, spark, "/etc/x.env"))
        for rank, plan in enumerate((head, worker))
    }
    for rank, argv in words.items():
        assert argv[:2] == ["/usr/bin/docker", "run"] and "exec" not in argv
        assert "/etc/spark-deploy/nccl.env" in argv
        after = argv[argv.index("vllm/vllm-openai:v0.33.0") + 1 :]
        tail = after[after.index("--nnodes") :]
        assert tail[:10] == [
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--master-addr",
            "192.168.100.1",
            "--master-port",
            "29501",
            "--distributed-executor-backend",
            "mp",
        ]
        assert after[after.index("--tensor-parallel-size") + 1] == "2"
        assert ("--headless" in after) == (rank == 1)
        assert "ray" not in " ".join(after)
    assert "[vllm-ray-maybe-missing-in-image]" not in " ".join(inv.warnings)


def test_vllm_ray_pair_runs_a_ray_head_and_worker_and_serves_in_the_head():
    head = units("s1", RAY_VLLM, pair=True)
    worker = units("s2", RAY_VLLM, pair=True)
    assert list(head) == ["spark-engine-vllm-ray-head.service", "spark-engine-vllm.service"]
    assert list(worker) == ["spark-engine-vllm-ray-worker.service"]

    ray_head = exec_start(head["spark-engine-vllm-ray-head.service"])
    image = ray_head.index("vllm/vllm-openai:v0.33.0")
    assert ray_head[image - 2 : image] == ["--entrypoint", "ray"]
    # No dashboard (its jobs API runs any code sent to it) and no client server (10001),
    # before issue 22 both were left to Ray's defaults.
    assert ray_head[image + 1 :] == [
        "start",
        "--head",
        "--port",
        "6379",
        "--include-dashboard",
        "false",
        "--dashboard-host",
        "127.0.0.1",
        "--ray-client-server-port",
        "0",
        "--node-ip-address",
        "192.168.100.1",
        "--disable-usage-stats",
        "--block",
    ]
    assert "/etc/spark-deploy/nccl.env" in ray_head
    assert "-v" in ray_head  # the model folders: Ray's vLLM workers load from them

    ray_worker_unit = worker["spark-engine-vllm-ray-worker.service"]
    ray_worker = exec_start(ray_worker_unit)
    image = ray_worker.index("vllm/vllm-openai:v0.33.0")
    assert ray_worker[image + 1 :] == [
        "start",
        "--address",
        "192.168.100.1:6379",
        "--node-ip-address",
        "192.168.100.2",
        "--disable-usage-stats",
        "--block",
    ]
    assert "/usr/local/sbin/spark-ray-wait --address 192.168.100.1:6379 --timeout 600" in directive(
        ray_worker_unit, "ExecStartPre"
    )
    assert "--tensor-parallel-size" not in ray_worker  # the worker runs no server

    server_unit = head["spark-engine-vllm.service"]
    server = exec_start(server_unit)
    assert server[:3] == ["/usr/bin/docker", "exec", "spark-engine-vllm-ray-head"]
    assert server[3:5] == ["sh", "-c"] and server[6:9] == ["sh", "vllm", "serve"]
    assert server[server.index("--tensor-parallel-size") + 1] == "2"
    assert server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert directive(server_unit, "BindsTo") == ["spark-engine-vllm-ray-head.service"]
    assert "spark-engine-vllm-ray-head.service" in directive(server_unit, "After")[0]
    assert (
        "/usr/local/sbin/spark-ray-wait --container spark-engine-vllm-ray-head --gpus 2 "
        "--timeout 600"
    ) in directive(server_unit, "ExecStartPre")
    # no container of its own: nothing to remove before start, the stop signals its pid
    assert not any("docker rm" in line for line in directive(server_unit, "ExecStartPre"))
    [stop] = directive(server_unit, "ExecStop")
    assert stop.startswith("-/usr/bin/docker exec spark-engine-vllm-ray-head sh -c")
    assert "/tmp/spark-engine-vllm.pid" in stop and "/tmp/spark-engine-vllm.pid" in server[5]


def test_a_vllm_ray_pair_environment_turns_off_rays_memory_monitor_and_only_with_ray():
    for engine, ray in (({"name": "vllm"}, False), (RAY_VLLM, True)):
        inv = inventory(engine, pair=True)
        for plan in inv.engine_plans.values():
            env = dict(plan.env)
            assert ("RAY_memory_monitor_refresh_ms" in env) == ray
            assert env.get("RAY_memory_monitor_refresh_ms", "0") == "0"
            assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"


def test_vllm_pair_without_the_ray_memory_monitor_off_is_refused():
    with pytest.raises(Exception) as caught:
        inventory({**RAY_VLLM, "env": {"RAY_memory_monitor_refresh_ms": None}}, pair=True)
    assert "ray-memory-monitor" in str(caught.value)


def test_each_unit_of_a_ray_pair_gets_its_own_sudoers_and_paths():
    from sparkdeploy.engine_plan.files import engine_files

    inv = inventory(RAY_VLLM, pair=True)
    assert [file.path for file in engine_files(inv.engine_plans["s1"])] == [
        "/etc/spark-deploy/spark-engine-vllm.env",
        "/etc/systemd/system/spark-engine-vllm-ray-head.service",
        "/etc/sudoers.d/spark-deploy-spark-engine-vllm-ray-head",
        "/etc/systemd/system/spark-engine-vllm.service",
        "/etc/sudoers.d/spark-deploy-spark-engine-vllm",
    ]
    assert inv.engine_plans["s1"].units == (
        "spark-engine-vllm.service",
        "spark-engine-vllm-ray-head.service",
    )
    assert inv.engine_plans["s2"].units == ("spark-engine-vllm-ray-worker.service",)
    assert not inv.engine_plans["s2"].serves_api


@pytest.mark.parametrize(
    "word, expected",
    [
        ("plain", "plain"),
        ('{"a": 1}', '"{\\"a\\": 1}"'),
        ("100%", "100%%"),
        ("$HOME", "$$HOME"),
    ],
)
def test_systemd_words(word, expected):
    assert systemd_word(word) == expected


def test_sudoers_grants_exactly_four_verbs_of_one_unit():
    text = render(
        "engine-sudoers.j2",
        user="ops",
        unit="spark-engine-sglang.service",
        unit_base="spark-engine-sglang",
    )
    [rule] = [line for line in text.splitlines() if line and not line.startswith("#")]
    user, grant = rule.split(" ALL=(root) NOPASSWD: ")
    assert user == "ops"
    commands = grant.split(", ")
    assert len(commands) == 8 and "*" not in grant
    verbs = {command.split()[1] for command in commands}
    assert verbs == {"start", "stop", "restart", "status"}
    assert {command.split()[2] for command in commands} == {
        "spark-engine-sglang.service",
        "spark-engine-sglang",
    }


@pytest.mark.parametrize(
    ("engine", "flag"),
    [("vllm", "--limit-mm-per-prompt"), ("sglang", "--json-model-override-args")],
)
def test_a_mapping_for_a_json_text_flag_reaches_the_engine_as_one_json_word(engine, flag):
    """Issue 24: flags a release types as strings but reads as JSON take a YAML mapping; the
    unit carries it as one word systemd hands over unchanged (% and $ and quotes included)."""
    value = {"index_topk_pattern": "FFS 50% $HOME", "image": 2, "nested": {"a": [1, "b"]}}
    unit = rendered("s1", {"name": engine, "args": {flag: value}})
    [(_, argv)] = [value for _, key, value in read_unit(unit) if key == "ExecStart"]
    words = list(argv)
    assert json.loads(words[words.index(flag) + 1]) == value
