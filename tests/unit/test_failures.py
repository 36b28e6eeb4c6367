"""Expected failures: an OperationError of a callback fails its operation without a
traceback, and the end of the run says per Spark what failed, the cause from the known GB10
failure signatures, the fix and the next command."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any, cast

from pyinfra.api import OperationError
from pyinfra.api.state import StateStage

from sparkdeploy.reports.failures import (
    Failure,
    SparkFailed,
    diagnose_command,
    expected,
    failure_of,
    format_failure,
    format_failures,
    judged,
    record,
    status_command,
    take_failures,
)
from sparkdeploy.reports.notices import NoticePrinter
from tests.unit.operations import run, spark

CRASH = "RuntimeError: Unsupported architecture for sparse decode fwd"
UNIT = "spark-engine-sglang.service"


def test_a_known_signature_gives_the_cause_and_the_fix():
    error = SparkFailed(
        f"{UNIT} did not become healthy:\n{CRASH}",
        then=(diagnose_command("spark-1"), f"journalctl -u {UNIT} -n 300"),
    )
    failure = failure_of("spark-1", "health check", error)
    assert failure.what == f"health check: {UNIT} did not become healthy"
    assert failure.cause.startswith("flashmla-sm100-only")
    assert failure.cause.endswith(f"Seen: {CRASH}")
    assert failure.fix.startswith("There is no flag around it")
    assert failure.then == (
        "pyinfra -y inventory.py diagnose.py --limit spark-1",
        f"journalctl -u {UNIT} -n 300",
    )


def test_an_error_naming_no_command_points_to_the_given_one_else_to_diagnose():
    error = OperationError("spark-fetch@abc.service failed: 401")
    assert failure_of("s", "fetch", error, then=("journalctl -u x",)).then == ("journalctl -u x",)
    named = failure_of("s", "", error, then=(status_command("{host}"),))
    assert named.then == ("pyinfra -y inventory.py status.py --limit s",)
    plain = failure_of("s", "", error)
    assert plain.then == ("pyinfra -y inventory.py diagnose.py --limit s",)
    assert (plain.what, plain.cause, plain.fix) == ("spark-fetch@abc.service failed: 401", "", "")


def test_the_block_says_what_cause_fix_and_next():
    failure = Failure("spark-2", "health check: x", "sig: why", "do this", ("cmd one", "cmd two"))
    assert format_failure(failure).splitlines() == [
        "--> spark-2 FAILED: health check: x",
        "    cause  sig: why",
        "    fix    do this",
        "    next   cmd one",
        "           cmd two",
    ]
    unknown = Failure("s", "fetch: boom", "", "", ("cmd",))
    assert format_failure(unknown).splitlines()[1:] == [
        "    cause  no known GB10 failure signature; see above",
        "    next   cmd",
    ]


def test_a_wrapped_callback_fails_its_operation_without_raising(caplog):
    @expected("health check")
    def check(state, host, crash: str) -> None:
        raise SparkFailed(f"{UNIT} did not become healthy:\n{crash}")

    state: Any = cast(Any, SimpleNamespace())  # the run store sits on any object
    host = SimpleNamespace(name="spark-1", print_prefix="[spark-1] ")
    assert check(state, host, CRASH) is False
    assert f"[spark-1] {CRASH}" in caplog.text  # logged where it happened
    [failure] = take_failures(state)
    assert failure.host == "spark-1" and failure.cause.startswith("flashmla-sm100-only")
    assert take_failures(state) == []  # printed once
    # pyinfra calls a FunctionCommand's function with state and host when it names them
    assert inspect.getfullargspec(check).args[:2] == ["state", "host"]


def test_failures_are_taken_in_the_inventorys_order_of_their_sparks():
    """Hosts fail in parallel greenlets: the summary names them as the inventory does."""
    hosts = [SimpleNamespace(name=name) for name in ("stat-1", "stat-2", "stat-3")]
    state: Any = cast(Any, SimpleNamespace(inventory=hosts))
    for name in ("stat-3", "stat-1", "stat-3"):
        record(state, Failure(name, f"step of {name}", "", "", (str(len(name)),)))
    assert [failure.host for failure in take_failures(state)] == ["stat-1", "stat-3"]


def test_a_wrapped_callback_that_passes_passes():
    @expected("x")
    def fine(state, host) -> None:
        return None

    state: Any = cast(Any, SimpleNamespace())  # the run store sits on any object
    assert fine(state, SimpleNamespace(name="s", print_prefix="")) is True
    assert take_failures(state) == []


def test_the_blocks_end_with_a_line_naming_the_failed_sparks():
    failures = [
        Failure("spark-1", "a", "", "", ("x",)),
        Failure("spark-3", "b", "", "", ("y",)),
        Failure("spark-1", "c", "", "", ("z",)),
    ]
    text = format_failures(failures)
    assert text.splitlines()[-1] == "--> 2 Spark(s) FAILED: spark-1, spark-3"
    assert text.count("FAILED: ") == 4  # three blocks and the last line
    assert format_failures([]) == ""


def test_judged_fails_the_spark_only_when_something_failed():
    host = spark()
    assert run(judged, host, failed="").noop == "nothing failed"
    outcome = run(judged, host, failed="engine FAIL: not ready", then=["cmd"])
    assert outcome.commands == ["call _fail"]
    [callback] = outcome.callbacks
    state: Any = cast(Any, SimpleNamespace())
    assert callback.function(state, host, *callback.args) is False
    [failure] = take_failures(state)
    assert (failure.host, failure.what, failure.then) == (
        host.name,
        "engine FAIL: not ready",
        ("cmd",),
    )


def printed(final_only: bool, stage, active: set, caplog) -> str:
    """What the notice printer logs at a host's disconnect, one failure recorded."""
    caplog.clear()
    host = spark()
    state: Any = cast(Any, SimpleNamespace(current_stage=stage, active_hosts=active))
    state.failed_hosts = {host}
    record(state, Failure(host.name, "health check: x", "", "", ("cmd",)))
    NoticePrinter(final_only).host_disconnect(state, host)
    return caplog.text


def test_the_blocks_are_printed_at_the_end_or_when_every_spark_failed(caplog):
    ended = printed(True, StateStage.Disconnect, {"spark-2"}, caplog)
    name = spark().name
    assert f"--> {name} FAILED: health check: x" in ended
    assert f"--> 1 Spark(s) FAILED: {name}" in ended
    stopped = printed(True, StateStage.Execute, set(), caplog)  # pyinfra: No hosts remaining!
    assert f"--> {name} FAILED" in stopped
    rebooting = printed(True, StateStage.Execute, {"spark-2"}, caplog)  # a reboot mid-run
    assert "FAILED" not in rebooting


def test_a_check_that_read_no_journal_says_so_instead_of_pointing_above():
    host = spark()
    said = "status reads no journal; the command below reads it"
    outcome = run(judged, host, failed="engine FAIL: not ready", then=["cmd"], unexplained=said)
    [callback] = outcome.callbacks
    state: Any = cast(Any, SimpleNamespace())
    assert callback.function(state, host, *callback.args) is False
    [failure] = take_failures(state)
    assert f"    cause  {said}" in format_failure(failure).splitlines()
    # a known failure signature in what failed still wins over the note
    crash = "unit FAIL: RuntimeError: Unsupported architecture for sparse decode fwd"
    outcome = run(judged, host, failed=crash, then=["cmd"], unexplained=said)
    [callback] = outcome.callbacks
    assert callback.function(state, host, *callback.args) is False
    [failure] = take_failures(state)
    assert failure.cause.startswith("flashmla-sm100-only")
