"""
Secrets in log lines (issue 22, "Keys given away"): ``escape.redact`` hides what engines log
under a secret's name and anything shaped like a token, and leaves the rest of a diagnosis as
it is; the readings every reader shares (the MCP server, diagnose.py) are redacted.
"""

from __future__ import annotations

import pytest

from sparkdeploy.config.values import looks_like_secret
from sparkdeploy.escape import REDACTED, redact, redact_lines
from sparkdeploy.readings.journals import JOURNAL_MARK, parse_kernel, parse_units

KEY = "k3y-0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    "line, shown",
    [
        (
            f"server_args=ServerArgs(model_path='/m', api_key='{KEY}', port=30000)",
            "server_args=ServerArgs(model_path='/m', api_key='<redacted>', port=30000)",
        ),
        (
            f"non-default args: {{'model': '/m', 'api_key': ['{KEY}', 'k2'], 'port': 8000}}",
            "non-default args: {'model': '/m', 'api_key': <redacted>, 'port': 8000}",
        ),
        (
            f'Namespace(api_key="{KEY}", hf_token=None)',
            'Namespace(api_key="<redacted>", hf_token=None)',
        ),
        (f"Authorization: Bearer {KEY}", "Authorization: Bearer <redacted>"),
        (
            f"vllm serve /m --api-key {KEY} --port 8000",
            "vllm serve /m --api-key <redacted> --port 8000",
        ),
        (f"VLLM_API_KEY={KEY}", "VLLM_API_KEY=<redacted>"),
        (f"api-key: '{KEY}'", "api-key: '<redacted>'"),
        (f"AWS_SECRET_ACCESS_KEY={KEY}", "AWS_SECRET_ACCESS_KEY=<redacted>"),
        (f"HF_TOKEN=hf_{'a' * 34}", "HF_TOKEN=<redacted>"),
        (f"pulled with nvapi-{'x' * 40} ok", "pulled with <redacted> ok"),
        # Not secrets: what a diagnosis needs stays.
        ("max_tokens=5 tokenizer_path='/m' token_budget=2 api_key=None", None),
        ("NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE", None),
    ],
)
def test_redact(line, shown):
    assert redact(line) == (line if shown is None else shown)


def test_what_the_inventory_refuses_as_secret_the_logs_hide():
    samples = [f"hf_{'a' * 34}", f"sk-{'b' * 30}", f"ghp_{'c' * 30}", "AKIAABCDEFGHIJKLMNOP"]
    samples += [f"eyJ{'d' * 12}.{'e' * 12}.{'f' * 12}", f"xoxb-{'1' * 12}"]
    for sample in samples:
        assert looks_like_secret(sample)
        assert sample not in redact(f"seen {sample} here"), sample


def test_a_private_key_is_hidden_whole():
    lines = [
        "a",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXk",
        "-----END OPENSSH PRIVATE KEY-----",
        "z",
    ]
    assert redact_lines(lines) == ["a", REDACTED, REDACTED, REDACTED, "z"]


def test_the_readings_return_no_secret():
    (unit,) = parse_units([f"{JOURNAL_MARK} unit u.service", f"api_key='{KEY}'"])
    (boot,) = parse_kernel([f"{JOURNAL_MARK} boot current boot", f"x kernel: token={KEY}"])
    assert KEY not in " ".join([*unit.lines, *boot.lines])
