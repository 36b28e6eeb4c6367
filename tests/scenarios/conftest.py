"""
Molecule-like scenarios on booted Spark twins: create, converge, idempotence, verify,
destroy. A scenario is a test class naming its twins; its steps are its tests, in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.twins import harness
from tests.twins.prepared import prepared_image
from tests.twins.runner import DeployRun, run_deploy


@dataclass
class Scenario:
    twins: dict[str, harness.Twin]
    inventory: Path
    runs: list[DeployRun] = field(default_factory=list)

    def deploy(
        self, *extra: str, env: dict[str, str] | None = None, deploy: str = "deploy.py"
    ) -> DeployRun:
        result = run_deploy(self.inventory, *extra, env=env, deploy=deploy, warm=True)
        self.runs.append(result)
        return result

    def write_inventory(self) -> None:
        harness.write_inventory(list(self.twins.values()), self.inventory)

    @property
    def switch(self) -> harness.Switch | None:
        """The QSFP switch the twins hang off, if they do."""
        return next((t.switch for t in self.twins.values() if t.switch is not None), None)


# Three Sparks on a QSFP switch: the demo pair's keys, spark-c like spark-b, and the rails of
# Spark n on 192.168.{100+i}.n/24 (harness.host_data).
SWITCH_TRIO = harness.host_data(harness.spark_names(3), "switch")


@contextmanager
def made_scenario(
    spec: dict[str, dict],
    prepare: dict[str, str],
    fabric: harness.Fabric | None,
    inventory: Path,
    fresh: bool = False,
) -> Iterator[Scenario]:
    """Twins named and keyed by `spec`, wired by `fabric` (None: a pair gets its cable),
    `prepare` run in them as root after boot; destroyed (with their switch) afterwards. They
    start from the prepared image (tests/twins/prepared.py: a deploy has been there once),
    or from the plain image of a freshly imaged Spark when `fresh`."""
    image = harness.build_image if fresh else prepared_image
    twins = harness.up(tuple(spec), cable=len(spec) == 2, fabric=fabric, image=image)
    try:
        for twin in twins:
            twin.data = dict(spec[twin.name])
            if fabric == "ring":  # where the others reach it, known once it runs
                twin.data["management_address"] = harness.container_ip(twin)
            if twin.name in prepare:
                twin.exec(prepare[twin.name])
        made = Scenario({t.name: t for t in twins}, inventory)
        made.write_inventory()
        yield made
    finally:
        harness.destroy(twins)


@pytest.fixture(scope="class")
def scenario(request, tmp_path_factory):
    """Create the twins the test class asks for (`twins = {name: {inventory keys}}`,
    `prepare = {name: shell commands run as root after boot}`, `fabric = "switch"` to hang
    them off a QSFP switch instead of cabling a pair, `fresh = True` for the plain image of a
    freshly imaged Spark instead of the prepared one), destroy them when the class is done."""
    inventory = tmp_path_factory.mktemp(request.cls.__name__) / "inventory.yml"
    with made_scenario(
        request.cls.twins,
        getattr(request.cls, "prepare", {}),
        getattr(request.cls, "fabric", None),
        inventory,
        getattr(request.cls, "fresh", False),
    ) as made:
        yield made


@pytest.fixture(scope="module")
def switch_trio(tmp_path_factory):
    """spark-a, spark-b and spark-c on a QSFP switch (SWITCH_TRIO's inventory keys), shared
    by the tests of a module and destroyed, switch included, after its last one. Twins are
    named per namespace, so a module using it names no spark-a/b/c in a `scenario` class."""
    inventory = tmp_path_factory.mktemp("switch-trio") / "inventory.yml"
    with made_scenario(SWITCH_TRIO, {}, "switch", inventory) as made:
        yield made


def take_chart(said: str) -> Path:
    """The link test's chart, named on its report's `chart:` line and written in the folder
    pyinfra ran from (the checkout, for the scenarios): checked to be an SVG, then removed so
    that no run leaves it in the checkout."""
    [line] = [line for line in said.splitlines() if line.strip().startswith("chart: ")]
    chart = Path(line.split()[1])
    text = chart.read_text(encoding="utf-8")
    chart.unlink()
    assert text.startswith("<svg") and "</svg>" in text, text[:200]
    return chart


def assert_idempotent(run: DeployRun) -> None:
    """The second run: success, and every operation on every host reported No Change."""
    assert run.returncode == 0, run.explain()
    assert run.changed() == {}, f"second run changed something: {run.changed()}"
    assert run.errors() == {}, run.explain()
    for op in run.results["operations"]:
        assert op["hosts"] == len(op["no_change"]), op
