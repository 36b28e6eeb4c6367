"""The docker and engine stand-ins in a twin: an engine container in the foreground of a
systemd unit, as the deploy's engine units will run it; the image decides the release whose
flags the engine accepts (from the catalogues the harness copied in) and whether it has Ray."""

from __future__ import annotations

from tests.twins import harness

MODEL = "/opt/models/tiny"
UNIT = "eng-sglang"
PORT = 30000
SGLANG_IMAGE = "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"  # SGLang 0.5.10
RUN = (
    f"docker run --name {UNIT} --rm --network host --gpus all --ipc host"
    f" -v {MODEL}:/model:ro {SGLANG_IMAGE}"
    f" python3 -m sglang.launch_server --model-path /model --port {PORT} --enable-metrics"
)
# Inside the twin, with the standard library only (the twin has no curl).
MODELS = f"""
import time, urllib.request
for _ in range(150):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:{PORT}/v1/models", timeout=2).read().decode())
        break
    except OSError:
        time.sleep(0.2)
else:
    raise SystemExit("never served")
"""
LISTENING = f"""
import socket
print(socket.socket().connect_ex(("127.0.0.1", {PORT})) == 0)
"""


def sh(twin: harness.Twin, command: str, input: str | None = None) -> str:
    return twin.exec(command, input=input).stdout.strip()


class TestEngineUnderSystemd:
    twins: dict[str, dict] = {"eng-standin": {}}
    prepare = {
        "eng-standin": (
            f'mkdir -p {MODEL} && echo \'{{"model_type": "llama"}}\' > {MODEL}/config.json'
            f" && echo '{{}}' > {MODEL}/tokenizer.json"
        )
    }

    def test_unit_serves_the_model(self, scenario):
        twin = scenario.twins["eng-standin"]
        sh(twin, f"systemd-run --unit={UNIT} {RUN}")
        assert '"id": "/model"' in sh(twin, "python3 -", input=MODELS)
        assert sh(twin, f"systemctl is-active {UNIT}") == "active"

    def test_docker_sees_the_container(self, scenario):
        twin = scenario.twins["eng-standin"]
        assert sh(twin, "docker ps --format '{{.Names}}'") == UNIT
        assert sh(twin, f"docker inspect -f '{{{{.State.Running}}}}' {UNIT}") == "true"
        journal = sh(twin, f"journalctl -u {UNIT} --no-pager")
        assert "The server is fired up and ready to roll!" in journal

    def test_systemctl_stop_stops_the_container(self, scenario):
        twin = scenario.twins["eng-standin"]
        sh(twin, f"systemctl stop {UNIT}")
        assert sh(twin, "docker ps -a --format '{{.Names}}'") == ""
        assert sh(twin, "python3 -", input=LISTENING) == "False"
        # journald files the engine's last stdout lines when it gets to them, after the stop
        # returns; once in CI `journalctl -u` had not shown the line after 15 s (late, or filed
        # without the unit: not known), so this reads the whole journal, which holds one engine.
        # On a loaded machine (four workers and other jobs on two cores) 30 s was not enough
        # once either: the wait polls, so its limit costs nothing when the line comes.
        shutdown = "INFO:     Application shutdown complete."
        harness.wait_for(
            lambda: shutdown in sh(twin, "journalctl --no-pager -o cat"),
            "the engine's shutdown line in the journal", timeout=120,
        )  # fmt: skip
        journal = sh(twin, f"journalctl -u {UNIT} --no-pager")
        assert f"{UNIT}.service: Deactivated successfully." in journal  # docker run exited 0

    def test_the_operator_needs_the_docker_group(self, scenario):
        twin = scenario.twins["eng-standin"]
        denied = twin.exec("su - spark -c 'docker ps'", check=False)
        assert denied.returncode == 1
        assert (
            "permission denied while trying to connect to the Docker daemon socket" in denied.stderr
        )

    def test_the_image_decides_flags_and_ray(self, scenario):
        twin = scenario.twins["eng-standin"]
        ambiguous = twin.exec(
            f"docker run --rm -v {MODEL}:/model:ro {SGLANG_IMAGE} python3 -m sglang.launch_server"
            " --model-path /model --cuda-graph 8",
            check=False,
        )
        assert ambiguous.returncode == 2
        assert ambiguous.stdout.splitlines()[-1] == (
            "sglang serve: error: ambiguous option: --cuda-graph could match "
            "--cuda-graph-bs, --cuda-graph-max-bs"
        )
        no_ray = twin.exec(
            "docker run --rm --entrypoint ray vllm/vllm-openai:v0.33.0 start --head", check=False
        )
        assert no_ray.returncode == 127
        assert 'exec: "ray": executable file not found in $PATH' in no_ray.stderr
