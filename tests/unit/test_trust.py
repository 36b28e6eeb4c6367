"""
What a copied inventory may make the laptop do (issue 22, sparkdeploy/config/trust.py): the HF
token goes only to the Hugging Face Hub unless the operator names another endpoint in the
laptop's environment, a malformed config.json is a warning, and the security summary says
what an inventory loosens before pyinfra asks to apply.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkdeploy.config.model_source import read_model_class
from sparkdeploy.config.security import HEADER, security_changes, security_summary
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.trust import TRUST_ENDPOINT_ENV, hf_token, token_endpoint_trusted
from sparkdeploy.deploys.models import huggingface
from sparkdeploy.inventory import build_inventory
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from tests.unit.hostile import TOKEN

ROOT = Path(__file__).resolve().parents[2]
MIRROR = "https://mirror.example/hub"
KEY = "k" * 32


def spark(**fields: Any) -> SparkSettings:
    return SparkSettings.model_validate(
        {"ssh_host": "a", "ssh_user": "nvidia", "model_repo": "org/model", **fields}
    )


class Recorder:
    """A Hub that answers with ``config`` and records the token it was sent."""

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else {"architectures": ["X"]}
        self.tokens: list[str | None] = []

    def __call__(self, repo, revision, endpoint, token, offline, timeout):
        self.tokens.append(token)
        return self.config


@pytest.mark.parametrize(
    ("endpoint", "trusted", "sent"),
    [
        (None, None, True),
        ("https://huggingface.co", None, True),
        ("https://huggingface.co/", None, True),
        (MIRROR, None, False),
        (MIRROR, "https://other.example", False),
        (MIRROR, "", False),
        (MIRROR, MIRROR, True),
        (MIRROR, MIRROR + "/", True),
        ("https://huggingface.co.evil.example", None, False),
    ],
)
def test_the_token_goes_only_to_the_hub_or_the_endpoint_the_operator_named(
    endpoint: str | None, trusted: str | None, sent: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"HF_TOKEN": TOKEN} | ({TRUST_ENDPOINT_ENV: trusted} if trusted is not None else {})
    settings = spark(hf_endpoint=endpoint)
    assert token_endpoint_trusted(endpoint, environ) is sent
    # the laptop's read of config.json
    hub = Recorder()
    read_model_class(settings, hub, environ=environ)
    assert hub.tokens == [TOKEN if sent else None]
    # the token installed on the Spark (whose hf command sends it to HF_ENDPOINT)
    monkeypatch.setattr(os, "environ", environ)
    assert huggingface.laptop_token(settings) == (TOKEN if sent else "")
    assert hf_token("HF_TOKEN", endpoint, environ) == (TOKEN if sent else "")


def test_a_withheld_token_is_a_warning_that_says_how_to_confirm_and_never_shows_it() -> None:
    document = {"sparks": {"s1": {"ssh_host": "a", "ssh_user": "n", "hf_endpoint": MIRROR}}}
    inventory = build_inventory(document, "x.yml", environ={"HF_TOKEN": TOKEN})
    [warning] = [w for w in inventory.warnings if "hf_endpoint" in w]
    assert f"export {TRUST_ENDPOINT_ENV}={MIRROR}" in warning and TOKEN not in warning
    confirmed = {"HF_TOKEN": TOKEN, TRUST_ENDPOINT_ENV: MIRROR}
    assert not [w for w in build_inventory(document, "x.yml", environ=confirmed).warnings]


@pytest.mark.parametrize(
    "config",
    [
        {"architectures": 5},
        {"architectures": "LlamaForCausalLM", "text_config": {"architectures": {"a": 1}}},
        {"quantization_config": {"config_groups": 5}},
        {"quantization_config": {"config_groups": {"g": {"format": 5}}}},
    ],
)
def test_a_malformed_config_json_is_no_traceback(config: dict[str, Any]) -> None:
    model = read_model_class(spark(), Recorder(config), environ={})
    assert isinstance(model, (ModelClass, UnknownModel))


def test_a_config_json_the_class_cannot_be_read_from_is_an_unknown_model(monkeypatch) -> None:
    def broken(config: Any, source: str = "") -> ModelClass:
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(ModelClass, "from_config", staticmethod(broken))
    model = read_model_class(spark(), Recorder(), environ={})
    assert isinstance(model, UnknownModel) and "malformed" in model.why


def test_a_default_inventory_changes_nothing() -> None:
    sparks = {"s1": spark(engine={"name": "sglang"})}
    assert security_changes(sparks, {}) == [] and security_summary(sparks, {}) == ""


def test_each_loosened_setting_is_one_line() -> None:
    engine = {
        "name": "sglang",
        "bind": "0.0.0.0",
        "mounts": [{"host": "/srv/kernels", "container": "/k"}],
        "docker_args": ["--privileged", "--cap-add=SYS_PTRACE", "--device=/dev/infiniband", "--shm-size=1g"],
        "mods": ["fix.sh"],
    }  # fmt: skip
    sparks = {
        name: spark(
            hf_endpoint=MIRROR,
            ssh_strict_host_key_checking="no",
            operator_user="llm",
            engine=engine,
        )
        for name in ("s1", "s2")
    }
    lines = security_changes(sparks, {"SPARK_API_KEY": KEY})
    assert lines == [
        f"s1, s2: hf_endpoint {MIRROR}: models come from this mirror; the HF token is not sent "
        "there",
        "s1, s2: ssh_strict_host_key_checking no: the Spark's host key is never checked",
        "s1, s2: operator_user llm: this account owns the models and the HF token",
        "s1, s2: engine.bind 0.0.0.0: the API answers on every interface, with the key in "
        "$SPARK_API_KEY",
        "s1, s2: engine.mounts: the container reads the Spark's /srv/kernels -> /k",
        "s1, s2: engine.docker_args: --privileged --cap-add=SYS_PTRACE --device=/dev/infiniband",
        "s1, s2: engine.files/mods: shipped from this laptop: fix.sh",
    ]
    open_api = {"s1": spark(engine={"name": "sglang", "bind": "0.0.0.0", "api_open": True})}
    assert security_changes(open_api, {}) == [
        "s1: engine.bind 0.0.0.0: the API answers on every interface, without a key",
        "s1: engine.api_open: true: the API is open to anyone who reaches it",
    ]
    trusted = security_changes({"s1": spark(hf_endpoint=MIRROR)}, {TRUST_ENDPOINT_ENV: MIRROR})
    assert trusted == [
        f"s1: hf_endpoint {MIRROR}: models come from this mirror; the HF token goes there "
        f"({TRUST_ENDPOINT_ENV} names it)"
    ]


def test_inventory_py_prints_the_summary_to_stderr_before_pyinfra_applies(tmp_path: Path) -> None:
    path = tmp_path / "sparks.yml"
    document = {
        "sparks": {"s1": {"ssh_host": "a", "ssh_user": "n", "ssh_strict_host_key_checking": "no"}}
    }
    path.write_text(yaml.safe_dump(document))
    environ = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"} | {
        "SPARK_INVENTORY": str(path)
    }
    done = subprocess.run(
        [sys.executable, "inventory.py"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert HEADER in done.stderr and "host key is never checked" in done.stderr
    assert done.stdout == ""


def test_the_bind_all_warning_does_not_say_no_authentication_when_a_key_is_set() -> None:
    own = {"ssh_host": "a", "ssh_user": "n", "model_repo": "org/model"}
    document = {"sparks": {"s1": {**own, "engine": {"name": "sglang", "bind": "0.0.0.0"}}}}
    warnings = " ".join(build_inventory(document, "x.yml", environ={"SPARK_API_KEY": KEY}).warnings)
    assert "bind-all-interfaces" in warnings and "has no authentication" not in warnings
