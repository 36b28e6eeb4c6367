"""
The status command on a twin pair serving SGLang over the QSFP cable: after a deploy, one
SSH command per Spark (no sudo) shows the driver held, the drm override gone with its
reboot pending, the rails with MTU 9000 and a jumbo ping, the RoCE GID index, the units and
the engine ready; pyinfra's only operation judges each Spark and nothing on either twin
changes. Then drift made behind the deploy's back (engine stopped, hold released, an MTU
lowered) shows up, and the run fails naming both Sparks.
"""

from __future__ import annotations

import json

from sparkdeploy import __version__
from tests.scenarios.test_engine import pair_spark
from tests.twins import harness

NAMES = ("stat-1", "stat-2")
UNIT = "spark-engine-sglang.service"
HEADER = f"--> Status (read-only; nothing was changed; spark-deploy {__version__}):\n"
# What a read-only command must leave as it was: files the deploy manages (and their times),
# the engine unit's current run, the holds, the links, and sudo's log.
SNAPSHOT = (
    "find /etc /usr/local /opt/spark-deploy /opt/models /run/spark-deploy -xdev"
    " -printf '%p %s %m %T@\\n' 2>/dev/null | sort | sha256sum; "
    f"systemctl show -p ActiveEnterTimestamp,InvocationID,NRestarts {UNIT}; "
    "apt-mark showhold; ip -o link show | sed 's/ qdisc.*//'; "
    "journalctl -q --no-pager -t sudo | wc -l"
)


def snapshot(scenario, names: tuple[str, ...] = NAMES) -> dict[str, str]:
    return {name: scenario.twins[name].exec(SNAPSHOT).stdout for name in names}


def table(said: dict) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """The status as JSON (SPARK_STATUS_JSON): Spark -> check -> [(state, detail)]."""
    rows: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for spark, found in said["sparks"].items():
        for row in found:
            check = (
                row["check"].rstrip("0123456789 ")
                if row["check"].startswith("unit")
                else row["check"]
            )
            rows.setdefault(spark, {}).setdefault(check, []).append((row["state"], row["detail"]))
    return rows


def one(rows, spark: str, check: str) -> tuple[str, str]:
    [row] = rows[spark][check]
    return row


def run_status(
    scenario,
    names: tuple[str, ...] = NAMES,
    env: dict[str, str] | None = None,
    failing: tuple[str, ...] = (),
):
    """status.py, checked to be read-only: only the judging operation, which fails the
    ``failing`` Sparks (exit 1) and changes nothing, one SSH command per Spark, no sudo, and
    nothing on any twin (``names``) changed; the run and the status as JSON."""
    before = snapshot(scenario, names)
    where = scenario.inventory.parent / "status.json"
    where.unlink(missing_ok=True)
    run = scenario.deploy(deploy="status.py", env={**(env or {}), "SPARK_STATUS_JSON": str(where)})
    assert run.returncode == (1 if failing else 0), run.explain()
    assert run.changed() == {}, run.results
    if failing and len(failing) < len(names):  # when every Spark fails pyinfra gives no results
        assert run.errors() == {name: ["Judge the status"] for name in failing}
    assert run.remote_commands() == {name: 1 for name in names}, run.explain()
    for name in names:
        assert f"[{name}] >>> sh -c " in run.stderr  # as the SSH user: not through sudo
        assert f"[{name}] >>> sudo" not in run.stderr
    if failing:
        assert f"--> {len(failing)} Spark(s) FAILED: {', '.join(failing)}" in run.stderr
    assert snapshot(scenario, names) == before
    return run, json.loads(where.read_text())


class TestStatusOfAPair:
    twins = {name: pair_spark(node) for node, name in enumerate(NAMES, start=1)}

    def test_converge(self, scenario):
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode == 0, run.explain()

    def test_status_of_the_prepared_pair(self, scenario):
        run, said = run_status(scenario)
        print(HEADER + run.stderr.split(HEADER, 1)[1])  # the matrix, for -s
        lines = run.stderr.split(HEADER, 1)[1].splitlines()
        assert lines[0].split() == ["CHECK", *NAMES]
        assert lines[1].split() == ["gpu", "ok", "ok"]
        rows = table(said)
        assert list(rows) == list(NAMES)
        for node, name in enumerate(NAMES, start=1):
            assert one(rows, name, "gpu") == ("ok", "NVIDIA GB10, 41 C")
            assert one(rows, name, "driver") == (
                "ok",
                "580.95.05, nvidia-driver-580-open 580.95.05-0ubuntu1 held",
            )
            state, detail = one(rows, name, "drm override")
            assert state == "WARN"  # removed by the deploy, the twin not rebooted yet
            assert detail.startswith("absent; REBOOT PENDING: /etc/modprobe.d/")
            state, detail = one(rows, name, "memory")
            assert state == "ok" and detail.endswith("GiB, guard 1 GiB")
            for number, (rail, peer) in enumerate(
                zip(harness.qsfp_plan(node), harness.qsfp_plan(3 - node)), start=1
            ):
                peer_ip = peer["address"].split("/")[0]
                assert one(rows, name, f"rail {number}") == (
                    "ok",
                    f"{rail['interface']} {rail['address']}, MTU 9000, up, 8972-byte "
                    f"don't-fragment ping to {peer_ip} ok",
                )
            assert one(rows, name, "roce gid") == (
                "ok",
                "index 3 on rocep1s0f0 (enp1s0f0np0), roceP2p1s0f0 (enP2p1s0f0np0)",
            )
            state, detail = one(rows, name, "unit")
            assert state == "ok" and detail.startswith(f"{UNIT} active, enabled, since ")
        assert one(rows, "stat-1", "engine") == (
            "ok",
            "ready, serving Mistral-Small-4-119B-2603-NVFP4 on 127.0.0.1:30000",
        )
        assert one(rows, "stat-2", "engine") == ("-", "rank 1 of 2: the head serves the API")
        verdict = "2 Spark(s): WARN on 2 Sparks (stat-1: drm override; stat-2: drm override)"
        assert said["verdict"] == verdict and said["fail"] == []
        assert run.stderr.rstrip().endswith(verdict)

    def test_status_shows_drift(self, scenario):
        head, worker = (scenario.twins[name] for name in NAMES)
        head.exec(f"systemctl stop {UNIT}")
        worker.exec("apt-mark unhold nvidia-driver-580-open >/dev/null")
        worker.exec(f"ip link set {harness.RAILS[1]} mtu 1500")  # behind NetworkManager's back
        run, said = run_status(scenario, failing=NAMES)
        rows = table(said)
        assert said["fail"] == list(NAMES)
        diagnose = f"SPARK_INVENTORY={scenario.inventory} pyinfra -y inventory.py diagnose.py"
        assert f"explained by: {diagnose} --limit stat-1" in run.stderr
        state, detail = one(rows, "stat-1", "unit")
        assert state == "FAIL" and detail.startswith(f"{UNIT} inactive, enabled, last active ")
        state, detail = one(rows, "stat-1", "engine")
        assert state == "FAIL"
        assert detail.startswith("not ready: http://127.0.0.1:30000/v1/models curl: (7)")
        assert one(rows, "stat-2", "driver") == (
            "WARN",
            "580.95.05, nvidia-driver-580-open 580.95.05-0ubuntu1 NOT held (the deploy holds it)",
        )
        state, detail = one(rows, "stat-2", "rail 2")
        assert state == "FAIL" and "MTU 1500" in detail and "not as configured" in detail
        state, detail = one(rows, "stat-1", "rail 2")
        assert state == "FAIL" and "ping to 192.168.101.2 FAILED" in detail
        assert one(rows, "stat-1", "rail 1")[0] == "ok"
