"""The run store: each pyinfra run has its own facts, results and notices."""

from __future__ import annotations

from unittest import mock

from pyinfra.context import ctx_state

from sparkdeploy.facts.preflight import SparkPreflight
from sparkdeploy.facts.store import gathered, run_store
from sparkdeploy.reports import notices
from tests.unit.operations import PREFLIGHT, spark


def test_a_fact_is_gathered_once_per_run_and_again_in_the_next():
    first, second = spark(), spark()  # two runs: each builds its own State
    with mock.patch.object(type(first), "get_fact", return_value=PREFLIGHT) as get_fact:
        assert gathered(first, SparkPreflight, model_dir="/opt/models") is PREFLIGHT
        assert gathered(first, SparkPreflight, model_dir="/opt/models") is PREFLIGHT
        assert get_fact.call_count == 1
        gathered(second, SparkPreflight, model_dir="/opt/models")
        assert get_fact.call_count == 2


def test_notices_and_results_belong_to_their_run():
    first, second = spark(), spark()
    with ctx_state.use(first.state):
        notices.add("spark-1", "REBOOT PENDING: first run")
    run_store(first.state).results[("spark-1", "x")] = 1
    assert run_store(first.state).notices == {"spark-1": [(30, "REBOOT PENDING: first run")]}
    assert run_store(second.state).notices == {}
    assert run_store(second.state).results == {}
