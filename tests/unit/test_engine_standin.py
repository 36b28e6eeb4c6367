"""The docker stand-in and the stand-in engine (tests/twins/standins/engine), run on this machine.

The stand-in is called by its path (the machine's own docker is never shadowed), with its state
folder, failure file and the images' programs in a temporary folder, the committed flag
catalogues (which a twin gets as a copy) and a short engine startup. Its images come from the
registry stand-in, one for the whole test process (tests/unit/standin_registry.py), pulled once
into a shared store. The engine alone is
also run as the image's programs run it, with its release in the environment.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.unit import standin_registry

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "twins" / "standins"
DOCKER = STANDINS / "engine" / "docker"
ENGINE = STANDINS / "engine" / "engine.py"
CATALOGUES = ROOT / "sparkdeploy" / "knowledge" / "catalogues"
SGLANG_IMAGE = "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"  # SGLang 0.5.10, CUDA's wrapper
SGLANG = (
    SGLANG_IMAGE,
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/model",
)
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"  # its entrypoint is `vllm serve`; no Ray
RAY_IMAGE = "spark-twin/vllm-openai-ray:v0.33.0"  # the same with Ray added
NGC_IMAGE = "nvcr.io/nvidia/vllm:26.05-py3"  # vLLM 0.20.1 behind NVIDIA's wrapper entrypoint
PLAIN_IMAGE = "debian:bookworm-slim"  # no entrypoint, no engine
STARTUP_S = 0.5


class Docker:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.env = {
            "PATH": os.environ["PATH"],
            "SPARK_TWIN_DOCKER_STATE": str(tmp / "state"),
            "SPARK_TWIN_ENGINE_FAIL": str(tmp / "engine-fail"),
            "SPARK_TWIN_ENGINE_STARTUP_S": str(STARTUP_S),
            "SPARK_TWIN_CATALOGUES": str(CATALOGUES),
            "SPARK_TWIN_IMAGE_PROGRAMS": str(tmp / "image"),
        }
        self.registry = standin_registry.shared()
        self.env |= self.registry.docker_env(self.registry.root / "store")
        for program, target in (
            ("vllm", "engine/engine.py vllm"),
            ("sglang", "engine/engine.py sglang"),
            ("ray", "engine/ray.py"),
        ):  # as the twin image installs them (standins/install.sh)
            script = tmp / "image" / program / program
            script.parent.mkdir(parents=True)
            script.write_text(f'#!/bin/sh\nexec python3 {STANDINS}/{target} "$@"\n')
            script.chmod(0o755)
        self.model = tmp / "model"
        self.model.mkdir()
        (self.model / "config.json").write_text(
            '{"model_type": "llama", "max_position_embeddings": 8192}'
        )
        (self.model / "tokenizer.json").write_text("{}")
        self.foreground: list[subprocess.Popen] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(DOCKER), *args], env=self.env, capture_output=True, text=True, timeout=60
        )

    def start(self, *args: str) -> subprocess.Popen:
        """`docker run` in the foreground, as an engine unit runs it."""
        process = subprocess.Popen(
            [str(DOCKER), "run", *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.foreground.append(process)
        return process

    def mount(self, folder: Path | None = None) -> tuple[str, str]:
        return "-v", f"{folder or self.model}:/model:ro"

    def names(self) -> list[str]:
        return self("ps", "-a", "--format", "{{.Names}} {{.Status}}").stdout.splitlines()


def cleaned_up(made: Docker):
    """Yield the stand-in; afterwards end what the test left running, and every container."""
    yield made
    for process in made.foreground:
        if process.poll() is None:
            process.kill()
    for line in made("ps", "-aq").stdout.split():
        made("rm", "-f", line)


@pytest.fixture
def docker(tmp_path):
    yield from cleaned_up(Docker(tmp_path))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(port: int, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        text = reply.read().decode()
        return json.loads(text) if reply.headers.get("Content-Type") == "application/json" else text


def wait_serving(port: int, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return get(port, "/v1/models")
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_foreground_sglang_serves_and_stops_like_uvicorn(docker):
    port = free_port()
    run = docker.start(
        "--name",
        "eng-sglang",
        "--rm",
        "--network",
        "host",
        "--gpus",
        "all",
        "--ipc",
        "host",
        "--shm-size",
        "32g",
        "--ulimit",
        "memlock=-1",
        "-e",
        "HF_HUB_OFFLINE=1",
        *docker.mount(),
        *SGLANG,
        "--port",
        str(port),
        "--enable-metrics",
    )
    assert refused(port)  # still loading: nothing listens yet, as with the real server
    models = wait_serving(port)
    assert [m["id"] for m in models["data"]] == ["/model"]  # no served name: the model path
    assert models["data"][0]["owned_by"] == "sglang" and models["data"][0]["max_model_len"] == 8192
    reply = get(
        port,
        "/v1/chat/completions",
        {"model": "/model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    )
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"] == "OK"
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 1
    metrics = get(port, "/metrics")
    for name in ("sglang:num_running_reqs", "sglang:gen_throughput", "sglang:spec_accept_length"):
        assert f"# TYPE {name} gauge" in metrics
    assert (
        'sglang:generation_tokens_total{model_name="/model",engine_type="unified",'
        'is_streaming="false"} 1.0'
    ) in metrics

    assert (
        docker(
            "inspect", "-f", "{{.State.Running}} {{.State.Status}} {{.Config.Image}}", "eng-sglang"
        ).stdout
        == f"true running {SGLANG_IMAGE}\n"
    )
    pid = int(docker("inspect", "-f", "{{.State.Pid}}", "eng-sglang").stdout)
    env = json.loads(docker("inspect", "-f", "{{json .Config.Env}}", "eng-sglang").stdout)
    assert "HF_HUB_OFFLINE=1" in env and pid > 0

    stopped = docker("stop", "eng-sglang")
    assert (stopped.returncode, stopped.stdout) == (0, "eng-sglang\n")
    output, _ = run.communicate(timeout=10)
    assert run.returncode == 0  # uvicorn shuts down cleanly on SIGTERM: docker run reports 0
    assert "The server is fired up and ready to roll!" in output
    assert output.rstrip().endswith(f"INFO:     Finished server process [{pid}]")
    assert docker.names() == []  # --rm
    assert refused(port)


def test_detached_vllm_from_its_image_entrypoint_then_kill_and_rm(docker):
    port = free_port()
    started = docker(
        "run",
        "-d",
        "--name",
        "eng-vllm",
        "--network",
        "host",
        "-p",
        f"{port}:{port}",
        *docker.mount(),
        VLLM_IMAGE,
        "/model",
        "--port",
        str(port),
        "--served-model-name",
        "mistral-small",
        "--speculative-config",
        '{"method": "eagle"}',
    )
    assert started.returncode == 0, started.stderr
    assert len(started.stdout.strip()) == 64
    assert "WARNING: Published ports are discarded when using host network mode" in started.stderr
    assert [m["id"] for m in wait_serving(port)["data"]] == ["mistral-small"]
    missing = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=b'{"model": "other", "messages": []}'
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(missing, timeout=5)
    assert error.value.code == 404
    metrics = get(port, "/metrics")
    assert 'vllm:num_requests_running{model_name="mistral-small",engine="0"} 0.0' in metrics
    assert "vllm:spec_decode_num_accepted_tokens_total" in metrics
    assert (
        docker("ps", "--filter", "name=eng-vllm", "--format", "{{.Names}}").stdout == "eng-vllm\n"
    )
    assert "Application startup complete." in docker("logs", "eng-vllm").stdout

    refusal = docker("rm", "eng-vllm")
    assert refusal.returncode == 1
    assert refusal.stderr == (
        'Error response from daemon: cannot remove container "/eng-vllm": '
        "container is running: stop the container before removing or force remove\n"
    )
    assert docker("kill", "eng-vllm").returncode == 0  # SIGKILL
    assert (
        docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", "eng-vllm").stdout
        == "exited 137\n"
    )
    assert docker.names()[0].startswith("eng-vllm Exited (137) ")
    assert refused(port)
    assert docker("rm", "eng-vllm").stdout == "eng-vllm\n"
    gone = docker("rm", "eng-vllm")
    assert (gone.returncode, gone.stderr) == (
        1,
        "Error response from daemon: No such container: eng-vllm\n",
    )
    inspect = docker("inspect", "eng-vllm")
    assert (inspect.returncode, inspect.stdout, inspect.stderr) == (
        1,
        "[]\n",
        "Error: No such object: eng-vllm\n",
    )


def test_rm_force_kills_a_running_container(docker):
    port = free_port()
    run = docker.start(
        "--name", "eng-force", "--network", "host", *docker.mount(), *SGLANG, "--port", str(port)
    )
    wait_serving(port)
    assert docker("rm", "-f", "eng-force").stdout == "eng-force\n"
    run.communicate(timeout=10)
    assert run.returncode == 137
    assert docker.names() == [] and refused(port)


def test_stop_kills_what_ignores_sigterm_after_the_timeout(docker):
    docker(
        "run",
        "-d",
        "--name",
        "eng-stubborn",
        PLAIN_IMAGE,
        "sh",
        "-c",
        "trap '' TERM; sleep 60 & wait",
    )
    time.sleep(0.3)
    began = time.monotonic()
    assert docker("stop", "-t", "1", "eng-stubborn").returncode == 0
    assert 1 <= time.monotonic() - began < 5
    assert docker("inspect", "-f", "{{.State.ExitCode}}", "eng-stubborn").stdout == "137\n"


def test_rm_with_restart_always_is_refused(docker):
    done = docker("run", "--rm", "--restart", "always", *docker.mount(), *SGLANG)
    assert done.returncode == 125
    assert done.stderr == (
        "docker: conflicting options: cannot specify both --restart and --rm\n\n"
        "Run 'docker run --help' for more information\n"
    )
    assert docker.names() == []


def test_a_name_in_use_is_a_conflict(docker):
    # The engine image first: dockerd looks the image up before the name, so one not yet in
    # the store shared by the tests is pulled, its lines first (this test ran first once).
    assert docker("pull", "-q", SGLANG_IMAGE).returncode == 0
    docker("run", "-d", "--name", "eng-taken", PLAIN_IMAGE, "sleep", "60")
    holder = docker("inspect", "-f", "{{.Id}}", "eng-taken").stdout.strip()
    done = docker("run", "--name", "eng-taken", *docker.mount(), *SGLANG)
    assert done.returncode == 125
    assert done.stderr.startswith(
        f'docker: Error response from daemon: Conflict. The container name "/eng-taken" is already '
        f'in use by container "{holder}". You have to remove (or rename) that container'
    )


def test_unknown_flag_and_unknown_image_tag(docker):
    done = docker("run", "--gpu", "all", PLAIN_IMAGE)
    assert (done.returncode, done.stderr.splitlines()[0]) == (125, "unknown flag: --gpu")
    for image in ("lmsysorg/sglang:v9.9.9", "vllm/vllm-openai:v0.34.0"):  # not in images.json
        done = docker("run", "--rm", image, "true")
        assert done.returncode == 125
        assert done.stderr.splitlines()[:2] == [
            f"Unable to find image '{image}' locally",
            f"docker: Error response from daemon: manifest for {image} not found: "
            "manifest unknown: manifest unknown",
        ]
        assert docker("pull", image).returncode == 1
    assert docker("pull", "-q", SGLANG_IMAGE).stdout == f"docker.io/{SGLANG_IMAGE}\n"
    missing = docker.registry.missing
    missing.write_text(SGLANG_IMAGE + "\n")  # a listed one, made missing from the registry
    try:
        done = docker("pull", "-q", SGLANG_IMAGE)
    finally:
        missing.unlink()
    assert (done.returncode, done.stderr) == (
        1,
        f"Error response from daemon: manifest for {SGLANG_IMAGE} not found: manifest unknown: "
        "manifest unknown\n",
    )


@pytest.mark.parametrize(
    "missing, error",
    [
        ("tokenizer.json", "KeyError: 'tokenizer.json'"),
        (
            "config.json",
            "ValueError: Unrecognized model in /model. Should have a `model_type` key in its config.json.",
        ),
    ],
)
def test_sglang_refuses_an_incomplete_model_folder(docker, missing, error):
    (docker.model / missing).unlink()
    done = docker("run", "--rm", *docker.mount(), *SGLANG)
    assert done.returncode == 1
    assert error in done.stdout.splitlines()
    assert docker.names() == []


def test_vllm_without_config_and_repeated_entrypoint(docker):
    (docker.model / "config.json").unlink()
    done = docker("run", "--rm", *docker.mount(), VLLM_IMAGE, "/model")
    assert done.returncode == 1
    assert (
        "ValueError: Invalid repository ID or local directory specified: '/model'." in done.stdout
    )
    # `vllm serve` again after the image's own entrypoint: vLLM's argparse refuses it
    done = docker("run", "--rm", *docker.mount(), VLLM_IMAGE, "vllm", "serve", "/model")
    assert done.returncode == 2
    assert done.stdout.splitlines() == [
        "usage: vllm [-h] [-v] {serve} ...",
        "vllm: error: unrecognized arguments: serve /model",
    ]


def test_injected_failure_is_printed_and_exits_1(docker):
    crash = "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device"
    (docker.tmp / "engine-fail").write_text(crash + "\n")
    done = docker("run", "--name", "eng-crash", *docker.mount(), *SGLANG)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == crash
    assert docker.names()[0].startswith("eng-crash Exited (1) ")
    assert crash in docker("logs", "eng-crash").stdout


# --- the engine's command line, parsed as its image's release parses it -------------------

# A catalogue as the catalogue builder writes it, with the parser section of its contract:
# a release that split --cuda-graph-max-bs into a -decode and a -prefill flag.
SPLIT_RELEASE: dict[str, Any] = {
    "engine": "sglang",
    "version": "0.5.99",
    "parser": {"prog": "sglang serve", "allow_abbrev": True, "underscores": False},
    "flags": {
        "--model-path": {"type": "str", "choices": None, "default": None},
        "--model": {"type": "str", "choices": None, "default": None, "alias_of": "--model-path"},
        "--port": {"type": "int", "choices": None, "default": 30000},
        "--cuda-graph-max-bs-decode": {"type": "int", "choices": None, "default": None},
        "--cuda-graph-max-bs-prefill": {"type": "int", "choices": None, "default": None},
    },
}
AMBIGUOUS = (
    "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
    "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
)


def engine(kind: str, version: str, *argv: str, catalogues: Path = CATALOGUES):
    """The stand-in engine as an image's program runs it (the release from the image)."""
    env = {
        "PATH": os.environ["PATH"],
        "SPARK_TWIN_IMAGE_ENGINE": kind,
        "SPARK_TWIN_IMAGE_VERSION": version,
        "SPARK_TWIN_CATALOGUES": str(catalogues),
        "SPARK_TWIN_ENGINE_STARTUP_S": str(STARTUP_S),
    }
    return subprocess.run(
        [sys.executable, str(ENGINE), *argv], env=env, capture_output=True, text=True, timeout=30
    )


def last_error(done: subprocess.CompletedProcess) -> str:
    return (done.stderr or done.stdout).splitlines()[-1]


def test_an_unknown_flag_is_refused_with_argparses_message(docker):
    for image in (SGLANG_IMAGE, VLLM_IMAGE):  # pulled first: run's pull lines would come first
        assert docker("pull", "-q", image).returncode == 0
    done = docker("run", "--rm", *docker.mount(), *SGLANG, "--max-model-len", "4096")
    assert done.returncode == 2
    assert done.stdout.startswith("usage: sglang serve [-h] ")  # SGLang 0.5.10: prog "sglang serve"
    assert last_error(done) == "sglang serve: error: unrecognized arguments: --max-model-len 4096"
    done = docker("run", "--rm", *docker.mount(), VLLM_IMAGE, "/model", "--context-length", "4096")
    assert done.returncode == 2
    assert last_error(done) == "vllm: error: unrecognized arguments: --context-length 4096"
    assert docker.names() == []


@pytest.mark.parametrize(
    "abbreviations, error",
    [
        (True, AMBIGUOUS),
        (False, "sglang serve: error: unrecognized arguments: --cuda-graph-max-bs 8"),
    ],
)
def test_a_split_flag_is_an_ambiguous_prefix_where_argparse_abbreviates(
    tmp_path, abbreviations, error
):
    release = dict(SPLIT_RELEASE, parser={**SPLIT_RELEASE["parser"], "allow_abbrev": abbreviations})
    (tmp_path / "sglang-0.5.99.json").write_text(json.dumps(release))
    done = engine("sglang", "0.5.99", "sglang", "serve", "/model", "--cuda-graph-max-bs", "8",
                  catalogues=tmp_path)  # fmt: skip
    assert (done.returncode, last_error(done)) == (2, error)
    assert done.stderr.startswith(
        "usage: sglang serve [-h] [--model-path MODEL_PATH] [--port PORT]"
    )


def test_sglang_0_5_10_has_its_own_ambiguous_prefix():
    done = engine("sglang", "0.5.10", "python3", "-m", "sglang.launch_server",
                  "--model-path", "/model", "--cuda-graph", "8")  # fmt: skip
    assert (done.returncode, last_error(done)) == (
        2,
        "sglang serve: error: ambiguous option: --cuda-graph could match --cuda-graph-bs, "
        "--cuda-graph-max-bs",
    )


@pytest.mark.parametrize(
    "kind, version, args, error",
    [
        (
            "sglang",
            "0.5.10",
            ["--speculative-algorithm", "MTP"],
            "sglang serve: error: argument --speculative-algorithm: invalid choice: 'MTP' "
            "(choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')",
        ),
        (
            "sglang",
            "0.5.10",
            ["--port", "3e4"],
            "sglang serve: error: argument --port: invalid int value: '3e4'",
        ),  # fmt: skip
        (
            "sglang",
            "0.5.10",
            ["--mem_fraction_static", "0.5"],
            "sglang serve: error: unrecognized arguments: --mem_fraction_static 0.5",
        ),  # fmt: skip
        (
            "vllm",
            "0.33.0",
            ["--optimization-level", "O7"],
            "vllm serve: error: argument --optimization-level: invalid int value: 'O7'",
        ),  # fmt: skip
        (
            "vllm",
            "0.33.0",
            ["--max-model-len", "4x"],
            "vllm serve: error: argument --max-model-len: invalid human_readable_int value: '4x'",
        ),  # fmt: skip
    ],
)
def test_bad_values_and_spellings_are_refused_as_argparse_does(kind, version, args, error):
    start = (
        ["python3", "-m", "sglang.launch_server", "--model-path", "/model"]
        if kind == "sglang"
        else ["vllm", "serve", "/model"]
    )
    done = engine(kind, version, *start, *args)
    assert (done.returncode, last_error(done)) == (2, error)


def test_vllm_takes_underscores_dotted_json_and_its_model_option(docker):
    port = free_port()
    started = docker(
        "run", "-d", "--name", "eng-flex", "--network", "host", *docker.mount(), VLLM_IMAGE,
        "--model", "/model", "--port", str(port), "--served_model_name", "small",
        "--max_num_seqs", "4", "--speculative-config.method", "eagle",
        "--speculative-config.num_speculative_tokens", "3", "--mamba-backend", "triton",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert [m["id"] for m in wait_serving(port)["data"]] == ["small"]
    assert "vllm:spec_decode_num_drafts_total" in get(port, "/metrics")  # the config was read
    docker("rm", "-f", "eng-flex")
    # no model before --served-model-name: vLLM's parser raises before argparse runs
    done = docker("run", "--rm", *docker.mount(), VLLM_IMAGE, "--served-model-name", "x")
    assert done.returncode == 1
    assert last_error(done).startswith("ValueError: `model` should be provided as the first")


def test_help_and_version_are_the_releases(docker):
    older = engine("sglang", "0.5.10", "python3", "-m", "sglang.launch_server", "--help")
    newer = engine("sglang", "0.5.12", "python3", "-m", "sglang.launch_server", "--help")
    assert older.returncode == newer.returncode == 0
    assert older.stdout.startswith("usage: sglang serve [-h]")
    assert "--enable-double-sparsity" in older.stdout and "--enable-http2" not in older.stdout
    assert "--enable-http2" in newer.stdout and "--enable-double-sparsity" not in newer.stdout
    helped = docker("run", "--rm", VLLM_IMAGE, "--help=all")
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: vllm serve [model_tag] [options]\n")
    assert "--max-model-len MAX_MODEL_LEN" in helped.stdout
    catalogue = json.loads((CATALOGUES / "vllm-0.33.0.json").read_text())
    assert all(flag in helped.stdout for flag in catalogue["flags"])
    # a plain --help (vLLM >= 0.10) lists no flags, only where to find them
    short = docker("run", "--rm", VLLM_IMAGE, "--help")
    assert short.returncode == 0 and "--max-model-len" not in short.stdout
    assert "For full list:            vllm serve --help=all" in short.stdout
    assert docker("run", "--rm", "--entrypoint", "vllm", VLLM_IMAGE, "--version").stdout == (
        "0.33.0\n"
    )
    assert docker("run", "--rm", NGC_IMAGE, "vllm", "--version").stdout == "0.20.1\n"
    assert docker("run", "--rm", SGLANG_IMAGE, "sglang", "version").stdout == (
        "sglang version: 0.5.10\n"
    )


# --- which command a container runs: the image's ENTRYPOINT ------------------------------

WRAPPER = "/opt/nvidia/nvidia_entrypoint.sh"


def test_a_forks_image_takes_and_lists_its_own_flags_besides_its_releases(docker):
    fork = "spark-twin/vllm-fork:mxfp4"  # its ENV adds --mxfp4-backend (images.json)
    helped = docker("run", "--rm", fork, "--help=all")
    assert helped.returncode == 0 and "--mxfp4-backend" in helped.stdout
    assert "--max-model-len MAX_MODEL_LEN" in helped.stdout
    plain = docker("run", "--rm", VLLM_IMAGE, "--help=all")
    assert "--mxfp4-backend" not in plain.stdout
    wrong = docker("run", "--rm", fork, "--mxfp4-backend", "FOO")
    assert wrong.returncode == 2 and "invalid choice: 'FOO'" in wrong.stdout + wrong.stderr


def test_a_wrapper_entrypoint_runs_its_arguments_as_a_command(docker):
    # only flags: the wrapper's `exec "$@"` reads the first as an option of bash's exec
    done = docker("run", "--rm", *docker.mount(), NGC_IMAGE, "--model", "/model")
    assert done.returncode == 2
    first, usage = done.stdout.splitlines()
    assert first.startswith(f"{WRAPPER}: line ") and first.endswith(": exec: --: invalid option")
    assert usage.startswith("exec: usage: exec [-cl]")
    # a program the image does not have
    done = docker("run", "--rm", SGLANG_IMAGE, "vllm", "serve", "/model")
    assert done.returncode == 127 and done.stdout.endswith(": exec: vllm: not found\n")
    # the other engine's module: python's own error
    done = docker(
        "run", "--rm", SGLANG_IMAGE, "python3", "-m", "vllm.entrypoints.openai.api_server"
    )
    assert (done.returncode, done.stdout) == (
        1,
        "/usr/bin/python3: Error while finding module specification for "
        "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')\n",
    )
    inspected = docker("run", "--name", "eng-wrapped", SGLANG_IMAGE, "true")
    assert inspected.returncode == 0
    assert docker("inspect", "-f", "{{.Path}} {{json .Args}}", "eng-wrapped").stdout == (
        f'{WRAPPER} ["true"]\n'
    )


def test_no_entrypoint_runs_the_arguments_and_entrypoint_replaces_it(docker):
    assert docker("run", "--rm", PLAIN_IMAGE, "sh", "-c", "echo plain").stdout == "plain\n"
    done = docker("run", "--rm", PLAIN_IMAGE, "--model", "/model")
    assert done.returncode == 127
    assert 'exec: "--model": executable file not found in $PATH' in done.stderr
    replaced = docker("run", "--rm", "--entrypoint", "sh", VLLM_IMAGE, "-c", "echo replaced")
    assert (replaced.returncode, replaced.stdout) == (0, "replaced\n")


def test_docker_exec_does_not_apply_the_entrypoint(docker):
    port = free_port()
    docker("run", "-d", "--name", "eng-exec", "--network", "host", *docker.mount(), VLLM_IMAGE,
           "/model", "--port", str(port))  # fmt: skip
    wait_serving(port)
    assert docker("inspect", "-f", "{{json .Config.Entrypoint}}", "eng-exec").stdout == (
        '["vllm","serve"]\n'
    )
    version = docker("exec", "eng-exec", "vllm", "--version")
    assert (version.returncode, version.stdout) == (0, "0.33.0\n")


def test_images_without_ray_have_no_ray(docker):
    done = docker("run", "--rm", "--entrypoint", "ray", VLLM_IMAGE, "start", "--head")
    assert done.returncode == 127
    assert 'exec: "ray": executable file not found in $PATH: unknown' in done.stderr
    docker("run", "-d", "--name", "eng-noray", SGLANG_IMAGE, "sleep", "60")
    status = docker("exec", "eng-noray", "sh", "-c", "ray status")
    assert (status.returncode, status.stderr) == (127, "sh: 1: ray: not found\n")
    with_ray = docker("run", "--rm", "--entrypoint", "ray", RAY_IMAGE, "--version")
    assert with_ray.returncode == 0 and with_ray.stdout.startswith("ray, version ")
    # vLLM's Ray executor in an image without Ray fails as vLLM does when `import ray` fails
    done = docker("run", "--rm", *docker.mount(), VLLM_IMAGE, "/model", "--tensor-parallel-size",
                  "2", "--distributed-executor-backend", "ray")  # fmt: skip
    assert (done.returncode, last_error(done)) == (
        1,
        "ValueError: Failed to import Ray: No module named 'ray'.Please install Ray with "
        "`pip install ray`.",
    )


def test_a_headless_vllm_node_serves_no_api_and_runs_until_stopped(docker):
    """vLLM's own multi-node mode: a node after the head (--headless) logs the head's
    torch.distributed address, never listens on its port, and stops cleanly on SIGTERM."""
    port = free_port()
    native = ("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1")
    run = docker.start(
        "--name",
        "eng-headless",
        *docker.mount(),
        VLLM_IMAGE,
        "/model",
        "--port",
        str(port),
        *native,
        "--distributed-executor-backend",
        "mp",
        "--headless",
    )
    deadline = time.monotonic() + 10
    while "running" not in docker("inspect", "-f", "{{.State.Status}}", "eng-headless").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(STARTUP_S * 3)  # longer than a serving node takes to listen
    assert run.poll() is None and refused(port)
    assert docker("stop", "eng-headless").returncode == 0
    output, _ = run.communicate(timeout=10)
    assert run.returncode == 0
    assert (
        "headless multiproc executor, with head node address 10.0.0.1:29501 for "
        "torch.distributed process group."
    ) in output
    assert "Starting vLLM server" not in output and output.rstrip().endswith("Shutting down.")
    # Ray with --nnodes is refused as vLLM's ParallelConfig refuses it.
    done = engine("vllm", "0.33.0", "vllm", "serve", "/model", *native,
                  "--distributed-executor-backend", "ray")  # fmt: skip
    assert (done.returncode, last_error(done)) == (
        1,
        "ValueError: nnodes > 1 can only be set when distributed executor backend is mp, uni "
        "or external_launcher.",
    )


def test_an_sglang_rank_after_the_first_answers_health_only(docker):
    """SGLang's ranks after the first run no tokenizer and no API, only a dummy health server
    on --port: /health answers, /v1/models and chat completions are not there."""
    port = free_port()
    run = docker.start(
        "--name",
        "eng-rank1",
        *docker.mount(),
        *SGLANG,
        "--port",
        str(port),
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--dist-init-addr",
        "10.0.0.1:20000",
    )
    try:
        deadline = time.monotonic() + 15
        while refused(port):
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.1)
        assert get(port, "/health") == ""
        for path, body in (("/v1/models", None), ("/v1/chat/completions", {"messages": []})):
            with pytest.raises(urllib.error.HTTPError) as answer:
                get(port, path, body)
            assert answer.value.code == 404
    finally:
        assert docker("stop", "eng-rank1").returncode == 0
        run.communicate(timeout=10)


def test_a_burst_of_sigterms_still_shuts_the_engine_down_cleanly(tmp_path):
    """systemd signals the whole cgroup of a unit and `docker run` forwards the same signal,
    so the engine gets SIGTERM twice or more, the second while the first's handler may still
    run. A handler that took a lock (an Event's, Thread.start's) then waited on itself forever
    and systemd killed the engine 90 s later, its shutdown line unprinted (CI, 2026-11-26).
    A signal while the finished engine exits must not kill it either: Python restores the
    default action then, and one in ten bursts ended in -15 (CI, 2026-11-26)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "tokenizer.json").write_text("{}")
    env = {
        "PATH": os.environ["PATH"],
        "SPARK_TWIN_IMAGE_ENGINE": "sglang",
        "SPARK_TWIN_IMAGE_VERSION": "0.5.10",
        "SPARK_TWIN_CATALOGUES": str(CATALOGUES),
        "SPARK_TWIN_ENGINE_STARTUP_S": "0.1",
        "SPARK_TWIN_MOUNTS": json.dumps([["/model", str(model)]]),
    }
    for _ in range(3):  # before the fix, 17 bursts in 20 hung
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, str(ENGINE), *SGLANG[1:], "--port", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_serving(port)
            # SIGTERMs until the engine has exited, so that some come while it exits
            burst_ends = time.monotonic() + 5
            while time.monotonic() < burst_ends and process.poll() is None:
                process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=10)
        finally:
            process.kill()
        assert process.returncode == 0, output
        assert "INFO:     Application shutdown complete." in output
