"""GB10 rules: each one refuses (or warns about) a configuration it names, inside the scope its
sources saw; the profiles pass; engine.accept turns one rule into a notice."""

from __future__ import annotations

import pytest

from sparkdeploy.config import engine as engine_settings
from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.engine_plan import rules
from sparkdeploy.engine_plan.effective import MultiNode, effective_args, effective_env
from sparkdeploy.engine_plan.rules import check_rules, load_rules
from sparkdeploy.knowledge.flags import available_versions, load_catalogue
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from tests.unit import model_configs as cfg

MODEL, DRAFT = "/opt/models/Mistral-Small-4-119B-2603-NVFP4", "/opt/models/eagle"
PAIR = MultiNode(nodes=2, rank=0, head="10.0.0.1", interface="enp1s0f0np0")
MISTRAL = ModelClass.from_config(cfg.MISTRAL_SMALL_4)
QWEN = ModelClass.from_config(cfg.QWEN3_DENSE)
DEEPSEEK = ModelClass.from_config(cfg.DEEPSEEK_V3)
GPT_OSS = ModelClass.from_config(cfg.GPT_OSS)
SGLANG_12 = {"image": "lmsysorg/sglang:v0.5.12", "version": "0.5.12"}
SGLANG_23 = {"image": "lmsysorg/sglang:v0.5.23", "version": "0.5.23"}
QWEN_FP8 = ModelClass(architectures=("Qwen3MoeForCausalLM",), moe=True, quantization="fp8")
# NVIDIA's first Spark image: SGLang 0.5.3.post3 (NVIDIA/dgx-spark-playbooks#68)
SPARK_IMAGE = {"image": "lmsysorg/sglang:spark@sha256:" + "c" * 64, "version": "0.5.3.post3"}
DFLASH = {"--speculative-config": {"method": "dflash", "num_speculative_tokens": 15}}
RAY_PAIR = {"--distributed-executor-backend": "ray", "--tensor-parallel-size": 2}
GEMMA4 = ModelClass(architectures=("Gemma4ForConditionalGeneration",), model_type=("gemma4",))
DEEPSEEK_V4 = ModelClass(
    architectures=("DeepseekV4ForCausalLM",), model_type=("deepseek_v4",), mla=True, moe=True
)
EUGR_ID = {"image": "sha256:" + "e" * 64, "launch": "command", "version": "0.33.0"}
EUGR_B12X = {"image": "eugr/spark-vllm-b12x:latest@sha256:" + "b" * 64, "version": "0.33.0"}
# NGC 26.07 holds vLLM 0.24.0-dev (images.yaml): its catalogue is 0.24.0, its rules' release 0.24.0.dev0
NGC_2607 = {"image": "nvcr.io/nvidia/vllm:26.07-py3", "version": "0.24.0"}
MTP4 = {"--speculative-config": {"method": "mtp", "num_speculative_tokens": 4}}
# scitrera's build of SGLang main after 0.5.9, flags checked against the newest catalogue
SGLANG_DEV = {"image": "scitrera/dgx-spark-sglang:0.5.9-dev-2f592c3b-t5", "version": "0.5.23"}
SGLANG_UNKNOWN = {"image": "ghcr.io/someone/sglang-gb10:v1", "version": "0.5.23"}
VLLM_UNKNOWN = {"image": "nvcr.io/nvidia/vllm:26.09-py3", "version": "0.33.0"}

# rule id -> (engine, settings fields, extra args over the profile, env over the profile,
#             text the message must contain: the flag and value, variable, image or option,
#             model class). Each example is inside the rule's scope.
EXAMPLES = {
    "sglang-flashinfer-attention": ("sglang", {}, {"--attention-backend": "flashinfer"}, {}, "--attention-backend flashinfer", MISTRAL),
    "vllm-flashinfer-attention": ("vllm", {}, {"--attention-backend": "FLASHINFER_MLA"}, {}, "--attention-backend FLASHINFER_MLA", MISTRAL),
    "vllm-flashinfer-attention-accuracy": ("vllm", {}, {"--attention-backend": "FLASHINFER"}, {}, "--attention-backend FLASHINFER", QWEN),
    "sglang-datacenter-attention": ("sglang", {}, {"--decode-attention-backend": "fa3"}, {}, "--decode-attention-backend fa3", MISTRAL),
    "sglang-fa4-attention": ("sglang", {}, {"--attention-backend": "fa4"}, {}, "--attention-backend fa4", MISTRAL),
    "vllm-datacenter-attention": ("vllm", {}, {"--attention-backend": "FLASHMLA"}, {}, "--attention-backend FLASHMLA", MISTRAL),
    "vllm-flash-attn-older-release": ("vllm", {"version": "0.32.0"}, {"--attention-backend": "FLASH_ATTN"}, {}, "--attention-backend FLASH_ATTN", QWEN),
    "vllm-mla-backend-non-mla-model": ("vllm", {}, {"--attention-backend": "TRITON_MLA"}, {}, "--attention-backend TRITON_MLA", QWEN),
    "vllm-non-mla-backend-mla-model": ("vllm", {}, {"--attention-backend": "TRITON_ATTN"}, {}, "--attention-backend TRITON_ATTN", DEEPSEEK),
    "vllm-attention-backend-env-ignored": ("vllm", {}, {}, {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, "VLLM_ATTENTION_BACKEND=TRITON_MLA", MISTRAL),
    "sglang-mem-fraction-static": ("sglang", {}, {"--mem-fraction-static": 0.88}, {}, "--mem-fraction-static 0.88", MISTRAL),
    "vllm-gpu-memory-utilization": ("vllm", {"image": "nvcr.io/nvidia/vllm:26.10-py3"}, {"--gpu-memory-utilization": 0.95}, {}, "--gpu-memory-utilization 0.95", MISTRAL),
    "fastsafetensors-gemma4-eugr": ("vllm", EUGR_ID, {"--load-format": "fastsafetensors"}, {}, "--load-format fastsafetensors", GEMMA4),
    "vllm-mtp-v1-runner": ("vllm", NGC_2607, MTP4, {}, "--speculative-config.method mtp", QWEN),
    "vllm-mtp-prefix-caching": ("vllm", {"version": "0.25.1"}, MTP4, {}, "--speculative-config.method mtp", QWEN),
    "sglang-dflash-mem-fraction": ("sglang", SGLANG_23, {"--speculative-algorithm": "DFLASH", "--mem-fraction-static": 0.95}, {}, "--mem-fraction-static 0.95", QWEN),
    "vllm-deepgemm-unknown-recipe": ("vllm", NGC_2607, {}, {}, "VLLM_USE_DEEP_GEMM unset", QWEN_FP8),
    "vllm-b12x-without-b12x": ("vllm", {"image": "eugr/spark-vllm:latest@sha256:" + "f" * 64}, {"--linear-backend": "b12x"}, {}, "--linear-backend b12x", QWEN),
    "sglang-weight-loader-disable-mmap": ("sglang", SGLANG_23, {"--weight-loader-disable-mmap": True}, {}, "--weight-loader-disable-mmap", DEEPSEEK_V4),
    "vllm-ray-missing-in-image": ("vllm", {"image": "nvcr.io/nvidia/vllm:26.05-py3"}, RAY_PAIR, {}, "--distributed-executor-backend ray", MISTRAL),
    "vllm-ray-maybe-missing-in-image": ("vllm", {}, RAY_PAIR, {}, "--distributed-executor-backend ray", MISTRAL),
    "vllm-dflash-max-num-seqs": ("vllm", {"image": "vllm/vllm-openai:v0.25.1", "version": "0.25.1"}, DFLASH, {}, "--speculative-config.method dflash", QWEN),
    "vllm-cutlass-fp8-published-build": ("vllm", {}, {}, {}, "VLLM_DISABLED_KERNELS unset", QWEN_FP8),
    "vllm-gpu-memory-utilization-high": ("vllm", {}, {"--gpu-memory-utilization": 0.9}, {}, "--gpu-memory-utilization 0.9", MISTRAL),
    "sglang-cuda-graph-max-bs": ("sglang", {}, {"--cuda-graph-max-bs": 64}, {}, "--cuda-graph-max-bs 64", MISTRAL),
    "sglang-eagle-topk": ("sglang", {}, {"--speculative-eagle-topk": 4}, {}, "--speculative-eagle-topk 4", MISTRAL),
    "sglang-spec-v2-missing": ("sglang", {}, {}, {"SGLANG_ENABLE_SPEC_V2": None}, "--speculative-algorithm EAGLE", MISTRAL),
    "sglang-spec-v2-off": ("sglang", SGLANG_12, {}, {"SGLANG_ENABLE_SPEC_V2": "False"}, "--speculative-algorithm EAGLE", MISTRAL),
    "sglang-spec-v2-removed": ("sglang", SGLANG_23, {}, {}, "SGLANG_ENABLE_SPEC_V2=True", MISTRAL),
    "docker-rm-with-restart": ("sglang", {}, {"--rm": True}, {}, "docker --rm", MISTRAL),
    "enforce-eager": ("vllm", {}, {"--enforce-eager": True}, {}, "--enforce-eager", MISTRAL),
    "sglang-skip-server-warmup": ("sglang", {}, {"--skip-server-warmup": True}, {}, "--skip-server-warmup", MISTRAL),
    "load-format-fastsafetensors": ("vllm", {"image": "nvcr.io/nvidia/vllm:26.04-py3"}, {"--load-format": "fastsafetensors"}, {}, "--load-format fastsafetensors", MISTRAL),
    "image-unpinned": ("vllm", {"image": "vllm/vllm-openai:latest"}, {}, {}, "image vllm/vllm-openai:latest", MISTRAL),
    "sglang-image-without-cu13": ("sglang", {"image": "lmsysorg/sglang:v0.5.10"}, {}, {}, "image lmsysorg/sglang:v0.5.10", MISTRAL),
    "sglang-image-cu12": ("sglang", {**SGLANG_12, "image": "lmsysorg/sglang:v0.5.12-cu129"}, {}, {}, "image lmsysorg/sglang:v0.5.12-cu129", MISTRAL),
    "multinode-socket-interface": ("sglang", {}, {"--nnodes": 2}, {}, "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME unset", MISTRAL),
    "ray-memory-monitor": ("vllm", {}, {"--distributed-executor-backend": "ray"}, {}, "RAY_memory_monitor_refresh_ms unset", MISTRAL),
    "nccl-ib-gid-index-fixed": ("vllm", {}, {}, {"NCCL_IB_GID_INDEX": "3"}, "NCCL_IB_GID_INDEX=3", MISTRAL),
    "vllm-flashinfer-autotune": ("vllm", {}, {"--enable-flashinfer-autotune": True}, {}, "--enable-flashinfer-autotune", MISTRAL),
    "vllm-moe-backend-sm121": ("vllm", {}, {"--moe-backend": "flashinfer_cutlass"}, {}, "--moe-backend flashinfer_cutlass", MISTRAL),
    "deep-gemm-sm121": ("sglang", {}, {"--fp8-gemm-backend": "deep_gemm"}, {}, "--fp8-gemm-backend deep_gemm", MISTRAL),
    "vllm-mxfp4-quantization": ("vllm", {}, {"--quantization": "mxfp4"}, {}, "--quantization mxfp4", QWEN),
    "vllm-torch-cuda-arch": ("vllm", {}, {}, {"TORCH_CUDA_ARCH_LIST": "12.0"}, "TORCH_CUDA_ARCH_LIST=12.0", MISTRAL),
    "sglang-max-running-requests": ("sglang", {}, {"--max-running-requests": None}, {}, "--max-running-requests not set", MISTRAL),
    "bind-all-interfaces": ("sglang", {"bind": "0.0.0.0"}, {}, {}, "bind 0.0.0.0", MISTRAL),
}  # fmt: skip


@pytest.fixture(autouse=True)
def uncatalogued_releases(monkeypatch):
    """Releases with no committed catalogue yet (SGLang 0.5.13+, vLLM before 0.33; they come
    from the catalogues branch) read the nearest committed one: these tests are about the
    release ranges of the rules, not about flags."""
    real = load_catalogue

    def nearest(engine: str, version: str):
        if version in available_versions(engine):
            return real(engine, version)
        return real(engine, available_versions(engine)[-1 if engine == "sglang" else 0])

    monkeypatch.setattr(engine_settings, "load_catalogue", nearest)  # EngineSettings.catalogue


def violations_for(engine, fields, args, env, model=None):
    """The profile (with a draft model) plus the example's changes, checked by the rules."""
    settings = EngineSettings.model_construct(**EngineSettings(name=engine).model_dump() | fields)
    effective = effective_args(EngineSettings(name=engine), MODEL, DRAFT)
    effective_environment = effective_env(EngineSettings(name=engine), DRAFT)
    for flag, value in args.items():
        effective.pop(flag, None) if value is None else effective.__setitem__(flag, value)
    for name, value in env.items():
        effective_environment.pop(
            name, None
        ) if value is None else effective_environment.__setitem__(name, value)
    return check_rules(settings, effective, effective_environment, model)


def severity_of(rule_id, engine, fields=None, args=None, env=None, model=MISTRAL):
    found = [
        v
        for v in violations_for(engine, fields or {}, args or {}, env or {}, model)
        if v.id == rule_id
    ]
    assert len(found) <= 1, found
    return (found[0].severity, found[0].message) if found else (None, "")


def test_every_rule_has_an_example():
    assert sorted(EXAMPLES) == sorted(rule.id for rule in load_rules())


def test_every_rule_has_sources_and_a_scope():
    for rule in load_rules():
        assert rule.sources, rule.id
        assert all(s.seen and s.where and s.date for s in rule.sources), rule.id
        assert rule.scope is not None, rule.id
        if rule.severity == "error" and rule.otherwise:
            assert rule.otherwise["severity"] == "warning", rule.id


@pytest.mark.parametrize("rule", load_rules(), ids=lambda rule: rule.id)
def test_rule_refuses_its_example(rule):
    engine, fields, args, env, subject, model = EXAMPLES[rule.id]
    matched = [v for v in violations_for(engine, fields, args, env, model) if v.id == rule.id]
    assert len(matched) == 1, matched
    [violation] = matched
    assert violation.severity == rule.severity
    assert violation.message == f"{subject}: {rule.summary}"
    assert (violation.reason, violation.fix) == (rule.reason, rule.fix)
    assert str(violation).startswith(f"{rule.severity} [{rule.id}] {subject}")


# (rule, engine, settings fields, args, env, model) -> severity at the edges of the scope
EDGES = [
    # FlashInfer attention on SGLang: seen crashing on 0.5.10 only; NVIDIA uses it later
    ("sglang-flashinfer-attention", "sglang", {}, {"--attention-backend": "flashinfer"}, {}, MISTRAL, "error"),
    ("sglang-flashinfer-attention", "sglang", SGLANG_12, {"--prefill-attention-backend": "flashinfer"}, {}, MISTRAL, "warning"),
    ("sglang-flashinfer-attention", "sglang", SPARK_IMAGE, {"--attention-backend": "flashinfer"}, {}, MISTRAL, "warning"),
    # FA4: datacenter-only before 0.5.18, an SM12x FA4 from 0.5.18
    ("sglang-fa4-attention", "sglang", {"version": "0.5.17"}, {"--attention-backend": "fa4"}, {}, QWEN, "error"),
    ("sglang-fa4-attention", "sglang", {"version": "0.5.18"}, {"--attention-backend": "fa4"}, {}, QWEN, "warning"),
    # vLLM FlashInfer: MLA flavour refused, plain FLASHINFER a warning
    ("vllm-flashinfer-attention", "vllm", {}, {"--attention-backend": "FLASHINFER"}, {}, QWEN, None),
    ("vllm-flashinfer-attention-accuracy", "vllm", {}, {"--attention-backend": "FLASHINFER"}, {}, QWEN, "warning"),
    # FLASH_ATTN: vLLM's own first choice for non-MLA models on GB10 in 0.33.0
    ("vllm-flash-attn-older-release", "vllm", {}, {"--attention-backend": "FLASH_ATTN"}, {}, QWEN, None),
    ("vllm-datacenter-attention", "vllm", {}, {"--attention-backend": "FLASH_ATTN"}, {}, QWEN, None),
    ("vllm-non-mla-backend-mla-model", "vllm", {}, {"--attention-backend": "FLASH_ATTN"}, {}, QWEN, None),
    ("vllm-non-mla-backend-mla-model", "vllm", {}, {"--attention-backend": "FLASH_ATTN"}, {}, MISTRAL, "error"),
    ("vllm-non-mla-backend-mla-model", "vllm", {}, {"--attention-backend": "FLASHINFER"}, {}, DEEPSEEK, "error"),
    # TRITON_MLA on a non-MLA model
    ("vllm-mla-backend-non-mla-model", "vllm", {}, {"--attention-backend": "TRITON_MLA"}, {}, QWEN, "error"),
    ("vllm-mla-backend-non-mla-model", "vllm", {}, {"--attention-backend": "TRITON_MLA"}, {}, GPT_OSS, "error"),
    ("vllm-mla-backend-non-mla-model", "vllm", {}, {"--attention-backend": "TRITON_MLA"}, {}, MISTRAL, None),
    ("vllm-mla-backend-non-mla-model", "vllm", {}, {"--attention-backend": "TRITON_MLA"}, {}, DEEPSEEK, None),
    ("vllm-mla-backend-non-mla-model", "vllm", {}, {"--attention-config": '{"backend": "TRITON_MLA"}'}, {}, QWEN, "error"),
    # memory fraction / CUDA graphs: error where seen (0.5.10, Mistral Small 4), else warning
    ("sglang-mem-fraction-static", "sglang", {}, {"--mem-fraction-static": 0.88}, {}, QWEN, "warning"),
    ("sglang-mem-fraction-static", "sglang", SGLANG_12, {"--mem-fraction-static": 0.88}, {}, MISTRAL, "warning"),
    ("sglang-mem-fraction-static", "sglang", {}, {"--mem-fraction-static": 0.85}, {}, MISTRAL, None),
    ("sglang-cuda-graph-max-bs", "sglang", {}, {"--cuda-graph-bs": [8, 16, 48]}, {}, MISTRAL, "error"),
    ("sglang-cuda-graph-max-bs", "sglang", SGLANG_12, {"--cuda-graph-max-bs": 64}, {}, MISTRAL, "warning"),
    ("sglang-cuda-graph-max-bs", "sglang", SGLANG_23, {"--cuda-graph-max-bs-decode": 64}, {}, MISTRAL, "warning"),
    ("sglang-cuda-graph-max-bs", "sglang", {}, {"--cuda-graph-max-bs": 32}, {}, MISTRAL, None),
    ("sglang-cuda-graph-max-bs", "sglang", SGLANG_23, {"--cuda-graph-config": {"decode": {"max_bs": 48}}}, {}, MISTRAL, "warning"),
    ("sglang-cuda-graph-max-bs", "sglang", SGLANG_23, {"--cuda-graph-config": '{"prefill": {"bs": [16, 64]}}'}, {}, MISTRAL, "warning"),
    ("sglang-cuda-graph-max-bs", "sglang", SGLANG_23, {"--cuda-graph-config": {"decode": {"max_bs": 32}}}, {}, MISTRAL, None),
    # speculative v2: by release
    ("sglang-eagle-topk", "sglang", SGLANG_12, {"--speculative-eagle-topk": 4}, {}, MISTRAL, None),
    ("sglang-spec-v2-missing", "sglang", SGLANG_12, {}, {"SGLANG_ENABLE_SPEC_V2": None}, MISTRAL, None),
    ("sglang-spec-v2-off", "sglang", {}, {}, {"SGLANG_ENABLE_SPEC_V2": "False"}, MISTRAL, None),
    ("sglang-spec-v2-off", "sglang", {"version": "0.5.13"}, {}, {"SGLANG_ENABLE_SPEC_V2": "0"}, MISTRAL, "warning"),
    ("sglang-spec-v2-removed", "sglang", {"version": "0.5.13"}, {}, {}, MISTRAL, None),
    ("sglang-spec-v2-removed", "sglang", {"version": "0.5.14"}, {}, {}, MISTRAL, "warning"),
    # utilisation above 0.90: a risk NVIDIA documents, no crash on record; eugr runs 0.95
    ("vllm-gpu-memory-utilization", "vllm", {"image": "nvcr.io/nvidia/vllm:26.05-py3"}, {"--gpu-memory-utilization": 0.91}, {}, MISTRAL, "warning"),
    ("vllm-gpu-memory-utilization", "vllm", {}, {"--gpu-memory-utilization": 0.95}, {}, MISTRAL, "warning"),
    ("vllm-gpu-memory-utilization", "vllm", {"image": "nvcr.io/nvidia/vllm:26.05-py3"}, {"--gpu-memory-utilization": 0.9}, {}, MISTRAL, None),
    # Ray in the image: NGC from 26.05 ships none; the official image may not
    ("vllm-ray-missing-in-image", "vllm", {"image": "nvcr.io/nvidia/vllm:26.03-py3"}, RAY_PAIR, {}, MISTRAL, None),
    ("vllm-ray-missing-in-image", "vllm", {"image": "nvcr.io/nvidia/vllm:26.10-py3"}, RAY_PAIR, {}, MISTRAL, "error"),
    ("vllm-ray-missing-in-image", "vllm", {"image": "nvcr.io/nvidia/vllm:26.10-py3"}, {"--distributed-executor-backend": "ray"}, {}, MISTRAL, None),
    ("vllm-ray-maybe-missing-in-image", "vllm", {"image": "scitrera/dgx-spark-vllm:0.17.1-t5"}, RAY_PAIR, {}, MISTRAL, None),
    # DFlash needs a small --max-num-seqs: seen on vLLM 0.25
    ("vllm-dflash-max-num-seqs", "vllm", {"image": "vllm/vllm-openai:v0.25.1", "version": "0.25.1"}, {**DFLASH, "--max-num-seqs": 4}, {}, QWEN, None),
    ("vllm-dflash-max-num-seqs", "vllm", {"image": "vllm/vllm-openai:v0.25.1", "version": "0.25.1"}, {**DFLASH, "--max-num-seqs": 64}, {}, QWEN, "error"),
    ("vllm-dflash-max-num-seqs", "vllm", {"image": "vllm/vllm-openai:v0.26.0", "version": "0.26.0"}, DFLASH, {}, QWEN, "warning"),
    ("vllm-dflash-max-num-seqs", "vllm", {}, {"--speculative-config.method": "dflash"}, {}, QWEN, "warning"),
    ("vllm-dflash-max-num-seqs", "vllm", {}, {"--speculative-config": {"method": "mtp"}}, {}, QWEN, None),
    # CUTLASS FP8 on published vLLM builds: FP8 checkpoints only, unless the kernel is disabled
    ("vllm-cutlass-fp8-published-build", "vllm", {}, {}, {}, QWEN, None),
    ("vllm-cutlass-fp8-published-build", "vllm", {}, {}, {"VLLM_DISABLED_KERNELS": "CutlassFp8BlockScaledMMKernel"}, QWEN_FP8, None),
    ("vllm-cutlass-fp8-published-build", "vllm", {"image": "sha256:" + "a" * 64, "launch": "command"}, {}, {}, QWEN_FP8, None),
    # fastsafetensors: error only in the NGC 26.03/26.04 images
    ("load-format-fastsafetensors", "vllm", {"image": "nvcr.io/nvidia/vllm:26.03-py3"}, {"--load-format": "fastsafetensors"}, {}, MISTRAL, "error"),
    ("load-format-fastsafetensors", "vllm", {"image": "nvcr.io/nvidia/vllm:26.05-py3"}, {"--load-format": "fastsafetensors"}, {}, MISTRAL, "warning"),
    ("load-format-fastsafetensors", "vllm", {}, {"--load-format": "fastsafetensors"}, {}, MISTRAL, "warning"),
    ("load-format-fastsafetensors", "sglang", {}, {"--speculative-draft-load-format": "fastsafetensors"}, {}, MISTRAL, "warning"),
    # SGLang image CUDA: plain tags are CUDA 13 from 0.5.11, -cu129 is CUDA 12
    ("sglang-image-without-cu13", "sglang", SGLANG_12, {}, {}, MISTRAL, None),
    ("sglang-image-without-cu13", "sglang", {"image": "scitrera/dgx-spark-sglang:0.5.10"}, {}, {}, MISTRAL, None),
    ("sglang-image-without-cu13", "sglang", {"image": "lmsysorg/sglang:v0.5.10-cu129"}, {}, {}, MISTRAL, "error"),
    ("sglang-image-without-cu13", "sglang", SPARK_IMAGE, {}, {}, MISTRAL, None),
    ("sglang-image-without-cu13", "sglang", {"image": "lmsysorg/sglang:v0.5.9", "version": "0.5.9"}, {}, {}, MISTRAL, "error"),
    ("sglang-image-cu12", "sglang", {"image": "lmsysorg/sglang:v0.5.10-cu129"}, {}, {}, MISTRAL, None),
    ("sglang-image-cu12", "sglang", {**SGLANG_12, "image": "lmsysorg/sglang:v0.5.12-cu130"}, {}, {}, MISTRAL, None),
    # node count
    ("multinode-socket-interface", "vllm", {}, {"--tensor-parallel-size": 2}, {}, MISTRAL, "error"),
    ("multinode-socket-interface", "vllm", {}, {"--tensor-parallel-size": 1}, {}, MISTRAL, None),
    # mxfp4 on an mxfp4 checkpoint is fine
    ("vllm-mxfp4-quantization", "vllm", {}, {"--quantization": "mxfp4"}, {}, GPT_OSS, None),
    # the MoE backend for SM12x is not flagged
    ("vllm-moe-backend-sm121", "vllm", {}, {"--moe-backend": "marlin"}, {}, MISTRAL, None),
    # vLLM's default utilisation (0.92 in 0.33.0) counts when the flag is dropped
    ("vllm-gpu-memory-utilization", "vllm", {}, {"--gpu-memory-utilization": None}, {}, MISTRAL, "warning"),
    ("vllm-gpu-memory-utilization", "vllm", {"image": "nvcr.io/nvidia/vllm:26.10-py3"}, {"--gpu-memory-utilization": None}, {}, MISTRAL, "warning"),
    ("vllm-gpu-memory-utilization", "vllm", VLLM_UNKNOWN, {"--gpu-memory-utilization": None}, {}, MISTRAL, "warning"),
    # FlashInfer on SGLang: a dev build after 0.5.9 is 0.5.10.dev0, in scope; an unknown one warns
    ("sglang-flashinfer-attention", "sglang", SGLANG_DEV, {"--attention-backend": "flashinfer"}, {}, MISTRAL, "error"),
    ("sglang-flashinfer-attention", "sglang", SGLANG_UNKNOWN, {"--attention-backend": "flashinfer"}, {}, MISTRAL, "warning"),
    ("sglang-flashinfer-attention", "sglang", SGLANG_23, {"--attention-backend": "flashinfer"}, {}, MISTRAL, "warning"),
    # fastsafetensors with Gemma 4: error on eugr's builds, a warning elsewhere, nothing for others
    ("fastsafetensors-gemma4-eugr", "vllm", {"image": "ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:latest@sha256:" + "d" * 64}, {"--load-format": "fastsafetensors"}, {}, GEMMA4, "error"),
    ("fastsafetensors-gemma4-eugr", "vllm", {}, {"--load-format": "fastsafetensors"}, {}, GEMMA4, "warning"),
    ("fastsafetensors-gemma4-eugr", "vllm", EUGR_ID, {"--load-format": "fastsafetensors"}, {}, QWEN, "warning"),
    ("fastsafetensors-gemma4-eugr", "vllm", EUGR_ID, {"--load-format": "instanttensor"}, {}, GEMMA4, None),
    # MTP on the V1 runner: error on 0.24.0-dev (NGC 26.07), warning elsewhere, fine with V2 or < 4 tokens
    ("vllm-mtp-v1-runner", "vllm", NGC_2607, MTP4, {"VLLM_USE_V2_MODEL_RUNNER": "1"}, QWEN, None),
    ("vllm-mtp-v1-runner", "vllm", NGC_2607, {"--speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}, {}, QWEN, None),
    ("vllm-mtp-v1-runner", "vllm", {}, MTP4, {}, QWEN, "warning"),
    # MTP + prefix caching: before 0.26.0 only, unless prefix caching is off
    ("vllm-mtp-prefix-caching", "vllm", {}, MTP4, {}, QWEN, None),
    ("vllm-mtp-prefix-caching", "vllm", {"version": "0.25.1"}, {**MTP4, "--no-enable-prefix-caching": True}, {}, QWEN, None),
    # DFlash at 0.95 on one Spark; a draft-free 0.95 is not this rule
    ("sglang-dflash-mem-fraction", "sglang", SGLANG_23, {"--mem-fraction-static": 0.95}, {}, QWEN, None),
    ("sglang-dflash-mem-fraction", "sglang", SGLANG_23, {"--speculative-algorithm": "DFLASH", "--mem-fraction-static": 0.9}, {}, QWEN, None),
    # DeepGEMM 'Unknown recipe': vLLM 0.24 with FP8 checkpoints
    ("vllm-deepgemm-unknown-recipe", "vllm", NGC_2607, {}, {"VLLM_USE_DEEP_GEMM": "0"}, QWEN_FP8, None),
    ("vllm-deepgemm-unknown-recipe", "vllm", NGC_2607, {}, {}, QWEN, None),
    ("vllm-deepgemm-unknown-recipe", "vllm", {}, {}, {}, QWEN_FP8, None),
    # b12x values: refused on eugr's images without b12x, accepted on the b12x image
    ("vllm-b12x-without-b12x", "vllm", EUGR_B12X, {"--linear-backend": "b12x"}, {}, QWEN, None),
    ("vllm-b12x-without-b12x", "vllm", EUGR_ID, {"--load-format": "b12x"}, {}, QWEN, "warning"),
    # no mmap: DeepSeek-V4 only
    ("sglang-weight-loader-disable-mmap", "sglang", SGLANG_23, {"--weight-loader-disable-mmap": True}, {}, QWEN, None),
    ("vllm-gpu-memory-utilization", "vllm", {}, {"--gpu-memory-utilization": 0.9}, {}, MISTRAL, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule_id", "engine", "fields", "args", "env", "model", "expected"),
    EDGES,
    ids=[f"{edge[0]}-{index}" for index, edge in enumerate(EDGES)],
)
def test_rule_at_the_edges_of_its_scope(rule_id, engine, fields, args, env, model, expected):
    severity, message = severity_of(rule_id, engine, fields, args, env, model)
    assert severity == expected, message
    if severity == "warning" and any(
        r.id == rule_id and r.severity == "error" for r in load_rules()
    ):
        # outside the scope, or inside it as far as an unknown release or model can tell
        assert "outside where it was seen" in message or "applies " in message, message


def test_an_unknown_model_class_turns_an_error_into_a_warning_that_says_so():
    why = UnknownModel("its config.json could not be read: OSError: offline")
    severity, message = severity_of(
        "vllm-mla-backend-non-mla-model",
        "vllm",
        args={"--attention-backend": "TRITON_MLA"},
        model=why,
    )
    assert severity == "warning"
    assert "applies if the model does not use MLA attention" in message
    assert "its config.json could not be read: OSError: offline" in message
    severity, message = severity_of(
        "sglang-mem-fraction-static", "sglang", args={"--mem-fraction-static": 0.9}, model=why
    )
    assert (severity, "has model type mistral4" in message) == ("warning", True)


def test_the_default_model_class_is_unknown():
    settings = EngineSettings(name="vllm")
    args = effective_args(settings, MODEL) | {"--attention-backend": "TRITON_MLA"}
    found = check_rules(settings, args, effective_env(settings))
    # Every rule scoped to a model class says it applies if the model is of that class.
    assert {v.id for v in found} == {
        "vllm-mla-backend-non-mla-model",
        "vllm-cutlass-fp8-published-build",
    }
    assert all(v.severity == "warning" and "no config.json was read" in v.message for v in found)


@pytest.mark.parametrize(
    "args",
    [
        {"--attention-backend": "FLASHINFER_MLA"},
        {"--attention-config": {"backend": "FLASHINFER_MLA"}},
        {"--attention-config.backend": "FLASHINFER_MLA"},
        {"--attention_backend": "FLASHINFER_MLA"},
        {"--attention-config": '{"backend": "FLASHINFER_MLA"}'},
        {"--attention_config.backend": "FLASHINFER_MLA"},
    ],
    ids=["flag", "json-key", "dotted-key", "underscore-spelling", "json-text", "underscore-dotted"],
)
def test_rules_see_every_way_a_setting_is_given(args):
    settings = EngineSettings(name="vllm")
    found = check_rules(settings, args, {"TORCH_CUDA_ARCH_LIST": "12.1a"}, MISTRAL)
    [violation] = [v for v in found if v.id == "vllm-flashinfer-attention"]
    assert violation.severity == "error"
    assert "FLASHINFER_MLA" in violation.message


def test_an_environment_variable_counts_only_in_the_releases_that_read_it():
    env = {"TORCH_CUDA_ARCH_LIST": "12.1a", "VLLM_ATTENTION_BACKEND": "FLASHINFER_MLA"}
    old = EngineSettings.model_construct(
        **EngineSettings(name="vllm").model_dump() | {"version": "0.14.1"}
    )
    args = {"--gpu-memory-utilization": 0.8}
    assert [(v.id, v.message.split(":")[0]) for v in check_rules(old, args, env, MISTRAL)] == [
        ("vllm-flashinfer-attention", "VLLM_ATTENTION_BACKEND=FLASHINFER_MLA")
    ]
    new = EngineSettings(name="vllm")
    assert [v.id for v in check_rules(new, args, env, MISTRAL)] == [
        "vllm-attention-backend-env-ignored"
    ]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("draft", [None, DRAFT])
@pytest.mark.parametrize("multinode", [None, PAIR])
def test_default_profiles_pass_every_rule(engine, draft, multinode):
    settings = EngineSettings(name=engine)
    args = effective_args(settings, MODEL, draft, multinode)
    found = check_rules(settings, args, effective_env(settings, draft, multinode), MISTRAL)
    # A vLLM pair runs vLLM's own multi-node mode: no Ray, so no Ray rule is met.
    assert [v.id for v in found] == []


def test_rules_see_aliases_as_their_flag():
    settings = EngineSettings(name="vllm")
    [violation] = check_rules(
        settings,
        {"--device-memory-utilization": 0.95},
        {"TORCH_CUDA_ARCH_LIST": "12.1a"},
        MISTRAL,
    )
    assert violation.id == "vllm-gpu-memory-utilization"


def test_docker_options_are_found_in_docker_args_in_any_spelling():
    fields = EngineSettings(name="sglang").model_dump() | {
        "docker_args": ["--restart=always", "--rm"]
    }
    settings = EngineSettings.model_construct(**fields)
    found = [
        v.message.split(":")[0]
        for v in check_rules(settings, {}, {})
        if v.id == "docker-rm-with-restart"
    ]
    assert found == ["docker --rm", "docker --restart"]


def test_thresholds_are_exclusive():
    settings = EngineSettings(name="sglang")
    args = effective_args(settings, MODEL) | {
        "--mem-fraction-static": 0.85,
        "--cuda-graph-max-bs": 32,
    }
    assert check_rules(settings, args, {}, MISTRAL) == []


def test_rules_only_apply_to_their_engine():
    vllm = EngineSettings(name="vllm")
    args = effective_args(vllm, MODEL) | {"--max-running-requests": None}
    assert [v.id for v in check_rules(vllm, args, effective_env(vllm), MISTRAL)] == []


# Flags of releases whose catalogue is not committed yet (SGLang 0.5.14+: the catalogues
# branch builds them); found in the sglang 0.5.14-0.5.23 wheels, arg_groups/fields/exec_.py.
NOT_YET_CATALOGUED = {
    "--gdn-decode-kernel",  # b12x builds only (field notes 2026-11b section 1), no PyPI release
    "--cuda-graph-config",
    "--cuda-graph-max-bs-decode",
    "--cuda-graph-max-bs-prefill",
    "--cuda-graph-bs-decode",
    "--cuda-graph-bs-prefill",
}


@pytest.mark.parametrize("rule", load_rules(), ids=lambda rule: rule.id)
def test_rule_flags_exist_in_a_catalogue_of_their_engine(rule):
    """A typo in a rule's flag would make it never fire."""
    flags = rule.match.get("flag", [])
    flags = (flags if isinstance(flags, list) else [flags]) + list(rule.match.get("when_flag", {}))
    engines = ["sglang", "vllm"] if rule.engine == "any" else [rule.engine]
    known = {f for e in engines for v in available_versions(e) for f in load_catalogue(e, v).flags}
    known |= NOT_YET_CATALOGUED
    assert [flag for flag in flags if flag.split(".")[0] not in known] == []
    for value in rule.match.get("equals", []) if all("." not in f for f in flags) else []:
        catalogues = [load_catalogue(e, v) for e in engines for v in available_versions(e)]
        assert any(
            c.accepts(flag, value) for c in catalogues for flag in flags if flag in c.flags
        ), value


def test_ways_name_real_flags():
    book = rules.load_book()
    for engine, flags in book.ways.items():
        known = {f for v in available_versions(engine) for f in load_catalogue(engine, v).flags}
        known |= NOT_YET_CATALOGUED
        for flag, ways in flags.items():
            assert flag in known
            assert all(way.json.split(".")[0] in known for way in ways if way.json)


def test_a_malformed_rules_file_is_refused_with_every_problem(tmp_path, monkeypatch):
    bad = tmp_path / "gb10_rules.yaml"
    bad.write_text(
        "ways: {}\n"
        "rules:\n"
        "- {id: a, engine: tgi, severity: fatal, summary: s, reason: r, fix: f,\n"
        "   scope: {releases: 'soon', colour: red}, sources: [{seen: x, where: y, date: today}],\n"
        "   match: {above: 3, colour: red}}\n"
        "- {id: b, engine: vllm, severity: error, summary: s, reason: r, fix: f, scope: {},\n"
        "   sources: [], match: {env_present: X}}\n"
    )
    monkeypatch.setattr(rules, "RULES_FILE", bad)
    rules.load_book.cache_clear()
    try:
        with pytest.raises(rules.RulesError) as caught:
            rules.load_book()
    finally:
        rules.load_book.cache_clear()
    message = str(caught.value)
    assert "unknown match key 'colour'" in message
    assert "unknown scope key 'colour'" in message
    assert "'soon' is not a PEP 440 specifier" in message
    assert "source date 'today' is not YYYY-MM[-DD]" in message
    assert "rule 2 (b): sources is a non-empty list" in message
    assert "severity must be one of ('error', 'warning')" in message
    assert "engine must be sglang, vllm or any" in message
    assert "need `flag`" in message


def test_an_unknown_release_turns_an_error_into_a_warning_naming_the_assumption():
    severity, message = severity_of(
        "sglang-flashinfer-attention",
        "sglang",
        SGLANG_UNKNOWN,
        {"--attention-backend": "flashinfer"},
    )
    assert severity == "warning"
    assert "applies to sglang releases >=0.5.10.dev0,<0.5.11" in message
    assert "image ghcr.io/someone/sglang-gb10:v1 is of no release images.yaml knows" in message
    assert "sglang 0.5.23, the newest catalogued release, was assumed" in message


def test_an_unknown_releases_default_is_not_evidence():
    """vLLM's default utilisation read from the newest catalogue (0.33.0) for an NGC month
    whose release is unknown: a warning that names the assumption."""
    severity, message = severity_of(
        "vllm-gpu-memory-utilization", "vllm", VLLM_UNKNOWN, {"--gpu-memory-utilization": None}
    )
    assert severity == "warning"
    assert message.startswith("--gpu-memory-utilization (vllm 0.33.0's default) 0.92: ")
    assert (
        "the default is not evidence here: image nvcr.io/nvidia/vllm:26.09-py3 is of no" in message
    )


def test_a_development_build_is_scoped_by_its_base_release():
    settings = EngineSettings(name="sglang", image=SGLANG_DEV["image"])
    assert rules.rule_release(settings) == rules.Release("0.5.10.dev0")
    ngc = EngineSettings(name="vllm", image=NGC_2607["image"])
    assert (ngc.version, rules.rule_release(ngc)) == ("0.24.0", rules.Release("0.24.0.dev0"))
    unknown = EngineSettings(name="vllm", image=VLLM_UNKNOWN["image"])
    assert rules.rule_release(unknown).version is None


def test_ray_on_one_spark_gets_the_memory_monitor_off_from_the_deploy():
    settings = EngineSettings(name="vllm", args={"--distributed-executor-backend": "ray"})
    env = effective_env(settings)
    assert env["RAY_memory_monitor_refresh_ms"] == "0"
    args = effective_args(settings, MODEL)
    assert "ray-memory-monitor" not in {v.id for v in check_rules(settings, args, env, QWEN)}
    # An operator who removes it is told to put it back.
    removed = EngineSettings(
        name="vllm",
        args={"--distributed-executor-backend": "ray"},
        env={"RAY_memory_monitor_refresh_ms": None},
    )
    found = check_rules(removed, args, effective_env(removed), QWEN)
    assert [v.severity for v in found if v.id == "ray-memory-monitor"] == ["error"]
    assert "RAY_memory_monitor_refresh_ms" not in effective_env(EngineSettings(name="vllm"))
