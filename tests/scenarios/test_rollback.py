"""
Upgrades that roll back, on a twin: the engine serves; an upgrade to a nightly that crashes
while loading fails the run with that nightly's diagnosis while the configuration that served
before serves again (asserted through the API); the same bad inventory fails the same way and
the Spark still serves; the good inventory again changes nothing; status shows the rollback.
"""

from __future__ import annotations

from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_engine import TOKEN_ENV, UNIT, UNIT_FILE, models_answer, state
from tests.scenarios.test_status import run_status, table
from tests.twins import harness

# A regressed nightly (tests/twins/standins/images.json): it dies loading the model.
BAD_IMAGE = "lmsysorg/sglang:nightly-dev-cu13-20260401-0badc0de"
BAD = {"name": "sglang", "image": BAD_IMAGE, "version": "0.5.10"}
CRASH = "no kernel image is available for execution on the device"
MODEL_ID = '"id": "Mistral-Small-4-119B-2603-NVFP4"'


def chat(twin: harness.Twin) -> str:
    """A one-token chat completion through the API, from inside the twin."""
    probe = (
        "import json, urllib.request as u\n"
        "body = json.dumps({'model': 'Mistral-Small-4-119B-2603-NVFP4', 'max_tokens': 1,\n"
        "                   'messages': [{'role': 'user', 'content': 'hi'}]}).encode()\n"
        "request = u.Request('http://127.0.0.1:30000/v1/chat/completions', data=body,\n"
        "                    headers={'Content-Type': 'application/json'})\n"
        "print(u.urlopen(request, timeout=10).read().decode())\n"
    )
    done = twin.exec("python3 -", input=probe, check=False)
    return done.stdout if done.returncode == 0 else done.stderr


def serving(twin: harness.Twin) -> bool:
    return state(twin) == "active" and MODEL_ID in models_answer(twin)


class TestUpgradeThatRollsBack:
    twins = {"rb": {**harness.MODEL, "engine": {"name": "sglang"}}}

    def test_converge_keeps_the_healthy_configuration(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "[rb] spark-engine-rollback: kept as the last good configuration" in run.stderr
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))

    def test_a_crashing_upgrade_rolls_back_and_fails_with_its_diagnosis(self, scenario):
        twin = scenario.twins["rb"]
        good_unit = twin.read(UNIT_FILE)
        twin.data["engine"] = BAD
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0
        assert f"{UNIT} did not become healthy" in run.stderr, run.explain()
        assert CRASH in run.stderr and "no-kernel-image-sm121" in run.stderr
        assert "Rolled back" in run.stderr and "healthy and serving again" in run.stderr
        # The configuration that served before serves again, through the API.
        assert twin.read(UNIT_FILE) == good_unit and BAD_IMAGE not in good_unit
        assert serving(twin)
        assert '"choices"' in chat(twin)

    def test_the_same_bad_inventory_fails_the_same_way_and_the_spark_still_serves(self, scenario):
        twin = scenario.twins["rb"]
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0
        assert CRASH in run.stderr and "Rolled back" in run.stderr, run.explain()
        assert serving(twin) and '"choices"' in chat(twin)

    def test_status_shows_the_rollback(self, scenario):
        [(state, detail)] = table(run_status(scenario, ("rb",))[1])["rb"]["config"]
        assert state == "ok", detail
        assert "live = last good" in detail and "rolled back" in detail
        assert "no-kernel-image-sm121" in detail and "healthy again" in detail

    def test_the_good_inventory_again_changes_nothing(self, scenario):
        twin = scenario.twins["rb"]
        twin.data["engine"] = {"name": "sglang"}
        scenario.write_inventory()
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
        assert serving(twin)


class TestRollbackOff:
    """engine.rollback: false keeps a failed start as it is (the run fails, nothing serves)."""

    twins = {"rb-off": {**harness.MODEL, "engine": {"name": "sglang", "rollback": False}}}

    def test_a_crashing_upgrade_stays_failed(self, scenario):
        twin = scenario.twins["rb-off"]
        assert scenario.deploy(env=TOKEN_ENV).returncode == 0
        twin.data["engine"] = {**BAD, "rollback": False}
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0 and CRASH in run.stderr, run.explain()
        assert "Rolled back" not in run.stderr
        assert BAD_IMAGE in twin.read(UNIT_FILE)
        assert not serving(twin)
