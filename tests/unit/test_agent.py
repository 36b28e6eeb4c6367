"""
The MCP server's tools given recorded readings (journals, kernel log, status lines, image
readings) and what they answer; the server through the SDK's in-process client; the context
the deploy writes; ``from_argv`` reading command lines as each release does.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sparkdeploy.agent.context import SparkContext, context_of, load_context
from sparkdeploy.agent.server import BearerToken, app, build_server, loopback, read_token
from sparkdeploy.agent.tools import Tools
from sparkdeploy.inventory import build_inventory
from sparkdeploy.knowledge.flags import check_flags, from_argv, to_argv
from sparkdeploy.readings.journals import JOURNAL_MARK
from tests.unit.test_diagnosis import FAILED, facts_output, journal, kernel

UNIT = "spark-engine-sglang.service"
IMAGE = "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"
CONTEXT = SparkContext(
    spark="spark-1",
    engine={"name": "sglang", "image": IMAGE},
    version="0.5.10",
    image=IMAGE,
    model_folder="/opt/models/Qwen3-8B",
    units=(UNIT,),
    gpu_units={"engine": UNIT, "tts": "spark-gpu-tts.service"},
    port=30000,
    serves_api=True,
    memory_guard_gb=70,
)


class Recorded:
    """A Spark as the tools see it: each command's output, and every command asked."""

    def __init__(self, output: list[str], answers: dict[str, tuple[int, str]] | None = None):
        self.output, self.answers = output, answers or {}
        self.commands: list[str] = []
        self.urls: list[str] = []

    def run(self, command: str) -> list[str]:
        self.commands.append(command)
        return self.output

    def get(self, url: str) -> tuple[int, str]:
        self.urls.append(url)
        return self.answers.get(url.rsplit("30000", 1)[-1], (0, "Connection refused"))


def tools(
    output: list[str] | None = None,
    readings: Path | None = None,
    answers: dict[str, tuple[int, str]] | None = None,
) -> Tools:
    """Tools reading a recorded Spark (``made.run.__self__`` is the ``Recorded``)."""
    spark = Recorded(list(output or []), answers)
    made = Tools(CONTEXT, run=spark.run, get=spark.get)
    if readings is not None:
        made.readings = readings
    return made


def asked(made: Tools) -> Recorded:
    return made.run.__self__  # type: ignore[attr-defined]


# -- diagnose ----------------------------------------------------------------------------------


def test_diagnose_names_the_crash_in_the_engine_journal_and_the_kernel_log():
    output = facts_output((UNIT, FAILED, journal("sglang-flashinfer-invalid-device-function")))
    output += [f"{JOURNAL_MARK} boot current boot", *kernel("clean")]
    output += [f"{JOURNAL_MARK} boot previous boot", *kernel("wedge-previous-boot")]
    answer = tools(output).diagnose(UNIT)
    (unit,) = answer["units"]
    assert unit["unit"] == UNIT and unit["active"] is False
    assert unit["state"].startswith("activating (auto-restart, exit-code, exit status 137)")
    assert [finding["id"] for finding in unit["findings"]] == ["flashinfer-invalid-device-function"]
    assert unit["findings"][0]["rule"] == "sglang-flashinfer-attention"
    assert "invalid device function" in unit["findings"][0]["seen"]
    assert answer["kernel"] and all("previous boot" in f["where"] for f in answer["kernel"])
    assert "matches flashinfer-invalid-device-function" not in answer["report"]
    assert "rule id  flashinfer-invalid-device-function (GB10 rule" in answer["report"]


def test_diagnose_reads_every_gpu_unit_of_the_plan_and_no_other():
    made = tools([])
    made.diagnose()
    (command,) = asked(made).commands
    assert f"journalctl -u {UNIT} -n 300" in command
    assert "journalctl -u spark-gpu-tts.service -n 300" in command
    assert "journalctl -b -1 --no-pager -q -o short-iso -k -n 1000" in command
    with pytest.raises(ValueError, match="'ssh.service' is not a unit of this Spark's plan"):
        made.diagnose("ssh.service")
    assert len(asked(made).commands) == 1


def test_diagnose_bounds_the_lines_it_reads():
    made = tools([])
    made.diagnose(UNIT, lines=10**9)
    assert f"journalctl -u {UNIT} -n 5000 " in asked(made).commands[0]


KEY = "k3y-0123456789abcdef0123456789abcdef"
# What the engines log at start (issue 22: returned as they were to any local process):
# SGLang's server_args, vLLM's non-default args and Namespace, a crash dumping a request.
LOGGED_KEYS = [
    f"[2026-03-23 10:12:05] server_args=ServerArgs(model_path='/opt/models/Qwen3-8B', "
    f"api_key='{KEY}', hf_token='hf_{'a' * 34}', port=30000, max_total_tokens=4096)",
    f"(APIServer pid=7) INFO 03-23 10:12:05 [utils.py:253] non-default args: "
    f"{{'model': '/opt/models/x', 'api_key': ['{KEY}'], 'port': 8000}}",
    f"args: Namespace(host='127.0.0.1', api_key=\"{KEY}\", hf_token=None)",
    f"headers: {{'Authorization': 'Bearer {KEY}'}} NGC key nvapi-{'b' * 40}",
]


def test_diagnose_never_answers_a_secret_the_engine_logged():
    output = facts_output(
        (
            UNIT,
            FAILED,
            "\n".join([journal("sglang-flashinfer-invalid-device-function"), *LOGGED_KEYS]),
        )
    )
    output += [
        f"{JOURNAL_MARK} boot current boot",
        f"2026-03-23T10:12:05+00:00 s kernel: token={KEY}",
    ]
    answer = json.dumps(tools(output).diagnose(UNIT, lines=5000))
    assert KEY not in answer and "hf_aaaa" not in answer and "nvapi-bbbb" not in answer
    assert "api_key='<redacted>'" in answer and "'api_key': <redacted>" in answer
    assert "Bearer <redacted>" in answer and "hf_token=None" in answer


# -- explain_rule ------------------------------------------------------------------------------


def test_explain_rule_gives_scope_reason_fix_and_sources():
    rule = tools().explain_rule("sglang-flashinfer-attention")
    assert rule["kind"] == "GB10 rule" and rule["engine"] == "sglang"
    assert rule["where_seen"] == "releases >=0.5.10.dev0,<0.5.11"
    assert rule["outside_that"]["severity"] == "warning"
    assert {"field report 000", "field report 001"} <= {s["where"] for s in rule["sources"]}
    assert "flashinfer-invalid-device-function" in rule["failure_signatures"]


def test_explain_rule_knows_the_failure_signatures_diagnose_names():
    signature = tools().explain_rule("no-kernel-image-sm121")
    assert signature["kind"] == "failure signature"
    assert signature["scope"] == "engine" and signature["sources"]


def test_explain_rule_of_an_unknown_id_says_the_closest_and_how_to_list():
    with pytest.raises(ValueError, match="closest: sglang-flashinfer-attention") as error:
        tools().explain_rule("sglang-flashinfer")
    assert "call explain_rule without an id to list them" in str(error.value)
    listed = tools().explain_rule()
    assert "sglang-flashinfer-attention" in listed["rules"]
    assert "no-kernel-image-sm121" in listed["signatures"]


# -- check_command -----------------------------------------------------------------------------


def test_a_command_the_gb10_rules_refuse_is_refused_with_the_rule():
    verdict = tools().check_command(
        "python3 -m sglang.launch_server --model-path /opt/models/Qwen3-8B "
        "--attention-backend flashinfer --port 30000"
    )
    assert verdict["verdict"] == "refused" and verdict["release"] == "0.5.10"
    assert verdict["problems"][0].startswith("error [sglang-flashinfer-attention]")
    assert verdict["args"] == {"--attention-backend": "flashinfer"}
    notes = " ".join(verdict["notes"])
    assert "--model-path: set by the deploy" in notes and "--port: set by the deploy" in notes
    assert f"no reading of {IMAGE} on this Spark" in notes


def test_an_accepted_command_shows_the_server_flags_the_unit_would_run():
    verdict = tools().check_command("--attention-backend triton --mem-fraction-static 0.7")
    assert verdict["verdict"] == "accepted", verdict
    flags = verdict["server_flags"]
    assert flags[flags.index("--mem-fraction-static") + 1] == "0.7"
    assert flags[flags.index("--model-path") + 1] == "/opt/models/Qwen3-8B"


def test_an_unknown_flag_is_refused_with_the_closest_names():
    verdict = tools().check_command("--mem-fraction 0.7 --bogus-option 3")
    assert verdict["verdict"] == "refused"
    assert any("--bogus-option: not a flag of SGLang 0.5.10" in p for p in verdict["problems"])


def test_the_release_in_the_image_picks_the_catalogue(tmp_path: Path):
    reading = {"id": "sha256:ab", "image": IMAGE, "engine": "sglang", "release": "0.5.12"}
    (tmp_path / "ab.json").write_text(json.dumps(reading))
    (tmp_path / "cd.json").write_text(json.dumps({**reading, "image": "other", "release": "0.5.3"}))
    verdict = tools(readings=tmp_path).check_command("--attention-backend triton")
    assert verdict["release"] == "0.5.12"
    assert "the release found in the image" in verdict["notes"][0]


def test_a_release_without_a_catalogue_is_said_and_the_planned_one_used(tmp_path: Path):
    reading = {"image": IMAGE, "engine": "sglang", "release": "9.9.9"}
    (tmp_path / "ab.json").write_text(json.dumps(reading))
    verdict = tools(readings=tmp_path).check_command("--attention-backend triton")
    assert verdict["release"] == "0.5.10"
    assert "SGLang 9.9.9, which has no flag catalogue here" in verdict["notes"][0]


@pytest.mark.parametrize(
    "command, message",
    [
        ("vllm serve /opt/models/x --max-model-len 4096", "this Spark runs no vLLM engine"),
        ("rm -rf /", "not a command line of SGLang or vLLM"),
        ("--tp 'unclosed", "not a shell command line"),
        ("--x " + "y" * 17000, "more than 16384 characters"),
    ],
)
def test_command_lines_it_cannot_check_are_refused_with_why(command: str, message: str):
    with pytest.raises(ValueError, match=message):
        tools().check_command(command)


def test_check_command_never_runs_anything():
    made = tools()
    made.check_command("python3 -m sglang.launch_server --tp 1; touch /tmp/x")
    assert asked(made).commands == [] and asked(made).urls == []


# -- status ------------------------------------------------------------------------------------


def status_output(engine: str = "active", tts: str = "inactive") -> list[str]:
    output = facts_output(
        (UNIT, {"LoadState": "loaded", "ActiveState": engine, "SubState": "running"}, ""),
        ("spark-gpu-tts.service", {"LoadState": "loaded", "ActiveState": tts}, ""),
    )
    return [
        *output,
        f"{JOURNAL_MARK} value mem 119203140",
        f"{JOURNAL_MARK} value gpu NVIDIA GB10, 580.95.05, 41",
        f'{JOURNAL_MARK} value rollback {{"kept": {{"live": true}}, "rollback": null}}',
        f"{JOURNAL_MARK} value linktest ",
    ]


def test_status_says_who_holds_the_gpu_the_api_and_memory():
    models = '{"object": "list", "data": [{"id": "Qwen3-8B"}]}'
    made = tools(status_output(), answers={"/health": (200, ""), "/v1/models": (200, models)})
    answer = made.status()
    (command,) = asked(made).commands
    assert f"systemctl show {UNIT} " in command and "journalctl" not in command
    assert answer["gpu_holder"] == "engine"
    assert answer["api"] == {"health": 200, "state": "serving", "models": ["Qwen3-8B"]}
    assert answer["memory"] == {"available_gib": 113.7, "guard_gib": 70}
    assert answer["gpu"] == "NVIDIA GB10, 580.95.05, 41"
    assert answer["rollback"] == {"kept": {"live": True}, "rollback": None}
    assert answer["link_test"] is None
    assert answer["units"]["spark-gpu-tts.service"].startswith("inactive")


def test_status_reads_a_401_as_up_and_two_holders_as_a_fault():
    answer = tools(
        status_output(tts="active"), answers={"/health": (200, ""), "/v1/models": (401, "")}
    ).status()
    assert answer["api"]["state"] == "up, requires its API key"
    assert answer["gpu_holder"] == ["engine", "tts"]
    down = tools(status_output(engine="failed")).status()
    assert down["api"]["state"] == "not answering: Connection refused"
    assert down["gpu_holder"] is None


# -- the server through the SDK's client -------------------------------------------------------


def call(*calls: tuple[str, dict]) -> list[Any]:
    async def ask() -> list[Any]:
        async with Client(build_server(tools())) as client:
            listed = await client.list_tools()
            results: list[Any] = [listed]
            for name, args in calls:
                results.append(await client.call_tool(name, args))
            return results

    return asyncio.run(ask())


def test_the_server_lists_four_read_only_tools_and_answers_errors_as_errors():
    listed, rule, unknown = call(
        ("explain_rule", {"rule_id": "sglang-flashinfer-attention"}),
        ("explain_rule", {"rule_id": "nope"}),
    )
    hints = {tool.name: tool.annotations for tool in listed.tools}
    assert set(hints) == {"status", "diagnose", "explain_rule", "check_command"}
    assert all(
        h.read_only_hint and h.idempotent_hint and not h.open_world_hint for h in hints.values()
    )
    assert not rule.is_error and rule.structured_content["id"] == "sglang-flashinfer-attention"
    assert unknown.is_error
    assert "no GB10 rule or failure signature is called 'nope'" in unknown.content[0].text


def test_the_server_binds_loopback_only():
    assert loopback("127.0.0.1") == "127.0.0.1" and loopback("::1") == "::1"
    with pytest.raises(Exception, match="0.0.0.0 is not a loopback address"):
        loopback("0.0.0.0")


# -- the bearer token (issue 22: loopback alone let every local user read the journals) ------

TOKEN = "s3cret-t0ken_of-the-operator"


def gate(headers: list[tuple[bytes, bytes]], kind: str = "http") -> tuple[bool, list[dict]]:
    """Whether a request with ``headers`` reached the app behind the gate, and what the
    gate itself sent."""
    reached: list[bool] = []
    sent: list[dict] = []

    async def inner(scope, receive, send) -> None:
        reached.append(True)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message) -> None:
        sent.append(message)

    scope = {"type": kind, "method": "POST", "path": "/mcp", "headers": headers}
    asyncio.run(BearerToken(inner, TOKEN)(scope, receive, send))
    return bool(reached), sent


REFUSED = [
    {
        "type": "http.response.start",
        "status": 401,
        "headers": [(b"www-authenticate", b"Bearer"), (b"content-length", b"0")],
    },
    {"type": "http.response.body", "body": b""},
]


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer wrong")],
        [(b"authorization", f"Bearer {TOKEN}x".encode())],
        [(b"authorization", f"Basic {TOKEN}".encode())],
        [(b"authorization", TOKEN.encode())],
        [(b"authorization", b"Bearer ")],
        [(b"authorization", f"Bearer {TOKEN}".encode()), (b"authorization", b"Bearer x")],
        [(b"x-token", TOKEN.encode())],
    ],
    ids=["none", "wrong", "longer", "basic", "no scheme", "empty", "two", "other header"],
)
def test_a_request_without_the_token_gets_401_and_nothing_else(headers):
    reached, sent = gate(headers)
    assert not reached and sent == REFUSED


@pytest.mark.parametrize("scheme", [b"Bearer", b"bearer", b"BEARER"])
def test_a_request_with_the_token_reaches_the_server(scheme):
    reached, sent = gate(
        [(b"host", b"127.0.0.1:8765"), (b"Authorization", scheme + b" " + TOKEN.encode())]
    )
    assert reached and sent == []


def test_a_websocket_without_the_token_is_closed_and_lifespan_passes():
    assert gate([], "websocket") == (False, [{"type": "websocket.close", "code": 1008}])
    assert gate([], "lifespan") == (True, [])


def test_the_token_is_read_from_its_file_and_an_empty_one_refused(tmp_path: Path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert read_token(path) == TOKEN
    path.write_text("\n")
    with pytest.raises(SystemExit, match="is empty: run the deploy again"):
        read_token(path)
    with pytest.raises(SystemExit, match="cannot read the token"):
        read_token(tmp_path / "missing")
    with pytest.raises(ValueError, match="the MCP token is empty"):
        BearerToken(lambda *_: None, "")  # type: ignore[arg-type]


@pytest.fixture
def served() -> Iterator[str]:
    """The real server (the SDK's Streamable HTTP app behind the gate) under uvicorn on a
    free loopback port: its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app(build_server(tools()), TOKEN, "127.0.0.1"), port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.02)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(10)


def test_the_served_server_answers_the_client_with_the_token_only(served: str):
    async def ask(headers: dict[str, str]) -> list[str]:
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(served, http_client=http)) as client,
        ):
            return [tool.name for tool in (await client.list_tools()).tools]

    assert sorted(asyncio.run(ask({"Authorization": f"Bearer {TOKEN}"}))) == [
        "check_command",
        "diagnose",
        "explain_rule",
        "status",
    ]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = httpx2.post(served, json=body, headers=headers)
        assert (refused.status_code, refused.content) == (401, b"")


# -- the context the deploy writes -------------------------------------------------------------


def test_the_context_round_trips_and_refuses_another_format(tmp_path: Path):
    path = tmp_path / "context.json"
    path.write_text(CONTEXT.to_json())
    assert load_context(path) == CONTEXT
    path.write_text(json.dumps({**json.loads(CONTEXT.to_json()), "format": 2}))
    with pytest.raises(ValueError, match="not a context of format 1; run the deploy again"):
        load_context(path)


def test_the_context_of_a_rank_of_a_pair_carries_its_place_and_engine_as_written():
    document = {
        "defaults": {"ssh_user": "nvidia", "model_repo": "Qwen/Qwen3-8B"},
        "sparks": {
            name: {
                "ssh_host": f"10.0.0.{n}",
                "mcp_server": True,
                "engine": {"name": "sglang", "image": IMAGE, "bind": "127.0.0.1"},
                "qsfp": [
                    {"interface": "enp1s0f0np0", "address": f"192.168.100.{n}/24"},
                    {"interface": "enP2p1s0f0np0", "address": f"192.168.101.{n}/24"},
                ],
            }
            for n, name in ((1, "spark-1"), (2, "spark-2"))
        },
    }
    inventory = build_inventory(document, "sparks.yml")
    context = context_of(
        "spark-2",
        inventory.sparks["spark-2"],
        inventory.engine_plans["spark-2"],
        inventory.topology["spark-2"],
    )
    # as written, with what the engine's defaults fill in (EngineSettings' model validator)
    assert context.engine == {"name": "sglang", "image": IMAGE, "bind": "127.0.0.1", "port": 30000}
    assert context.multinode == {
        "nodes": 2,
        "rank": 1,
        "head": "192.168.100.1",
        "interface": "enp1s0f0np0",
        "port": None,
        "address": "192.168.100.2",
        "ring": False,
    }
    assert context.serves_api is False and context.units == (UNIT,)
    assert context.engine_settings() == inventory.sparks["spark-2"].engine


# -- from_argv ---------------------------------------------------------------------------------


def test_from_argv_reads_each_kind_of_flag_as_the_release_does():
    words = [
        "serve", "/opt/models/x", "--enable-auto-tool-choice", "--max-model-len", "4096",
        "--cudagraph-capture-sizes", "1", "2", "4", "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 2}', "-tp=2", "--kv-cache-dtype", "fp8",
    ]  # fmt: skip
    parsed = from_argv("vllm", "0.33.0", words)
    assert parsed.positional == ("serve", "/opt/models/x") and parsed.unknown == ()
    assert parsed.args == {
        "--enable-auto-tool-choice": True,
        "--max-model-len": "4096",
        "--cudagraph-capture-sizes": ["1", "2", "4"],
        "--speculative-config": {"method": "mtp", "num_speculative_tokens": 2},
        "-tp": "2",
        "--kv-cache-dtype": "fp8",
    }
    assert check_flags("vllm", "0.33.0", parsed.args) == []
    assert to_argv("vllm", "0.33.0", parsed.args)[:4] == [
        "--enable-auto-tool-choice",
        "--max-model-len",
        "4096",
        "--cudagraph-capture-sizes",
    ]


def test_from_argv_keeps_unknown_flags_and_negative_numbers_apart():
    parsed = from_argv("sglang", "0.5.10", ["--no-such-flag", "-1", "--disable-radix-cache"])
    assert parsed.unknown == ("--no-such-flag",)
    assert parsed.args == {"--no-such-flag": "-1", "--disable-radix-cache": True}
