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
    order = [item.nodeid for item in conftest.scheduled(items)]  # type: ignore[arg-type]
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
