"""The status fact's command and parsing (on its documented sample), each row of the table
from settings, plan and status, and the table itself."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pyinfra.context import ctx_state

from sparkdeploy import __version__
from sparkdeploy.config.paths import DRM_OVERRIDE_CONF
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.engine_plan.plan import EnginePlan, plan_sparks
from sparkdeploy.facts.status import Api, SparkStatus, Status, parse_api
from sparkdeploy.facts.store import run_store
from sparkdeploy.render import aligned
from sparkdeploy.reports.status import (
    FAIL,
    JSON_ENV,
    NONE,
    OK,
    STATUS,
    WARN,
    Row,
    check_order,
    explained_by,
    format_status,
    labels,
    release_row,
    report,
    status_json,
    status_rows,
    verdict,
)
from tests.twins import harness
from tests.unit.operations import spark
from tests.unit.samples import docstring_sample

SAMPLE = docstring_sample(SparkStatus)
MODEL_ID = "Mistral-Small-4-119B-2603-NVFP4"
UNIT = "spark-engine-sglang.service"


def sparks(**keys) -> dict[str, SparkSettings]:
    """A pair with QSFP rails and SGLang across both, as the twins have it."""
    return {
        name: SparkSettings.model_validate(
            {
                "ssh_host": f"{name}.local",
                "ssh_user": "nvidia",
                "sysfs_root": "/sys",
                "qsfp": harness.qsfp_plan(node),
                "engine": {"name": "sglang"},
                **harness.MODEL,
                **keys,
            }
        )
        for node, name in ((1, "spark-1"), (2, "spark-2"))
    }


PAIR = sparks()
TOPOLOGY = Topology.of(PAIR)
PLANS, _, _ = plan_sparks(PAIR, TOPOLOGY)


def status(lines=SAMPLE, drop: str = "", add: tuple[str, ...] = ()) -> Status:
    kept = [line for line in lines if not (drop and line.startswith(drop))]
    return SparkStatus().process([*kept, *add])


def rows_of(
    state: Status,
    name: str = "spark-1",
    plan: EnginePlan | None = None,
    spark: SparkSettings | None = None,
) -> dict[str, list[Row]]:
    """The head's rows by check (rails and units can have several)."""
    rails = Topology.of({**PAIR, name: spark or PAIR[name]})[name].rails
    found: dict[str, list[Row]] = {}
    chosen = plan if plan is not None else PLANS[name]
    for row in status_rows(spark or PAIR[name], chosen, rails, state):
        found.setdefault(row.check, []).append(row)
    return found


def only(rows: dict[str, list[Row]], check: str) -> Row:
    [row] = rows[check]
    return row


def test_sample_parses():
    parsed = status()
    assert parsed.preflight.gpu_name == "NVIDIA GB10"
    assert parsed.preflight.driver == "580.95.05"
    assert parsed.preflight.drm_override is False
    assert parsed.preflight.reboot_pending.startswith(f"{DRM_OVERRIDE_CONF} was removed")
    assert parsed.packages == {"nvidia-driver-580-open": "580.95.05-0ubuntu1"}
    assert parsed.holds == {"nvidia-driver-580-open"}
    assert parsed.temperature == "41"
    assert parsed.units == {
        UNIT: {
            "ActiveState": "active",
            "UnitFileState": "enabled",
            "ActiveEnterTimestamp": "Tue 2026-03-24 10:12:03 UTC",
        }
    }
    assert parsed.api == Api(0, (MODEL_ID,), "")
    assert parsed.network.links["enp1s0f0np0"].mtu == 9000
    assert parsed.network.links["enP2p1s0f0np0"].mtu == 1500
    assert parsed.network.pings[("enp1s0f0np0", "192.168.100.2")].ok
    assert not parsed.network.pings[("enP2p1s0f0np0", "192.168.101.2")].ok
    assert [gid.index for gid in parsed.network.gids] == [3, 3]


def test_api_answers_and_failures():
    assert parse_api('0 {"object":"list","data":[{"id":"a"},{"id":"b"}]}').models == ("a", "b")
    refused = parse_api("7 curl: (7) Failed to connect to 127.0.0.1 port 30000 after 0 ms")
    assert refused.status == 7 and refused.models == ()
    assert "Failed to connect" in refused.detail
    assert parse_api("0 <html>").detail == "not a model list: <html>"


def test_command_reads_only_what_the_spark_has():
    fact = SparkStatus()
    alone = fact.command(
        model_dir="/opt/models",
        units=[],
        api_url="",
        interfaces=[],
        pings=[],
        sysfs_root="/sys",
        env_file="/etc/spark-deploy/nccl.env",
    )
    assert "curl" not in alone and "systemctl show" not in alone
    assert "ip -o link" not in alone and "ping" not in alone
    assert "sudo" not in alone
    assert "nvidia-smi --query-gpu=temperature.gpu --format=csv,noheader" in alone
    served = fact.command(
        model_dir="/opt/models",
        units=[UNIT, "spark-engine-sglang-worker.service"],
        api_url="http://127.0.0.1:30000/v1/models",
        interfaces=["enp1s0f0np0"],
        pings=[("enp1s0f0np0", "192.168.100.2", 8972)],
        sysfs_root="/sys",
        env_file="/etc/spark-deploy/nccl.env",
    )
    assert served.count("systemctl show -p ActiveState,UnitFileState,ActiveEnterTimestamp") == 2
    assert "curl -sS -f -m 5 http://127.0.0.1:30000/v1/models" in served
    assert "ping -n -q -c 2 -i 0.05 -W 1 -M do -s 8972 -I enp1s0f0np0 192.168.100.2" in served


def test_head_rows_from_the_sample():
    rows = rows_of(status())
    assert only(rows, "gpu") == Row("gpu", OK, "NVIDIA GB10, 41 C")
    assert only(rows, "driver") == Row(
        "driver", OK, "580.95.05, nvidia-driver-580-open 580.95.05-0ubuntu1 held"
    )
    drm = only(rows, "drm override")
    assert drm.state == WARN and "REBOOT PENDING" in drm.detail
    assert only(rows, "memory") == Row(
        "memory", OK, "MemAvailable 113.7 of 119.7 GiB, guard 70 GiB"
    )
    rail_1, rail_2 = rows["rail 1"][0], rows["rail 2"][0]
    assert rail_1 == Row(
        "rail 1",
        OK,
        "enp1s0f0np0 192.168.100.1/24, MTU 9000, up, "
        "8972-byte don't-fragment ping to 192.168.100.2 ok",
    )
    assert rail_2.state == FAIL
    assert "MTU 1500" in rail_2.detail and "not as configured" in rail_2.detail
    assert "ping to 192.168.101.2 FAILED (ping: local error: message too long" in rail_2.detail
    assert only(rows, "roce gid") == Row(
        "roce gid", OK, "index 3 on rocep1s0f0 (enp1s0f0np0), roceP2p1s0f0 (enP2p1s0f0np0)"
    )
    assert only(rows, "unit") == Row(
        "unit", OK, f"{UNIT} active, enabled, since Tue 2026-03-24 10:12:03 UTC"
    )
    assert only(rows, "engine") == Row(
        "engine", OK, f"ready, serving {MODEL_ID} on 127.0.0.1:30000"
    )


def test_rows_come_in_the_deploys_order():
    checks = [
        row.check
        for row in status_rows(
            PAIR["spark-1"], PLANS["spark-1"], TOPOLOGY["spark-1"].rails, status()
        )
    ]
    assert checks == [
        "gpu",
        "driver",
        "drm override",
        "memory",
        "rail 1",
        "rail 2",
        "roce gid",
        "link test",
        "unit",
        "engine",
    ]


def test_worker_has_no_api_row_of_its_own():
    engine = only(rows_of(status(drop="api="), name="spark-2"), "engine")
    assert engine == Row("engine", NONE, "rank 1 of 2: the head serves the API")


def test_drift_is_flagged():
    loose = only(rows_of(status(drop="hold ")), "driver")
    assert loose.state == WARN and "NOT held" in loose.detail
    present = only(rows_of(status(drop="drm_override=", add=("drm_override=1",))), "drm override")
    assert present.state == WARN and present.detail.startswith(f"{DRM_OVERRIDE_CONF} present")
    low = only(
        rows_of(status(drop="mem_available_kb=", add=("mem_available_kb=52428800",))), "memory"
    )
    assert low == Row(
        "memory",
        WARN,
        "MemAvailable 50.0 of 119.7 GiB, guard 70 GiB: an engine start would wait for the guard",
    )
    stopped = status(drop=f"unit.{UNIT}=ActiveState", add=(f"unit.{UNIT}=ActiveState=failed",))
    unit = only(rows_of(stopped), "unit")
    assert unit.state == FAIL and unit.detail.startswith(f"{UNIT} failed, enabled, last active")


def test_a_590_driver_fails_with_the_refusal():
    other = status(drop="pkg ", add=("pkg nvidia-driver-590-open 590.44.01-0ubuntu1",))
    driver = only(rows_of(other), "driver")
    assert driver.state == FAIL and "driver branch 580 is required" in driver.detail


def test_engine_not_ready_or_serving_another_model():
    refused = status(
        drop="api=",
        add=(
            "api=7 curl: (7) Failed to connect to 127.0.0.1 port "
            "30000 after 0 ms: Couldn't connect to server",
        ),
    )
    engine = only(rows_of(refused), "engine")
    assert engine.state == FAIL
    assert engine.detail.startswith("not ready: http://127.0.0.1:30000/v1/models curl: (7)")
    other = status(drop="api=", add=('api=0 {"data":[{"id":"other-model"}]}',))
    assert only(rows_of(other), "engine") == Row(
        "engine", FAIL, f"http://127.0.0.1:30000/v1/models lists other-model, not {MODEL_ID}"
    )


def test_gid_index_that_moved_fails():
    moved = [line.replace("/3:", "/5:") if line.startswith("gid=") else line for line in SAMPLE]
    gid = only(rows_of(status(moved)), "roce gid")
    assert gid.state == FAIL
    assert "is at index 5 on rocep1s0f0 port 1, not 3 (roce_gid_index)" in gid.detail
    assert "\n" not in gid.detail  # the table behind it is left to the deploy's message
    auto = sparks(roce_gid_index="auto")["spark-1"]
    assert only(rows_of(status(moved), spark=auto), "roce gid").detail.startswith("index 5 on")


def test_missing_interface_fails():
    gone = status(drop="link=5:")
    assert rows_of(gone)["rail 2"] == [Row("rail 2", FAIL, "enP2p1s0f0np0: no such interface")]


def test_every_unit_of_the_plan_gets_a_row():
    @dataclasses.dataclass(frozen=True)
    class TwoUnits(EnginePlan):
        @property
        def units(self) -> tuple[str, ...]:
            return (self.unit, "spark-engine-sglang-ray.service")

    plan = TwoUnits(
        **{f.name: getattr(PLANS["spark-1"], f.name) for f in dataclasses.fields(EnginePlan)}
    )
    units = rows_of(status(), plan=plan)["unit"]
    assert [row.state for row in units] == [OK, FAIL]
    assert (
        units[1].detail
        == "spark-engine-sglang-ray.service unknown, not installed, last active never"
    )


def test_a_spark_without_engine_or_rails():
    alone = SparkSettings(ssh_host="x", ssh_user="nvidia")
    rows = status_rows(alone, None, (), status())
    assert [row.check for row in rows] == ["gpu", "driver", "drm override", "memory", "engine"]
    assert rows[-1] == Row("engine", NONE, "none (no engine: in the inventory)")


def test_one_spark_all_ok_is_a_column_and_a_verdict():
    assert format_status({"spark-1": [Row("gpu", OK, "x"), Row("engine", NONE, "none")]}) == (
        f"--> Status (read-only; nothing was changed; spark-deploy {__version__}):\n"
        "    CHECK   spark-1\n"
        "    gpu     ok\n"
        "    engine  -\n"
        "    1 Spark(s): all ok"
    )


def test_pair_matrix_then_what_is_not_ok_each_fail_with_its_command():
    text = format_status(
        {
            "spark-1": [Row("gpu", OK, "NVIDIA GB10, 41 C"), Row("memory", WARN, "low")],
            "spark-2": [Row("gpu", FAIL, "no GPU"), Row("rail 1", FAIL, "DOWN")],
        }
    )
    assert text.splitlines() == [
        f"--> Status (read-only; nothing was changed; spark-deploy {__version__}):",
        "    CHECK   spark-1  spark-2",
        "    gpu     ok       FAIL",
        "    rail 1           FAIL",
        "    memory  WARN",
        "",
        "    SPARK    CHECK   STATE  DETAIL",
        "    spark-1  memory  WARN   low",
        "    spark-2  gpu     FAIL   no GPU",
        "                            explained by: pyinfra -y inventory.py diagnose.py --limit "
        "spark-2",
        "    spark-2  rail 1  FAIL   DOWN",
        "                            explained by: on the Spark: nmcli -f NAME,DEVICE,STATE "
        "connection show; ip -br addr; rdma link",
        "    2 Spark(s): FAIL on 1 Spark (spark-2: gpu, rail 1), WARN on 1 Spark (spark-1: memory)",
    ]


EIGHT = {
    f"spark-{n}": [
        Row("gpu", OK, "NVIDIA GB10"),
        Row("unit", OK, "spark-engine-vllm.service active"),
        Row("unit", FAIL if n == 8 else OK, "spark-engine-vllm-ray.service inactive"),
        Row("engine", OK if n == 1 else NONE, "ready" if n == 1 else f"rank {n - 1} of 8"),
    ]
    for n in range(1, 9)
}


def test_eight_sparks_are_eight_columns_with_only_the_failure_detailed():
    lines = format_status(EIGHT).splitlines()
    assert lines[1].split() == ["CHECK", *(f"spark-{n}" for n in range(1, 9))]
    assert lines[2].split() == ["gpu", *["ok"] * 8]
    assert lines[3].split() == ["unit", "1", *["ok"] * 8]
    assert lines[4].split() == ["unit", "2", *["ok"] * 7, "FAIL"]
    assert lines[5].split() == ["engine", "ok", *["-"] * 7]
    assert lines[7].split()[:4] == ["SPARK", "CHECK", "STATE", "DETAIL"]
    assert "spark-8  unit 2  FAIL   spark-engine-vllm-ray.service inactive" in lines[8]
    assert lines[9].strip() == ("explained by: pyinfra -y inventory.py diagnose.py --limit spark-8")
    assert lines[-1] == "    8 Spark(s): FAIL on 1 Spark (spark-8: unit 2)"
    assert max(len(line) for line in lines[:6]) < 100  # eight columns fit a terminal


def test_a_check_only_some_sparks_have_follows_its_place():
    sections = {
        "a": [Row("gpu", OK, ""), Row("engine", OK, "")],
        "b": [Row("gpu", OK, ""), Row("rail 1", OK, ""), Row("engine", NONE, "")],
    }
    assert check_order(sections) == ["gpu", "rail 1", "engine"]
    assert labels([Row("unit", OK, ""), Row("gpu", OK, ""), Row("unit", OK, "")]) == [
        "unit 1",
        "gpu",
        "unit 2",
    ]


def test_json_has_every_row_the_failed_sparks_and_their_commands():
    said = json.loads(status_json(EIGHT))
    assert list(said["sparks"]) == list(EIGHT)
    assert said["sparks"]["spark-1"][0] == {"check": "gpu", "state": "ok", "detail": "NVIDIA GB10"}
    [failed] = [row for row in said["sparks"]["spark-8"] if row["state"] == FAIL]
    assert failed["check"] == "unit 2"
    assert failed["explained_by"] == "pyinfra -y inventory.py diagnose.py --limit spark-8"
    assert said["fail"] == ["spark-8"] and said["warn"] == []
    assert said["verdict"] == "8 Spark(s): FAIL on 1 Spark (spark-8: unit 2)"


def test_each_failing_check_names_the_command_that_explains_it():
    assert explained_by("link test", "s") == "pyinfra -y inventory.py linktest.py"
    assert explained_by("rail 2", "s").startswith("on the Spark: nmcli")
    assert explained_by("roce gid", "s").startswith("on the Spark: nmcli")
    assert explained_by("driver", "s").startswith("pyinfra inventory.py deploy.py --limit s --dry")
    assert explained_by("status", "s") == "pyinfra -y inventory.py status.py --limit s -v"
    for check in ("gpu", "unit 1", "engine", "config", "gpu holder"):
        assert explained_by(check, "s") == "pyinfra -y inventory.py diagnose.py --limit s"


@pytest.mark.parametrize(
    "rows, text",
    [
        ([], ""),
        ([("a", "bb"), ("ccc", "d")], "a    bb\nccc  d"),
    ],
)
def test_aligned(rows, text):
    assert aligned(rows) == text


def test_the_run_prints_the_matrix_and_writes_the_json_where_asked(tmp_path, monkeypatch):
    host = spark(**harness.MODEL, engine={"name": "sglang"})
    run_store(host.state).results[(host.name, STATUS)] = status()
    where = tmp_path / "status.json"
    monkeypatch.setenv(JSON_ENV, str(where))
    with ctx_state.use(host.state):
        text = report()
    said = json.loads(where.read_text())
    assert list(said["sparks"]) == [host.name]
    assert text.splitlines()[1].split() == ["CHECK", host.name]
    assert text.splitlines()[-1] == f"    {said['verdict']}"


def test_the_release_row_compares_the_sparks_managed_header_with_this_laptops():
    """The memory guard's header names the release that deployed the Spark (render.STAMP)."""
    ours = status(add=(f"release=# Managed by spark-deploy {__version__}",))
    assert ours.release == __version__
    [row] = release_row(ours)
    assert (row.state, row.detail) == (
        OK,
        f"deployed by spark-deploy {__version__}, as this laptop's",
    )
    older = status(add=("release=# Managed by spark-deploy 0.0.9",))
    [row] = release_row(older)
    assert row.state == WARN and row.detail.startswith(
        f"deployed by spark-deploy 0.0.9; this laptop has {__version__}: "
    )
    assert status(add=("release=unstamped",)).release == "before 0.1.0"
    assert status(add=("release=# Managed by spark-deploy: x",)).release == "before 0.1.0"
    [never] = release_row(status(add=("release=",)))
    assert never.state == NONE and "not deployed yet" in never.detail
    assert release_row(status()) == []  # not asked: no row
    alone = SparkSettings(ssh_host="x", ssh_user="nvidia")
    rows = status_rows(alone, None, (), ours)
    assert [row.check for row in rows][-2:] == ["engine", "release"]


def test_the_release_line_reads_the_header_of_the_guard_every_deploy_writes():
    from sparkdeploy.config.paths import MEMORY_GUARD
    from sparkdeploy.facts.status import release_line

    line = release_line()
    assert line.startswith("printf 'release=%s\\n'") and MEMORY_GUARD in line
    assert "'^# Managed by spark-deploy'" in line


def test_the_header_and_json_name_this_laptops_release():
    assert format_status(EIGHT).splitlines()[0] == (
        f"--> Status (read-only; nothing was changed; spark-deploy {__version__}):"
    )
    assert json.loads(status_json(EIGHT))["version"] == __version__


def test_the_summary_counts_sparks_and_names_their_checks():
    """ "2 Spark(s): 2 FAIL (spark-a: unit, engine)" read as two Sparks failed (operator
    session): the counts are of Sparks, the checks are named."""
    sections = {
        "spark-a": [Row("unit", FAIL, "x"), Row("engine", FAIL, "y")],
        "spark-b": [Row("drm override", WARN, "z"), Row("engine", NONE, "")],
    }
    assert verdict(sections) == (
        "2 Spark(s): FAIL on 1 Spark (spark-a: unit, engine), WARN on 1 Spark (spark-b: drm override)"
    )
    both = {name: [Row("gpu", FAIL, "")] for name in ("a", "b", "c")}
    assert verdict(both) == "3 Spark(s): FAIL on 3 Sparks (a: gpu; b: gpu; c: gpu)"
