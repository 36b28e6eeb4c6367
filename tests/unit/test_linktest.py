"""The link test: bus bandwidth as nccl-tests computes it, the verdict and memory sizing of
files/spark-link-test, the `docker run` each Spark runs (2 and 3 Sparks), the facts' parsing,
the stored result written atomically, the rail link-speed judgement and the status row."""

from __future__ import annotations

import dataclasses
import json
import stat
import subprocess
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkdeploy.config.paths import CONTAINER_ENV, HF_ENV_FILE, LINK_TEST, NCCL_ENV
from sparkdeploy.config.spark import SparkSettings, size_bytes
from sparkdeploy.config.topology import Topology
from sparkdeploy.engine_plan.linktest import (
    DEFAULT_RDMA_OPTIONS,
    group_problems,
    link_test_run,
    rdma_options,
)
from sparkdeploy.engine_plan.plan import EnginePlan, plan_sparks
from sparkdeploy.facts.linktest import (
    LinkTestReady,
    LinkTestRun,
    RunOutput,
    parse_result,
    store_lines,
)
from sparkdeploy.facts.status import SparkStatus
from sparkdeploy.reports.linktest import (
    FAIL,
    NONE,
    OK,
    WARN,
    SparkRun,
    format_report,
    judge,
    rail_speed,
    status_detail,
    verdict_line,
)
from tests.twins import harness
from tests.unit.samples import docstring_sample

ROOT = Path(__file__).resolve().parents[2]
LOADER = SourceFileLoader(
    "spark_link_test", str(ROOT / "sparkdeploy" / "files" / "spark-link-test")
)
SPEC = spec_from_loader(LOADER.name, LOADER)
assert SPEC is not None
script = module_from_spec(SPEC)
LOADER.exec_module(script)
GIB = 1024**3


def sparks(count: int, **keys) -> dict[str, SparkSettings]:
    return {
        f"spark-{node}": SparkSettings.model_validate(
            {
                "ssh_host": f"spark-{node}.local",
                "ssh_user": "nvidia",
                "qsfp": harness.qsfp_plan(node),
                "engine": {"name": "sglang"},
                **harness.MODEL,
                **keys,
            }
        )
        for node in range(1, count + 1)
    }


PAIR = sparks(2)
PAIR_TOPOLOGY = Topology.of(PAIR)
PAIR_PLANS, _, _ = plan_sparks(PAIR, PAIR_TOPOLOGY)
TRIO = sparks(3)
TRIO_TOPOLOGY = Topology.of(TRIO)


def trio_plan(name: str) -> EnginePlan:
    """A three-Spark plan: the pair's, with this Spark's place (planning N Sparks is another
    part of the issue; the link test reads only image, name, docker_args of a plan)."""
    place = TRIO_TOPOLOGY[name]
    plan = PAIR_PLANS["spark-1"]
    assert plan is not None
    return dataclasses.replace(plan, nodes=place.nodes, rank=place.rank)


def result_record(**changes) -> dict:
    record = {
        "when": "2026-11-23T10:00:00Z",
        "passed": True,
        "verdict": "all-gather bus bandwidth 23.410 GB/s at 16G >= 21.875 GB/s",
        "nodes": 2,
        "rank": 0,
        "min_busbw": 21.875,
        "requested": 16 * GIB,
        "results": [
            {"op": "all_gather", "size": GIB, "algbw": 44.0, "busbw": 22.0, "time_us": 24403.0},
            {"op": "all_reduce", "size": GIB, "algbw": 22.0, "busbw": 22.0, "time_us": 48806.0},
            {"op": "all_gather", "size": 16 * GIB, "algbw": 46.82, "busbw": 23.41, "time_us": 1},
        ],
        "skipped": [],
    }
    return {**record, **changes}


# --- bus bandwidth, verdict and memory sizing (files/spark-link-test) -----------------------


def test_bus_bandwidth_is_nccl_tests_formula():
    # 16 GiB gathered in one second by 2 ranks: algbw 17.18 GB/s, busbw half of it.
    algbw, busbw = script.bandwidths("all_gather", 16 * GIB, 1.0, 2)
    assert algbw == pytest.approx(17.179869184)
    assert busbw == pytest.approx(algbw / 2)
    algbw, busbw = script.bandwidths("all_reduce", 16 * GIB, 1.0, 2)
    assert busbw == pytest.approx(algbw)  # 2(n-1)/n = 1 for two ranks
    _, gather8 = script.bandwidths("all_gather", 10**9, 1.0, 8)
    _, reduce8 = script.bandwidths("all_reduce", 10**9, 1.0, 8)
    assert (gather8, reduce8) == (pytest.approx(7 / 8), pytest.approx(14 / 8))
    with pytest.raises(ValueError):
        script.bus_factor("broadcast", 2)
    with pytest.raises(ValueError):
        script.bandwidths("all_gather", GIB, 0.0, 2)


def test_verdict_is_the_largest_all_gather_against_the_threshold():
    rows = result_record()["results"]
    assert script.verdict(rows, 21.875, 16 * GIB) == (
        True,
        "all-gather bus bandwidth 23.410 GB/s at 16G >= 21.875 GB/s",
    )
    passed, text = script.verdict(rows, 25.0, 16 * GIB)
    assert not passed and "23.410 GB/s at 16G < 25 GB/s" in text
    passed, text = script.verdict(rows[:2], 21.875, 16 * GIB)
    assert passed and "at 1G (sized down from 16G" in text
    assert script.verdict([], 21.875, GIB) == (False, "no all-gather size was run")


def test_sizes_are_skipped_when_they_would_leave_memavailable_under_the_floor():
    sizes = [GIB, 4 * GIB, 16 * GIB]
    # 16G on two Sparks holds 16 GiB + 8 GiB at once.
    assert script.buffer_bytes(16 * GIB, 2) == 24 * GIB
    assert script.largest_fitting(sizes, 2, 120 * GIB, 8 * GIB) == 16 * GIB
    assert script.largest_fitting(sizes, 2, 30 * GIB, 8 * GIB) == 4 * GIB
    assert script.largest_fitting(sizes, 2, 8 * GIB, 8 * GIB) == 0


def test_sizes_parse_as_nccl_tests_writes_them():
    assert size_bytes("16G") == 17179869184
    assert size_bytes("256M") == 256 * 1024**2
    assert size_bytes("100") == 100
    spark = PAIR["spark-1"]
    assert spark.link_test_min_busbw == 21.875
    assert spark.link_test_size_bytes[-1] == 16 * GIB
    with pytest.raises(ValidationError, match="not a size as nccl-tests writes it"):
        SparkSettings.model_validate(
            {"ssh_host": "s", "ssh_user": "nvidia", "link_test_sizes": ["16X"]}
        )


# --- the command each Spark runs ------------------------------------------------------------


def test_pair_command_runs_the_script_in_the_engine_image_with_its_environment():
    plan = PAIR_PLANS["spark-2"]
    assert plan is not None
    run = link_test_run(plan, PAIR_TOPOLOGY["spark-2"], PAIR["spark-2"])
    words = list(run.words)
    assert words[:2] == ["docker", "run"]
    assert (run.rank, run.nodes, run.master) == (1, 2, "192.168.100.1:29500")
    env_files = [words[i + 1] for i, word in enumerate(words) if word == "--env-file"]
    assert env_files == [HF_ENV_FILE, NCCL_ENV, CONTAINER_ENV.format(name=plan.name)]
    for option in DEFAULT_RDMA_OPTIONS:
        assert option in words
    env = [words[i + 1] for i, word in enumerate(words) if word == "-e"]
    assert env[:4] == ["MASTER_ADDR=192.168.100.1", "MASTER_PORT=29500", "RANK=1", "WORLD_SIZE=2"]
    image = words.index(plan.image)
    assert words[image - 2 : image] == ["--entrypoint", "python3"]
    assert f"{LINK_TEST}:{LINK_TEST}:ro" in words[:image]
    assert words[image + 1] == LINK_TEST
    sizes = words[words.index("--sizes") + 1]
    assert sizes.split(",")[-1] == str(16 * GIB)
    assert words[words.index("--min-busbw") + 1] == "21.875"


def test_three_sparks_rendezvous_at_the_head_with_their_ranks():
    runs = [link_test_run(trio_plan(name), TRIO_TOPOLOGY[name], TRIO[name]) for name in TRIO]
    assert [(run.rank, run.nodes) for run in runs] == [(0, 3), (1, 3), (2, 3)]
    for run in runs:
        env = [run.words[i + 1] for i, word in enumerate(run.words) if word == "-e"]
        assert "MASTER_ADDR=192.168.100.1" in env and "WORLD_SIZE=3" in env
    assert [w for w in runs[2].words if w.startswith("RANK=")] == ["RANK=2"]


def test_rdma_options_come_from_the_plan_when_it_carries_them():
    @dataclasses.dataclass(frozen=True)
    class PlanWithRdma(EnginePlan):
        rdma_args: tuple[str, ...] = ()

    plan = PAIR_PLANS["spark-1"]
    assert plan is not None
    assert rdma_options(plan) == DEFAULT_RDMA_OPTIONS
    decided = ("--device=/dev/infiniband", "--ulimit=memlock=-1:-1", "--cap-add=IPC_LOCK")
    fuller = PlanWithRdma(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)})
    fuller = dataclasses.replace(fuller, rdma_args=decided)
    assert rdma_options(fuller) == decided
    words = link_test_run(fuller, PAIR_TOPOLOGY["spark-1"], PAIR["spark-1"]).words
    assert "--cap-add=IPC_LOCK" in words


def test_the_sparks_must_run_together():
    places = {name: PAIR_TOPOLOGY[name] for name in PAIR}
    assert group_problems(places, dict(PAIR_PLANS), PAIR, set(PAIR)) == []
    problems = group_problems(places, {**PAIR_PLANS, "spark-2": None}, PAIR, {"spark-1"})
    assert problems == [
        "spark-2: no engine in the inventory, so no image to run the test in",
        "spark-2: not in this run (--limit); every Spark of the 2 must take part at once",
    ]
    other = {**PAIR, "spark-2": PAIR["spark-2"].model_copy(update={"link_test_port": 29600})}
    assert group_problems(places, dict(PAIR_PLANS), other, set(PAIR)) == [
        "spark-2: link_test_port differ from the head spark-1's; every Spark must run the same test"
    ]
    alone = sparks(1)
    assert group_problems(
        {"spark-1": Topology.of(alone)["spark-1"]}, {"spark-1": None}, alone, {"spark-1"}
    ) == ["the link test needs two or more Sparks in the inventory"]


# --- facts ----------------------------------------------------------------------------------


def test_readiness_sample_parses():
    ready = LinkTestReady().process(docstring_sample(LinkTestReady))
    assert ready.active == {"spark-engine-sglang.service": "inactive"}
    assert ready.speeds["enp1s0f0np0"] == "200000"
    assert ready.image == (0, "sha256:5b2e0c3a8f41")
    assert ready.script and ready.mem_available_kb == 119203140
    command = LinkTestReady().command(
        ["spark-engine-sglang.service"], ["enp1s0f0np0"], "/opt/spark-twin/sys/", "img:1"
    )
    assert "/opt/spark-twin/sys/class/net/enp1s0f0np0/speed" in command


def test_run_output_parses_the_result_and_the_network():
    output = [
        "out=rank 0 of 2: rendezvous at 192.168.100.1:29500 (nccl)",
        "out=s1:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0",
        "out=s1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
        "out=spark-link-test-result " + json.dumps(result_record()),
        "status=0",
        "stored=1",
    ]
    run = LinkTestRun().process(output)
    assert (run.status, run.stored, run.networks) == (0, True, ("IB",))
    assert run.result is not None and run.result.passed
    assert run.result.largest == result_record()["results"][2]
    assert parse_result("not json") is None
    assert parse_result("") is None
    assert parse_result('{"when": "x"}') is None  # no verdict: not a result


def test_the_result_is_stored_root_readable_and_whole(tmp_path):
    target = tmp_path / "state" / "linktest.json"
    line = "spark-link-test-result " + json.dumps(result_record())
    script_text = "\n".join([f"out='noise\n{line}\nmore'", *store_lines(str(target))])
    done = subprocess.run(["sh", "-c", script_text], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "stored=1"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    stored = parse_result(target.read_text())
    assert stored is not None and stored.when == "2026-11-23T10:00:00Z"
    assert [p.name for p in target.parent.iterdir()] == ["linktest.json"]  # no temporary left
    nothing = subprocess.run(
        ["sh", "-c", "\n".join(["out='no result'", *store_lines(str(target))])],
        capture_output=True,
        text=True,
        check=True,
    )
    assert nothing.stdout == "" and parse_result(target.read_text()) is not None


def test_run_command_stops_the_container_after_a_timeout():
    command = LinkTestRun().command(["docker", "run", "img"], 960)
    assert command.startswith("out=$(timeout 960 docker run img 2>&1)")
    assert "docker rm -f spark-link-test" in command


# --- judgement, report, status --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "state", "said"),
    [
        ("200000", OK, "enp1s0f0np0: 200000 Mb/s (expected 200000)"),
        ("100000", WARN, "what a switch port may negotiate"),
        ("25000", FAIL, "not 200000"),
        ("-1", FAIL, "the link is down"),
        ("cat: /sys/class/net/enp1s0f0np0/speed: Invalid argument", FAIL, "is the link up?"),
    ],
)
def test_rail_speed_judgement(text, state, said):
    found, detail = rail_speed("enp1s0f0np0", text)
    assert found == state and said in detail


def spark_run(name: str, rank: int, record: dict | None, status: int = 0, **keys) -> SparkRun:
    result = parse_result(json.dumps(record)) if record else None
    lines = ("x [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",)
    run = RunOutput(status, lines, result, result is not None)
    speeds = keys.pop("speeds", (("enp1s0f0np0", OK, "enp1s0f0np0: 200000 Mb/s"),))
    return SparkRun(name, rank, run, keys.pop("refusal", ""), speeds)


def test_judge_and_report():
    both = [spark_run("spark-1", 0, result_record()), spark_run("spark-2", 1, result_record())]
    assert judge(both) == (True, result_record()["verdict"])
    text = format_report(both, "lmsysorg/sglang:x", "192.168.100.1:29500")
    assert "16G" in text and "23.41" in text and "PASS:" in text
    assert "NCCL used TCP sockets, not RDMA" in text
    slow = result_record(passed=False, verdict="all-gather bus bandwidth 3.000 GB/s < 21.875")
    assert judge([both[0], spark_run("spark-2", 1, slow)]) == (
        False,
        "spark-2: all-gather bus bandwidth 3.000 GB/s < 21.875",
    )
    assert judge([spark_run("spark-1", 0, None, status=124)])[1] == (
        "spark-1: no result from the link test (stopped by the timeout; output above)"
    )
    refused = spark_run("spark-1", 0, None, refusal="spark-1: unit active")
    assert judge([refused]) == (False, "spark-1: spark-1: unit active")
    bad_rail = spark_run(
        "spark-1", 0, result_record(), speeds=(("enp1s0f0np0", FAIL, "link down"),)
    )
    assert judge([bad_rail]) == (False, "spark-1: link down")


def test_the_verdict_names_every_spark_it_failed_on_and_what_explains_it():
    slow = result_record(passed=False, verdict="all-gather bus bandwidth 3.000 GB/s < 21.875")
    bad_rail = (("enp1s0f0np0", FAIL, "link down"),)
    runs = [
        spark_run("spark-1", 0, result_record()),
        spark_run("spark-2", 1, slow),
        spark_run("spark-3", 2, result_record(), speeds=bad_rail),
    ]
    first, second = verdict_line(runs).splitlines()
    assert first == (
        "    FAIL on spark-2, spark-3: spark-2: all-gather bus bandwidth 3.000 GB/s < 21.875"
    )
    assert "pyinfra -y inventory.py status.py" in second
    assert verdict_line(runs[:1]) == f"    PASS: {result_record()['verdict']}"


def test_status_row_of_the_last_result():
    assert status_detail(None) == (NONE, "never run (pyinfra -y inventory.py linktest.py)")
    state, detail = status_detail(parse_result(json.dumps(result_record())))
    assert state == OK
    assert detail == (
        "passed 2026-11-23T10:00:00Z: all-gather busbw 23.41 GB/s at 16G "
        "(threshold 21.875 GB/s, 2 Sparks)"
    )
    failed = parse_result(json.dumps(result_record(passed=False)))
    assert status_detail(failed)[0] == FAIL
    # Folded into the status fact's one command: its documented sample has the line.
    status = SparkStatus().process(docstring_sample(SparkStatus))
    assert status.link_test is not None and status.link_test.passed
    assert status_detail(status.link_test)[1].startswith("passed 2026-11-23T10:00:00Z")
    lines = [line for line in docstring_sample(SparkStatus) if not line.startswith("linktest=")]
    assert SparkStatus().process([*lines, "linktest="]).link_test is None


def test_status_command_reads_the_stored_result_without_sudo():
    command = SparkStatus().command("/opt/models", [], "", ["enp1s0f0np0"], [], "/sys", NCCL_ENV)
    assert "linktest=" in command and "/var/lib/spark-deploy/linktest.json" in command
    assert "sudo" not in command
    without_rails = SparkStatus().command("/opt/models", [], "", [], [], "/sys", NCCL_ENV)
    assert "linktest=" not in without_rails
