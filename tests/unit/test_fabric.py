"""RDMA inside the engine containers of a pair: the docker options from knowledge/fabric.yaml
and how they meet engine.docker_args, the NCCL/Gloo/engine environment per engine and
release, the host facts left in nccl.env, the memory guard that must precede SGLang's
imbalance switch, and the health check's judgement of NCCL's network from the journal."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.paths import MEMORY_GUARD
from sparkdeploy.deploys.engine.serve import _check_health
from sparkdeploy.engine_plan.effective import MultiNode, effective_env
from sparkdeploy.inventory import InventoryError
from sparkdeploy.knowledge.docker_options import parse_docker_args
from sparkdeploy.knowledge.fabric import capabilities, container_options, rdma_options
from sparkdeploy.knowledge.flags import available_versions, unread_env
from sparkdeploy.knowledge.profiles import profile, scoped
from sparkdeploy.knowledge.signatures import diagnose
from sparkdeploy.render import FILES, TEMPLATES
from tests.unit.test_engine_profiles import settings_for
from tests.unit.test_engine_units import exec_start, inventory, units
from tests.unit.test_ops_engine import UNIT, serving_with

JOURNALS = Path(__file__).parent / "fixtures" / "journals"
RDMA_WORDS = ("--device=/dev/infiniband", "--ulimit=memlock=-1:-1")
HEAD = MultiNode(
    nodes=2, rank=0, head="192.168.100.1", interface="enp1s0f0np0", address="192.168.100.1"
)
WORKER = MultiNode(
    nodes=2, rank=1, head="192.168.100.1", interface="enp1s0f0np0", address="192.168.100.2"
)


def options(*words: str) -> tuple[tuple[str, str | None], ...]:
    parsed, problems, _ = parse_docker_args(list(words))
    assert problems == []
    return parsed


# --- the data and its loader -------------------------------------------------------------


def test_the_container_options_and_why_no_capability():
    found = container_options()
    assert tuple(option.word for option in found) == RDMA_WORDS
    assert all(option.source and option.why for option in found)
    assert capabilities() == ()  # the field ran RoCE with devices and memlock only


@pytest.mark.parametrize(
    "given, words, problems",
    [
        ((), RDMA_WORDS, []),
        (("--shm-size=16g",), RDMA_WORDS, []),
        (("--device=/dev/infiniband",), RDMA_WORDS[1:], []),  # the operator's, written once
        (("--ulimit", "memlock=-1"), RDMA_WORDS[:1], []),  # -1 is -1:-1 to docker
        (("--ulimit=stack=67108864",), RDMA_WORDS, []),  # another limit: both still added
        (("--privileged",), RDMA_WORDS[1:], []),  # every device; limits stay limits
        (("--cap-add=IPC_LOCK",), RDMA_WORDS, []),
    ],
    ids=["none", "other", "same-device", "same-memlock", "stack", "privileged", "ipc-lock"],
)
def test_rdma_options_meet_the_operators(given, words, problems):
    assert rdma_options(options(*given)) == (words, problems, [])


def test_a_narrower_device_on_a_pair_is_kept_next_to_the_deploys_with_a_warning():
    words, problems, warnings = rdma_options(options("--device=/dev/infiniband/uverbs0"))
    assert words == RDMA_WORDS and problems == []
    assert warnings == [
        "--device /dev/infiniband/uverbs0 is written after the deploy's --device=/dev/infiniband, "
        "which stays (docker gives both; a node given twice is created once): NCCL must still "
        "find the IB devices under /dev/infiniband in the container, which the link test checks "
        "on the Spark (pyinfra inventory.py linktest.py)"
    ]


def test_another_memlock_on_a_pair_is_refused_naming_the_file():
    words, problems, _ = rdma_options(options("--ulimit=memlock=65536"))
    assert words == RDMA_WORDS[:1]
    assert problems[0].startswith(
        "--ulimit memlock=65536: on a multi-node Spark the deploy gives every engine container "
        "--ulimit=memlock=-1:-1 (sparkdeploy/knowledge/fabric.yaml): docker keeps the last"
    )


# --- the units of a pair -----------------------------------------------------------------


def rdma_in(words: list[str]) -> list[str]:
    return [word for word in words if word.startswith(("--device", "--ulimit", "--cap-add"))]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_container_of_a_pair_gets_the_devices_and_memlock(engine):
    for name in ("s1", "s2"):
        for unit in units(name, {"name": engine}, pair=True).values():
            words = exec_start(unit)
            if words[1] == "run":  # a docker exec runs in a container that has them
                assert rdma_in(words) == list(RDMA_WORDS)
                assert words.index(RDMA_WORDS[0]) < words.index("--env-file")


def test_one_spark_gets_none():
    words = exec_start(units("s1", {"name": "sglang"})["spark-engine-sglang.service"])
    assert rdma_in(words) == []


def test_a_pair_with_privileged_gets_no_second_device_set():
    engine = {"name": "sglang", "docker_args": ["--privileged", "--shm-size=16g"]}
    words = exec_start(units("s2", engine, pair=True)["spark-engine-sglang.service"])
    assert rdma_in(words) == ["--ulimit=memlock=-1:-1"]
    assert words.count("--privileged") == 1 and "--shm-size=16g" in words


def test_a_pair_repeating_the_deploys_options_writes_each_once():
    engine = {
        "name": "sglang",
        "docker_args": ["--ulimit", "memlock=-1", "--device=/dev/infiniband"],
    }
    words = exec_start(units("s1", engine, pair=True)["spark-engine-sglang.service"])
    assert rdma_in(words) == ["--ulimit=memlock=-1", "--device=/dev/infiniband"]  # theirs


def test_a_pair_with_a_single_uverbs_device_keeps_the_deploys_folder():
    engine = {"name": "sglang", "docker_args": ["--device=/dev/infiniband/uverbs1"]}
    paired = inventory(engine, pair=True)
    assert paired.engine_plans["s1"].rdma_args == RDMA_WORDS
    assert any("NCCL must still find the IB devices" in w for w in paired.warnings)
    words = exec_start(units("s1", engine, pair=True)["spark-engine-sglang.service"])
    assert rdma_in(words) == [*RDMA_WORDS, "--device=/dev/infiniband/uverbs1"]
    assert inventory(engine).engine_plans["s1"].rdma_args == ()  # alone it is the operator's


def test_a_pair_with_another_memlock_is_refused():
    engine = {"name": "sglang", "docker_args": ["--ulimit", "memlock=65536"]}
    with pytest.raises(InventoryError, match=r"remove it from engine\.docker_args"):
        inventory(engine, pair=True)


# --- the environment per engine and release ----------------------------------------------


def pair_env(engine: str, version: str, place: MultiNode = HEAD) -> dict[str, str]:
    return effective_env(settings_for(engine, version), None, place)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "version, switch",
    [
        ("0.5.4.post3", ("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "true")),
        ("0.5.6.post2", ("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "true")),
        ("0.5.7", ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "false")),
        ("0.5.10", ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "false")),
        ("0.5.23", ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "false")),
    ],
)
def test_sglang_pair_environment(version, switch):
    env = pair_env("sglang", version, WORKER)
    assert {name: env[name] for name in env if "INBALANCE" in name} == dict([switch])
    assert env["SGLANG_HOST_IP"] == "192.168.100.2"  # this Spark's own fabric address
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert (env["NCCL_CUMEM_ENABLE"], env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == (
        "0",
        "INFO",
        "INIT,NET",
    )
    assert "MASTER_ADDR" not in env and "MASTER_PORT" not in env  # from --dist-init-addr
    assert "VLLM_HOST_IP" not in env


@pytest.mark.parametrize("version", ["0.16.0", "0.20.1", "0.33.0"])
def test_vllm_pair_environment(version):
    env = pair_env("vllm", version)
    assert env["VLLM_HOST_IP"] == "192.168.100.1"
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert not any(name.startswith(("SGL", "MASTER_")) for name in env)


@pytest.mark.parametrize(
    "engine, version", [(e, v) for e in ("sglang", "vllm") for v in available_versions(e)]
)
def test_every_engine_variable_of_a_pair_is_read_by_its_release(engine, version):
    """Scoped right: no SGLANG_*/SGL_*/VLLM_* variable of the pair profile is one the
    release's catalogue says it does not read (it would have no effect there)."""
    assert unread_env(engine, version, pair_env(engine, version)) == []


def test_one_spark_gets_none_of_the_pair_environment():
    env = effective_env(EngineSettings(name="sglang"))
    assert not any(name.startswith(("NCCL_", "GLOO_", "SGLANG_HOST")) for name in env)


def test_operator_env_still_wins():
    settings = EngineSettings(name="sglang", env={"NCCL_DEBUG": "WARN", "NCCL_CUMEM_ENABLE": None})
    env = effective_env(settings, None, HEAD)
    assert env["NCCL_DEBUG"] == "WARN" and "NCCL_CUMEM_ENABLE" not in env


# --- the imbalance switch needs the memory guard on every node ----------------------------


def imbalance_off(env: dict[str, str]) -> bool:
    return (
        env.get("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK") == "true"
        or env.get("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK") == "false"
    )


@pytest.mark.parametrize("version", ["0.5.4.post3", "0.5.10", "0.5.23"])
def test_imbalance_check_off_only_behind_a_mandatory_memory_guard_on_every_rank(version):
    image = settings_for("sglang", version).image
    engine: dict[str, Any] = {"name": "sglang", "image": image, "version": version}
    inv = inventory(engine, pair=True)
    for name in ("s1", "s2"):
        plan = inv.engine_plans[name]
        assert imbalance_off(dict(plan.env))
        unit = units(name, engine, pair=True)["spark-engine-sglang.service"]
        lines = unit.splitlines()
        guard = lines.index(f"ExecStartPre={MEMORY_GUARD} 70 300")  # no `-`: a timeout stops it
        start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
        assert guard < start


def test_the_profile_says_why_the_switch_is_safe():
    section = profile("sglang")["multinode"]["env"]
    switches = [entry for name, entry in section.items() if "INBALANCE" in name]
    assert len(switches) == 2
    assert all("memory guard on every node" in entry["source"] for entry in switches)
    for version in available_versions("sglang"):  # exactly one switch, the one it reads
        assert len([name for name in scoped(section, version, None) if "INBALANCE" in name]) == 1


# --- nccl.env keeps host facts only ------------------------------------------------------


def test_nccl_env_and_the_profiles_share_no_variable():
    template = (TEMPLATES / "nccl.env.j2").read_text()
    host_facts = set(re.findall(r"(?:^|%\})([A-Z][A-Z0-9_]*)=", template, re.MULTILINE))
    assert host_facts == {
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "SPARK_NODE_ADDR",
        "SPARK_PEER_ADDR",
        "SPARK_HEAD_ADDR",
        "SPARK_NODE_RANK",
        "SPARK_NNODES",
    }
    for engine in ("sglang", "vllm"):
        assert not host_facts & set(profile(engine)["multinode"]["env"])


# --- the health check's judgement ----------------------------------------------------------


def load_health():
    path = FILES / "spark-engine-health"
    loader = importlib.machinery.SourceFileLoader("spark_engine_health", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    # No compiled form beside the shipped script; the worker's own setting comes back after.
    with mock.patch.object(sys, "dont_write_bytecode", True):
        loader.exec_module(module)
    return module


health = load_health()


def journal(name: str) -> list[str]:
    return (JOURNALS / f"{name}.log").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("name", ["sglang-pair-clean", "vllm-pair-clean"])
def test_a_pair_on_rdma_passes(name, capsys):
    assert health.nccl_transport(journal(name))[0] == "IB"
    assert health.judge_nccl("", journal(name)) == 0
    said = capsys.readouterr().out
    assert said.startswith("spark-engine-health: NCCL uses RDMA (NET/IB : Using [0]rocep1s0f1")


def test_a_socket_fallback_fails_with_nccl_lines_and_the_cause(capsys):
    lines = journal("sglang-pair-socket-fallback")
    network, evidence, causes = health.nccl_transport(lines)
    assert network == "Socket"
    assert causes[0].startswith("the container cannot open the RDMA devices")
    assert health.judge_nccl("", lines) == 1
    said = capsys.readouterr().err
    assert "NCCL fell back to TCP sockets (NET/Socket) instead of RDMA" in said
    assert "docker run --device=/dev/infiniband" in said
    assert "NCCL INFO NET/IB : No device found." in said
    found = [diagnosis.signature.id for diagnosis in diagnose(said)]
    assert found == ["nccl-ib-open-device-failed", "nccl-ib-no-device", "nccl-socket-fallback"]


def test_no_nccl_line_cannot_confirm_rdma(capsys):
    assert health.judge_nccl("", journal("sglang-clean")) == 1
    assert "no NCCL transport line in the engine's journal" in capsys.readouterr().err


def test_an_hca_mismatch_is_named():
    lines = [
        "spark-2:61:61 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0",
        "spark-2:61:61 [0] NCCL INFO NET/IB : No device found.",
        "spark-2:61:61 [0] NCCL INFO NET/Socket : Using [0]enp1s0f0np0:192.168.100.2<0>",
    ]
    network, evidence, causes = health.nccl_transport(lines)
    assert network == "Socket" and evidence == lines
    assert causes == [causes[0]] and "NCCL_IB_HCA names none of the Spark's" in causes[0]


def test_no_api_needs_a_unit_and_nccl():
    with pytest.raises(SystemExit):
        health.main(["--no-api"])
    with pytest.raises(SystemExit):
        health.main([])  # --port is needed to check an API


# --- the operation asks for it -----------------------------------------------------------


def test_serving_checks_nccl_with_the_api_on_the_head_and_alone_elsewhere():
    head = serving_with(None, nccl=True).callbacks
    rank = serving_with(None, health=False, nccl=True).callbacks
    alone = serving_with(None, health=False).callbacks
    assert [(c.function, c.args[1], c.kwargs["nccl"]) for c in head + rank] == [
        (_check_health, ["--port", "30000", "--nccl", "--unit", UNIT, "--timeout", "1800"], True),
        (_check_health, ["--no-api", "--nccl", "--unit", UNIT, "--timeout", "1800"], True),
    ]
    assert alone == []


def test_real_nccls_ib_line_without_a_device_is_no_proof_of_rdma():
    # NCCL 2.28.9 (torch 2.11) on two GPUs of one host with no RDMA device, P2P and SHM off,
    # as tools/device/nccl_ring.py recorded it on an H100 host (2026-11-26).
    lines = [
        "vm:653:653 [0] NCCL INFO NET/IB : No device found.",
        "vm:653:653 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>",
        "vm:653:653 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>",
        "vm:653:653 [0] NCCL INFO Using network Socket",
    ]
    assert health.nccl_transport(lines)[0] == "Socket"
    # without NCCL's "Using network" line (another NCCL_DEBUG_SUBSYS), still not RDMA
    assert health.nccl_transport(lines[:3])[0] == "Socket"
    assert health.nccl_transport(lines[1:2])[0] == ""
    listed = "spark-1:9:9 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE"
    assert health.nccl_transport([listed])[0] == "IB"
