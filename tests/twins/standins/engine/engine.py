#!/usr/bin/env python3
"""A stand-in inference engine (SGLang or vLLM) for the Spark twins. Standard library only.

The docker stand-in (./docker) starts it with a container's command line, as the real image
would run it:

    python3 -m sglang.launch_server --model-path /model [--host 127.0.0.1] [--port 30000]
        [--served-model-name NAME] [--enable-metrics] [--speculative-algorithm ALGO] ...
    sglang serve /model ...                                (same options)
    vllm serve /model [--host 0.0.0.0] [--port 8000] [--served-model-name NAME...]
        [--speculative-config JSON] ...
    python3 -m vllm.entrypoints.openai.api_server --model /model ...

Other options are accepted and ignored. Like the real engine (SGLang 0.5.23, vLLM 0.33.0) it:

- reads the model folder (a container path, mapped to the host through the mounts the docker
  stand-in passes in SPARK_TWIN_MOUNTS) and refuses to start without config.json or
  tokenizer.json, printing the engine's own error and exiting 1;
- "loads" for SPARK_TWIN_ENGINE_STARTUP_S seconds (default 1) without listening, so clients
  get connection refused, as from the real servers while they load;
- then serves GET /v1/models, POST /v1/chat/completions (one deterministic token), GET /health
  and GET /metrics (Prometheus text with the real metric names; SGLang only with
  --enable-metrics), logging in the engine's format, uvicorn's lines included;
- on SIGTERM/SIGINT shuts down like uvicorn and exits 0; SIGKILL kills it.

When /etc/spark-twin/engine-fail (or $SPARK_TWIN_ENGINE_FAIL) exists, its lines are printed
while the model loads and the engine exits 1: a way to replay a real crash.
"""

from __future__ import annotations

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

VERSIONS = {"sglang": "0.5.23", "vllm": "0.33.0"}
# How each engine is started: `python3 -m MODULE` or `PROGRAM serve` (which also takes the
# model as its first positional argument).
MODULES = {"sglang.launch_server": "sglang", "vllm.entrypoints.openai.api_server": "vllm"}
PROGRAMS = ("sglang", "vllm")
DEFAULTS = {"sglang": ("127.0.0.1", 30000), "vllm": ("0.0.0.0", 8000)}
VLLM_DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
BOOLEAN_FLAGS = {"--trust-remote-code", "--enforce-eager", "--enable-metrics"}
BOOLEAN_PREFIXES = ("--enable-", "--disable-", "--no-")
# Options taking several values (nargs="+"/"*"), as vLLM 0.33.0's parser declares them.
MULTI_VALUE_FLAGS = {
    "vllm": {
        "--allowed-media-domains",
        "--api-key",
        "--collect-detailed-traces",
        "--cpu-offload-params",
        "--cudagraph-capture-sizes",
        "--ignore-patterns",
        "--kv-cache-dtype-skip-layers",
        "--logits-processors",
        "--lora-modules",
        "--lora-target-modules",
        "--numa-bind-cpus",
        "--numa-bind-nodes",
        "--offload-params",
        "--served-model-name",
        "--sleep-preserve-parameter-names",
    },
    "sglang": set(),
}
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


def recognize(argv: list[str]) -> tuple[str, list[str], bool] | None:
    """(engine, its options, whether a positional model is allowed) for an engine command
    line, None for any other command."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program in PROGRAMS and argv[1:2] == ["serve"]:
        return program, argv[2:], True
    if (
        re.fullmatch(r"python(3(\.\d+)?)?", program)
        and argv[1:2] == ["-m"]
        and len(argv) > 2
        and argv[2] in MODULES
    ):
        return MODULES[argv[2]], argv[3:], False
    return None


def split_options(args: list[str], multi: set[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Options (name -> values; a switch has none) and the positional arguments left over."""
    options: dict[str, list[str]] = {}
    positionals: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--"):
            positionals.append(arg)
            continue
        name, eq, value = arg.partition("=")
        values = options.setdefault(name, [])
        if eq:
            values.append(value)
        elif name not in BOOLEAN_FLAGS and not name.startswith(BOOLEAN_PREFIXES):
            while i < len(args) and not args[i].startswith("--"):
                values.append(args[i])
                i += 1
                if name not in multi:
                    break
    return options, positionals


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
    model: str
    host: str
    port: int
    served_names: list[str]
    metrics: bool
    speculative: bool
    context_len: int = 0
    ray_gpus: int = 0  # vLLM's Ray executor: the GPUs it places its workers on (0: no Ray)
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
                f"vLLM server version {VERSIONS['vllm']}, serving model {self.model}",
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


def parse(kind: str, args: list[str], positional_ok: bool) -> Engine:
    options, positionals = split_options(args, MULTI_VALUE_FLAGS[kind])

    def value(*names: str, default=None):
        for name in names:
            if options.get(name):
                return options[name][-1]
        return default

    model = positionals.pop(0) if positional_ok and positionals else None
    if positionals:
        argparse_error(kind, f"unrecognized arguments: {' '.join(positionals)}")
    if kind == "sglang":
        model = model or value("--model-path", "--model")
        if model is None:
            argparse_error(kind, "the following arguments are required: --model-path")
        served = [value("--served-model-name", default=model)]
        speculative = "--speculative-algorithm" in options
    else:
        model = model or value("--model", default=VLLM_DEFAULT_MODEL)
        served = options.get("--served-model-name") or [model]
        speculative = "--speculative-config" in options
    host, port = DEFAULTS[kind]
    ray = kind == "vllm" and value("--distributed-executor-backend") == "ray"
    return Engine(
        kind=kind,
        model=model,
        host=value("--host", default=host),
        port=int(value("--port", default=port)),
        served_names=served,
        metrics=kind == "vllm" or "--enable-metrics" in options,
        speculative=speculative,
        ray_gpus=int(value("--tensor-parallel-size", default="1")) if ray else 0,
    )


def argparse_error(kind: str, message: str):
    print(f"{kind}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    engine: Engine

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
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
        if self.path.split("?", 1)[0] != "/v1/chat/completions":
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


def ray_cluster():
    """The Ray stand-in beside this file (the image's `ray`), for the cluster it runs here."""
    sys.dont_write_bytecode = True
    path = Path(__file__).with_name("ray.py")
    spec = importlib.util.spec_from_file_location("spark_twin_ray", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def serve(engine: Engine) -> int:
    stop = threading.Event()
    server: list[ThreadingHTTPServer] = []

    def on_signal(signum, frame) -> None:
        stop.set()
        if server:
            threading.Thread(target=server[0].shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    engine.announce()
    error = engine.model_error()
    if error:
        print("Traceback (most recent call last):", *error, sep="\n", file=sys.stderr, flush=True)
        return 1
    if engine.ray_gpus and not place_on_ray(engine, stop):
        return 0 if stop.is_set() else 1
    engine.start_loading()
    if FAIL_FILE.is_file():
        print(FAIL_FILE.read_text().rstrip("\n"), file=sys.stderr, flush=True)
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
        threading.Thread(
            target=watch_ray, args=(engine, lost, lambda: on_signal(0, None)), daemon=True
        ).start()
    if not stop.is_set():
        server[0].serve_forever(poll_interval=0.2)
    server[0].server_close()
    if lost.is_set():
        return 1
    engine.shutdown_lines()
    return 0


def main(argv: list[str]) -> int:
    recognized = recognize(argv)
    if recognized is None:
        print(f"not an engine command: {' '.join(argv)}", file=sys.stderr)
        return 127
    return serve(parse(*recognized))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
