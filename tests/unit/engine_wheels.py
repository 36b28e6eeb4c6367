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

        def prepare_server_args(argv):
            parser = argparse.ArgumentParser()  # only to read --config
            ServerArgs.add_cli_args(parser)
            parser = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=False)
            ServerArgs.add_cli_args(parser)
            return parser.parse_args(argv)
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
    "vllm/envs.py": """
        import os
        from typing import Any, Callable

        environment_variables: dict[str, Callable[[], Any]] = {
            "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),
            "VLLM_ATTENTION_BACKEND": lambda: os.getenv("VLLM_ATTENTION_BACKEND"),
        }
        """,
    "vllm/utils/argparse_utils.py": """
        import json
        from argparse import ArgumentParser

        class FlexibleArgumentParser(ArgumentParser):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)

            def parse_args(self, args=None, namespace=None):
                processed = []
                for arg in args:
                    key = arg.replace("_", "-")
                    name, *keys = key.split(".")
                    processed.append(json.loads(keys[0]) if keys else name)
                return super().parse_args(processed, namespace)
        """,
    "vllm/entrypoints/cli/main.py": """
        def main():
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            parser = FlexibleArgumentParser(description="vLLM CLI")
            parser.parse_args()
        """,
    "vllm/entrypoints/cli/serve.py": """
        class ServeSubcommand:
            name = "serve"

            def subparser_init(self, subparsers):
                return subparsers.add_parser(self.name, usage="vllm serve [model_tag]")
        """,
    "vllm-9.9.9.dist-info/entry_points.txt": """
        [console_scripts]
        vllm = vllm.entrypoints.cli.main:main
        """,
}


# SGLang 0.5.20+: annotated fields in namespace classes under arg_groups/fields/, collected
# by server_args._INPUT_NAMESPACES; a few flags still registered by hand in add_cli_args.
SGLANG_ARG_UTILS = """
    from typing import Annotated

    A = Annotated

    class Arg:
        def __init__(self, help="", choices=None, aliases=None, cli_name=None,
                     type_parser=None, nargs=None, action=None, action_kwargs=None,
                     no_cli=False):
            ...

    def add_cli_args_from_dataclass(parser, cls, *, fields=None):
        for field in cls.fields():
            parser.add_argument(*field.names, **field.kwargs)
    """

SGLANG_FIELDS_FILES = {
    "sglang/__init__.py": "",
    "sglang/srt/arg_groups/arg_utils.py": SGLANG_ARG_UTILS,
    "sglang/srt/arg_groups/choices.py": """
        ATTENTION_BACKEND_CHOICES = ["triton", "flashinfer", "fa4"]
        """,
    "sglang/srt/arg_groups/fields/__init__.py": """
        def collect_input_fields(sources):
            return {}, {}, {}
        """,
    "sglang/srt/arg_groups/fields/model.py": """
        from __future__ import annotations

        from typing import ClassVar, Literal, Optional

        import msgspec

        from sglang.srt.arg_groups.arg_utils import A, Arg
        from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES
        from sglang.srt.utils.common import human_readable_int

        KvDtype = Literal["auto", "fp8_e4m3"]

        class Model(msgspec.Struct):
            _NS_PATH = "model"
            registry: ClassVar[dict] = {}
            model_path: A[str, Arg(help="Weights.", aliases=["--model"])]
            port: A[int, "The port."] = 30000
            attention_backend: A[
                Optional[str], Arg(help="Kernels.", choices=ATTENTION_BACKEND_CHOICES)
            ] = None
            context_length: A[Optional[int], Arg(help=f"{1}", type_parser=human_readable_int)] = None
            kv_cache_dtype: A[KvDtype, "KV cache type."] = "auto"
            reasoning_parser: A[Optional[str], Arg(help="Parser.", no_cli=True)] = "qwen3"
            internal_only: int = 3
            kv_canary_real_data: str = "none"
            served_model_name: A[Optional[str], "Name."] = None
            enable_metrics: A[bool, "Metrics."] = False
        """,
    "sglang/srt/arg_groups/fields/exec_.py": """
        from __future__ import annotations

        import argparse
        from typing import List, Literal, Optional

        import msgspec

        from sglang.srt.arg_groups.arg_utils import A, Arg

        class Backend:
            FULL = "full"
            BREAKABLE = "breakable"
            DISABLED = "disabled"
            ALL = (FULL, BREAKABLE, DISABLED)

        def parse_cuda_graph_config_arg(raw):
            return raw

        class ExecGraphBase(msgspec.Struct):
            cuda_graph_max_bs_decode: A[Optional[int], "Decode graph batch size."] = None

        class ExecGraph(ExecGraphBase):
            _NS_PATH = "exec.graph"
            cuda_graph_bs_decode: A[Optional[List[int]], "Decode batch sizes."] = None
            cuda_graph_backend_decode: A[
                Optional[Literal["full", "breakable", "disabled"]],
                Arg(help="Decode backend.", choices=Backend.ALL),
            ] = None
            cuda_graph_config: A[
                Optional[dict], Arg(help="JSON.", type_parser=parse_cuda_graph_config_arg)
            ] = None
            disable_cuda_graph: A[bool, Arg(help="Resolved.", no_cli=True)] = False
            enable_tf32_matmul: A[
                Optional[bool],
                Arg(help="TF32.", action=argparse.BooleanOptionalAction),
            ] = None
            lora_paths: A[
                Optional[List[str]],
                Arg(help="LoRA.", action=LoRAPathAction, action_kwargs={"nargs": "*"}),
            ] = None
        """,
    "sglang/srt/arg_groups/fields/parallel.py": """
        import msgspec

        from sglang.srt.arg_groups.arg_utils import A, Arg

        class Parallel(msgspec.Struct):
            _NS_PATH = "parallel"
            tp_size: A[int, Arg(help="TP.", aliases=["--tensor-parallel-size"])] = 1
            dist_init_addr: A[str | None, Arg(help="Addr.", aliases=["--nccl-init-addr"])] = None
        """,
    "sglang/srt/parser/reasoning_parser_names.py": """
        REASONING_PARSER_NAMES = ["qwen3", "deepseek-r1"]
        """,
    "sglang/srt/server_args.py": """
        import argparse
        import sys

        import msgspec

        from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
        from sglang.srt.arg_groups.argparse_actions import (
            DeprecatedStoreConstAction,
            DeprecatedStoreTrueAction,
        )
        from sglang.srt.arg_groups.fields.exec_ import ExecGraph
        from sglang.srt.arg_groups.fields.model import Model
        from sglang.srt.arg_groups.fields.parallel import Parallel

        def _reasoning_parser_choices():
            module = sys.modules.get("sglang.srt.parser.reasoning_parser")
            if module is not None:
                return list(module.ReasoningParser.DetectorMap)
            from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

            return list(REASONING_PARSER_NAMES)

        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                choices = _reasoning_parser_choices()
                parser.add_argument(
                    "--reasoning-parser",
                    choices=["auto"] + choices,
                    default=_declared_default("reasoning_parser"),
                )
                parser.add_argument(
                    "--kv-canary-real-data",
                    type=str,
                    default=_declared_default("kv_canary_real_data"),
                )
                parser.add_argument(
                    "--disable-cuda-graph",
                    action=DeprecatedStoreTrueAction,
                    new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
                )
                parser.add_argument(
                    "--monokernel-backend",
                    action=DeprecatedStoreConstAction,
                    nargs=None,
                    choices=["amd"],
                    new_flag="--enable-amd-monokernel",
                )

        _INPUT_NAMESPACES = [Model, ExecGraph, Parallel]
        ServerArgs = msgspec.defstruct("ServerArgs", [])

        def _declared_default(name):
            return None

        def prepare_server_args(argv):
            parser = argparse.ArgumentParser(prog="sglang serve")
            ServerArgs.add_cli_args(parser)
            return parser.parse_args(argv)
        """,
    "sglang/srt/environ.py": """
        import os

        class EnvBool: ...

        class Envs:
            SGLANG_ENABLE_TORCH_COMPILE = EnvBool(False)
            SGLANG_NEW_NAME = EnvBoolWithAlias(True, deprecated_name="SGLANG_OLD_NAME")
            _helper = 3

        _DEPRECATED_ENVS = {"SGLANG_RETIRED": _DeprecatedEnv(note="gone")}
        """,
    "sglang/srt/speculative/hook.py": """
        import os

        from sglang.srt.utils.common import get_bool_env_var

        def _lazy_bool(key, default="false"):
            return lambda: get_bool_env_var(key, default)

        LAZY = _lazy_bool("SGLANG_LAZY_FLAG")

        def check(logger, monkeypatch):
            if os.getenv("SGLANG_ENABLE_SPEC_V2") is not None:
                logger.warning("SGLANG_ENABLE_SPEC_V2 has been removed")
            get_bool_env_var("SGL_LEGACY_SWITCH")
            depth = os.environ["SGLANG_DEPTH"]
            if "SGLANG_PRESENT" in os.environ:
                os.environ.setdefault("SGLANG_DEFAULTED", "1")
            os.environ["SGLANG_WRITTEN_ONLY"] = "1"
            monkeypatch.setenv("SGLANG_TEST_ONLY", "1")
            logger.info("SGLANG_LOGGED_ONLY")
            return depth, {"SGLANG_DICT_KEY": 1}.get("SGLANG_DICT_KEY")
        """,
}

# SGLang 0.5.14-0.5.19: the same annotated fields on the ServerArgs dataclass itself.
SGLANG_ANNOTATED_FILES = {
    "sglang/__init__.py": "",
    "sglang/srt/arg_groups/arg_utils.py": SGLANG_ARG_UTILS,
    "sglang/srt/server_args.py": """
        import argparse
        import dataclasses
        from typing import Optional

        from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass

        @dataclasses.dataclass
        class ServerArgs:
            model_path: A[str, Arg(help="Weights.", aliases=["--model"])]
            port: A[int, "The port."] = 30000
            cuda_graph_max_bs_decode: A[Optional[int], "Decode graph batch size."] = None

            @staticmethod
            def add_cli_args(parser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser.add_argument(
                    "--cuda-graph-max-bs",
                    type=int,
                    action=DeprecatedAliasStoreAction,
                    new_flag="--cuda-graph-max-bs-decode",
                    dest="cuda_graph_max_bs_decode",
                )

        def prepare_server_args(argv):
            parser = argparse.ArgumentParser(prog="sglang serve")
            ServerArgs.add_cli_args(parser)
            return parser.parse_args(argv)
        """,
}

# Neither layout: ServerArgs.add_cli_args registers its flags some third way.
SGLANG_UNKNOWN_FILES = {
    "sglang/__init__.py": "",
    "sglang/srt/server_args.py": """
        from sglang.srt.registry import register_everything

        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                register_everything(parser)
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
