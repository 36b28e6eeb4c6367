"""The rendered engine units and sudoers files, for both engines, on one Spark and a pair."""

from __future__ import annotations

import json
import shlex

import pytest

from operations.engine import systemd_word, unit_text
from operations.settings import validate_inventory
from operations.templates import render

PAIR_QSFP = [
    [{"interface": "enp1s0f0np0", "address": f"192.168.100.{n}/24"},
     {"interface": "enP2p1s0f0np0", "address": f"192.168.101.{n}/24"}]
    for n in (1, 2)
]


def inventory(engine: dict, pair: bool = False):
    sparks = {"s1": {"ssh_host": "a"}}
    if pair:
        sparks = {f"s{n}": {"ssh_host": f"h{n}", "qsfp": PAIR_QSFP[n - 1]} for n in (1, 2)}
    return validate_inventory({
        "defaults": {"ssh_user": "nvidia", "engine": engine,
                     "model_repo": "mistralai/Mistral-Small-4-119B-2603-NVFP4",
                     "model_base_repo": "mistralai/Mistral-Small-4-119B-2603",
                     "draft_model_repo": "mistralai/Mistral-Small-4-119B-2603-eagle"},
        "sparks": sparks,
    }, "inventory/sparks.yml")


def exec_start(unit: str) -> list[str]:
    [line] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def rendered(name: str, engine: dict, pair: bool = False) -> str:
    inv = inventory(engine, pair)
    plan = inv.engine_plans[name]
    return unit_text(plan, inv.sparks[name], f"/etc/spark-deploy/{plan.container}.env")


def test_sglang_single_node_unit():
    unit = rendered("s1", {"name": "sglang"})
    words = exec_start(unit)
    assert words[:3] == ["/usr/bin/docker", "run", "--name"]
    assert "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a" in words
    image = words.index("lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a")
    assert words[image + 1:image + 4] == ["python3", "-m", "sglang.launch_server"]
    assert "--rm" not in words and "--restart" not in words and "-d" not in words
    assert words[words.index("--attention-backend") + 1] == "triton"
    assert words[words.index("--speculative-eagle-topk") + 1] == "1"
    assert words[words.index("--host") + 1] == "127.0.0.1"
    assert "--nnodes" not in words and "EnvironmentFile=/etc/spark-deploy/nccl.env" not in unit
    assert "ExecStartPre=/usr/local/sbin/spark-memory-guard 70 300" in unit
    assert ("ExecStartPre=/usr/local/sbin/spark-model-check --verify "
            "/opt/models/Mistral-Small-4-119B-2603-NVFP4 "
            "mistralai/Mistral-Small-4-119B-2603-NVFP4@main 1") in unit
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
    words = exec_start(unit_text(plan, inv.sparks["s1"], "/etc/spark-deploy/x.env"))
    image = words.index("vllm/vllm-openai:v0.33.0")
    assert words[image + 1] == "--model"
    assert words[words.index("--gpu-memory-utilization") + 1] == "0.8"
    assert dict(plan.env)["TORCH_CUDA_ARCH_LIST"] == "12.1a"
    assert dict(plan.env)["VLLM_SKIP_P2P_CHECK"] == "1"
    spec = words[words.index("--speculative-config") + 1]
    assert json.loads(spec)["method"] == "eagle"  # one JSON word, quoted for systemd


def test_vllm_pair_is_refused_until_ray_units_exist():
    with pytest.raises(Exception) as caught:
        inventory({"name": "vllm"}, pair=True)
    assert "vLLM across two Sparks" in str(caught.value)


@pytest.mark.parametrize("word, expected", [
    ("plain", "plain"),
    ('{"a": 1}', '"{\\"a\\": 1}"'),
    ("100%", "100%%"),
    ("$HOME", "$$HOME"),
])
def test_systemd_words(word, expected):
    assert systemd_word(word) == expected


def test_sudoers_grants_exactly_four_verbs_of_one_unit():
    text = render("engine-sudoers.j2", user="ops", unit="spark-engine-sglang.service",
                  unit_base="spark-engine-sglang")
    [rule] = [line for line in text.splitlines() if line and not line.startswith("#")]
    user, grant = rule.split(" ALL=(root) NOPASSWD: ")
    assert user == "ops"
    commands = grant.split(", ")
    assert len(commands) == 8 and "*" not in grant
    verbs = {command.split()[1] for command in commands}
    assert verbs == {"start", "stop", "restart", "status"}
    assert {command.split()[2] for command in commands} == {
        "spark-engine-sglang.service", "spark-engine-sglang"}
