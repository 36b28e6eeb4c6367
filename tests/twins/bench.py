"""
`make bench`: the full deploy on a fresh twin pair, timed. Prints the first converge (fresh
twins to a serving engine: image and model fetched, copied to the other Spark, engine
started and health-checked) and the no-op re-run (median of 5), with the SSH commands per
host of each, and the bytes the pair fetched from the stand-in Hub and registry against
one copy of the model and the image. Replaces the twins of this checkout (its namespace,
see harness.py).
"""

from __future__ import annotations

import statistics

import yaml

from sparkdeploy.inventory import build_inventory
from tests.twins import harness
from tests.twins.demo import fresh_pair, replug_after_reboot
from tests.twins.fetched import folder_bytes, image_bytes, internet_bytes
from tests.twins.runner import DeployRun, run_deploy

NOOP_RUNS = 5
TOKEN_ENV = harness.HUB_TOKEN_ENV


def run(title: str) -> DeployRun:
    done = run_deploy(harness.TWINS_INVENTORY, env=TOKEN_ENV)
    if done.returncode != 0:
        raise harness.HarnessError(f"{title} failed:\n{done.stderr[-3000:]}")
    return done


def commands(done: DeployRun) -> str:
    return ", ".join(f"{host} {count}" for host, count in sorted(done.remote_commands().items()))


def planned_image(name: str) -> str:
    """The engine image the plan gives Spark ``name`` (not `docker ps`: after the head's
    reboot the engine may still be starting, with no container yet)."""
    document = yaml.safe_load(harness.TWINS_INVENTORY.read_text(encoding="utf-8"))
    planned = build_inventory(document, str(harness.TWINS_INVENTORY), environ=TOKEN_ENV)
    return planned.engine_plans[name].image


def fetched(twins: list[harness.Twin]) -> str:
    """The pair's bytes from the internet, against one model and one image."""
    head = twins[0]
    plan = harness.DEMO_HOSTS[head.name]
    folders = [
        f"/opt/models/{plan[key].rsplit('/', 1)[1]}" for key in ("model_repo", "draft_model_repo")
    ]
    image = planned_image(head.name)
    one = folder_bytes(head, *folders) + image_bytes(head, image)
    got = sum(internet_bytes(twin) for twin in twins)
    return f"{got / 1e6:.2f} MB = {got / one:.2f} x (model + draft + image: {one / 1e6:.2f} MB)"


def bench() -> int:
    twins = fresh_pair()
    first = run("first converge (fresh to serving)")
    bytes_line = fetched(twins)
    replug_after_reboot(twins)
    noops = [run(f"no-op run {i + 1}") for i in range(NOOP_RUNS)]
    changed = [done.changed() for done in noops if done.changed()]
    median = statistics.median(done.seconds for done in noops)
    print("\n| run | wall time | SSH commands per host |")
    print("| --- | --- | --- |")
    print(f"| fresh to serving (first converge) | {first.seconds:.1f} s | {commands(first)} |")
    each = " ".join(f"{done.seconds:.2f}" for done in noops)
    print(
        f"| no-op re-run (median of {NOOP_RUNS}: {each}) | {median:.2f} s | {commands(noops[-1])} |"
    )
    print(f"\nfetched from the stand-in Hub and registry by the pair: {bytes_line}")
    if changed:
        print(f"NOT IDEMPOTENT: a no-op run changed {changed[0]}")
        return 1
    return 0
