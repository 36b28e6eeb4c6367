"""
Diagnosis on a twin: the engine stand-in crashes with a known GB10 failure line; the deploy
fails, without a traceback, with a block naming the cause, the fix and the next command;
then `pyinfra inventory.py diagnose.py` names the signature, its rule, cause and fix after
the results, with one SSH command and nothing changed on the twin, and exits 1 naming the
Spark (its unit is stopped with a known failure). Once the engine
runs clean, the diagnosis says that nothing matched and shows the last lines.
"""

from __future__ import annotations

from tests.scenarios.test_engine import models_answer, state, wait_for
from tests.twins import harness

UNIT = "spark-engine-sglang.service"
CRASH = "RuntimeError: Unsupported architecture for sparse decode fwd"
FAIL_FILE = "/etc/spark-twin/engine-fail"
# What a diagnosis must leave as it was: the deploy's files, the unit's state and its journal.
SNAPSHOT = (
    "find /etc/spark-deploy /etc/systemd/system /etc/sudoers.d /usr/local/sbin -type f "
    "-exec sha256sum {} + | sort; "
    f"systemctl show {UNIT} -p ActiveState,SubState,NRestarts,InvocationID; "
    f"journalctl -u {UNIT} -q -o cat | wc -l"
)


def snapshot(twin: harness.Twin) -> str:
    return twin.exec(SNAPSHOT).stdout


class TestDiagnose:
    twins = {"diag-1": {**harness.MODEL, "engine": {"name": "sglang"}}}
    prepare = {"diag-1": f"echo '{CRASH}' > {FAIL_FILE}"}

    def test_deploy_fails_on_the_crash(self, scenario):
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode != 0
        assert f"{UNIT} did not become healthy" in run.stderr, run.explain()
        assert "Traceback" not in run.stderr and "Unexpected error" not in run.stderr
        block = run.stderr[run.stderr.index("--> diag-1 FAILED: health check: ") :]
        assert f"health check: {UNIT} did not become healthy" in block
        assert "    cause  flashmla-sm100-only" in block and f"Seen: {CRASH}" in block
        assert "    fix    There is no flag around it" in block
        # the run's inventory is not the default one: the command names it (as pasted, it works)
        next_command = f"SPARK_INVENTORY={scenario.inventory} pyinfra -y inventory.py diagnose.py"
        assert f"    next   {next_command} --limit diag-1" in block
        assert f"journalctl -u {UNIT} -n 300" in block
        assert "--> 1 Spark(s) FAILED: diag-1" in block

    def test_diagnosis_names_the_signature_and_changes_nothing(self, scenario):
        twin = scenario.twins["diag-1"]
        twin.exec(f"systemctl stop {UNIT}")  # no restart between the snapshots
        before = snapshot(twin)
        run = scenario.deploy(deploy="diagnose.py")
        print(run.stderr)
        # the unit is stopped with a known failure in its journal: the Spark FAILs, and with
        # its only Spark failed pyinfra stops before its results (and its JSON)
        assert run.returncode == 1, run.explain()
        assert run.changed() == {}
        assert run.remote_commands() == {"diag-1": 1}
        assert "Traceback" not in run.stderr
        block = run.stderr[run.stderr.index(f"--> diag-1 FAILED: {UNIT}: inactive (dead") :]
        assert "    cause  flashmla-sm100-only" in block
        assert f"    next   journalctl -u {UNIT} -n 300" in block
        assert "--> 1 Spark(s) FAILED: diag-1" in block
        report = run.stderr[run.stderr.index("--> Beginning operation run...") :]
        assert f"[diag-1] Diagnosis of {UNIT}: inactive (dead" in report
        assert "rule id  flashmla-sm100-only" in report
        assert f"seen     {CRASH}" in report
        assert "cause    FlashMLA's sparse decode kernel" in report
        assert "fix      There is no flag around it" in report
        assert snapshot(twin) == before

    def test_clean_engine_matches_nothing(self, scenario):
        twin = scenario.twins["diag-1"]
        twin.exec(
            f"rm -f {FAIL_FILE} && journalctl --rotate -q && journalctl --vacuum-time=1s -q"
            f" && systemctl start {UNIT}"
        )
        wait_for(lambda: models_answer(twin), "the engine to serve")
        run = scenario.deploy(deploy="diagnose.py")
        print(run.stderr)
        assert run.returncode == 0, run.explain()
        assert state(twin) == "active"
        report = run.stderr[run.stderr.index("--> Results:") :]
        assert f"[diag-1] Diagnosis of {UNIT}: active (running) since" in report
        assert "no known GB10 failure signature in its last" in report
        assert "        | [" in report and "The server is fired up and ready to roll!" in report
