"""
`make demo`: fresh twins, the real deploy twice, and proof that the second run changed
nothing. The twins stay up afterwards for a look around (`make twins-down` removes them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from tests.twins import harness
from tests.twins.runner import PYINFRA

GRAND_TOTAL = re.compile(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def deploy(title: str) -> tuple[float, dict[str, str]]:
    print(
        f"\n=== {title}: pyinfra inventory.py deploy.py (SPARK_INVENTORY=inventory/twins.yml)",
        flush=True,
    )
    env = {**os.environ, "SPARK_INVENTORY": str(harness.TWINS_INVENTORY), **harness.HUB_TOKEN_ENV}
    started = time.monotonic()
    done = subprocess.run(
        [str(PYINFRA), "-y", "inventory.py", "deploy.py"],
        cwd=harness.ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    seconds = time.monotonic() - started
    sys.stderr.write(done.stderr)
    match = GRAND_TOTAL.search(done.stderr)
    if done.returncode != 0 or not match:
        raise harness.HarnessError(f"{title} failed (exit {done.returncode})")
    totals = dict(zip(("hosts", "success", "error", "no_change"), match.groups()))
    return seconds, totals


def fresh_pair() -> list[harness.Twin]:
    """Remove this checkout's twins, boot a new pair and write inventory/twins.yml for it."""
    harness.down()
    started = time.monotonic()
    twins = harness.up()
    harness.write_inventory(twins, harness.TWINS_INVENTORY)
    print(
        f"twins: {', '.join(t.name for t in twins)} booted in "
        f"{time.monotonic() - started:.1f}s; inventory/twins.yml written"
    )
    return twins


def replug_after_reboot(twins: list[harness.Twin]) -> None:
    """A twin's reboot is a new container network namespace: the cable went with it."""
    if any(harness.reboot_count(t) for t in twins):
        harness.replug(twins)
        print("twins: a twin rebooted; QSFP cable plugged in again")


def demo() -> int:
    twins = fresh_pair()
    first_s, first = deploy("First run")
    replug_after_reboot(twins)
    second_s, second = deploy("Second run")
    changed_again = second["success"] not in ("-", "0") or second["error"] not in ("-", "0")
    print("\n=== Summary")
    print(f"  first run : {first_s:5.1f}s, changes: {first['success']}")
    print(
        f"  second run: {second_s:5.1f}s, changes: {second['success']}, "
        f"no change: {second['no_change']}"
    )
    if changed_again:
        print("  NOT IDEMPOTENT: the second run changed something", file=sys.stderr)
        return 1
    print("  the second run changed nothing. Twins stay up: `make twins-down` removes them.")
    return 0
