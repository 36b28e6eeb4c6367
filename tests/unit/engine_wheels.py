"""
Tiny stand-in wheels for the flag extractors: the same declaration patterns as the real
SGLang and vLLM sources, in a few lines each, so the extractors are tested offline.
"""

from __future__ import annotations

import textwrap
import zipfile
from pathlib import Path

SGLANG_FILES = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/parser/reasoning_parser.py": """
        class Qwen3Detector: ...
        class ReasoningParser:
            DetectorMap = {"qwen3": Qwen3Detector, "mistral": Qwen3Detector}
        """,
    "sglang/srt/server_args.py": """
        import argparse
        import dataclasses
        import json
        from typing import Optional

        from sglang.srt.parser.reasoning_parser import ReasoningParser

        ATTENTION_BACKEND_CHOICES = ["triton", "flashinfer"]
        ALL_BACKENDS = [*ATTENTION_BACKEND_CHOICES, "fa3"]
        KV_CHOICES = ["auto"] + ["fp8_e4m3"]

        @dataclasses.dataclass
        class ServerArgs:
            mem_fraction_static: Optional[float] = None
            port: int = 30000
            capacity: int = 10 * 1000
            kv_cache_dtype: str = KV_CHOICES[0]

            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                parser.add_argument("--model-path", "--model", type=str, required=True)
                parser.add_argument("--port", type=int, default=ServerArgs.port)
                parser.add_argument(
                    "--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static
                )
                parser.add_argument("--attention-backend", type=str, choices=ALL_BACKENDS)
                parser.add_argument(
                    "--kv-cache-dtype", choices=KV_CHOICES, default=ServerArgs.kv_cache_dtype
                )
                parser.add_argument("--enable-metrics", action="store_true")
                parser.add_argument(
                    "--stream-output",
                    action=DeprecatedStoreTrueAction,
                    new_flag="--incremental-streaming-output",
                )
                parser.add_argument("--old-knob", action=DeprecatedAction)
                parser.add_argument(
                    "--shared-loras", action=argparse.BooleanOptionalAction, default=None
                )
                parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
                parser.add_argument("--context-length", type=human_readable_int)
                parser.add_argument("--labels", type=json.loads)
                parser.add_argument("--capacity", type=int, default=ServerArgs.capacity)
                reasoning = list(ReasoningParser.DetectorMap.keys())
                parser.add_argument("--reasoning-parser", choices=reasoning)
                parser.add_argument("--checksum", type=str, nargs="?", const="")
        """,
}

VLLM_FILES = {
    "vllm/__init__.py": "",
    "vllm/config/utils.py": "def config(cls):\n    return cls\n",
    "vllm/config/__init__.py": """
        from vllm.config.attention import AttentionConfig
        from vllm.config.cache import CacheConfig
        from vllm.config.compilation import CompilationConfig
        from vllm.config.model import ModelConfig
        from vllm.config.vllm import VllmConfig
        """,
    "vllm/config/model.py": """
        from typing import Literal
        from vllm.config.utils import config

        ModelDType = Literal["auto", "half", "bfloat16"]

        @config
        class ModelConfig:
            model: str = "Qwen/Qwen3-0.6B"
            max_model_len: int | None = None
            enforce_eager: bool = False
            dtype: ModelDType | None = "auto"
            hf_token: bool | str | None = None
        """,
    "vllm/config/cache.py": """
        from typing import Literal
        from pydantic import Field
        from vllm.config.utils import config

        CacheDType = Literal["auto", "fp8", "fp8_inc"]
        PrefixHash = Literal["sha256", "xxhash"]

        @config
        class CacheConfig:
            gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
            cache_dtype: CacheDType = "auto"
            hash_algo: PrefixHash | str = "sha256"
            enable_prefix_caching: bool | None = None
        """,
    "vllm/config/attention.py": """
        from vllm.config.utils import config
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        @config
        class AttentionConfig:
            backend: AttentionBackendEnum | None = None
        """,
    "vllm/v1/attention/backends/registry.py": """
        from enum import Enum, EnumMeta

        class _Meta(EnumMeta): ...

        class AttentionBackendEnum(Enum, metaclass=_Meta):
            FLASH_ATTN = "vllm.flash"
            TRITON_MLA = "vllm.triton_mla"
        """,
    "vllm/config/compilation.py": """
        from typing import Literal
        from vllm.config.utils import config

        @config
        class CompilationConfig:
            cudagraph_capture_sizes: list[int] | None = None
            moe_backend: Literal["auto", "marlin"] = "auto"
        """,
    "vllm/config/vllm.py": """
        from pydantic import Field
        from vllm.config.compilation import CompilationConfig
        from vllm.config.utils import config

        @config
        class VllmConfig:
            compilation_config: CompilationConfig = Field(default_factory=CompilationConfig)
        """,
    "vllm/engine/arg_utils.py": """
        import argparse
        from dataclasses import dataclass

        from vllm.config import (
            AttentionConfig, CacheConfig, CompilationConfig, ModelConfig, VllmConfig,
        )

        def _compute_kwargs(cls):
            human_readable_int_args = {"max_num_batched_tokens"}
            for name in ():
                if name == "max_model_len":
                    pass

        def get_kwargs(cls):
            return _compute_kwargs(cls)

        @dataclass
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                model_kwargs = get_kwargs(ModelConfig)
                group = parser.add_argument_group(title="ModelConfig")
                group.add_argument("--model", **model_kwargs["model"])
                group.add_argument("--max-model-len", **model_kwargs["max_model_len"])
                group.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
                group.add_argument("--dtype", **model_kwargs["dtype"])
                group.add_argument("--hf-token", **model_kwargs["hf_token"])
                cache_kwargs = get_kwargs(CacheConfig)
                cache_kwargs["cache_dtype"]["choices"].remove("fp8_inc")
                group.add_argument(
                    "--gpu-memory-utilization",
                    "--device-memory-utilization",
                    **cache_kwargs["gpu_memory_utilization"],
                )
                group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                group.add_argument("--hash-algo", **cache_kwargs["hash_algo"])
                group.add_argument(
                    "--enable-prefix-caching",
                    **{**cache_kwargs["enable_prefix_caching"], "default": None},
                )
                group.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
                attention_kwargs = get_kwargs(AttentionConfig)
                group.add_argument("--attention-backend", **attention_kwargs["backend"])
                compilation_kwargs = get_kwargs(CompilationConfig)
                group.add_argument(
                    "--cudagraph-capture-sizes", **compilation_kwargs["cudagraph_capture_sizes"]
                )
                moe_kwargs = compilation_kwargs["moe_backend"]
                moe_kwargs["type"] = lambda s: s.lower()
                group.add_argument("--moe-backend", **moe_kwargs)
                vllm_kwargs = get_kwargs(VllmConfig)
                group.add_argument(
                    "--compilation-config", "-cc", **vllm_kwargs["compilation_config"]
                )
                return parser

        @dataclass
        class AsyncEngineArgs(EngineArgs):
            enable_log_requests: bool = False

            @staticmethod
            def add_cli_args(parser, async_args_only=False):
                if not async_args_only:
                    parser = EngineArgs.add_cli_args(parser)
                parser.add_argument(
                    "--enable-log-requests",
                    action=argparse.BooleanOptionalAction,
                    default=AsyncEngineArgs.enable_log_requests,
                )
                return parser
        """,
    "vllm/entrypoints/openai/cli_args.py": """
        import json
        from dataclasses import field
        from typing import Literal

        from vllm.config.utils import config
        from vllm.engine.arg_utils import AsyncEngineArgs, get_kwargs, optional_type

        @config
        class BaseFrontendArgs:
            lora_modules: list[str] | None = None
            chat_template: str | None = None

            @classmethod
            def _customize_cli_kwargs(cls, frontend_kwargs):
                frontend_kwargs["lora_modules"]["type"] = optional_type(str)
                return frontend_kwargs

            @classmethod
            def add_cli_args(cls, parser):
                frontend_kwargs = get_kwargs(cls)
                frontend_kwargs = cls._customize_cli_kwargs(frontend_kwargs)
                group = parser.add_argument_group(title="Frontend")
                for key, value in frontend_kwargs.items():
                    extra_flags = value.pop("flags", [])
                    group.add_argument(*extra_flags, f"--{key.replace('_', '-')}", **value)
                return parser

        @config
        class FrontendArgs(BaseFrontendArgs):
            host: str | None = None
            port: int = 8000
            allowed_origins: list[str] = field(default_factory=lambda: ["*"])
            uvicorn_log_level: Literal["info", "debug"] = "info"

            @classmethod
            def _customize_cli_kwargs(cls, frontend_kwargs):
                frontend_kwargs = super()._customize_cli_kwargs(frontend_kwargs)
                frontend_kwargs["allowed_origins"]["type"] = json.loads
                del frontend_kwargs["allowed_origins"]["nargs"]
                frontend_kwargs["port"]["flags"] = ["-p"]
                return frontend_kwargs

        def make_arg_parser(parser):
            parser.add_argument("model_tag", type=str, nargs="?")
            parser.add_argument("--headless", action="store_true", default=False)
            parser = FrontendArgs.add_cli_args(parser)
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
        """,
}


def make_wheel(folder: Path, filename: str, files: dict[str, str]) -> Path:
    """A wheel (zip) named ``filename`` in ``folder`` holding ``files`` (dedented)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, textwrap.dedent(text).lstrip("\n"))
    return path
