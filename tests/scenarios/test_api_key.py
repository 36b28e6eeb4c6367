"""
An API that asks for a key, on a twin: the engine listens on every interface and requires the
key the laptop holds; a request without it is refused (401), with it served; the key is in no
command line, no unit, no deploy output and no file anyone but root can read; without the key
the same inventory is refused before any host is touched; a second run changes nothing.
"""

from __future__ import annotations

import json

from sparkdeploy.config.paths import HEALTH_FAILED as FAILED
from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import TOKEN_ENV, UNIT, UNIT_FILE, state
from tests.scenarios.test_status import run_status, table
from tests.twins import harness

KEY = "twin-key-5f1c0a9e7d3b42c8a61e0f9b7c5d3a21"
ENV = {**TOKEN_ENV, "SPARK_API_KEY": KEY}
KEY_FILE = "/etc/spark-deploy/spark-engine-sglang.key.yaml"
# Every file under these folders that holds the key, with its mode and owner.
HOLDERS = (
    f"grep -rlF -- {KEY} /etc /var /opt /home /tmp /run /root /usr/local 2>/dev/null"
    " | xargs -r stat -c '%n %a %U'"
)


ENV_FILE = "/etc/spark-deploy/spark-engine-sglang.env"
CONTAINER = "spark-engine-sglang"
# A local user's server on the engine port (issue 22, "Keys given away"): it answers like an
# engine and keeps every request it hears, headers included, in HEARD.
STRANGER = "/tmp/stranger.py"
HEARD = "/tmp/stranger.heard"
PID = "/tmp/stranger.pid"
STRANGER_CODE = f"""
import http.server, json, os
open({PID!r}, "w").write(str(os.getpid()))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open({HEARD!r}, "a") as heard:
            heard.write(self.requestline + "\\n" + str(self.headers))
        body = json.dumps({{"data": [{{"id": "m"}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
http.server.ThreadingHTTPServer(("0.0.0.0", 30000), Handler).serve_forever()
"""


def ask(
    twin: harness.Twin, path: str, key: str | None, body: dict | None = None
) -> tuple[int, str]:
    """(HTTP status, body) of a request to the engine from inside the twin."""
    probe = (
        "import json, sys, urllib.error, urllib.request as u\n"
        f"key, body = {key!r}, {json.dumps(body)!r}\n"
        "headers = {'Content-Type': 'application/json'}\n"
        "if key: headers['Authorization'] = 'Bearer ' + key\n"
        "data = None if body == 'null' else body.encode()\n"
        f"request = u.Request('http://127.0.0.1:30000{path}', data=data, headers=headers)\n"
        "try:\n"
        "    with u.urlopen(request, timeout=10) as answer: print(answer.status, answer.read().decode())\n"
        "except urllib.error.HTTPError as error: print(error.code, error.read().decode())\n"
    )
    status, _, text = twin.exec("python3 -", input=probe).stdout.strip().partition(" ")
    return int(status), text


class TestApiKey:
    twins = {"key": {**harness.MODEL, "engine": {"name": "sglang", "bind": "0.0.0.0"}}}

    def test_without_the_key_the_open_api_is_refused_before_any_host(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 2
        assert "key 'engine.bind': 0.0.0.0 serves the API beyond this Spark" in run.stderr
        assert "engine.api_open: true" in run.stderr
        assert "Connecting to hosts" not in run.stderr

    def test_converge(self, scenario):
        run = scenario.deploy(env=ENV)
        assert run.returncode == 0, run.explain()
        assert "[key] spark-engine-health: ready after" in run.stderr
        assert KEY not in run.stdout + run.stderr
        assert_idempotent(scenario.deploy(env=ENV))

    def test_a_request_without_the_key_is_refused_and_with_it_served(self, scenario):
        twin = scenario.twins["key"]
        assert ask(twin, "/v1/models", None) == (401, '{"error": "Unauthorized"}')
        assert ask(twin, "/v1/models", "a-wrong-key-of-enough-length")[0] == 401
        status, listed = ask(twin, "/v1/models", KEY)
        assert status == 200 and "Mistral-Small-4-119B-2603-NVFP4" in listed
        chat = {
            "model": "Mistral-Small-4-119B-2603-NVFP4",
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}],
        }
        assert ask(twin, "/v1/chat/completions", None, chat)[0] == 401
        status, answer = ask(twin, "/v1/chat/completions", KEY, chat)
        assert status == 200 and '"choices"' in answer
        assert ask(twin, "/health", None)[0] == 200  # SGLang leaves /health open
        assert "0.0.0.0:30000" in twin.exec("ss -ltn").stdout

    def test_the_key_is_in_no_command_line_and_no_readable_file(self, scenario):
        twin = scenario.twins["key"]
        assert KEY not in twin.exec("ps -eo args").stdout
        assert KEY not in twin.exec(f"systemctl cat {UNIT}").stdout
        assert KEY not in twin.exec(f"journalctl -u {UNIT} --no-pager").stdout
        unit = twin.read(UNIT_FILE)
        assert "--config /run/secrets/spark-api-key.yaml" in unit
        holders = twin.exec(HOLDERS).stdout.split("\n")
        assert f"{KEY_FILE} 600 root" in holders, holders
        for line in filter(None, holders):
            path, mode, owner = line.rsplit(" ", 2)
            assert owner == "root" and mode.endswith("00"), line  # root's alone
        assert twin.exec(f"su - spark -c 'cat {KEY_FILE}'", check=False).returncode != 0

    def test_status_reads_the_refusal_as_up(self, scenario):
        [(state, detail)] = table(run_status(scenario, ("key",), env=ENV)[1])["key"]["engine"]
        assert state == "ok" and "requires its API key" in detail, detail

    def test_the_env_and_key_files_are_root_only_and_the_container_hardened(self, scenario):
        twin = scenario.twins["key"]
        for path in (ENV_FILE, KEY_FILE):
            assert twin.exec(f"stat -c '%a %U %G' {path}").stdout.split() == ["600", "root", "root"]
            refused = twin.exec(f"sudo -u nobody cat {path}", check=False)
            assert refused.returncode != 0 and "Permission denied" in refused.stderr, path
        [inspected] = json.loads(twin.exec(f"docker inspect {CONTAINER}").stdout)
        assert inspected["HostConfig"]["CapDrop"] == ["NET_RAW"]
        assert inspected["HostConfig"]["SecurityOpt"] == ["no-new-privileges"]

    def test_a_local_user_holding_the_port_never_gets_the_key(self, scenario):
        twin = scenario.twins["key"]
        twin.exec(f"systemctl stop {UNIT}", check=False)  # not there yet when run alone
        twin.exec(f"cat > {STRANGER} && rm -f {HEARD} {PID}", input=STRANGER_CODE)
        twin.exec(f"su spark -s /bin/sh -c 'setsid -f python3 {STRANGER} >/dev/null 2>&1'")
        twin.exec(
            "for i in $(seq 50); do ss -Hltn 'sport = :30000' | grep -q . && exit 0;"
            " sleep 0.2; done; exit 1"
        )
        try:
            run = scenario.deploy(env=ENV)
            heard = twin.read(HEARD) or ""
        finally:
            twin.exec(f'kill "$(cat {PID})"', check=False)
        assert run.returncode != 0
        said = run.stdout + run.stderr
        assert "port 30000 is held by a process outside the engine's container" in said, said
        # Named by pid and command where root may read the holder's fds (a Spark); by user
        # alone in a twin, whose root lacks CAP_SYS_PTRACE.
        named = (f"user spark command 'python3 {STRANGER}'", "a socket of user spark whose")
        assert any(name in said for name in named), said[-3000:]
        assert "the API key was not sent to it" in said, said[-3000:]
        assert KEY not in said and KEY not in heard and "Authorization" not in heard
        # The failed check is recorded, by root, where the local user can neither remove
        # it (to pass as healthy) nor write one.
        listed = twin.exec(f"stat -c '%n %a %U' {FAILED} {FAILED}/{UNIT}").stdout.split("\n")
        assert listed[:2] == [f"{FAILED} 755 root", f"{FAILED}/{UNIT} 644 root"], listed
        for attempt in (f"rm -f {FAILED}/{UNIT}", f"touch {FAILED}/other.service"):
            assert twin.exec(f"su spark -s /bin/sh -c '{attempt}'", check=False).returncode != 0
        # With the port free again, the next run checks the engine again whatever systemd
        # says of the unit (active while it loads, between restarts): it serves, the check
        # passes with the key, and the record is gone.
        run = scenario.deploy(env=ENV)
        assert run.returncode == 0, run.explain()
        assert "[key] spark-engine-health: ready after" in run.stderr, run.explain()
        assert state(twin, UNIT) == "active"
        assert ask(twin, "/v1/models", KEY)[0] == 200
        assert twin.exec(f"ls -A {FAILED}").stdout == ""
