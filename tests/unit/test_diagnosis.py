"""
Diagnosis: recorded engine journals (`journalctl -u UNIT -o cat`, in SGLang's and vLLM's own
log formats) each match exactly the right failure signature; clean starts match none; the
journal fact reads every unit of a plan in one command; the report names rule, cause and fix.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sparkdeploy.facts.journals import JOURNAL_MARK, EngineJournals, UnitJournal
from sparkdeploy.knowledge.signatures import diagnose
from sparkdeploy.reports.diagnosis import TAIL_LINES, report

JOURNALS = Path(__file__).parent / "fixtures" / "journals"
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
    "vllm-clean": [],
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
    assert "cause" in lines[4] and "no kernels" in lines[4]
    assert "fix" in lines[5] and "--attention-backend triton" in lines[5]


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
