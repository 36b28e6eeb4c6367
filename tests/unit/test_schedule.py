"""The order the suite hands its scopes to pytest-xdist (tests/conftest.py `scheduled`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import conftest


@dataclass
class Item:  # what `scheduled` reads of a pytest item
    nodeid: str
    cls: Any = None

    @property
    def path(self) -> Path:
        return conftest.SCENARIOS.parent.parent / self.nodeid.split("::")[0]


class Pair:
    twins: dict[str, dict] = {"a": {}, "b": {}}


class Alone:
    twins: dict[str, dict] = {"a": {}}


def test_scenarios_first_the_most_twins_then_the_most_steps_and_each_scopes_steps_in_order():
    items = [
        Item("tests/unit/test_big.py::test_one[1]"),
        Item("tests/unit/test_big.py::test_one[2]"),
        Item("tests/unit/test_big.py::test_two"),
        Item("tests/scenarios/test_x.py::Alone::test_converge", Alone),
        Item("tests/scenarios/test_x.py::Alone::test_idempotence", Alone),
        Item("tests/scenarios/test_x.py::Alone::test_verify", Alone),
        Item("tests/scenarios/test_y.py::Pair::test_converge", Pair),
        Item("tests/scenarios/test_y.py::Pair::test_idempotence", Pair),
        Item("tests/scenarios/test_z.py::test_function"),
        Item("tests/unit/test_small.py::test_only"),
    ]
    order = [item.nodeid for item in conftest.scheduled(items, {})]  # type: ignore[arg-type]
    assert order == [
        "tests/scenarios/test_y.py::Pair::test_converge",
        "tests/scenarios/test_y.py::Pair::test_idempotence",
        "tests/scenarios/test_x.py::Alone::test_converge",
        "tests/scenarios/test_x.py::Alone::test_idempotence",
        "tests/scenarios/test_x.py::Alone::test_verify",
        "tests/scenarios/test_z.py::test_function",
        "tests/unit/test_big.py::test_one[1]",
        "tests/unit/test_big.py::test_one[2]",
        "tests/unit/test_big.py::test_two",
        "tests/unit/test_small.py::test_only",
    ]


def test_the_longest_scenario_first_by_its_recorded_seconds_and_a_new_one_ahead():
    items = [
        Item("tests/unit/test_big.py::test_one"),
        Item("tests/scenarios/test_x.py::Alone::test_converge", Alone),
        Item("tests/scenarios/test_x.py::Alone::test_verify", Alone),
        Item("tests/scenarios/test_y.py::Pair::test_converge", Pair),
        Item("tests/scenarios/test_new.py::Pair::test_converge", Pair),
        Item("tests/scenarios/test_z.py::test_function"),
    ]
    seconds = {
        "tests/scenarios/test_x.py::Alone": 130.0,  # one twin, but the longest
        "tests/scenarios/test_y.py::Pair": 70.0,
        "tests/scenarios/test_z.py": 10.0,
        "tests/scenarios/test_gone.py::Renamed": 500.0,  # a scope no longer there: no effect
    }
    order = [item.nodeid for item in conftest.scheduled(items, seconds)]  # type: ignore[arg-type]
    assert order == [
        "tests/scenarios/test_new.py::Pair::test_converge",
        "tests/scenarios/test_x.py::Alone::test_converge",
        "tests/scenarios/test_x.py::Alone::test_verify",
        "tests/scenarios/test_y.py::Pair::test_converge",
        "tests/scenarios/test_z.py::test_function",
        "tests/unit/test_big.py::test_one",
    ]


def test_the_recorded_seconds_name_scenarios_that_exist():
    recorded = conftest._recorded_seconds()
    assert len(recorded) > 30, conftest.SECONDS_FILE
    root = conftest.SCENARIOS.parent.parent
    for scope in recorded:
        module, _, cls = scope.partition("::")
        source = (root / module).read_text() if (root / module).is_file() else ""
        assert source and (not cls or f"class {cls}" in source), (
            f"{conftest.SECONDS_FILE.name} names {scope}, which is gone: record the seconds "
            "again with SCENARIO_SECONDS=write make test"
        )
