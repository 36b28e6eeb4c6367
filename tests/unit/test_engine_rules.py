"""GB10 rules: each one refuses (or warns about) a configuration it names; the profiles pass."""

from __future__ import annotations

import pytest

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.engine_plan.effective import MultiNode, effective_args, effective_env
from sparkdeploy.engine_plan.rules import check_rules, load_rules
from sparkdeploy.knowledge.flags import available_versions, load_catalogue

MODEL, DRAFT = "/opt/models/Mistral-Small-4-119B-2603-NVFP4", "/opt/models/eagle"
PAIR = MultiNode(nodes=2, rank=0, head="10.0.0.1", interface="enp1s0f0np0")

# rule id -> (engine, settings fields, extra args over the profile, env over the profile,
#             text the message must contain: the flag and value, variable, image or option)
EXAMPLES = {
    "sglang-flashinfer-attention": ("sglang", {}, {"--attention-backend": "flashinfer"}, {}, "--attention-backend flashinfer"),
    "vllm-flashinfer-attention": ("vllm", {}, {"--attention-backend": "FLASHINFER_MLA"}, {}, "--attention-backend FLASHINFER_MLA"),
    "sglang-datacenter-attention": ("sglang", {}, {"--decode-attention-backend": "fa3"}, {}, "--decode-attention-backend fa3"),
    "vllm-datacenter-attention": ("vllm", {}, {"--attention-backend": "FLASHMLA"}, {}, "--attention-backend FLASHMLA"),
    "sglang-mem-fraction-static": ("sglang", {}, {"--mem-fraction-static": 0.88}, {}, "--mem-fraction-static 0.88"),
    "vllm-gpu-memory-utilization": ("vllm", {}, {"--gpu-memory-utilization": 0.95}, {}, "--gpu-memory-utilization 0.95"),
    "vllm-gpu-memory-utilization-high": ("vllm", {}, {"--gpu-memory-utilization": 0.9}, {}, "--gpu-memory-utilization 0.9"),
    "sglang-cuda-graph-max-bs": ("sglang", {}, {"--cuda-graph-max-bs": 64}, {}, "--cuda-graph-max-bs 64"),
    "sglang-eagle-topk": ("sglang", {}, {"--speculative-eagle-topk": 4}, {}, "--speculative-eagle-topk 4"),
    "sglang-spec-v2-missing": ("sglang", {}, {}, {"SGLANG_ENABLE_SPEC_V2": None}, "--speculative-algorithm EAGLE"),
    "docker-rm-with-restart": ("sglang", {}, {"--rm": True}, {}, "docker --rm"),
    "enforce-eager": ("vllm", {}, {"--enforce-eager": True}, {}, "--enforce-eager"),
    "sglang-skip-server-warmup": ("sglang", {}, {"--skip-server-warmup": True}, {}, "--skip-server-warmup"),
    "load-format-fastsafetensors": ("vllm", {}, {"--load-format": "fastsafetensors"}, {}, "--load-format fastsafetensors"),
    "image-unpinned": ("vllm", {"image": "vllm/vllm-openai:latest"}, {}, {}, "image vllm/vllm-openai:latest"),
    "sglang-image-without-cu13": ("sglang", {"image": "lmsysorg/sglang:v0.5.10"}, {}, {}, "image lmsysorg/sglang:v0.5.10"),
    "multinode-socket-interface": ("sglang", {}, {"--nnodes": 2}, {}, "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME unset"),
    "ray-memory-monitor": ("vllm", {}, {"--distributed-executor-backend": "ray"}, {}, "RAY_memory_monitor_refresh_ms unset"),
    "nccl-ib-gid-index-fixed": ("vllm", {}, {}, {"NCCL_IB_GID_INDEX": "3"}, "NCCL_IB_GID_INDEX=3"),
    "vllm-flashinfer-autotune": ("vllm", {}, {"--enable-flashinfer-autotune": True}, {}, "--enable-flashinfer-autotune"),
    "vllm-moe-backend-sm121": ("vllm", {}, {"--moe-backend": "flashinfer_cutlass"}, {}, "--moe-backend flashinfer_cutlass"),
    "deep-gemm-sm121": ("sglang", {}, {"--fp8-gemm-backend": "deep_gemm"}, {}, "--fp8-gemm-backend deep_gemm"),
    "vllm-mxfp4-quantization": ("vllm", {}, {"--quantization": "mxfp4"}, {}, "--quantization mxfp4"),
    "vllm-torch-cuda-arch": ("vllm", {}, {}, {"TORCH_CUDA_ARCH_LIST": "12.0"}, "TORCH_CUDA_ARCH_LIST=12.0"),
    "sglang-max-running-requests": ("sglang", {}, {"--max-running-requests": None}, {}, "--max-running-requests not set"),
    "bind-all-interfaces": ("sglang", {"bind": "0.0.0.0"}, {}, {}, "bind 0.0.0.0"),
}  # fmt: skip


def violations_for(engine, fields, args, env):
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
    return check_rules(settings, effective, effective_environment)


def test_every_rule_has_an_example():
    assert sorted(EXAMPLES) == sorted(rule.id for rule in load_rules())


@pytest.mark.parametrize("rule", load_rules(), ids=lambda rule: rule.id)
def test_rule_refuses_its_example(rule):
    engine, fields, args, env, subject = EXAMPLES[rule.id]
    matched = [v for v in violations_for(engine, fields, args, env) if v.id == rule.id]
    assert len(matched) == 1, matched
    [violation] = matched
    assert violation.severity == rule.severity
    assert violation.message == f"{subject}: {rule.summary}"
    assert (violation.reason, violation.fix) == (rule.reason, rule.fix)
    assert str(violation).startswith(f"{rule.severity} [{rule.id}] {subject}")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("draft", [None, DRAFT])
@pytest.mark.parametrize("multinode", [None, PAIR])
def test_default_profiles_pass_every_rule(engine, draft, multinode):
    settings = EngineSettings(name=engine)
    args = effective_args(settings, MODEL, draft, multinode)
    assert check_rules(settings, args, effective_env(settings, draft, multinode)) == []


def test_rules_see_aliases_as_their_flag():
    settings = EngineSettings(name="vllm")
    [violation] = check_rules(
        settings, {"--device-memory-utilization": 0.95}, {"TORCH_CUDA_ARCH_LIST": "12.1a"}
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
    assert check_rules(settings, args, {}) == []


def test_rules_only_apply_to_their_engine():
    vllm = EngineSettings(name="vllm")
    args = effective_args(vllm, MODEL) | {"--max-running-requests": None}
    assert [v.id for v in check_rules(vllm, args, effective_env(vllm))] == []


@pytest.mark.parametrize("rule", load_rules(), ids=lambda rule: rule.id)
def test_rule_flags_exist_in_a_catalogue_of_their_engine(rule):
    """A typo in a rule's flag would make it never fire."""
    flags = rule.match.get("flag", [])
    flags = (flags if isinstance(flags, list) else [flags]) + list(rule.match.get("when_flag", {}))
    engines = ["sglang", "vllm"] if rule.engine == "any" else [rule.engine]
    known = {f for e in engines for v in available_versions(e) for f in load_catalogue(e, v).flags}
    assert [flag for flag in flags if flag not in known] == []
    for value in rule.match.get("equals", []):
        catalogues = [load_catalogue(e, v) for e in engines for v in available_versions(e)]
        assert any(
            c.accepts(flag, value) for c in catalogues for flag in flags if flag in c.flags
        ), value


def test_a_malformed_rules_file_is_refused_with_every_problem(tmp_path, monkeypatch):
    from sparkdeploy.engine_plan import rules

    bad = tmp_path / "gb10_rules.yaml"
    bad.write_text(
        "- {id: a, engine: tgi, severity: fatal, summary: s, reason: r, fix: f, source: x,\n"
        "   match: {above: 3, colour: red}}\n"
    )
    monkeypatch.setattr(rules, "RULES_FILE", bad)
    rules.load_rules.cache_clear()
    try:
        with pytest.raises(rules.RulesError) as caught:
            rules.load_rules()
    finally:
        rules.load_rules.cache_clear()
    message = str(caught.value)
    assert "unknown match key 'colour'" in message
    assert "severity must be one of ('error', 'warning')" in message
    assert "engine must be sglang, vllm or any" in message
    assert "need `flag`" in message
