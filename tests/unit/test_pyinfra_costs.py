"""
The answers sparkdeploy.entry.pyinfra_costs gives in place of pyinfra's are pyinfra's: the
operation order from the same frame (deploy file found, not found, none; CLI or not; a call
spread over lines), the global arguments; and only pyinfra PYINFRA gets them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pyinfra
import pyinfra.api.util
import pytest

from sparkdeploy.entry import pyinfra_costs

PYINFRAS_ORDER = pyinfra.api.util.get_operation_order_from_stack  # never rebound


def both(state: SimpleNamespace) -> tuple[list[int], list[int]]:
    """pyinfra's answer and ours, asked from the same frame."""
    return PYINFRAS_ORDER(cast(Any, state)), pyinfra_costs.operation_order(state)


def nested(state: SimpleNamespace, depth: int) -> tuple[list[int], list[int]]:
    if depth:
        return nested(
            state,
            depth - 1,
        )
    return both(state)


@pytest.mark.parametrize("cli", [True, False])
@pytest.mark.parametrize("deploy_file", [__file__, "/nowhere/deploy.py", None])
def test_the_operation_order_is_pyinfras(monkeypatch, cli, deploy_file):
    monkeypatch.setattr(pyinfra, "is_cli", cli)
    state = SimpleNamespace(current_deploy_filename=deploy_file, current_op_file_number=7)
    theirs, ours = nested(state, 3)
    assert ours == theirs
    if deploy_file == __file__:  # this file's frames, from the first on
        assert len(ours) >= 5 + cli


def test_the_global_arguments_are_pyinfras():
    theirs = pyinfra_costs._ALL_GLOBAL_ARGUMENTS()
    assert pyinfra_costs.global_arguments() == theirs
    assert pyinfra_costs.global_arguments() is not pyinfra_costs.global_arguments()
    assert "_sudo" in dict(theirs)


def test_applied_to_the_release_read_only(monkeypatch):
    # the modules (pyinfra.api.operation is also the name of pyinfra's decorator)
    operation, arguments, facts = (
        pyinfra_costs._OPERATION,
        pyinfra_costs._ARGUMENTS,
        pyinfra_costs._FACTS,
    )
    pyinfras = {
        (operation, "get_operation_order_from_stack"): PYINFRAS_ORDER,
        (arguments, "all_global_arguments"): pyinfra_costs._ALL_GLOBAL_ARGUMENTS,
        (facts, "all_global_arguments"): pyinfra_costs._ALL_GLOBAL_ARGUMENTS,
    }
    for (module, name), function in pyinfras.items():  # restored after the test
        monkeypatch.setattr(module, name, function)
    monkeypatch.setattr(pyinfra, "__version__", "3.11.0")
    assert not pyinfra_costs.apply()
    assert all(getattr(module, name) is f for (module, name), f in pyinfras.items())

    monkeypatch.setattr(pyinfra, "__version__", pyinfra_costs.PYINFRA)
    assert pyinfra_costs.apply()
    assert operation.get_operation_order_from_stack is pyinfra_costs.operation_order
    assert arguments.all_global_arguments is pyinfra_costs.global_arguments
    assert facts.all_global_arguments is pyinfra_costs.global_arguments


def test_the_pinned_release_is_the_one_read():
    requirements = pyinfra_costs.__file__.rsplit("/sparkdeploy/", 1)[0] + "/requirements.txt"
    with open(requirements, encoding="utf-8") as pins:
        assert f"pyinfra=={pyinfra_costs.PYINFRA}\n" in pins.read()
