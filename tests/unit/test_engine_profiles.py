"""GB10 profiles: layering, overrides, speculative and multi-node, all within the catalogue."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Literal

import pytest

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.engine_plan.effective import (
    EngineConfigError,
    MultiNode,
    effective_args,
    effective_env,
    profile,
    speculative_on,
)
from sparkdeploy.knowledge.flags import (
    available_versions,
    check_flags,
    load_catalogue,
    spelling_notes,
    unread_env,
)
from sparkdeploy.knowledge.images import images
from sparkdeploy.knowledge.profiles import scoped

MODEL = "/opt/models/Mistral-Small-4-119B-2603-NVFP4"
DRAFT = "/opt/models/Mistral-Small-4-119B-2603-eagle"
PAIR_HEAD = MultiNode(nodes=2, rank=0, head="10.0.0.1", interface="enp1s0f0np0")
PAIR_WORKER = MultiNode(nodes=2, rank=1, head="10.0.0.1", interface="enp1s0f0np0")
VERSIONS = [
    (engine, version) for engine in ("sglang", "vllm") for version in available_versions(engine)
]


def settings_for(engine: Literal["sglang", "vllm"], version: str, **more) -> EngineSettings:
    """Settings pinned to ``version`` (with an image of that release when it is not the default)."""
    default = images()[engine]["default_image"]
    if images()[engine]["images"].get(default, {}).get("version") == version:
        return EngineSettings(name=engine, **more)
    repository = default.split(":")[0]
    return EngineSettings(name=engine, image=f"{repository}:v{version}-cu130", **more)


@pytest.mark.parametrize(("engine", "version"), VERSIONS)
def test_every_profile_flag_exists_in_its_catalogue(engine, version):
    """Every flag any profile section can emit is known to every catalogued release."""
    catalogue = load_catalogue(engine, version)
    section = profile(engine)
    always = [section["managed"], section["args"], section["speculative"]["args"]]
    always += [section["multinode"]["args"], section["multinode"]["worker_args"]]
    for model in (None, MLA, DENSE):
        emitted = [flag for part in always for flag in scoped(part, version, model)]
        assert [flag for flag in emitted if flag not in catalogue.flags] == []


@pytest.mark.parametrize(("engine", "version"), VERSIONS)
def test_every_profile_variable_is_read_by_its_release(engine, version):
    """The profile sets no engine variable (SGLANG_*, VLLM_*) its release does not read."""
    section = profile(engine)
    env: dict[str, str] = {}
    for part in (section["env"], section["speculative"]["env"], section["multinode"]["env"]):
        env |= scoped(part, version, None)
    assert unread_env(engine, version, env) == []


@pytest.mark.parametrize(("engine", "version"), VERSIONS)
@pytest.mark.parametrize("draft", [None, DRAFT])
@pytest.mark.parametrize("multinode", [None, PAIR_HEAD, PAIR_WORKER])
@pytest.mark.parametrize("model", [None, "MLA", "DENSE"])
def test_effective_args_pass_their_catalogue(engine, version, draft, multinode, model):
    model_class = {"MLA": MLA, "DENSE": DENSE}.get(model)
    args = effective_args(settings_for(engine, version), MODEL, draft, multinode, model_class)
    assert check_flags(engine, version, args) == []


def test_sglang_profile_is_the_reports_command():
    args = effective_args(EngineSettings(name="sglang"), MODEL, DRAFT)
    assert args == {
        "--model-path": MODEL,
        "--tokenizer-path": MODEL,
        "--host": "127.0.0.1",
        "--port": 30000,
        "--served-model-name": "Mistral-Small-4-119B-2603-NVFP4",
        "--attention-backend": "triton",
        "--mem-fraction-static": 0.75,
        "--cuda-graph-max-bs": 32,
        "--max-running-requests": 16,
        "--moe-runner-backend": "flashinfer_cutlass",
        "--speculative-algorithm": "EAGLE",
        "--speculative-draft-model-path": DRAFT,
        "--speculative-eagle-topk": 1,
        "--speculative-num-steps": 3,
        "--speculative-num-draft-tokens": 4,
    }
    assert effective_env(EngineSettings(name="sglang"), DRAFT) == {"SGLANG_ENABLE_SPEC_V2": "True"}


def test_vllm_profile_follows_report_002():
    settings = EngineSettings(
        name="vllm", served_model_name="mistral-small-4", context_length=131072
    )
    args = effective_args(settings, MODEL, model=MLA)
    assert args["--served-model-name"] == "mistral-small-4" and args["--max-model-len"] == 131072
    assert args["--attention-backend"] == "TRITON_MLA"
    assert args["--no-enable-flashinfer-autotune"] is True
    assert args["--gpu-memory-utilization"] == 0.8
    assert args["--cudagraph-capture-sizes"] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert "--speculative-config" not in args
    assert effective_env(settings) == {
        "TORCH_CUDA_ARCH_LIST": "12.1a",
        "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
        "VLLM_SKIP_P2P_CHECK": "1",
    }


def test_optional_flags_only_when_the_catalogue_has_them(monkeypatch):
    from sparkdeploy.knowledge import profiles

    monkeypatch.setitem(
        profile("sglang")["if_supported"], "--moe-runner-backend", "no_such_backend"
    )
    monkeypatch.setitem(profile("sglang")["if_supported"], "--no-such-flag", True)
    args = effective_args(EngineSettings(name="sglang"), MODEL)
    assert "--moe-runner-backend" not in args and "--no-such-flag" not in args
    assert profiles.profile("sglang")["args"]["--attention-backend"] == "triton"


def test_operator_overrides_replace_drop_and_negate():
    settings = EngineSettings(
        name="vllm",
        args={
            "--gpu-memory-utilization": 0.85,
            "--attention-backend": None,
            "--enable-flashinfer-autotune": True,
            "--device-memory-utilization": 0.86,  # an alias of --gpu-memory-utilization
        },
        env={"VLLM_SKIP_P2P_CHECK": None, "EXTRA": "1"},
    )
    args = effective_args(settings, MODEL)
    assert args["--gpu-memory-utilization"] == 0.86 and "--device-memory-utilization" not in args
    assert "--attention-backend" not in args
    assert (
        args["--enable-flashinfer-autotune"] is True
        and "--no-enable-flashinfer-autotune" not in args
    )
    env = effective_env(settings)
    assert "VLLM_SKIP_P2P_CHECK" not in env and env["EXTRA"] == "1"


def test_speculative_follows_the_draft_model_unless_set():
    assert "--speculative-algorithm" not in effective_args(EngineSettings(name="sglang"), MODEL)
    off = EngineSettings(name="sglang", speculative=False)
    assert "--speculative-algorithm" not in effective_args(off, MODEL, DRAFT)
    assert effective_env(off, DRAFT) == {}
    vllm = effective_args(EngineSettings(name="vllm"), MODEL, DRAFT)
    assert vllm["--speculative-config"] == {
        "method": "eagle",
        "model": DRAFT,
        "num_speculative_tokens": 3,
    }


def test_speculative_without_a_draft_is_refused():
    with pytest.raises(EngineConfigError) as caught:
        effective_args(EngineSettings(name="sglang", speculative=True), MODEL)
    assert caught.value.problems == [
        "speculative decoding is on but no draft model is configured: set draft_model_repo, or "
        "give the method in engine.args (--speculative-config / --speculative-algorithm) for "
        "one that needs no draft model (MTP, n-gram)"
    ]


def test_sglang_pair():
    head = effective_args(EngineSettings(name="sglang"), MODEL, None, PAIR_HEAD)
    worker = effective_args(EngineSettings(name="sglang"), MODEL, None, PAIR_WORKER)
    assert (head["--nnodes"], head["--node-rank"], worker["--node-rank"]) == (2, 0, 1)
    assert head["--dist-init-addr"] == "10.0.0.1:20000" and head["--tensor-parallel-size"] == 2
    env = effective_env(EngineSettings(name="sglang"), None, PAIR_HEAD)
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
    assert "SGLANG_HOST_IP" not in env  # no fabric address given: left out, never empty


def test_vllm_pair_runs_vllms_own_multinode_mode_by_default():
    head = effective_args(EngineSettings(name="vllm"), MODEL, None, PAIR_HEAD)
    worker = effective_args(EngineSettings(name="vllm"), MODEL, None, PAIR_WORKER)
    assert head["--distributed-executor-backend"] == "mp"
    assert (head["--nnodes"], head["--node-rank"], worker["--node-rank"]) == (2, 0, 1)
    assert head["--master-addr"] == worker["--master-addr"] == "10.0.0.1"
    assert head["--master-port"] == worker["--master-port"] == 29501
    assert head["--tensor-parallel-size"] == 2 and "--pipeline-parallel-size" not in head
    assert "--headless" not in head and worker["--headless"] is True


def test_vllm_pair_runs_ray_when_engine_args_choose_it():
    ray = EngineSettings(name="vllm", args={"--distributed-executor-backend": "ray"})
    head = effective_args(ray, MODEL, None, PAIR_HEAD)
    assert head["--distributed-executor-backend"] == "ray"
    assert head["--tensor-parallel-size"] == 2
    assert "--nnodes" not in head and "--headless" not in head  # Ray places the workers
    assert "--headless" not in effective_args(ray, MODEL, None, PAIR_WORKER)
    env = effective_env(ray, None, PAIR_HEAD)
    assert env["RAY_memory_monitor_refresh_ms"] == "0"


def test_multinode_rank_must_be_in_the_pair():
    with pytest.raises(ValueError, match="rank 2 is not in 0..1"):
        MultiNode(nodes=2, rank=2, head="10.0.0.1", interface="bond0")


# A model's class as the planner sees it (sparkdeploy/knowledge/model_class.py): only the
# attributes profile entries are scoped by.
MLA, DENSE = SimpleNamespace(mla=True), SimpleNamespace(mla=False)


def test_context_length_is_left_to_the_engine_unless_set():
    assert "--context-length" not in effective_args(EngineSettings(name="sglang"), MODEL)
    assert "--max-model-len" not in effective_args(EngineSettings(name="vllm"), MODEL)
    args = effective_args(EngineSettings(name="sglang", context_length=32768), MODEL)
    assert args["--context-length"] == 32768


def test_triton_mla_only_for_models_with_mla():
    vllm = EngineSettings(name="vllm")
    assert effective_args(vllm, MODEL, model=MLA)["--attention-backend"] == "TRITON_MLA"
    assert "--attention-backend" not in effective_args(vllm, MODEL, model=DENSE)
    assert "--attention-backend" not in effective_args(vllm, MODEL)  # unknown: vLLM picks


def test_entries_scoped_to_a_release_range_hold_at_its_edges(monkeypatch):
    entry = {"when": {"versions": ">=0.5.11,<0.5.13"}, "value": 8, "source": "test"}
    monkeypatch.setitem(profile("sglang")["args"], "--max-running-requests", entry)

    def running(version: str) -> object:
        return scoped(profile("sglang")["args"], version, None).get("--max-running-requests")

    assert [running(v) for v in ("0.5.10", "0.5.11", "0.5.12.post1", "0.5.13")] == [
        None,
        8,
        8,
        None,
    ]
    assert running("0.5.12rc1.dev5+g1234") == 8  # a build between releases counts by number


def test_vllm_spellings_are_read_as_the_release_reads_them():
    settings = EngineSettings(
        name="vllm",
        args={
            "--max_num_seqs": 4,  # `_` for `-`
            "--speculative-config.method": "mtp",  # dotted keys build the JSON object
            "--speculative-config.num_speculative_tokens": 2,
        },
    )
    args = effective_args(settings, MODEL)
    assert args["--max-num-seqs"] == 4 and "--max_num_seqs" not in args
    assert args["--speculative-config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert speculative_on(settings, None)  # MTP needs no draft folder


def test_the_draft_folder_stays_the_deploys_inside_an_operators_speculative_config():
    settings = EngineSettings(
        name="vllm",
        args={"--speculative-config": {"method": "eagle3", "num_speculative_tokens": 4}},
    )
    args = effective_args(settings, MODEL, DRAFT)
    assert args["--speculative-config"] == {
        "method": "eagle3",
        "num_speculative_tokens": 4,
        "model": DRAFT,
    }
    dropped = EngineSettings(
        name="vllm", args={"--speculative-config.num_speculative_tokens": None}
    )
    assert effective_args(dropped, MODEL, DRAFT)["--speculative-config"] == {
        "method": "eagle",
        "model": DRAFT,
    }


def test_sglang_abbreviations_are_written_out():
    settings = EngineSettings(name="sglang", args={"--mem-frac": 0.7})
    args = effective_args(settings, MODEL)
    assert args["--mem-fraction-static"] == 0.7 and "--mem-frac" not in args
    [note] = spelling_notes("sglang", "0.5.10", settings.args)
    assert note.startswith("--mem-frac: SGLang 0.5.10 reads it as --mem-fraction-static")


def test_a_speculative_method_is_seen_in_any_spelling_the_release_reads():
    abbreviated = EngineSettings(name="sglang", args={"--speculative-algo": "NGRAM"})
    assert speculative_on(abbreviated, None)  # argparse reads --speculative-algorithm
    dotted = EngineSettings(name="vllm", args={"--speculative_config.method": "ngram"})
    assert speculative_on(dotted, None)
    assert not speculative_on(EngineSettings(name="vllm", args={"--max-num-seqs": 4}), None)
