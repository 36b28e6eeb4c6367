"""Failure signatures: each matches a log excerpt written in the engines' own formats."""

from __future__ import annotations

import pytest

from sparkdeploy.engine_plan.rules import load_rules
from sparkdeploy.knowledge.signatures import diagnose, signatures

EXCERPTS = {
    "flashinfer-invalid-device-function": (
        "[2026-03-24 10:12:03 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: CUDA error: invalid device function"
    ),
    "missing-tokenizer-json": "    tokenizer_file = files['tokenizer.json']\nKeyError: 'tokenizer.json'",
    "unbalanced-memory": (
        "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
        "processes. min_per_gpu_memory=5.1, local_gpu_memory=90.2"
    ),
    "flashmla-sm100-only": "RuntimeError: Unsupported architecture for sparse decode fwd",
    "gloo-loopback": (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
        "[127.0.0.1]:35045: Connection refused"
    ),
    "oom-in-cuda-graph-capture": (
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB"
    ),
    "unrecognized-arguments": (
        "launch_server.py: error: unrecognized arguments: --speculative-draft-accept-rate-threshold 0.6"
    ),
    "sgl-kernel-common-ops": "[sgl_kernel] CRITICAL: Could not load any common_ops library!",
    "stable-image-invalid-ordinal": "RuntimeError: CUDA error: invalid device ordinal",
    "illegal-instruction-mla": (
        "torch.AcceleratorError: CUDA error: an illegal instruction (cudaErrorIllegalInstruction)"
    ),
    "fastsafetensors-import": "ImportError: Please install fastsafetensors to use this load format",
    "deep-gemm-sf-transformation": "RuntimeError: Unknown SF transformation",
}


def test_every_signature_has_an_excerpt():
    assert {signature.id for signature in signatures()} == set(EXCERPTS)


@pytest.mark.parametrize("signature_id", list(EXCERPTS))
def test_signature_matches_its_excerpt(signature_id):
    found = [diagnosis.signature.id for diagnosis in diagnose(EXCERPTS[signature_id])]
    assert found == [signature_id]


def test_signatures_name_only_real_rules():
    rules = {rule.id for rule in load_rules()}
    for signature in signatures():
        assert not signature.rule or signature.rule in rules, signature.id


def test_a_clean_log_matches_nothing():
    log = (
        "The server is fired up and ready to roll!\n"
        'INFO:     127.0.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK'
    )
    assert diagnose(log) == []
