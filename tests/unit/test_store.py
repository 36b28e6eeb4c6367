"""The run store: each pyinfra run has its own facts, results and notices."""

from __future__ import annotations

import inspect
import logging
import time
from unittest import mock

import gevent
import pytest
from pyinfra.context import ctx_host, ctx_state

from sparkdeploy.deploys.host import preflight
from sparkdeploy.facts.host_state import SparkHostState, host_state
from sparkdeploy.facts.network import QsfpNetwork, network
from sparkdeploy.facts.preflight import SparkPreflight
from sparkdeploy.facts.store import gathered, prefetch, run_store
from sparkdeploy.reports import notices
from tests.unit.operations import HOST_STATE, NETWORK, PREFLIGHT, pair, spark


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


def test_a_prefetched_fact_is_asked_for_once_and_its_round_trip_overlaps_the_next():
    target = spark()
    calls: list[str] = []

    def slow_fact(self, fact, **arguments):
        calls.append(fact.__name__)
        gevent.sleep(0.2)  # a round trip: other greenlets run meanwhile
        return PREFLIGHT

    with mock.patch.object(type(target), "get_fact", slow_fact), ctx_host.use(target):
        started = time.monotonic()
        prefetch(lambda: gathered(target, SparkPreflight, model_dir="/opt/models"))
        assert calls == []  # nothing runs until this greenlet waits
        assert gathered(target, SparkHostState) is PREFLIGHT
        assert gathered(target, SparkPreflight, model_dir="/opt/models") is PREFLIGHT
        both = time.monotonic() - started
    assert sorted(calls) == ["SparkHostState", "SparkPreflight"]  # each asked for once
    assert both < 0.35  # two 0.2 s round trips, one beside the other


def test_a_prefetched_facts_error_reaches_the_step_that_asks():
    target = spark()

    def failing(self, fact, **arguments):
        raise OSError("connection lost")

    with mock.patch.object(type(target), "get_fact", failing), ctx_host.use(target):
        prefetch(lambda: gathered(target, SparkPreflight, model_dir="/opt/models"))
        gevent.sleep(0)  # the prefetch runs and fails, quietly
        with pytest.raises(OSError, match="connection lost"):
            gathered(target, SparkPreflight, model_dir="/opt/models")


def test_an_asker_that_fails_before_it_asks_is_logged_for_debug(caplog):
    target = spark()

    def broken() -> None:
        raise TypeError("object of type 'Host' has no len()")

    with caplog.at_level(logging.DEBUG, logger="pyinfra"), ctx_host.use(target):
        prefetch(broken)
        gevent.sleep(0)  # the prefetch runs and fails
    assert "prefetch failed: TypeError" in caplog.text
    assert "no len()" not in caplog.text  # the type only: a fact's message may hold output


def test_the_preflight_step_takes_the_host_state_and_network_beside_its_own_round_trip():
    """check_spark prefetches with pyinfra's `host`, a context proxy: the host-state and
    network round trips start while the preflight one runs, not after it (the host-state
    prefetch once failed on the proxy, quietly, and its round trip followed the preflight)."""
    target = pair()["spark-1"]
    answers = {SparkPreflight: PREFLIGHT, SparkHostState: HOST_STATE, QsfpNetwork: NETWORK}
    events: list[tuple[str, str]] = []

    def slow_fact(self, fact, **arguments):
        events.append(("asked", fact.__name__))
        gevent.sleep(0.2)  # a round trip: other greenlets run meanwhile
        events.append(("answered", fact.__name__))
        return answers[fact]

    with (
        mock.patch.object(type(target), "get_fact", slow_fact),
        ctx_state.use(target.state),
        ctx_host.use(target),
    ):
        inspect.unwrap(preflight.check_spark)()  # the body, without pyinfra's deploy frame
        first_answer = next(i for i, (what, _) in enumerate(events) if what == "answered")
        before_any_answer = events[:first_answer]
        assert sorted(name for _, name in before_any_answer) == [
            "QsfpNetwork",
            "SparkHostState",
            "SparkPreflight",
        ], events  # all three asked for before the first came back
        assert host_state(target) is HOST_STATE  # taken once: no round trip more
        assert network(target) is NETWORK
    assert len(events) == 6, events
