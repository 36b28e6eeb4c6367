"""
Failure signatures: each matches the exact log strings it is known by (the engines' own
formats, the field check of 2026-11-23 section 3, verbatim, and the same lines with their
variable parts filled in), and nothing else; healthy SGLang, vLLM and kernel logs match none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkdeploy.engine_plan.rules import load_rules
from sparkdeploy.knowledge.signatures import KERNEL_LOG, diagnose, signatures

FIXTURES = Path(__file__).parent / "fixtures"

# Signature id -> the lines it must match (alone). The field check's strings are copied as
# shared/notes/field-2026-11.md writes them, including its "…" where it shortened a path or
# a figure; the lines after them fill those parts in the way the engines print them.
EXCERPTS: dict[str, tuple[str, ...]] = {
    "flashinfer-invalid-device-function": (
        "[2026-03-24 10:12:03 TP0] Scheduler hit an exception: Traceback (most recent call last):"
        "\nRuntimeError: CUDA error: invalid device function",
    ),
    "missing-tokenizer-json": (
        "    tokenizer_file = files['tokenizer.json']\nKeyError: 'tokenizer.json'",
    ),
    "unbalanced-memory": (
        "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
        "processes. min_per_gpu_memory=5.1, local_gpu_memory=90.2",
    ),
    "flashmla-sm100-only": ("RuntimeError: Unsupported architecture for sparse decode fwd",),
    "gloo-loopback": (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
        "[127.0.0.1]:35045: Connection refused",
    ),
    "oom-in-cuda-graph-capture": (
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
    ),
    "unrecognized-arguments": (
        "launch_server.py: error: unrecognized arguments: "
        "--speculative-draft-accept-rate-threshold 0.6",
    ),
    "sgl-kernel-common-ops": ("[sgl_kernel] CRITICAL: Could not load any common_ops library!",),
    "stable-image-invalid-ordinal": ("RuntimeError: CUDA error: invalid device ordinal",),
    "illegal-instruction-mla": (
        "torch.AcceleratorError: CUDA error: an illegal instruction (cudaErrorIllegalInstruction)",
    ),
    "fastsafetensors-import": (
        "ImportError: Please install fastsafetensors to use this load format",
    ),
    "deep-gemm-sf-transformation": ("RuntimeError: Unknown SF transformation",),
    # Field check 2026-11-23, section 3 (row numbers of its table).
    "sglang-ambiguous-option": (  # row 1
        "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill",
        "sglang serve: error: ambiguous option: --cuda-graph-bs could match "
        "--cuda-graph-bs-decode, --cuda-graph-bs-prefill",
    ),
    "ray-missing": (  # row 2
        "ray: not found",
        '"ray": executable file not found',
        "/bin/sh: 1: ray: not found",
        "docker: Error response from daemon: failed to create task for container: failed to "
        "create shim task: OCI runtime create failed: runc create failed: unable to start "
        'container process: error during container init: exec: "ray": executable file not '
        "found in $PATH: unknown.",
    ),
    "nvrm-no-memory": (  # row 3
        "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] "
        "(0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359",
        "2026-11-20T23:41:17+00:00 spark-2 kernel: NVRM: nvCheckOkFailedNoLog: Check failed: "
        "Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from "
        "_memdescAllocInternal(pMemDesc) @ mem_desc.c:1402",
    ),
    "ibv-reg-mr-no-memory": (  # row 4
        "NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
        "(RayWorkerWrapper pid=233, ip=192.168.100.11) spark-2:233:301 [0] NCCL WARN Call to "
        "ibv_reg_mr_iova2 failed with error Cannot allocate memory",
    ),
    "cutlass-sm120-only-guard": (  # row 5
        "This kernel only supports sm120.\ncudaErrorLaunchFailure: unspecified launch failure",
    ),
    "cutlass-error-internal": (  # row 6
        "Got cutlass error: Error Internal",
        "Got cutlass error: Error Internal at: 420",
        "RuntimeError: CutlassFp8BlockScaledMMKernel: cutlass::Status::kErrorInternal",
    ),
    "cutlass-fp4-gemm-runner": (  # row 7
        "RuntimeError: [FP4 gemm Runner] Failed to run cutlass FP4 gemm on sm120. "
        "Error: Error Internal",
    ),
    "triton-ptxas-sm121a": (  # row 8
        "ptxas fatal: Value 'sm_121a' is not defined for option 'gpu-name'",
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
    ),
    "deepgemm-unsupported-architecture": (  # row 9
        "RuntimeError: Assertion error (…/csrc/apis/hyperconnection.hpp:56): "
        "Unsupported architecture",
        "RuntimeError: Assertion error (/workspace/deepgemm-src/csrc/apis/hyperconnection.hpp:56)"
        ": Unsupported architecture",
        "tvm.error.InternalError: Assertion error (/deepgemm/csrc/apis/attention.hpp:211): "
        "Unsupported architecture",
    ),
    "deepgemm-missing-sm121-source": (  # row 10
        "Failed to open: …/vllm/third_party/deep_gemm/include/deep_gemm/impls/"
        "sm121_fp8_mqa_logits.cuh",
        "RuntimeError: Failed to open: /usr/local/lib/python3.12/dist-packages/vllm/third_party/"
        "deep_gemm/include/deep_gemm/impls/sm121_fp8_mqa_logits.cuh",
    ),
    "vllm-free-memory-below-utilization": (  # row 11
        "ValueError: Free memory on device cuda:0 (…/… GiB) on startup is less than desired "
        "GPU memory utilization (0.9, … GiB)",
        "(EngineCore pid=187) ValueError: Free memory on device cuda:0 (97.12/119.7 GiB) on "
        "startup is less than desired GPU memory utilization (0.9, 107.73 GiB). Decrease GPU "
        "memory utilization or reduce GPU memory used by other processes.",
    ),
    "no-kernel-image-sm121": (  # row 12
        "RuntimeError: RMSNorm failed with error code no kernel image is available for "
        "execution on the device",
        "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the "
        "device",
    ),
    "container-driver-too-old": (  # row 13
        "ERROR: This container was built for NVIDIA Driver Release 590.48 or later, but version "
        "580.159.03 was detected and compatibility mode is UNAVAILABLE.",
        "ERROR: This container was built for NVIDIA Driver Release 595.45 or later, but version "
        "580.173.02 was detected and compatibility mode is UNAVAILABLE.",
    ),
    "rpc-sample-tokens-timeout": (  # row 14
        "TimeoutError: RPC call to sample_tokens timed out",
    ),
    "shm-broadcast-stall": (  # row 15
        "No available shared memory broadcast block found in 60 seconds",
        "(EngineCore pid=190) INFO 11-21 09:12:40 [shm_broadcast.py:542] No available shared "
        "memory broadcast block found in 60 seconds. This typically happens when some processes "
        "are hanging or doing some time-consuming work (e.g. compilation).",
    ),
    "flashinfer-jit-no-sm12-arch": (  # row 16
        "RuntimeError: No supported CUDA architectures found for major versions [12].",
    ),
    "nvidia-persistenced-no-devices": (  # row 17
        "Failed to query NVIDIA devices",
        "2026-03-14T07:02:11+00:00 spark-1 nvidia-persistenced[1190]: Failed to query NVIDIA "
        "devices. Please ensure that the NVIDIA device files (/dev/nvidia*) exist, and that user "
        "0 has read and write permissions for those files.",
    ),
    # Field check section 4 (Driver): the proprietary modules on GB10.
    "nvrm-rm-init-adapter-failed": (
        "2026-11-21T08:00:04+00:00 spark-1 kernel: NVRM: GPU 000f:01:00.0: RmInitAdapter "
        "failed! (0x62:0x1a:2631)",
    ),
    "nvrm-xid": (
        "2026-11-21T08:00:04+00:00 spark-1 kernel: NVRM: Xid (PCI:000f:01:00): 169, "
        "pid=<unknown>, name=<unknown>",
    ),
    # RDMA inside multi-node containers: NCCL's own lines (NVIDIA/nccl#451, #941; ainode#87).
    "nccl-ib-open-device-failed": (
        "misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
        "spark-1:77:90 [0] transport/net_ib.cc:148 NCCL WARN NET/IB : Unable to open device "
        "rocep1s0f0",
    ),
    "nccl-ib-no-device": ("05-06-76-200:7839:7911 [0] NCCL INFO NET/IB : No device found.",),
    "nccl-socket-fallback": ("spark-1:77:90 [0] NCCL INFO Using network Socket",),
    "nccl-no-net-plugin": ("spark-2:61:61 [0] NCCL WARN Failed to initialize any NET plugin",),
    # Field check 2026-11b, section 2: the table's text as the note writes it.
    "deepgemm-unknown-recipe": ("Assertion error ... layout.hpp:57 'Unknown recipe'",),
    "cuda-illegal-memory-access": ("CUDA error: an illegal memory access",),
    "scaledmm-no-kernel": ("Failed to find a kernel that can implement the ScaledMM linear layer",),
    "b12x-flag-unrecognized": ("unrecognized arguments: --gdn-decode-kernel b12x",),
    "nccl-tree-connect-system-error": (
        "RuntimeError: NCCL error: unhandled system error",
        "ncclTransportTreeConnect",
    ),
    "ibv-modify-qp-timeout": ("Call to ibv_modify_qp failed with 110 Connection timed out",),
    "sglang-dflash-not-contiguous": ("self must be contiguous",),
    "flashinfer-dsv4-decode-launch": (
        "decode-dsv4 launch failed (unsupported shape or kernel error)",
    ),
}

# Healthy logs: an engine journal and kernel logs of a Spark that works.
HEALTHY = (
    "journals/sglang-clean.log",
    "journals/sglang-pair-clean.log",
    "journals/vllm-clean.log",
    "journals/vllm-pair-clean.log",
    "kernel/clean.log",
)


def test_every_signature_has_excerpts():
    assert [signature.id for signature in signatures()] == list(EXCERPTS)


@pytest.mark.parametrize(
    "signature_id, excerpt",
    [(name, excerpt) for name, excerpts in EXCERPTS.items() for excerpt in excerpts],
)
def test_signature_matches_its_excerpt_and_only_it(signature_id, excerpt):
    found = [diagnosis.signature.id for diagnosis in diagnose(excerpt)]
    assert found == [signature_id]


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_logs_match_nothing(name):
    log = (FIXTURES / name).read_text(encoding="utf-8")
    assert len(log.splitlines()) > 20
    assert diagnose(log) == []


def test_a_clean_log_matches_nothing():
    log = (
        "The server is fired up and ready to roll!\n"
        'INFO:     127.0.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK\n'
        "Array: not found in cache, loading\n"  # not `ray: not found`
        "NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build"
    )
    assert diagnose(log) == []


def test_kernel_log_is_matched_against_host_signatures_only():
    log = "\n".join(EXCERPTS["nvrm-no-memory"] + EXCERPTS["flashmla-sm100-only"])
    found = diagnose(log, KERNEL_LOG, scopes=("host",))
    assert [(f.signature.id, f.where) for f in found] == [("nvrm-no-memory", KERNEL_LOG)]


def test_kernel_signatures_are_host_scoped():
    scope = {signature.id: signature.scope for signature in signatures()}
    kernel = ("nvrm-no-memory", "nvrm-rm-init-adapter-failed", "nvrm-xid")
    assert all(scope[name] == "host" for name in kernel)
    assert scope["nvidia-persistenced-no-devices"] == "host"


def test_signatures_name_only_real_rules():
    rules = {rule.id for rule in load_rules()}
    for signature in signatures():
        assert not signature.rule or signature.rule in rules, signature.id


def test_every_signature_has_a_source_and_says_what_prevents_it():
    for signature in signatures():
        assert signature.sources, signature.id
        assert signature.cause and signature.fix, signature.id
    field_check = [s for s in signatures() if s.id in list(EXCERPTS)[12:]]
    for signature in field_check:
        assert any(source.ref.startswith("https://") for source in signature.sources), signature.id
        if signature.id != "nvrm-xid":  # any GPU error: nothing single prevents it
            assert signature.rule or signature.prevented_by or signature.rule_needed, signature.id
