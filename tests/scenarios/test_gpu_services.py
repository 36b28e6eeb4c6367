"""
GPU services taking turns, on a twin: the engine serves after the deploy and a TTS service is
installed beside it; the operator, with only `sudo -n spark-gpu-switch`, hands the GPU to the
TTS service and back while a sampler inside the twin reads every GPU unit's state: never two
at once, exactly one at the end; a deploy while the TTS service holds the GPU leaves it there;
a service whose memory does not come back is not started; a second run changes nothing.
"""

from __future__ import annotations

from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import TOKEN_ENV, as_ops, models_answer
from tests.twins import harness

ENGINE_UNIT = "spark-engine-sglang.service"
TTS_UNIT = "spark-gpu-tts.service"
BIG_UNIT = "spark-gpu-big.service"
UNITS = (ENGINE_UNIT, TTS_UNIT, BIG_UNIT)
# A generic GPU service: a real HTTP server answering / once it listens.
TTS = {
    "name": "tts",
    "image": "debian:bookworm-slim",
    "command": ["python3", "-m", "http.server", "8880", "--bind", "127.0.0.1"],
    "port": 8880,
    "memory_gb": 1,
    "health": "/",
}
# One that needs more memory than a twin has: its memory never comes back.
BIG = {**TTS, "name": "big", "port": 8881, "memory_gb": 128,
       "command": ["python3", "-m", "http.server", "8881", "--bind", "127.0.0.1"]}  # fmt: skip
SAMPLES = "/tmp/gpu-samples"
SAMPLER = (
    "rm -f /tmp/stop-sampler; nohup sh -c 'while [ ! -e /tmp/stop-sampler ]; do "
    f'systemctl is-active {" ".join(UNITS)} | tr "\\n" " "; echo; sleep 0.1; done\''
    f" > {SAMPLES} 2>&1 &"
)


def active_units(twin: harness.Twin) -> list[str]:
    states = twin.exec(f"systemctl is-active {' '.join(UNITS)}", check=False).stdout.split()
    return [unit for unit, state in zip(UNITS, states) if state == "active"]


def sampled_switch(twin: harness.Twin, name: str):
    """Run the switch as the operator while the sampler reads the units; the samples."""
    twin.exec(SAMPLER)
    switched = as_ops(twin, f"sudo -n spark-gpu-switch {name}")
    twin.exec(f"touch /tmp/stop-sampler; sleep 0.3; cat {SAMPLES} > /dev/null")
    samples = [line.split() for line in twin.exec(f"cat {SAMPLES}").stdout.splitlines()]
    return switched, [line for line in samples if len(line) == len(UNITS)]


class TestGpuServicesTakeTurns:
    twins = {
        "gpu": {
            **harness.MODEL,
            "operator_user": "ops",
            "memory_guard_timeout": 10,
            "engine": {"name": "sglang"},
            "gpu_services": [TTS, BIG],
        }
    }
    prepare = {"gpu": "useradd --create-home --shell /bin/bash ops"}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
        twin = scenario.twins["gpu"]
        assert active_units(twin) == [ENGINE_UNIT]
        unit = twin.read(f"/etc/systemd/system/{TTS_UNIT}")
        assert f"Conflicts={ENGINE_UNIT} {BIG_UNIT}" in unit
        assert "ExecStartPre=/usr/local/sbin/spark-memory-guard 1 10" in unit
        assert TTS_UNIT in twin.read(f"/etc/systemd/system/{ENGINE_UNIT}")
        for name in ("engine", "tts", "big"):
            sudoers = f"/etc/sudoers.d/spark-deploy-gpu-{name}"
            assert twin.exec(f"visudo -cf {sudoers}", check=False).returncode == 0

    def test_the_operator_hands_the_gpu_to_the_tts_service(self, scenario):
        twin = scenario.twins["gpu"]
        switched, samples = sampled_switch(twin, "tts")
        assert switched.returncode == 0, switched.stdout + switched.stderr
        assert "tts answers / after" in switched.stdout
        assert len(samples) > 5, samples
        assert all(line.count("active") <= 1 for line in samples), samples
        assert active_units(twin) == [TTS_UNIT]
        assert twin.exec(f"systemctl is-enabled {TTS_UNIT}").stdout.strip() == "enabled"
        assert twin.exec(f"systemctl is-enabled {ENGINE_UNIT}", check=False).stdout.strip() == (
            "disabled"
        )
        status = as_ops(twin, "sudo -n spark-gpu-switch --status")
        assert status.stdout.strip() == "the GPU is with tts"

    def test_the_operator_may_do_nothing_else(self, scenario):
        twin = scenario.twins["gpu"]
        # (the engine's own sudoers lets the operator start it, which stops the service)
        for forbidden in (
            f"systemctl start {TTS_UNIT}",
            f"systemctl stop {TTS_UNIT}",
            "spark-gpu-switch ssh",
            "spark-gpu-switch tts --status",
            "true",
        ):
            assert as_ops(twin, f"sudo -n {forbidden}").returncode != 0, forbidden
        assert active_units(twin) == [TTS_UNIT]

    def test_a_deploy_leaves_the_gpu_with_the_service(self, scenario):
        twin = scenario.twins["gpu"]
        run = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(run)
        assert f"the GPU is with {TTS_UNIT}" in run.stderr, run.explain()
        assert active_units(twin) == [TTS_UNIT]

    def test_a_service_whose_memory_does_not_come_back_is_not_started(self, scenario):
        twin = scenario.twins["gpu"]
        switched, samples = sampled_switch(twin, "big")
        assert switched.returncode == 1
        assert "the memory big needs did not come back: big not started" in switched.stdout
        assert all(line.count("active") <= 1 for line in samples), samples
        assert active_units(twin) == []

    def test_and_back_to_the_engine(self, scenario):
        twin = scenario.twins["gpu"]
        switched, samples = sampled_switch(twin, "engine")
        assert switched.returncode == 0, switched.stdout + switched.stderr
        assert all(line.count("active") <= 1 for line in samples), samples
        assert active_units(twin) == [ENGINE_UNIT]
        assert "Mistral-Small-4-119B-2603-NVFP4" in models_answer(twin)
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
