"""The model class from real-shaped config.json files, and how the laptop reads it."""

from __future__ import annotations

import json

import pytest

from sparkdeploy.config.model_source import hub_config, read_model_class
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from tests.unit import model_configs as cfg


@pytest.mark.parametrize(
    ("config", "architectures", "model_type", "mla", "moe", "quantization"),
    [
        (cfg.QWEN3_DENSE, ("Qwen3ForCausalLM",), ("qwen3",), False, False, "none"),
        (cfg.QWEN3_MOE, ("Qwen3MoeForCausalLM",), ("qwen3_moe",), False, True, "none"),
        (cfg.DEEPSEEK_V3, ("DeepseekV3ForCausalLM",), ("deepseek_v3",), True, True, "fp8"),
        (cfg.GPT_OSS, ("GptOssForCausalLM",), ("gpt_oss",), False, True, "mxfp4"),
        (
            cfg.MISTRAL_SMALL_4,
            ("Mistral3ForConditionalGeneration",),
            ("mistral3", "mistral4"),
            True,
            True,
            "none",
        ),
        (cfg.NVFP4_MODELOPT, ("Qwen3MoeForCausalLM",), ("qwen3_moe",), False, True, "nvfp4"),
    ],
    ids=["qwen3", "qwen3-moe", "deepseek-v3", "gpt-oss", "mistral-small-4", "nvfp4"],
)
def test_model_class_from_config(config, architectures, model_type, mla, moe, quantization):
    model = ModelClass.from_config(config, source="x")
    assert (model.architectures, model.model_type) == (architectures, model_type)
    assert (model.mla, model.moe, model.quantization) == (mla, moe, quantization)


def test_mla_from_a_known_architecture_without_kv_lora_rank():
    assert ModelClass.from_config({"architectures": ["DeepseekV2ForCausalLM"]}).mla is True
    assert ModelClass.from_config({"architectures": ["LlamaForCausalLM"]}).mla is False


def test_compressed_tensors_nvfp4_format_is_nvfp4():
    config = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"format": "nvfp4-pack-quantized"}},
        }
    }
    assert ModelClass.from_config(config).quantization == "nvfp4"


def spark(**fields) -> SparkSettings:
    return SparkSettings.model_validate({"ssh_host": "a", "model_repo": "Qwen/Qwen3-8B", **fields})


class Recorder:
    """A fetch that records its calls and answers from a table (never the network)."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def __call__(self, repo, revision, endpoint, token, offline, timeout):
        self.calls.append((repo, revision, endpoint, token, offline, timeout))
        answer = self.answers[(repo, revision)]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_reads_the_model_at_its_revision_from_the_configured_endpoint():
    fetch = Recorder({("Qwen/Qwen3-8B", "v1"): cfg.QWEN3_DENSE})
    model = read_model_class(
        spark(model_revision="v1", hf_endpoint="https://hf.example.org"),
        fetch,
        # The operator confirms the mirror (issue 22: the token goes only to the Hub else).
        environ={"HF_TOKEN": "tok", "SPARK_TRUST_HF_ENDPOINT": "https://hf.example.org"},
    )
    assert isinstance(model, ModelClass) and model.model_type == ("qwen3",)
    assert model.source == "Qwen/Qwen3-8B@v1 config.json"
    [(_, _, endpoint, token, offline, timeout)] = fetch.calls
    assert (endpoint, token, offline) == ("https://hf.example.org", "tok", False)
    assert timeout <= 10


def test_falls_back_to_the_base_repo_and_respects_offline():
    fetch = Recorder(
        {
            ("nvidia/Q-FP4", "main"): FileNotFoundError("config.json missing"),
            ("Qwen/Qwen3-8B", "main"): cfg.QWEN3_DENSE,
        }
    )
    model = read_model_class(
        spark(model_repo="nvidia/Q-FP4", model_base_repo="Qwen/Qwen3-8B"),
        fetch,
        environ={"HF_HUB_OFFLINE": "1"},
    )
    assert isinstance(model, ModelClass) and model.source.startswith("Qwen/Qwen3-8B@main")
    assert [call[4] for call in fetch.calls] == [True, True]


def test_an_unreadable_config_says_why_and_never_shows_the_token():
    token = "hf_" + "a" * 34
    fetch = Recorder({("Qwen/Qwen3-8B", "main"): OSError(f"401 for token {token}")})
    model = read_model_class(spark(), fetch, environ={"HF_TOKEN": token})
    assert isinstance(model, UnknownModel)
    assert "could not be read" in model.why and "Qwen/Qwen3-8B@main" in model.why
    assert token not in model.why


def test_no_model_repo_is_unknown():
    assert isinstance(read_model_class(spark(model_repo=None), Recorder({})), UnknownModel)


def test_the_sparks_of_a_pair_read_their_shared_model_once():
    from sparkdeploy.inventory import build_inventory
    from tests.twins import harness

    asked: list[str] = []

    def read(spark: SparkSettings) -> ModelClass:
        asked.append(spark.ssh_host)
        return ModelClass.from_config(cfg.QWEN3_DENSE)

    document = {
        "defaults": {"ssh_user": "nvidia", "model_repo": "org/m", "engine": {"name": "vllm"}},
        "sparks": {
            f"s{n}": {"ssh_host": f"s{n}.local", "qsfp": harness.qsfp_plan(n)} for n in (1, 2)
        },
    }
    build_inventory(document, "inventory/sparks.yml", read)
    assert asked == ["s1.local"]


def test_the_offline_read_makes_no_request_of_any_kind(tmp_path, monkeypatch):
    """hub_config offline: the cached config.json, or FileNotFoundError, and no socket opened
    (hf_hub_download with local_files_only fetched huggingface_hub's agent registry from
    huggingface.co unless the process itself had HF_HUB_OFFLINE)."""
    import socket

    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    connections = []  # recorded, not refused: the Hub client swallows what this raises

    def record(host, port, *_args, **_kwargs):  # every connection starts here, DNS or not
        connections.append((host, port))
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", record)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # as in `spark-deploy check`
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "agents.json"))
    monkeypatch.setattr(_detect_agent, "_registry", None)
    snapshot = tmp_path / "models--Qwen--Qwen3-8B" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(cfg.QWEN3_DENSE))
    (tmp_path / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (tmp_path / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("a" * 40)
    assert hub_config("Qwen/Qwen3-8B", "main", None, None, True, 1.0) == cfg.QWEN3_DENSE
    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache"):
        hub_config("nvidia/none", "main", None, None, True, 1.0)
    assert connections == []
