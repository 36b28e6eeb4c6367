"""
A fork's image started by its own entrypoint (engine.launch: image), end to end on a twin.
The stand-in image spark-twin/vllm-fork:mxfp4 is vLLM 0.33.0 with a fork's --mxfp4-backend
(tests/twins/standins/images.json), which no vLLM release and so no catalogue has. The
deploy warns before connecting that the image decides, then reads the image's own --help on
the Spark after the pull: a flag the image lacks is refused there before any unit changes;
without it the image's entrypoint gets the operator's arguments alone and serves.
"""

from __future__ import annotations

from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

FORK = "spark-twin/vllm-fork:mxfp4"
UNIT = "/etc/systemd/system/spark-engine-vllm.service"
MODEL_FOLDER = "/opt/models/Mistral-Small-4-119B-2603-NVFP4"
ARGS = {
    "--model": "{model}",
    "--host": "{bind}",
    "--port": "{port}",
    "--mxfp4-backend": "CUTLASS",
}
WARNED = "engine.launch image: the flags of engine.args are not checked before connecting"


def engine(**args: object) -> dict:
    return {"name": "vllm", "image": FORK, "launch": "image", "args": {**ARGS, **args}}


class TestForkImage:
    twins = {
        "fork": {
            **{key: value for key, value in harness.MODEL.items() if key != "draft_model_repo"},
            # --mxfp4-layers is a flag of the fork this image was not built with
            "engine": engine(**{"--mxfp4-layers": "moe"}),
        }
    }

    def test_a_flag_the_image_lacks_is_refused_on_the_spark_before_the_unit(self, scenario):
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode != 0
        said = run.stdout + run.stderr
        assert WARNED in said, said[-3000:]
        assert f"--mxfp4-layers: the engine in {FORK} (" in run.stderr, run.stderr[-3000:]
        assert "engine.launch image passes engine.args as written" in run.stderr
        assert "--mxfp4-backend:" not in run.stderr  # the image lists the fork's own flag
        assert scenario.twins["fork"].read(UNIT) is None

    def test_the_images_entrypoint_gets_the_operators_args_and_serves(self, scenario):
        twin = scenario.twins["fork"]
        twin.data["engine"] = engine()
        scenario.write_inventory()
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert WARNED in run.stdout + run.stderr
        assert "[fork] spark-engine-health: ready after" in run.stderr
        unit = twin.read(UNIT) or ""
        start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        expected = (
            f" {FORK} --model {MODEL_FOLDER} --host 127.0.0.1 --port 8000 --mxfp4-backend CUTLASS"
        )
        assert start.endswith(expected), start
        assert "--entrypoint" not in start
        assert "--mxfp4-backend CUTLASS" in twin.exec("pgrep -af '[m]xfp4-backend'").stdout
        assert_idempotent(scenario.deploy(env=harness.HUB_TOKEN_ENV))
