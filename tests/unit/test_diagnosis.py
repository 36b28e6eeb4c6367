"""
Diagnosis: recorded engine journals (`journalctl -u UNIT -o cat`, in SGLang's and vLLM's own
log formats) each match exactly the right failure signature; clean starts match none; the
journal fact reads every unit of a plan and the kernel log of two boots in one command; the
report names rule, cause and fix, and where each finding was seen.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyinfra.context import ctx_host, ctx_state

from sparkdeploy.facts.journals import (
    JOURNAL_MARK,
    BootLog,
    EngineJournals,
    Journals,
    KernelLog,
    SparkJournals,
    UnitJournal,
)
from sparkdeploy.facts.store import run_store
from sparkdeploy.knowledge.signatures import diagnose
from sparkdeploy.reports.diagnosis import (
    TAIL_LINES,
    diagnose_engines,
    kernel_report,
    report,
    unit_failure,
)
from tests.twins import harness
from tests.unit.operations import given, spark
from tests.unit.samples import docstring_sample

JOURNALS = Path(__file__).parent / "fixtures" / "journals"
KERNEL = Path(__file__).parent / "fixtures" / "kernel"
# Journal excerpt -> the signatures it must match (in signatures.yaml order), nothing else.
EXPECTED = {
    "sglang-flashinfer-invalid-device-function": ["flashinfer-invalid-device-function"],
    "sglang-missing-tokenizer-json": ["missing-tokenizer-json"],
    "sglang-unbalanced-memory": ["unbalanced-memory"],
    "sglang-flashmla-sparse-decode": ["flashmla-sm100-only"],
    "sglang-gloo-loopback": ["gloo-loopback"],
    "sglang-cuda-graph-oom": ["oom-in-cuda-graph-capture"],
    "sglang-unrecognized-arguments": ["unrecognized-arguments"],
    "sglang-common-ops": ["sgl-kernel-common-ops"],
    "vllm-illegal-instruction": ["illegal-instruction-mla"],
    "sglang-clean": [],
    "sglang-pair-clean": [],
    "sglang-pair-socket-fallback": [
        "nccl-ib-open-device-failed",
        "nccl-ib-no-device",
        "nccl-socket-fallback",
    ],
    "vllm-clean": [],
    "vllm-pair-clean": [],
}
UNIT = "spark-engine-sglang.service"


def journal(name: str) -> str:
    return (JOURNALS / f"{name}.log").read_text(encoding="utf-8")


def test_every_recorded_journal_has_an_expectation():
    assert {path.stem for path in JOURNALS.glob("*.log")} == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_journal_matches_exactly_its_signature(name):
    assert [found.signature.id for found in diagnose(journal(name))] == EXPECTED[name]


def facts_output(*units: tuple[str, dict[str, str], str]) -> list[str]:
    lines = []
    for unit, properties, log in units:
        lines.append(f"{JOURNAL_MARK} unit {unit}")
        lines += [f"{JOURNAL_MARK} state {key}={value}" for key, value in properties.items()]
        lines += log.splitlines()
    return lines


FAILED = {
    "LoadState": "loaded",
    "ActiveState": "activating",
    "SubState": "auto-restart",
    "Result": "exit-code",
    "ExecMainStatus": "137",
    "NRestarts": "2",
    "StateChangeTimestamp": "Tue 2026-03-24 10:15:16 UTC",
}
RUNNING = {
    "LoadState": "loaded",
    "ActiveState": "active",
    "SubState": "running",
    "Result": "success",
    "ExecMainStatus": "0",
    "NRestarts": "0",
    "StateChangeTimestamp": "Tue 2026-03-24 10:11:57 UTC",
}


def test_one_command_reads_every_unit_of_the_plan():
    command = EngineJournals().command(
        units=(UNIT, "spark-engine-sglang-worker.service"), lines=300
    )
    assert command.count("journalctl -u ") == 2
    assert "journalctl -u spark-engine-sglang.service -n 300 --no-pager -q -o cat" in command
    assert "systemctl show spark-engine-sglang-worker.service -p LoadState," in command
    assert not any(word in command for word in ("restart", "start ", "stop", "rm ", "reset"))


def test_fact_splits_units_state_and_journal_lines():
    log = journal("sglang-gloo-loopback")
    found = EngineJournals().process(
        facts_output(
            (UNIT, FAILED, log), ("spark-engine-vllm.service", {"LoadState": "not-found"}, "")
        )
    )
    first, second = found
    assert first == UnitJournal(UNIT, FAILED, tuple(log.splitlines()))
    assert first.summary() == (
        "activating (auto-restart, exit-code, exit status 137) since "
        "Tue 2026-03-24 10:15:16 UTC, 2 restarts"
    )
    assert not second.installed and second.lines == ()


def test_report_names_rule_cause_and_fix():
    level, text = report(
        UnitJournal(
            UNIT, FAILED, tuple(journal("sglang-flashinfer-invalid-device-function").splitlines())
        )
    )
    assert level == logging.WARNING
    lines = text.splitlines()
    assert lines[0].startswith(f"{UNIT}: activating (auto-restart, exit-code")
    assert lines[2].split() == [
        "rule",
        "id",
        "flashinfer-invalid-device-function",
        "(GB10",
        "rule",
        "sglang-flashinfer-attention)",
    ]
    assert lines[3].endswith("RuntimeError: CUDA error: invalid device function")
    assert lines[4].split() == ["where", "engine", "journal"]
    assert "cause" in lines[5] and "no kernels" in lines[5]
    assert "fix" in lines[6] and "--attention-backend triton" in lines[6]
    assert lines[7].split() == ["source", "field", "report", "001", "(shared/seeds)"]


def test_report_of_a_clean_journal_says_so_and_shows_the_last_lines():
    log = journal("vllm-clean").splitlines()
    level, text = report(UnitJournal("spark-engine-vllm.service", RUNNING, tuple(log)))
    assert level == logging.INFO
    head, summary, *tail = text.splitlines()
    assert head == (
        "spark-engine-vllm.service: active (running) since Tue 2026-03-24 10:11:57 UTC, 0 restarts"
    )
    assert summary.startswith(f"    no known GB10 failure signature in its last {len(log)} journal")
    assert tail == [f"        | {line}" for line in log[-TAIL_LINES:]]


def test_report_of_a_unit_that_is_not_there():
    level, text = report(UnitJournal(UNIT, {"LoadState": "not-found"}, ()))
    assert level == logging.WARNING
    assert text == f"{UNIT}: not installed (not-found); run the deploy to install it"


def kernel(name: str) -> tuple[str, ...]:
    return tuple((KERNEL / f"{name}.log").read_text(encoding="utf-8").splitlines())


def test_kernel_log_command_reads_two_boots_bounded_and_changes_nothing():
    command = KernelLog().command(lines=1000)
    assert "journalctl -b 0 --no-pager -q -o short-iso -k -n 1000 2>/dev/null" in command
    assert "journalctl -b -1 --no-pager -q -o short-iso -k -n 1000 2>/dev/null" in command
    assert "-t nvidia-persistenced -n 20" in command
    assert command.count("journalctl ") == 4
    assert not any(word in command for word in ("--rotate", "--vacuum", "rm ", "restart"))


def test_one_command_reads_the_units_and_the_kernel_log():
    command = SparkJournals().command(units=(UNIT,), lines=300, kernel_lines=1000)
    assert command.startswith(EngineJournals().command(units=(UNIT,), lines=300))
    assert command.endswith(KernelLog().command(lines=1000))


def test_fact_splits_units_and_boots():
    log = journal("sglang-gloo-loopback")
    output = facts_output((UNIT, FAILED, log)) + [
        f"{JOURNAL_MARK} boot current boot",
        *kernel("clean"),
        f"{JOURNAL_MARK} boot previous boot",
    ]
    found = SparkJournals().process(output)
    assert found == Journals(
        [UnitJournal(UNIT, FAILED, tuple(log.splitlines()))],
        [BootLog("current boot", kernel("clean")), BootLog("previous boot", ())],
    )


def test_a_spark_without_units_still_gets_its_kernel_log():
    found = SparkJournals().process([f"{JOURNAL_MARK} boot current boot", *kernel("clean")])
    assert found.units == [] and found.boots == [BootLog("current boot", kernel("clean"))]


def test_each_line_says_which_log_it_is_from():
    boot = BootLog("current boot", kernel("clean"))
    assert boot.where(boot.lines[0]) == "kernel log, current boot"
    persistenced = next(line for line in boot.lines if "nvidia-persistenced[" in line)
    assert boot.where(persistenced) == "nvidia-persistenced log, current boot"


def test_report_names_a_kernel_finding_with_its_boot():
    level, text = kernel_report(
        [
            BootLog("current boot", kernel("clean")),
            BootLog("previous boot", kernel("wedge-previous-boot")),
        ]
    )
    assert level == logging.WARNING
    lines = text.splitlines()
    assert lines[1] == (
        f"    1 known GB10 host failure signature(s) in {len(kernel('clean'))} lines of the "
        "current boot and 3 lines of the previous boot:"
    )
    assert lines[2].split()[:3] == ["rule", "id", "nvrm-no-memory"]
    assert "[NV_ERR_NO_MEMORY]" in lines[3] and lines[3].split()[1] == "2026-11-20T23:41:17+00:00"
    assert lines[4].split() == ["where", "kernel", "log,", "previous", "boot"]
    assert "power cycle" in lines[5] and "Power-cycle" in lines[6]
    assert "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1358" in text


def test_persistenced_finding_is_tagged_as_such():
    line = (
        "2026-03-14T07:02:11+00:00 spark-1 nvidia-persistenced[1190]: Failed to query NVIDIA "
        "devices. Please ensure that the NVIDIA device files (/dev/nvidia*) exist, and that "
        "user 0 has read and write permissions for those files."
    )
    level, text = kernel_report([BootLog("current boot", (*kernel("clean"), line))])
    assert level == logging.WARNING
    assert "        where    nvidia-persistenced log, current boot" in text.splitlines()
    assert "rule id  nvidia-persistenced-no-devices (no GB10 rule prevents it yet)" in text


def test_engine_signatures_are_not_looked_for_in_the_kernel_log():
    line = "2026-11-21T08:00:04+00:00 spark-1 kernel: invalid device function"
    level, text = kernel_report([BootLog("current boot", (line,))])
    assert level == logging.INFO and "no known GB10 host failure signature" in text


def test_report_of_a_clean_kernel_log_and_of_none():
    level, text = kernel_report(
        [BootLog("current boot", kernel("clean")), BootLog("previous boot", ())]
    )
    assert level == logging.INFO
    assert text.endswith(
        f"no known GB10 host failure signature in {len(kernel('clean'))} lines of the current "
        "boot and 0 lines of the previous boot (not in the journal)"
    )
    level, text = kernel_report([BootLog("current boot", ()), BootLog("previous boot", ())])
    assert level == logging.INFO and text.endswith("no lines (is the journal there and readable?)")


def test_a_host_fault_in_the_engine_journal_is_tagged_with_it():
    log = (
        *journal("vllm-pair-clean").splitlines()[:20],
        "(EngineCore pid=190) (RayWorkerWrapper pid=412) spark-1:412:498 [0] NCCL WARN Call to "
        "ibv_reg_mr_iova2 failed with error Cannot allocate memory",
    )
    level, text = report(UnitJournal("spark-engine-vllm.service", FAILED, log))
    assert level == logging.WARNING
    assert "rule id  ibv-reg-mr-no-memory (no GB10 rule prevents it yet)" in text
    assert "        where    engine journal" in text.splitlines()


# --- the whole diagnosis of a host: the fact given, the notices it records ----------------


def test_documented_kernel_sample_parses_and_is_diagnosed():
    boots = KernelLog().process(docstring_sample(KernelLog))
    assert [boot.boot for boot in boots] == ["current boot", "previous boot"]
    assert [len(boot.lines) for boot in boots] == [2, 1]
    level, text = kernel_report(boots)
    assert level == logging.WARNING
    assert "rule id  nvrm-rm-init-adapter-failed" in text
    assert "where    kernel log, previous boot" in text


def diagnosis_notices(engine: bool, boots: list[BootLog]) -> list[tuple[int, str]]:
    host = spark(**({**harness.MODEL, "engine": {"name": "sglang"}} if engine else {}))
    units = [
        UnitJournal(UNIT, FAILED, tuple(journal("sglang-flashmla-sparse-decode").splitlines()))
    ]
    given(host, SparkJournals, Journals(units if engine else [], boots))
    with ctx_state.use(host.state), ctx_host.use(host):
        diagnose_engines()
    return run_store(host.state).notices[host.name]


def test_a_host_diagnosis_reports_the_unit_then_the_kernel_log_with_its_source():
    boots = [
        BootLog("current boot", kernel("clean")),
        BootLog("previous boot", kernel("wedge-previous-boot")),
    ]
    (unit_level, unit_text), (kernel_level, kernel_text) = diagnosis_notices(True, boots)
    assert unit_level == logging.WARNING
    assert unit_text.startswith(f"Diagnosis of {UNIT}: activating (auto-restart")
    assert "rule id  flashmla-sm100-only" in unit_text
    assert "where    engine journal" in unit_text
    assert kernel_level == logging.WARNING
    assert kernel_text.startswith("Diagnosis of the kernel log (the last 1000 kernel lines")
    finding = {
        line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1]
        for line in kernel_text.splitlines()[2:]
    }
    assert finding["rule"] == "id  nvrm-no-memory (no GB10 rule prevents it yet)"
    assert finding["where"] == "kernel log, previous boot"
    assert finding["source"].startswith("https://github.com/NVIDIA/dgx-spark-playbooks/issues/97; ")


def test_a_spark_without_an_engine_gets_its_kernel_log_diagnosed():
    notices = diagnosis_notices(False, [BootLog("current boot", kernel("clean"))])
    assert notices[0] == (
        logging.INFO,
        "no engine: in the inventory for this Spark; only its kernel log is read",
    )
    assert notices[1][0] == logging.INFO
    assert "no known GB10 host failure signature" in notices[1][1]


# --- what FAILs, so diagnose.py exits 1 ---------------------------------------------------


def test_a_unit_fails_when_missing_failed_or_stopped_with_a_known_signature():
    crashed = tuple(journal("sglang-flashmla-sparse-decode").splitlines())
    text = unit_failure(UnitJournal(UNIT, FAILED, crashed))
    assert text.splitlines()[0].startswith(f"{UNIT}: activating (auto-restart")
    assert "Unsupported architecture for sparse decode fwd" in text
    assert unit_failure(UnitJournal(UNIT, RUNNING, crashed)) == ""  # serving now
    stopped = {**RUNNING, "ActiveState": "inactive", "SubState": "dead"}
    assert unit_failure(UnitJournal(UNIT, stopped, ("bye",))) == ""  # stopped on purpose
    assert unit_failure(UnitJournal(UNIT, stopped, crashed)) != ""
    failed = {**stopped, "ActiveState": "failed"}
    assert unit_failure(UnitJournal(UNIT, failed, ("bye",))).startswith(f"{UNIT}: failed")
    missing = unit_failure(UnitJournal(UNIT, {"LoadState": "not-found"}, ()))
    assert missing.endswith("run the deploy to install it")
