"""
`make bench`: the full deploy on a fresh twin pair, timed. Prints the first converge and the
no-op re-run (median of 5), with the SSH commands per host of each. Replaces the twins of
this checkout (its namespace, see harness.py).
"""

from __future__ import annotations

import statistics

from tests.twins import harness
from tests.twins.demo import fresh_pair, replug_after_reboot
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


def bench() -> int:
    twins = fresh_pair()
    first = run("first converge")
    replug_after_reboot(twins)
    noops = [run(f"no-op run {i + 1}") for i in range(NOOP_RUNS)]
    changed = [done.changed() for done in noops if done.changed()]
    median = statistics.median(done.seconds for done in noops)
    print("\n| run | wall time | SSH commands per host |")
    print("| --- | --- | --- |")
    print(f"| first converge | {first.seconds:.1f} s | {commands(first)} |")
    print(f"| no-op re-run (median of {NOOP_RUNS}) | {median:.2f} s | {commands(noops[-1])} |")
    if changed:
        print(f"NOT IDEMPOTENT: a no-op run changed {changed[0]}")
        return 1
    return 0
