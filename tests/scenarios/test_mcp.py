"""
The MCP server on a twin, asked with the real client of the same SDK (``mcp.Client`` over
Streamable HTTP, run inside the twin with the server's own venv, as the operator, with the
token from the operator's copy): the deploy installs it once and a second run changes nothing;
it runs as spark-mcp (systemd-journal, no sudo, no docker) on 127.0.0.1 only; a request
without the token gets 401 and no other account reads the token; its four tools answer and
the host is the same before and after; an engine that crashes is diagnosed with the crash's
signature; turning it off removes it.
"""

from __future__ import annotations

import json

from sparkdeploy.escape import shell
from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import TOKEN_ENV, UNIT, state
from tests.scenarios.test_rollback import BAD, CRASH
from tests.twins import harness

MCP_UNIT = "spark-mcp.service"
VENV_PYTHON = "/opt/spark-deploy/mcp/venv/bin/python"
OPERATOR = "spark"  # the twins' SSH user, the operator (no operator_user here)
TOKEN = "/etc/spark-deploy/mcp/token"
COPY = f"/home/{OPERATOR}/.config/spark-deploy/mcp-token"
URL = "http://127.0.0.1:8765/mcp"
ENGINE = {"name": "sglang", "rollback": False}
# The client: every call's outcome as one JSON line (tool, is_error, structured content or
# the error text).
# Run as the operator, it reads the token from the operator's copy (never from argv).
CLIENT = """
import asyncio, json, os, pwd, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

home = pwd.getpwuid(os.getuid()).pw_dir
with open(home + "/.config/spark-deploy/mcp-token") as f:
    headers = {"Authorization": "Bearer " + f.read().strip()}

async def main():
    async with httpx2.AsyncClient(headers=headers) as http, Client(
        streamable_http_client("http://127.0.0.1:8765/mcp", http_client=http)
    ) as client:
        listed = await client.list_tools()
        print(json.dumps({"tools": {t.name: t.annotations.read_only_hint for t in listed.tools}}))
        for name, args in json.loads(sys.argv[1]):
            result = await client.call_tool(name, args)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            print(json.dumps({"tool": name, "error": result.is_error,
                              "answer": result.structured_content, "text": text}))

asyncio.run(main())
"""
# What the tools could change: files the deploy and the engines own, units, containers.
SNAPSHOT = (
    "find /etc/systemd/system /etc/spark-deploy /etc/sudoers.d /var/lib/spark-deploy "
    "/opt/models /usr/local/sbin -xdev -type f -exec sha256sum {} + 2>/dev/null | sort; "
    "systemctl list-units --type=service --state=active --no-legend --plain | awk '{print $1}' "
    "| grep -v '^spark-fetch@' | sort; docker ps --format '{{.Names}} {{.Image}}' | sort"
)
FLASHINFER = (
    "python3 -m sglang.launch_server --model-path /opt/models/x "
    "--attention-backend flashinfer --mem-fraction-static 0.8"
)


def ask(twin: harness.Twin, *calls: tuple[str, dict]) -> tuple[dict, list[dict]]:
    """The tools listed (name -> read-only hint) and each call's outcome, in order."""
    done = twin.exec(
        f"runuser -u {OPERATOR} -- {VENV_PYTHON} - {shell(json.dumps(calls))}", input=CLIENT
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines[0]["tools"], lines[1:]


class TestMcpServer:
    twins = {"mcp": {**harness.MODEL, "engine": ENGINE, "mcp_server": True}}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "Install the MCP SDK (2.3.0) in its own venv" in " ".join(run.changed()["mcp"])
        again = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(again)
        token = scenario.twins["mcp"].exec(f"cat {TOKEN}").stdout.strip()
        assert len(token) >= 43, "the token is not 32 random bytes"
        for output in (run.stdout, run.stderr, again.stdout, again.stderr):
            assert token not in output, "the MCP token is in the deploy's output"

    def test_only_the_operator_holds_the_token(self, scenario):
        """Issue 22: on loopback alone, any local account read the engines' journals and the
        kernel log through spark-mcp's systemd-journal group."""
        twin = scenario.twins["mcp"]
        group = twin.exec(f"id -gn {OPERATOR}").stdout.strip()
        stat = twin.exec(f"stat -c '%a %U %G' {TOKEN} {COPY}").stdout.splitlines()
        assert stat == ["640 root spark-mcp", f"600 {OPERATOR} {group}"]
        assert twin.exec(f"cmp -s {TOKEN} {COPY}", check=False).returncode == 0
        for path in (TOKEN, COPY):
            other = twin.exec(f"runuser -u nobody -- cat {path}", check=False)
            assert other.returncode != 0 and other.stdout == "", f"nobody read {path}"
        token = twin.exec(f"cat {TOKEN}").stdout.strip()
        assert token not in twin.exec("ps -eo args; systemctl show spark-mcp.service").stdout
        post = f"curl -s -m 5 -o /dev/null -w '%{{http_code}} %{{size_download}}' -X POST {URL}"
        body = '-H \'Content-Type: application/json\' -d \'{"jsonrpc":"2.0","id":1}\''
        for header in ("", "-H 'Authorization: Bearer wrong'", "-H 'Authorization: Bearer'"):
            answer = twin.exec(f"runuser -u nobody -- {post} {body} {header}").stdout
            assert answer == "401 0", f"{header or 'no token'}: {answer}"

    def test_a_link_planted_as_the_copy_leads_root_nowhere(self, scenario):
        """The operator's symlink in place of the copy is replaced by the operator, and the
        file it pointed at is untouched."""
        twin = scenario.twins["mcp"]
        before = twin.exec("sha256sum /etc/shadow; stat -c '%a %U %G' /etc/shadow").stdout
        twin.exec(f"runuser -u {OPERATOR} -- ln -sf /etc/shadow {COPY}")
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        (changed,) = run.changed()["mcp"]
        assert changed.endswith(
            "Give the operator a copy of the MCP token (~/.config/spark-deploy/mcp-token)"
        )
        assert twin.exec("sha256sum /etc/shadow; stat -c '%a %U %G' /etc/shadow").stdout == before
        assert (
            twin.exec(f"[ -f {COPY} ] && [ ! -L {COPY} ] && cmp -s {TOKEN} {COPY}").returncode == 0
        )

    def test_it_runs_unprivileged_on_loopback_only(self, scenario):
        twin = scenario.twins["mcp"]
        assert state(twin, MCP_UNIT) == "active"
        assert twin.exec("id -nG spark-mcp").stdout.split() == ["spark-mcp", "systemd-journal"]
        sudo = twin.exec("sudo -l -U spark-mcp", check=False).stdout
        assert "is not allowed to run sudo" in sudo, sudo
        listening = twin.exec("ss -ltnH 'sport = :8765'").stdout.split()
        assert "127.0.0.1:8765" in listening and "0.0.0.0:8765" not in listening
        address = twin.exec("hostname -I").stdout.split()[0]
        outside = twin.exec(f"curl -s -m 3 http://{address}:8765/mcp", check=False)
        assert outside.returncode == 7, "the server answered on the twin's own address"
        props = twin.exec(f"systemctl show {MCP_UNIT} -p User -p NoNewPrivileges -p ProtectSystem")
        assert set(props.stdout.split()) == {
            "User=spark-mcp",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
        }

    def test_the_tools_answer_over_the_real_client_and_change_nothing(self, scenario):
        twin = scenario.twins["mcp"]
        before = twin.exec(SNAPSHOT).stdout
        tools, outcomes = ask(
            twin,
            ("status", {}),
            ("diagnose", {}),
            ("explain_rule", {"rule_id": "sglang-flashinfer-attention"}),
            ("check_command", {"command": FLASHINFER}),
            ("check_command", {"command": "--attention-backend triton --mem-fraction-static 0.7"}),
            ("explain_rule", {"rule_id": "sglang-flashinfer"}),
            ("diagnose", {"unit": "ssh.service"}),
        )
        assert tools == dict.fromkeys(["status", "diagnose", "explain_rule", "check_command"], True)
        status, diagnosis, rule, refused, accepted, unknown, foreign = outcomes
        assert [o["error"] for o in outcomes] == [False] * 5 + [True] * 2
        status = status["answer"]
        assert status["gpu_holder"] == "engine"
        assert status["api"] == {
            "health": 200,
            "state": "serving",
            "models": ["Mistral-Small-4-119B-2603-NVFP4"],
        }
        assert status["units"][UNIT].startswith("active (running)")
        diagnosis = diagnosis["answer"]
        assert [unit["unit"] for unit in diagnosis["units"]] == [UNIT]
        assert diagnosis["units"][0]["findings"] == []
        assert "no known GB10 failure signature" in diagnosis["report"]
        rule = rule["answer"]
        assert (
            rule["kind"] == "GB10 rule" and rule["where_seen"] == "releases >=0.5.10.dev0,<0.5.11"
        )
        verdict = refused["answer"]
        assert verdict["verdict"] == "refused" and verdict["release"] == "0.5.10"
        assert "[sglang-flashinfer-attention]" in verdict["problems"][0]
        assert "the release found in the image" in " ".join(verdict["notes"])
        ok = accepted["answer"]
        assert ok["verdict"] == "accepted" and ok["problems"] == [], ok
        flags = ok["server_flags"]
        assert flags[flags.index("--mem-fraction-static") + 1] == "0.7"
        # Questions the server cannot answer come back as the caller's error, with the fix.
        assert "closest: sglang-flashinfer-attention" in unknown["text"]
        assert "not a unit of this Spark's plan" in foreign["text"]
        assert twin.exec(SNAPSHOT).stdout == before

    def test_a_crashing_engine_is_diagnosed_with_its_signature(self, scenario):
        twin = scenario.twins["mcp"]
        twin.data["engine"] = {**BAD, "rollback": False}
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0 and CRASH in run.stderr, run.explain()
        _, (diagnosis,) = ask(twin, ("diagnose", {}))
        unit = diagnosis["answer"]["units"][0]
        assert unit["unit"] == UNIT
        assert [finding["id"] for finding in unit["findings"]] == ["no-kernel-image-sm121"]
        assert CRASH in unit["findings"][0]["seen"]
        twin.data["engine"] = ENGINE
        scenario.write_inventory()
        assert scenario.deploy(env=TOKEN_ENV).returncode == 0

    def test_turning_it_off_removes_it(self, scenario):
        twin = scenario.twins["mcp"]
        twin.data["mcp_server"] = False
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "Remove the MCP server (mcp_server is off)" in " ".join(run.changed()["mcp"])
        gone = "[ ! -e /opt/spark-deploy/mcp ] && [ ! -e /etc/systemd/system/spark-mcp.service ]"
        assert (
            twin.exec(
                gone + f" && [ ! -e /etc/spark-deploy/mcp/context.json ] && [ ! -e {TOKEN} ]"
                f" && [ ! -e {COPY} ]",
                check=False,
            ).returncode
            == 0
        )
        assert state(twin, MCP_UNIT) == "inactive"
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
