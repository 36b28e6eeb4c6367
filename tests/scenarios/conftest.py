"""
Molecule-like scenarios on booted Spark twins: create, converge, idempotence, verify,
destroy. A scenario is a test class naming its twins; its steps are its tests, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.twins import harness
from tests.twins.runner import DeployRun, run_deploy


@dataclass
class Scenario:
    twins: dict[str, harness.Twin]
    inventory: Path
    runs: list[DeployRun] = field(default_factory=list)

    def deploy(
        self, *extra: str, env: dict[str, str] | None = None, deploy: str = "deploy.py"
    ) -> DeployRun:
        result = run_deploy(self.inventory, *extra, env=env, deploy=deploy)
        self.runs.append(result)
        return result

    def write_inventory(self) -> None:
        harness.write_inventory(list(self.twins.values()), self.inventory)


@pytest.fixture(scope="class")
def scenario(request, tmp_path_factory):
    """Create the twins the test class asks for (`twins = {name: {inventory keys}}`,
    `prepare = {name: shell commands run as root after boot}`), destroy them when the class
    is done."""
    spec: dict[str, dict] = request.cls.twins
    prepare: dict[str, str] = getattr(request.cls, "prepare", {})
    twins = harness.up(tuple(spec), cable=len(spec) == 2)
    try:
        for twin in twins:
            twin.data = dict(spec[twin.name])
            if twin.name in prepare:
                twin.exec(prepare[twin.name])
        inventory = tmp_path_factory.mktemp(request.cls.__name__) / "inventory.yml"
        made = Scenario({t.name: t for t in twins}, inventory)
        made.write_inventory()
        yield made
    finally:
        harness.destroy(twins)


def assert_idempotent(run: DeployRun) -> None:
    """The second run: success, and every operation on every host reported No Change."""
    assert run.returncode == 0, run.explain()
    assert run.changed() == {}, f"second run changed something: {run.changed()}"
    assert run.errors() == {}, run.explain()
    for op in run.results["operations"]:
        assert op["hosts"] == len(op["no_change"]), op
