"""
The class of a model as the GB10 rules need it, read from its Hugging Face ``config.json``:
its architectures and model types, whether its attention is MLA (multi-head latent
attention), whether it is a mixture of experts, and how its checkpoint is quantized.

Multimodal configs (``Mistral3ForConditionalGeneration``, ...) keep the language model's
fields under ``text_config``; both levels are read. Where each test comes from:

- MLA: a ``kv_lora_rank`` (DeepSeek-V2/V3, Mistral Small 4's ``mistral4`` text config,
  GLM-4.7-Flash, Kimi) -- the field vLLM's ``ModelConfig.is_deepseek_mla`` and SGLang's
  ``ModelConfig._derive_model_shapes`` read the latent width from; else an architecture in
  ``MLA_ARCHITECTURES`` (SGLang 0.5.10 ``srt/configs/model_config.py``, the list that sets
  ``AttentionArch.MLA``).
- MoE: an expert count (``num_experts``/``n_routed_experts``/``num_local_experts``/
  ``moe_num_experts``) above one, as the Qwen3-MoE, DeepSeek and gpt-oss configs spell it.
- quantization: ``quantization_config.quant_method`` (``fp8``, ``mxfp4``, ``modelopt``,
  ``compressed-tensors`` ...), with NVFP4 told apart by ``quant_algo``/``format`` markers
  (ModelOpt writes ``quant_algo: NVFP4``; compressed-tensors ``format: nvfp4-pack-quantized``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# SGLang 0.5.10 srt/configs/model_config.py `_derive_model_shapes`: architectures it runs
# with MLA attention.
MLA_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "DotsVLMForCausalLM",
        "MistralLarge3ForCausalLM",
        "MistralLarge3ForCausalLMEagle",
        "KimiK25ForConditionalGeneration",
    }
)
EXPERT_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
FIELDS = ("architectures", "model_type", "mla", "moe", "quantization")


@dataclass(frozen=True)
class ModelClass:
    """What the GB10 rules ask about a model (``from_config`` builds it)."""

    architectures: tuple[str, ...] = ()
    model_type: tuple[str, ...] = ()  # the config's, then its text_config's
    mla: bool = False
    moe: bool = False
    quantization: str = "none"  # normalised quant_method: none, fp8, nvfp4, mxfp4, ...
    source: str = ""  # where the config.json was read

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str = "") -> ModelClass:
        """The class of the model whose ``config.json`` is ``config``."""
        text = config.get("text_config")
        levels = [config, *([text] if isinstance(text, Mapping) else [])]
        architectures = tuple(
            str(name)
            for level in levels
            for name in _list(level.get("architectures"))
            if isinstance(name, str)
        )
        model_type = tuple(
            str(level["model_type"]) for level in levels if isinstance(level.get("model_type"), str)
        )
        mla = any(level.get("kv_lora_rank") for level in levels) or bool(
            MLA_ARCHITECTURES.intersection(architectures)
        )
        moe = any(
            isinstance(level.get(key), int) and level[key] > 1
            for level in levels
            for key in EXPERT_COUNTS
        )
        quant = next(
            (
                level["quantization_config"]
                for level in levels
                if isinstance(level.get("quantization_config"), Mapping)
            ),
            None,
        )
        return cls(architectures, model_type, bool(mla), moe, _quantization(quant), source)

    def value(self, field: str) -> Any:
        return getattr(self, field)


@dataclass(frozen=True)
class UnknownModel:
    """No model class: the rules scoped to one say so with ``why``."""

    why: str


def _list(value: Any) -> list[Any]:
    """A config.json list, or none when the file gives something else (``"architectures":
    5``): the file comes from the Hub, written by anyone."""
    return value if isinstance(value, list) else []


def _quantization(config: Mapping[str, Any] | None) -> str:
    if config is None:
        return "none"
    method = str(config.get("quant_method") or "unknown").lower()
    markers = " ".join(
        str(config.get(key) or "") for key in ("quant_algo", "format", "quant_type")
    ).lower()
    groups = config.get("config_groups")
    for group in groups.values() if isinstance(groups, Mapping) else ():
        if isinstance(group, Mapping):
            markers += " " + str(group.get("format") or "").lower()
    if "nvfp4" in markers or "nvfp4" in method:
        return "nvfp4"
    if "mxfp4" in markers or method == "mxfp4":
        return "mxfp4"
    return method
