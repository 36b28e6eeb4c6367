#!/usr/bin/env python3
"""A stand-in inference engine (SGLang or vLLM) for the Spark twins. Standard library only.

The docker stand-in (./docker) starts it with a container's command line, as the real image
would run it, and tells it which release the image holds (SPARK_TWIN_IMAGE_ENGINE and
SPARK_TWIN_IMAGE_VERSION, from ../images.json) and whether it has Ray (SPARK_TWIN_IMAGE_RAY;
vLLM's Ray executor fails as `import ray` does without it):

    python3 -m sglang.launch_server --model-path /model ...
    sglang serve [/model] ...                   (a first positional is --model-path)
    vllm serve [/model] ...                     (--model moves to the front, as vLLM moves it)
    python3 -m vllm.entrypoints.openai.api_server --model /model ...
    vllm --version | -v                         sglang version

The options are that release's: argparse itself parses them, built from the release's flag
catalogue (<engine>-<version>.json in $SPARK_TWIN_CATALOGUES, default
/opt/spark-twin/catalogues, where the twin harness copies the committed catalogues). So an
unknown option, an ambiguous prefix (with allow_abbrev), a bad choice or type ends it with
argparse's usage line, `PROG: error: MESSAGE` and exit code 2, and --help lists the release's
flags (argparse's help, with the catalogue's types and defaults). The catalogue's `parser`
section says how the release reads its command line (prog, allow_abbrev, `_` for `-`, dotted
JSON keys); without it, PARSER_FALLBACK. vLLM's `vllm serve` reports unrecognized arguments
through its top-level parser (`vllm: error: ...`), as argparse does with subcommands. The
other engine's `python3 -m` module fails as python does without it.

Like the real engine it:

- reads the model folder (a container path, mapped to the host through the mounts the docker
  stand-in passes in SPARK_TWIN_MOUNTS) and refuses to start without config.json or
  tokenizer.json, printing the engine's own error and exiting 1;
- "loads" for SPARK_TWIN_ENGINE_STARTUP_S seconds (default 1) without listening, so clients
  get connection refused, as from the real servers while they load;
- then serves GET /v1/models, POST /v1/chat/completions (one deterministic token), GET /health
  and GET /metrics (Prometheus text with the real metric names; SGLang only with
  --enable-metrics), logging in the engine's format, uvicorn's lines included;
- across Sparks (--nnodes above 1, or vLLM's Ray executor with several GPUs) logs NCCL's init
  lines for the network NCCL would choose in its container (./nccl.py: RDMA with
  /dev/infiniband and an unlimited memlock, else TCP sockets), as NCCL_DEBUG asks;
- on SIGTERM/SIGINT shuts down like uvicorn and exits 0; SIGKILL kills it.

When /etc/spark-twin/engine-fail (or $SPARK_TWIN_ENGINE_FAIL) exists, its lines are printed
while the model loads and the engine exits 1: a way to replay a real crash. An image whose
ENV sets SPARK_TWIN_ENGINE_CRASH (a regressed build, ../images.json) crashes the same way with
that text. An image whose ENV sets SPARK_TWIN_IMAGE_FORK_FLAGS (a fork's build: a JSON object
of flag -> catalogue entry) takes those flags besides its release's, and lists them for --help.
"""

from __future__ import annotations

import argparse
import hmac
import importlib.util
import json
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The release a container runs is its image's (the docker stand-in sets these from images.json);
# the engine's options are that release's, from its flag catalogue.
RELEASE_ENV = ("SPARK_TWIN_IMAGE_ENGINE", "SPARK_TWIN_IMAGE_VERSION")
CATALOGUES = Path(os.environ.get("SPARK_TWIN_CATALOGUES", "/opt/spark-twin/catalogues"))
# How each engine reads its command line when a catalogue has no `parser` section:
# SGLang's server-args parser is a plain argparse.ArgumentParser (sglang/srt/server_args.py,
# prepare_server_args); vLLM's is FlexibleArgumentParser (vllm/utils/argparse_utils.py), which
# turns `_` into `-` in option names and merges `--json-arg.key value` into `--json-arg JSON`,
# and leaves argparse's allow_abbrev as it is (on).
PARSER_FALLBACK = {
    "sglang": {"allow_abbrev": True, "underscores": False, "dotted_json": False},
    "vllm": {"allow_abbrev": True, "underscores": True, "dotted_json": True},
}
# How each engine is started: `python3 -m MODULE` or `PROGRAM serve` (which also takes the
# model as its first positional argument).
MODULES = {"sglang.launch_server": "sglang", "vllm.entrypoints.openai.api_server": "vllm"}
PROGRAMS = ("sglang", "vllm")
DEFAULTS = {"sglang": ("127.0.0.1", 30000), "vllm": ("0.0.0.0", 8000)}
TOKEN = "OK"  # the one token every completion returns
# The engines' main metrics: name, type and help as their collectors declare them, the labels
# they carry and the count they report (None: 0, as on an idle engine).
METRICS = {
    "sglang": (
        ("sglang:num_running_reqs", "gauge", "The number of running requests.", "scheduler", None),
        (
            "sglang:num_queue_reqs",
            "gauge",
            "The number of requests in the waiting queue.",
            "scheduler",
            None,
        ),
        (
            "sglang:gen_throughput",
            "gauge",
            "The generation throughput (token/s).",
            "scheduler",
            None,
        ),
        ("sglang:token_usage", "gauge", "The token usage.", "scheduler", None),
        ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", "scheduler", None),
        (
            "sglang:spec_accept_length",
            "gauge",
            "Mean acceptance length of speculative decoding "
            "(accepted drafts + bonus token per forward).",
            "scheduler",
            "spec_accept_length",
        ),
        (
            "sglang:spec_accept_rate",
            "gauge",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            "scheduler",
            None,
        ),
        (
            "sglang:prompt_tokens",
            "counter",
            "Number of prefill tokens processed.",
            "tokenizer",
            "prompt_tokens",
        ),
        (
            "sglang:generation_tokens",
            "counter",
            "Number of generation tokens processed.",
            "tokenizer",
            "generation_tokens",
        ),
        (
            "sglang:num_requests",
            "counter",
            "Number of requests processed.",
            "tokenizer",
            "requests",
        ),
    ),
    "vllm": (
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            "engine",
            None,
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            "engine",
            None,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            "engine",
            None,
        ),
        (
            "vllm:prompt_tokens",
            "counter",
            "Number of prefill tokens processed.",
            "engine",
            "prompt_tokens",
        ),
        (
            "vllm:generation_tokens",
            "counter",
            "Number of generation tokens processed.",
            "engine",
            "generation_tokens",
        ),
        (
            "vllm:request_success",
            "counter",
            "Count of successfully processed requests.",
            "finished",
            None,
        ),
    ),
}
# vLLM registers these only when speculative decoding is configured; SGLang always has its own.
SPEC_METRICS = (
    ("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.", "engine", None),
    ("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", "engine", None),
    (
        "vllm:spec_decode_num_accepted_tokens",
        "counter",
        "Number of accepted tokens.",
        "engine",
        None,
    ),
)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
RAY_PG_WAIT_S = 1800  # vLLM's PG_WAIT_TIMEOUT
RAY_LOG_EVERY_S = 10
FAIL_FILE = Path(os.environ.get("SPARK_TWIN_ENGINE_FAIL", "/etc/spark-twin/engine-fail"))


@dataclass(frozen=True)
class Command:
    """An engine command line: the engine it starts, how (`PROGRAM serve` or
    `python3 -m MODULE`) and the arguments after that."""

    kind: str
    args: list[str]
    program: bool  # `sglang serve` / `vllm serve` (else python3 -m MODULE)
    module: str = ""


def recognize(argv: list[str]) -> Command | None:
    """The engine command in a container's command line, None for any other command."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program in PROGRAMS and argv[1:2] == ["serve"]:
        return Command(program, argv[2:], True)
    if (
        re.fullmatch(r"python(3(\.\d+)?)?", program)
        and argv[1:2] == ["-m"]
        and len(argv) > 2
        and argv[2] in MODULES
    ):
        return Command(MODULES[argv[2]], argv[3:], False, argv[2])
    return None


@dataclass(frozen=True)
class Release:
    """The engine release of the container's image, and its flag catalogue."""

    kind: str
    version: str
    flags: dict[str, dict[str, Any]]
    parser: dict[str, Any]

    @classmethod
    def load(cls, kind: str, version: str, folder: Path = CATALOGUES) -> Release:
        path = folder / f"{kind}-{version}.json"
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise StandinError(f"no flag catalogue of {kind} {version}: {exc}") from None
        parser = {**PARSER_FALLBACK[kind], **(document.get("parser") or {})}
        # A fork's image adds flags of its own to the release's (its ENV, ../images.json).
        fork = json.loads(os.environ.get("SPARK_TWIN_IMAGE_FORK_FLAGS") or "{}")
        return cls(kind, version, {**document["flags"], **fork}, parser)


class StandinError(Exception):
    """The stand-in itself is not set up to play this container (not an engine error)."""


def human_readable_int(value: str) -> int:
    """An int, or one with a k/m/g/t suffix (decimal) or K/M/G/T (binary), as vLLM's
    human_readable_int reads it (vllm/utils/argparse_utils.py)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value.strip())
    if not match:
        return int(value)
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    try:
        return int(number) * 1024 ** ("KMGT".index(suffix) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Decimals are not allowed with binary suffixes like {suffix}. "
            f"Did you mean to use {number}{suffix.lower()} instead?"
        ) from None


def value_type(spec: dict[str, Any]):
    """The argparse `type` of a catalogued flag: argparse names the function in its error
    (`invalid int value: 'x'`), as it would name the engine's own."""
    kind = spec["type"]
    if kind == "int":
        return human_readable_int if spec.get("human_readable") else int
    if kind == "float":
        return float
    if kind == "json":
        return json.loads
    if spec.get("ignore_case") and spec.get("choices"):
        by_case = {str(choice).lower(): choice for choice in spec["choices"]}

        def case_insensitive(value: str):
            return by_case.get(value.lower(), value)

        return case_insensitive
    return str


def describe(spec: dict[str, Any]) -> str:
    """A flag's line of help: the catalogue has types and defaults, not the engine's text."""
    parts = [spec["type"]]
    if spec.get("default") not in (None, [], {}):
        parts.append(f"default: {json.dumps(spec['default'])}")
    if spec.get("deprecated"):
        parts.append(
            "deprecated" + (f", use {spec['replaced_by']}" if spec.get("replaced_by") else "")
        )
    return "; ".join(parts).replace("%", "%%")


def add_flags(parser: argparse.ArgumentParser, flags: dict[str, dict[str, Any]]) -> None:
    """Every catalogued flag as an argparse argument: each canonical name with its aliases,
    a bool as a switch (with its `--no-` form when the catalogue has one)."""
    aliases: dict[str, list[str]] = {}
    negatable = set()
    for name, spec in flags.items():
        if spec.get("alias_of") in flags:
            aliases.setdefault(spec["alias_of"], []).append(name)
        if spec.get("negates") in flags:
            negatable.add(spec["negates"])
    for name, spec in flags.items():
        if spec.get("alias_of") in flags or spec.get("negates") in flags:
            continue
        names = [name, *aliases.get(name, [])]
        kwargs: dict[str, Any] = {
            "dest": name.lstrip("-").replace("-", "_"),
            "help": describe(spec),
        }
        if spec["type"] == "bool":
            negates = name in negatable
            kwargs["action"] = argparse.BooleanOptionalAction if negates else "store_true"
        else:
            kwargs["type"] = value_type(spec)
            if spec.get("choices"):
                kwargs["choices"] = spec["choices"]
            if spec.get("nargs"):
                kwargs["nargs"] = spec["nargs"]
            if spec.get("repeatable"):
                kwargs["action"] = "append"
        parser.add_argument(*names, **kwargs)


def flexible(args: list[str], underscores: bool, dotted_json: bool) -> list[str]:
    """vLLM's FlexibleArgumentParser before argparse sees the arguments: `_` is `-` in an
    option's name (up to its first dot); `--name.key value` and `--name.key=value` are merged
    into `--name '{"key": value}'` (the value read as JSON when it is, `key+` appending)."""
    if underscores:
        renamed = []
        for arg in args:
            if arg.startswith("--"):
                name, eq, value = arg.partition("=")
                head, dot, tail = name[2:].partition(".")
                arg = "--" + head.replace("_", "-") + dot + tail + eq + value
            renamed.append(arg)
        args = renamed
    if not dotted_json:
        return args
    kept: list[str] = []
    merged: dict[str, dict[str, Any]] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if not (arg.startswith("-") and "." in name):
            kept.append(arg)
            continue
        if not eq:
            value = rest.pop(0) if rest else ""
        flag, *keys = name.split(".")
        parsed: Any
        if keys and keys[-1].endswith("+"):
            keys[-1] = keys[-1][:-1]
            parsed = value.split(",")
        else:
            try:
                parsed = json.loads(value)
            except ValueError:
                try:
                    parsed = human_readable_int(value)
                except (ValueError, argparse.ArgumentTypeError):
                    parsed = value
        node = merged.setdefault(flag, {})
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if isinstance(parsed, list) and isinstance(node.get(keys[-1]), list):
            node[keys[-1]] += parsed
        else:
            node[keys[-1]] = parsed
    for flag, tree in merged.items():
        kept += [flag, json.dumps(tree)]
    return kept


VLLM_EPILOG = (  # vllm/entrypoints/utils.py VLLM_SUBCMD_PARSER_EPILOG
    "For full list:            vllm {subcmd} --help=all\n"
    "For a section:            vllm {subcmd} --help=ModelConfig    (case-insensitive)\n"
    "For a flag:               vllm {subcmd} --help=max-model-len  (_ or - accepted)\n"
    "Documentation:            https://docs.vllm.ai\n"
)


class VllmParser(argparse.ArgumentParser):
    """The help of vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py, vLLM >= 0.10):
    `--help=all` lists every flag; `--help=KEYWORD` the flags whose name holds it (`_` read
    as `-`); a plain `--help` only the usage, the config groups (the catalogue has none) and
    the epilog that says so, without the flags."""

    search: str | None = None

    def format_help(self) -> str:
        if self._subparsers is not None:
            return super().format_help()
        keyword = VllmParser.search
        if keyword == "all":
            return super().format_help()
        formatter = self._get_formatter()
        if keyword:
            matched = [
                action
                for action in self._actions
                if any(keyword in option.lower() for option in action.option_strings)
            ]
            if not matched:
                formatter.add_text(
                    f"No group or arguments matching '{keyword}'.\n"
                    "Use '--help' to see available groups or "
                    "'--help=all' to see all available parameters."
                )
                return formatter.format_help()
            formatter.start_section(f"Arguments matching '{keyword}'")
            formatter.add_arguments(matched)
            formatter.end_section()
            return formatter.format_help()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        formatter.add_text(self.epilog)
        return formatter.format_help()


def vllm_help(args: list[str]) -> list[str]:
    """FlexibleArgumentParser.parse_args: `--help=KEYWORD` is `--help` searching KEYWORD."""
    kept = []
    for arg in args:
        if arg.startswith("--help="):
            VllmParser.search = arg.split("=", 1)[1].lower().replace("_", "-")
            arg = "--help"
        kept.append(arg)
    return kept


def server_parser(release: Release, command: Command) -> tuple[argparse.ArgumentParser, list[str]]:
    """Argparse as the release builds it for this command line, and the arguments it parses.

    `vllm serve`: vLLM's top-level parser (`vllm`, which reports unrecognized arguments) with
    the `serve` subcommand, whose first positional argument is the model. `sglang serve`: the
    model may come first and stands for --model-path. `python3 -m MODULE`: one parser, named
    as argparse names a script (MODULE's file) unless the catalogue names it.
    """
    kind, args = release.kind, list(command.args)
    named = release.parser.get("prog")
    abbrev = bool(release.parser["allow_abbrev"])
    if kind == "vllm" and command.program:
        top = VllmParser(prog="vllm", allow_abbrev=abbrev)
        top.add_argument("-v", "--version", action="version", version=release.version)
        commands = top.add_subparsers(dest="subparser")
        serve = commands.add_parser(
            "serve",
            usage="vllm serve [model_tag] [options]",
            allow_abbrev=abbrev,
            epilog=VLLM_EPILOG.format(subcmd="serve"),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if named:
            serve.prog = named
        serve.add_argument("model_tag", nargs="?")
        add_flags(serve, release.flags)
        return top, ["serve", *vllm_serve_args(serve, args)]
    if command.program:
        prog = named or command.kind
        if args and not args[0].startswith("-"):  # `sglang serve MODEL ...`
            args = ["--model-path", args[0], *args[1:]]
    else:
        prog = named or command.module.rsplit(".", 1)[-1] + ".py"
    kind_parser = VllmParser if kind == "vllm" else argparse.ArgumentParser
    parser = kind_parser(prog=prog, allow_abbrev=abbrev)
    add_flags(parser, release.flags)
    return parser, args


def vllm_serve_args(serve: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """What FlexibleArgumentParser does with `vllm serve` arguments: --model moves to the
    front as the positional model; --served-model-name without a model there is refused."""
    for i, arg in enumerate(args):
        if arg == "--model" or arg.startswith("--model="):
            if arg == "--model":
                if i + 1 >= len(args) or args[i + 1].startswith("-"):
                    serve.error("argument --model: expected one argument")
                model, rest = args[i + 1], args[i + 2 :]
            else:
                model, rest = arg.removeprefix("--model="), args[i + 1 :]
            args = [model, *args[:i], *rest]
            break
    if (
        args
        and args[0].startswith("-")
        and not any(re.match(r"^--config(=.+|$)", arg) for arg in args)
        and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", arg) for arg in args)
    ):
        raise StandinValueError(
            "`model` should be provided as the first positional argument when using "
            "`vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
        )
    return args


class StandinValueError(ValueError):
    """An engine's own ValueError before it parses (printed as its traceback's last line)."""


def host_path(container_path: str) -> Path:
    """Where a path inside the container is on this host: through the longest bind mount."""
    mounts = json.loads(os.environ.get("SPARK_TWIN_MOUNTS", "[]"))
    for destination, source in sorted(mounts, key=lambda m: len(m[0]), reverse=True):
        if container_path == destination or container_path.startswith(
            destination.rstrip("/") + "/"
        ):
            return Path(source + container_path[len(destination.rstrip("/")) :])
    return Path(container_path)


@dataclass
class Engine:
    kind: str
    version: str
    model: str
    host: str
    port: int
    served_names: list[str]
    metrics: bool
    speculative: bool
    context_len: int = 0
    ray_gpus: int = 0  # vLLM's Ray executor: the GPUs it places its workers on (0: no Ray)
    headless: str = ""  # vLLM --headless: the head's torch.distributed address ("": serves)
    nodes: int = 1  # --nnodes: the Sparks its NCCL communicator spans
    # SGLang's ranks after the first (--node-rank >= 1 of --nnodes > 1) run no tokenizer and
    # no API: only a dummy health server on --port (sglang/srt/utils launch_dummy_health_check_server,
    # called from engine.py _launch_subprocesses for node_rank >= 1): /health, /health_generate
    # and, in recent releases, /ping, each an empty 200.
    health_only: bool = False
    api_key: str | None = None  # --api-key (SGLang: or its --config file; vLLM: or VLLM_API_KEY)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, int] = field(default_factory=dict)

    # --- logs, in the engine's own format ----------------------------------------------

    def log(self, message: str, source: str = "", process: str = "") -> None:
        """A line of the engine's own logger: SGLang's `[time PROCESS] message`, vLLM's
        `(PROCESS pid=N) INFO time [file:line] message`."""
        now = time.localtime()
        if self.kind == "sglang":
            rank = f" {process}" if process else ""
            line = f"[{time.strftime('%Y-%m-%d %H:%M:%S', now)}{rank}] {message}"
        else:
            where = f" [{source}]" if source else ""
            line = (
                f"({process or 'APIServer'} pid={os.getpid()}) INFO "
                f"{time.strftime('%m-%d %H:%M:%S', now)}{where} {message}"
            )
        print(line, flush=True)

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        """A line from uvicorn's logger (SGLang sets its format; vLLM prefixes its process)."""
        prefix = f"{level}:".ljust(9)
        if self.kind == "sglang":
            print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {prefix} {message}", flush=True)
        else:
            print(f"(APIServer pid={os.getpid()}) {prefix} {message}", flush=True)

    # --- startup -----------------------------------------------------------------------

    def announce(self) -> None:
        if self.kind == "sglang":
            self.log(
                f"server_args=ServerArgs(model_path='{self.model}', "
                f"served_model_name='{self.served_names[0]}', host='{self.host}', "
                f"port={self.port}, enable_metrics={self.metrics}, ...)"
            )
        else:
            self.log(
                f"vLLM server version {self.version}, serving model {self.model}",
                "startup.py:38",
            )
            given = {
                "model": self.model,
                "host": self.host,
                "port": self.port,
                "served_model_name": self.served_names,
            }
            defaults = dict(zip(("host", "port"), DEFAULTS["vllm"]), served_model_name=[self.model])
            shown = {k: v for k, v in given.items() if defaults.get(k) != v}
            self.log(f"non-default args: {shown}", "startup.py:96")

    def model_error(self) -> list[str] | None:
        """The engine's own error for a model folder it cannot load, or None."""
        folder = host_path(self.model)
        if not (folder / "config.json").is_file():
            if self.kind == "sglang":
                return [
                    f"ValueError: Unrecognized model in {self.model}. "
                    "Should have a `model_type` key in its config.json."
                ]
            return [
                f"ValueError: Invalid repository ID or local directory specified: '{self.model}'.",
                "Please verify the following requirements:",
                "1. Provide a valid Hugging Face repository ID.",
                "2. Specify a local directory that contains a recognized configuration file.",
                "   - For Hugging Face models: ensure the presence of a 'config.json'.",
                "   - For Mistral models: ensure the presence of a 'params.json'.",
            ]
        if not (folder / "tokenizer.json").is_file():
            return ["KeyError: 'tokenizer.json'"]
        config = json.loads((folder / "config.json").read_text())
        text = config.get("text_config") or {}
        self.context_len = config.get("max_position_embeddings") or text.get(
            "max_position_embeddings", 32768
        )
        return None

    def start_loading(self) -> None:
        if self.kind == "sglang":
            self.log("Load weight begin. avail mem=119.62 GB", process="TP0")
        else:
            self.log(
                f"Starting to load model {self.model}...", "gpu_model_runner.py:4978", "EngineCore"
            )

    def ready_lines(self, startup_s: float) -> None:
        if self.kind == "sglang":
            self.log(
                f"Load weight end. elapsed={startup_s:.2f} s, avail mem=52.31 GB", process="TP0"
            )
        else:
            self.log(
                f"Model loading took 66.42 GiB memory and {startup_s:.6f} seconds",
                "gpu_model_runner.py:5088",
                "EngineCore",
            )
            self.log("Supported tasks: ['generate']", "entry.py:135")
            self.log(f"Starting vLLM server on http://{self.host}:{self.port}", "entry.py:139")
            self.log("Available routes are:", "launcher.py:188")
            for path, method in (
                ("/v1/models", "GET"),
                ("/v1/chat/completions", "POST"),
                ("/health", "GET"),
                ("/metrics", "GET"),
            ):
                self.log(f"Route: {path}, Methods: {method}", "launcher.py:197")
        self.uvicorn(f"Started server process [{os.getpid()}]")
        self.uvicorn("Waiting for application startup.")
        self.uvicorn("Application startup complete.")
        if self.kind == "sglang":
            self.uvicorn(
                f"Uvicorn running on http://{self.host}:{self.port} (Press CTRL+C to quit)"
            )
            for request in ("GET /model_info", "POST /generate"):  # SGLang's warmup
                port = random.randint(32768, 60999)
                self.uvicorn(f'127.0.0.1:{port} - "{request} HTTP/1.1" 200 OK')
            self.log("The server is fired up and ready to roll!")

    def shutdown_lines(self) -> None:
        for message in (
            "Shutting down",
            "Waiting for application shutdown.",
            "Application shutdown complete.",
            f"Finished server process [{os.getpid()}]",
        ):
            self.uvicorn(message)

    # --- the API -----------------------------------------------------------------------

    def models(self) -> dict:
        created = int(time.time())
        cards: list[dict[str, Any]]
        cards = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": self.kind,
                "root": name if self.kind == "sglang" else self.model,
                "parent": None,
                "max_model_len": self.context_len,
            }
            for name in self.served_names
        ]
        if self.kind == "vllm":
            for card in cards:
                card["permission"] = [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ]
        return {"object": "list", "data": cards}

    def chat(self, request: dict) -> tuple[int, dict]:
        model = request.get("model") or self.served_names[0]
        if self.kind == "vllm" and model not in self.served_names:
            return 404, self.error(
                f"The model `{model}` does not exist. "
                f"Valid aliases: {', '.join(self.served_names)}.",
                "NotFoundError",
                404,
                "model",
            )
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            return 400, self.error(
                f"max_tokens must be at least 1, got {limit}.", "BadRequestError", 400, "max_tokens"
            )
        messages = request.get("messages") or []
        prompt = sum(len(str(m.get("content", "")).split()) for m in messages) + 4
        finish = "length" if limit == 1 else "stop"
        with self.lock:
            for key, value in (
                ("requests", 1),
                ("prompt_tokens", prompt),
                ("generation_tokens", 1),
                (f"finished_{finish}", 1),
            ):
                self.counts[key] = self.counts.get(key, 0) + value
        message = {
            "role": "assistant",
            "content": TOKEN,
            "reasoning_content": None,
            "tool_calls": None,
        }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        if self.kind == "sglang":
            choice["matched_stop"] = None
            reply_id = uuid.uuid4().hex
        else:
            choice["stop_reason"] = None
            reply_id = f"chatcmpl-{uuid.uuid4().hex}"
        return 200, {
            "id": reply_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt,
                "total_tokens": prompt + 1,
                "completion_tokens": 1,
                "prompt_tokens_details": None,
            },
        }

    def error(self, message: str, kind: str, code: int, param: str | None = None) -> dict:
        if self.kind == "sglang":
            return {
                "object": "error",
                "message": message,
                "type": "BadRequest",
                "param": param,
                "code": code,
            }
        return {"error": {"message": message, "type": kind, "param": param, "code": code}}

    def metrics_text(self) -> str:
        """Prometheus text exposition, written as prometheus_client writes it."""
        with self.lock:
            counts = dict(self.counts, spec_accept_length=1 if self.speculative else 0)
        name = self.served_names[0]
        labels = {
            "scheduler": {
                "model_name": name,
                "engine_type": "unified",
                "tp_rank": "0",
                "pp_rank": "0",
                "moe_ep_rank": "0",
            },
            "tokenizer": {"model_name": name, "engine_type": "unified", "is_streaming": "false"},
            "engine": {"model_name": name, "engine": "0"},
        }
        rows = METRICS[self.kind] + (
            SPEC_METRICS if self.kind == "vllm" and self.speculative else ()
        )
        lines = []
        for family, kind, help_text, label_set, key in rows:
            family += "_total" if kind == "counter" else ""
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
            samples: list[tuple[dict[str, str], str | None]]
            if label_set == "finished":  # one sample per finish reason
                samples = [
                    ({**labels["engine"], "finished_reason": reason}, f"finished_{reason}")
                    for reason in FINISH_REASONS
                ]
            else:
                samples = [(labels[label_set], key)]
            for sample_labels, sample_key in samples:
                rendered = ",".join(f'{k}="{v}"' for k, v in sample_labels.items())
                count = counts.get(sample_key, 0) if sample_key is not None else 0
                lines.append(f"{family}{{{rendered}}} {float(count)}")
        return "\n".join(lines) + "\n"


def parse(release: Release, command: Command) -> Engine:
    """The engine for a command line, parsed by argparse as the release's parser would parse
    it: an unknown, ambiguous or invalid option ends the process with argparse's message
    and exit code 2, `--help` prints the release's options and exits 0."""
    parser, args = server_parser(release, command)
    args = vllm_help(args) if release.kind == "vllm" else sglang_config(args)
    args = flexible(args, release.parser["underscores"], release.parser["dotted_json"])
    options = vars(parser.parse_args(args))
    host, port = DEFAULTS[release.kind]
    if release.kind == "sglang":
        model = options.get("model_path")
        if model is None:
            parser.error("the following arguments are required: --model-path")
        served = [options.get("served_model_name") or model]
        speculative = options.get("speculative_algorithm") is not None
        metrics = bool(options.get("enable_metrics"))
        ray_gpus = 0
    else:
        default_model = release.flags.get("--model", {}).get("default") or "Qwen/Qwen3-0.6B"
        model = options.get("model_tag") or options.get("model") or default_model
        served = options.get("served_model_name") or [model]
        speculative = options.get("speculative_config") is not None
        metrics = True
        ray = options.get("distributed_executor_backend") == "ray"
        ray_gpus = (options.get("tensor_parallel_size") or 1) if ray else 0
        native_multinode(options)
    return Engine(
        kind=release.kind,
        version=release.version,
        model=model,
        host=options.get("host") or host,
        port=options.get("port") or port,
        served_names=list(served),
        metrics=metrics,
        speculative=speculative,
        ray_gpus=ray_gpus,
        headless=headless_address(options) if release.kind == "vllm" else "",
        nodes=options.get("nnodes") or 1,
        api_key=api_key_of(release.kind, options),
        health_only=release.kind == "sglang"
        and (options.get("nnodes") or 1) > 1
        and (options.get("node_rank") or 0) >= 1,
    )


def sglang_config(args: list[str]) -> list[str]:
    """SGLang's --config: the YAML file's keys become arguments before the command line's
    (sglang/srt/server_args_config_parser.py ConfigArgumentMerger.merge_config_with_args,
    0.5.10): one file, .yaml or .yml, `key: value` at the top level, `true` adding a
    store_true flag. The stand-in reads flat scalar YAML only and refuses anything else."""
    if "--config" not in args:
        return args
    at = args.index("--config")
    if args.count("--config") > 1:
        raise StandinValueError("Multiple config files specified! Only one allowed.")
    if at == len(args) - 1:
        raise StandinValueError("No config file specified after --config flag!")
    path = Path(args[at + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise StandinValueError(f"Config file must be YAML format, got: {path.suffix}")
    if not host_path(str(path)).exists():
        raise StandinValueError(f"Config file not found: {path}")
    merged: list[str] = []
    for line in host_path(str(path)).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, colon, value = line.partition(":")
        value = value.strip()
        if not colon or line[:1].isspace() or value[:1] in ("[", "{", "|", ">"):
            raise StandinValueError(f"spark-twin stand-in: only flat `key: value` YAML: {line!r}")
        if value[:1] in ("'", '"') and value[-1:] == value[:1]:
            value = value[1:-1]
        merged += [f"--{key.strip()}"] if value == "true" else [f"--{key.strip()}", value]
    return merged + args[:at] + args[at + 2 :]


def api_key_of(kind: str, options: dict[str, Any]) -> str | None:
    """The key the server requires: --api-key; vLLM also VLLM_API_KEY (vllm/envs.py; the
    server takes `args.api_key or envs.VLLM_API_KEY`), its --api-key taking several keys."""
    given = options.get("api_key")
    if isinstance(given, list):
        given = given[0] if given else None
    if kind == "vllm":
        return given or os.environ.get("VLLM_API_KEY") or None
    return given or None


# Paths that answer without the key. SGLang: /health* and /metrics* (sglang/srt/utils/auth.py
# decide_request_auth). vLLM: its PUBLIC_ENDPOINTS (vllm/entrypoints/openai/server_utils.py,
# AuthenticationMiddleware; /v1 and every other route are guarded).
PUBLIC = {
    "sglang": ("/health", "/metrics"),
    "vllm": (
        "/health",
        "/ping",
        "/load",
        "/version",
        "/metrics",
        "/docs",
        "/redoc",
        "/openapi.json",
    ),
}


def needs_key(kind: str, path: str) -> bool:
    if kind == "sglang":
        return not path.startswith(PUBLIC["sglang"])
    return not any(path == public or path.startswith(public + "/") for public in PUBLIC["vllm"])


def native_multinode(options: dict[str, Any]) -> None:
    """What vLLM's ParallelConfig refuses of its own multi-node mode (vllm/config/parallel.py
    __post_init__): --nnodes > 1 with an executor other than mp, uni or external_launcher."""
    backend = options.get("distributed_executor_backend")
    if (options.get("nnodes") or 1) > 1 and backend not in (None, "mp", "uni", "external_launcher"):
        raise StandinValueError(
            "nnodes > 1 can only be set when distributed executor backend is mp, uni or "
            "external_launcher."
        )


def headless_address(options: dict[str, Any]) -> str:
    """The head's torch.distributed address a --headless vLLM node joins, or "" when the
    node serves the API (`vllm serve` runs no API server with --headless)."""
    if not options.get("headless"):
        return ""
    return f"{options.get('master_addr') or '127.0.0.1'}:{options.get('master_port') or 29501}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    engine: Engine

    def refused(self, path: str) -> bool:
        """401 {"error": "Unauthorized"} when the engine requires a key this request lacks
        (both engines answer so; the bearer token compared in constant time)."""
        key = self.engine.api_key
        if key is None or not needs_key(self.engine.kind, path):
            return False
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token, key):
            return False
        self.reply(401, {"error": "Unauthorized"})
        return True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.refused(path):
            return
        if self.engine.health_only:
            if path in ("/health", "/health_generate", "/ping"):
                self.reply(200, None)
            else:
                self.reply(404, {"detail": "Not Found"})
            return
        if path == "/v1/models":
            self.reply(200, self.engine.models())
        elif path == "/health":
            self.reply(200, None)
        elif path == "/metrics" and self.engine.metrics:
            self.reply(200, self.engine.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.refused(self.path.split("?", 1)[0]):
            return
        if self.engine.health_only or self.path.split("?", 1)[0] != "/v1/chat/completions":
            self.reply(404, {"detail": "Not Found"})
            return
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            self.reply(
                400, self.engine.error(f"Invalid request body: {exc}", "BadRequestError", 400)
            )
            return
        self.reply(*self.engine.chat(request))

    def reply(self, code: int, payload, content_type: str = "application/json") -> None:
        if payload is None:
            data = b""
        elif isinstance(payload, str):
            data = payload.encode()
        else:
            data = json.dumps(payload).encode()
        self.send_response(code)
        if data:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_request(self, code="-", size="-") -> None:
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        status = int(code)
        self.engine.uvicorn(
            f'{client} - "{self.command} {self.path} {self.request_version}" '
            f"{status} {HTTPStatus(status).phrase}"
        )

    def log_message(self, format: str, *args) -> None:  # errors http.server would print
        pass


def sibling(name: str):
    """A stand-in module beside this file (``name``.py), loaded without writing bytecode."""
    sys.dont_write_bytecode = True
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"spark_twin_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ray_cluster():
    """The Ray stand-in beside this file (the image's `ray`), for the cluster it runs here."""
    return sibling("ray")


def place_on_ray(engine: Engine, stop: threading.Event) -> bool:
    """Wait, as vLLM's Ray executor does, until the cluster has a GPU for every tensor-parallel
    worker; False (after printing vLLM's error) when there is no cluster or no time left."""
    ray = ray_cluster()
    started = time.monotonic()
    logged: float = -RAY_LOG_EVERY_S
    while not stop.is_set():
        gpus = ray.cluster_gpus()
        if gpus is None:
            print(
                "Traceback (most recent call last):",
                ray.NO_CLUSTER,
                sep="\n",
                file=sys.stderr,
                flush=True,
            )
            return False
        if gpus >= engine.ray_gpus:
            engine.log(
                f"Connected to Ray cluster with {gpus} GPUs", "ray_utils.py:364", "EngineCore"
            )
            return True
        waited = time.monotonic() - started
        if waited > RAY_PG_WAIT_S:
            print(
                f"ValueError: Cannot provide a placement group of placement_group_specs="
                f"{ray_specs(engine)} within {RAY_PG_WAIT_S} seconds. See `ray status` and "
                "`ray list nodes` to make sure the cluster has enough resources.",
                file=sys.stderr,
                flush=True,
            )
            return False
        if waited >= logged + RAY_LOG_EVERY_S:
            logged = waited
            engine.log(
                f"Waiting for creating a placement group of specs for {int(waited)} "
                f"seconds. specs={ray_specs(engine)}. Check `ray status` and `ray list "
                "nodes` to see if you have enough resources, and make sure the IP addresses "
                "used by ray cluster are the same as VLLM_HOST_IP environment variable "
                "specified in each node if you are running on a multi-node.",
                "ray_utils.py:286",
                "EngineCore",
            )
        stop.wait(0.5)
    return False


def ray_specs(engine: Engine) -> list[dict]:
    return [{"GPU": 1.0, "node:__internal_head__": 0.001}] + [{"GPU": 1.0}] * (engine.ray_gpus - 1)


def watch_ray(engine: Engine, lost: threading.Event, on_lost) -> None:
    """A Ray worker's node leaving the cluster kills its actor: the engine dies with it."""
    ray = ray_cluster()
    while not lost.wait(1):
        gpus = ray.cluster_gpus()
        if gpus is None or gpus < engine.ray_gpus:
            print(
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing "
                "this task. The actor's node was lost (RayWorkerWrapper).",
                file=sys.stderr,
                flush=True,
            )
            lost.set()
            on_lost()


def nccl_module():
    """The NCCL stand-in beside this file (which network NCCL would choose in this container)."""
    return sibling("nccl")


def spans_nodes(engine: Engine) -> bool:
    """Whether its NCCL communicator crosses Sparks: --nnodes above 1 (SGLang, vLLM's own
    multi-node mode), or vLLM's Ray executor placing tensor-parallel workers on a cluster."""
    return engine.nodes > 1 or engine.ray_gpus > 1


def log_nccl(engine: Engine) -> None:
    """NCCL's init lines for the network it chose here, printed as NCCL prints them (its own
    format, on the engine's output, only as far as NCCL_DEBUG asks for them)."""
    for line in nccl_module().init_lines(os.environ):
        print(line, file=sys.stderr if " NCCL WARN " in line else sys.stdout, flush=True)


def stop_on_signals(stop: threading.Event, server: list[ThreadingHTTPServer]):
    """SIGTERM and SIGINT stop the engine (``stop`` set, the server shut down); returns the
    same request as a function. The handler only writes a byte to a pipe: a signal can come
    while the handler of the one before still runs (systemd signals the unit's whole cgroup
    and `docker run` forwards the same signal), and a handler that takes a lock (an Event's,
    or the one Thread.start takes) then waits forever on itself."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)

    def on_signal(signum: int = 0, frame: object = None) -> None:
        try:
            os.write(wake_write, b"\0")
        except BlockingIOError:
            pass  # a stop is already waiting to be read

    def watch() -> None:
        os.read(wake_read, 1)
        stop.set()
        if server:
            server[0].shutdown()

    threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return on_signal


def serve(engine: Engine) -> int:
    stop = threading.Event()
    server: list[ThreadingHTTPServer] = []
    on_signal = stop_on_signals(stop, server)

    engine.announce()
    error = engine.model_error()
    if error:
        print("Traceback (most recent call last):", *error, sep="\n", file=sys.stderr, flush=True)
        return 1
    if engine.ray_gpus and os.environ.get("SPARK_TWIN_IMAGE_RAY") == "0":
        # vllm/v1/executor/ray_utils.py assert_ray_available(), in an image without Ray
        print(
            "Traceback (most recent call last):",
            "ValueError: Failed to import Ray: No module named 'ray'."
            "Please install Ray with `pip install ray`.",
            sep="\n",
            file=sys.stderr,
            flush=True,
        )
        return 1
    if engine.ray_gpus and not place_on_ray(engine, stop):
        return 0 if stop.is_set() else 1
    if spans_nodes(engine):
        log_nccl(engine)
    if engine.headless:
        return run_headless(engine, stop)
    engine.start_loading()
    if FAIL_FILE.is_file():
        print(FAIL_FILE.read_text().rstrip("\n"), file=sys.stderr, flush=True)
        return 1
    if os.environ.get("SPARK_TWIN_ENGINE_CRASH"):  # a regressed build: its ENV (images.json)
        print(os.environ["SPARK_TWIN_ENGINE_CRASH"], file=sys.stderr, flush=True)
        return 1
    startup_s = float(os.environ.get("SPARK_TWIN_ENGINE_STARTUP_S", "1"))
    if stop.wait(startup_s):
        return 0  # stopped while loading: nothing was listening yet

    Handler.engine = engine
    ThreadingHTTPServer.allow_reuse_address = True
    try:
        server.append(ThreadingHTTPServer((engine.host, engine.port), Handler))
    except OSError as exc:  # the port is taken
        engine.uvicorn(
            f"[Errno {exc.errno}] error while attempting to bind on address "
            f"('{engine.host}', {engine.port}): {str(exc.strerror).lower()}",
            "ERROR",
        )
        return 1
    server[0].daemon_threads = True
    engine.ready_lines(startup_s)
    lost = threading.Event()
    if engine.ray_gpus:
        threading.Thread(target=watch_ray, args=(engine, lost, on_signal), daemon=True).start()
    if not stop.is_set():
        server[0].serve_forever(poll_interval=0.05)
    server[0].server_close()
    if lost.is_set():
        return 1
    engine.shutdown_lines()
    return 0


def run_headless(engine: Engine, stop: threading.Event) -> int:
    """A vLLM node after the head (--headless): it logs what vLLM's run_headless logs for a
    node of a multi-node tensor/pipeline group (vllm/entrypoints/cli/serve.py), loads its part
    of the model, serves no API and runs until SIGTERM."""
    engine.log(
        f"Launching vLLM (v{engine.version}) headless multiproc executor, with head node "
        f"address {engine.headless} for torch.distributed process group.",
        "serve.py:212",
    )
    engine.start_loading()
    if FAIL_FILE.is_file():
        print(FAIL_FILE.read_text().rstrip("\n"), file=sys.stderr, flush=True)
        return 1
    stop.wait()
    engine.log("Shutting down.", "serve.py:270")
    return 0


def main(argv: list[str]) -> int:
    kind, version = (os.environ.get(name, "") for name in RELEASE_ENV)
    program = os.path.basename(argv[0]) if argv else ""
    if program == kind == "vllm" and argv[1:2] in (["--version"], ["-v"]):
        print(version)  # vLLM's top-level `vllm --version`
        return 0
    if program == kind == "sglang" and argv[1:2] == ["version"]:
        print(f"sglang version: {version}")  # `sglang version` (its git line left out)
        return 0
    command = recognize(argv)
    if command is None:
        print(f"not an engine command: {' '.join(argv)}", file=sys.stderr)
        return 127
    if command.kind != kind:  # the image has no such engine
        if command.program:
            print(f"/bin/sh: 1: {command.kind}: not found", file=sys.stderr)
            return 127
        python = argv[0] if "/" in argv[0] else f"/usr/bin/{argv[0]}"  # the images' python
        print(
            f"{python}: Error while finding module specification for '{command.module}' "
            f"(ModuleNotFoundError: No module named '{command.kind}')",
            file=sys.stderr,
        )
        return 1
    try:
        release = Release.load(kind, version)
    except StandinError as error:
        print(f"spark-twin engine stand-in: {error}", file=sys.stderr)
        return 125
    try:
        engine = parse(release, command)
    except StandinValueError as error:
        print("Traceback (most recent call last):", f"ValueError: {error}", sep="\n",
              file=sys.stderr)  # fmt: skip
        return 1
    return serve(engine)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Stopped: a later SIGTERM or SIGINT (the rest of a burst) changes nothing. Python puts
    # the default action back while it exits, and a late signal of a burst killed the
    # finished engine (-15 instead of 0); an ignored signal stays ignored.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
