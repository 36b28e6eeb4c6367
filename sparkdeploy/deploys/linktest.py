"""
The link test between the Sparks of a pair or cluster (files/spark-link-test in the engine
image, on every Spark at once), run two ways:

- on demand, read-only apart from its own result file (``pyinfra -y inventory.py
  linktest.py``): ``run_link_test`` takes every Spark's readiness (``LinkTestReady``), and,
  when every Spark may run it, runs it (``LinkTestRun``, a fact: pyinfra loads the hosts in
  parallel greenlets, so every Spark runs it at the same moment); the report is printed when
  the run ends, and ``judged`` (reports/failures.py) fails the host, so pyinfra exits 1, when the test
  did not pass;
- before a pair's or cluster's first start (``link_test_before_start: true``):
  ``link_test_before_start`` plans ``link_test_proven`` ahead of the engine units' start;
  pyinfra runs an operation on every host at once, so the Sparks meet at the rendezvous.

Memory: 16G all-gather buffers are 16 GiB + 16 GiB/n on each Spark, in the 128 GB of unified
memory an engine serving a model already holds most of (NV_ERR_NO_MEMORY wedges under
unified-memory pressure, field notes 2026-11 §3). So the test is refused while an engine unit
of any of the Sparks is active, unless the operator asks for it (SPARK_LINK_TEST_WHILE_SERVING=1);
either way a size whose buffers would leave MemAvailable under link_test_memory_floor_gb is
skipped on every Spark and the verdict says it was sized down.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, Host, OperationError, StringCommand, operation

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Place
from sparkdeploy.engine_plan.linktest import CONTAINER, group_problems, link_test_run
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.facts.linktest import LinkTestReady, LinkTestRun, Readiness, RunOutput
from sparkdeploy.facts.store import gathered, run_store
from sparkdeploy.reports import notices
from sparkdeploy.reports.failures import expected, judged, status_command
from sparkdeploy.reports.linkchart import result_series, svg_chart
from sparkdeploy.reports.linktest import SparkRun, format_report, judge, rail_speed

RESULT = "linktest"  # the run store's result key
WHILE_SERVING_ENV = "SPARK_LINK_TEST_WHILE_SERVING"
GRACE = 60  # seconds the docker run may take beyond the test's own timeout (start, teardown)


def members(target: Host) -> list[Host]:
    """The Sparks of ``target``'s pair or cluster: every host of the inventory with its head,
    in rank order."""
    head = target.data.place.head
    found = [other for other in state.inventory if other.data.place.head == head]
    return sorted(found, key=lambda other: other.data.place.rank)


def readiness(target: Host) -> Readiness:
    """``target``'s LinkTestReady, gathered once per run (every member asks for all)."""
    plan: EnginePlan | None = target.data.get("engine_plan")
    spark: SparkSettings = target.data.spark
    return gathered(
        target,
        LinkTestReady,
        units=list(plan.units) if plan else [],
        interfaces=[rail.interface for rail in target.data.place.rails],
        sysfs_root=spark.sysfs_root,
        image=plan.image if plan else "",
    )


def spark_refusal(name: str, plan: EnginePlan, ready: Readiness, while_serving: bool) -> str:
    """Why one Spark cannot run the test now ("" when it can)."""
    status, detail = ready.image
    if status != 0:
        return (
            f"{name}: the engine image {plan.image} is not on the Spark ({detail}); run the deploy"
        )
    if not ready.script:
        return f"{name}: spark-link-test is not installed; run the deploy"
    active = [unit for unit, value in ready.active.items() if value in ("active", "activating")]
    if active and not while_serving:
        return (
            f"{name}: {', '.join(active)} is active; the test's buffers would compete with the "
            "engine's for unified memory. Stop it (sudo systemctl stop UNIT) or run with "
            f"{WHILE_SERVING_ENV}=1 (sizes that do not fit are then skipped)"
        )
    return ""


def problems_of(group: list[Host]) -> list[str]:
    """Why these Sparks cannot run the test together, from their places, plans and settings
    and whether this run reaches each (engine_plan.linktest.group_problems)."""
    return group_problems(
        {m.name: m.data.place for m in group},
        {m.name: m.data.get("engine_plan") for m in group},
        {m.name: m.data.spark for m in group},
        {m.name for m in group if state.is_host_in_limit(m)},
    )


def group_refusal(target: Host, while_serving: bool) -> str:
    """Why the Sparks of ``target``'s group cannot run the test together ("" when they can)."""
    group = members(target)
    problems = problems_of(group)
    if problems:
        return "; ".join(problems)
    for member in group:
        refusal = spark_refusal(
            member.name, member.data.engine_plan, readiness(member), while_serving
        )
        if refusal:
            return refusal
    return ""


def rail_speeds(target: Host, ready: Readiness) -> tuple[tuple[str, str, str], ...]:
    root = target.data.spark.sysfs_root
    return tuple(
        (rail.interface, *rail_speed(rail.interface, ready.speeds.get(rail.interface, ""), root))
        for rail in target.data.place.rails
    )


def report() -> str:
    """The link test report of the Sparks of this run, when the run ends."""
    results = run_store(state).results
    runs = [
        results[(target.name, RESULT)]
        for target in state.inventory
        if (target.name, RESULT) in results
    ]
    if not runs:
        return "--> Link test: no Spark ran it"
    head = min(runs, key=lambda spark: spark.rank)
    target = state.inventory.get_host(head.name)
    plan: EnginePlan | None = target.data.get("engine_plan")
    place: Place = target.data.place
    master = f"{place.head_ip}:{target.data.spark.link_test_port}"
    text = format_report(runs, plan.image if plan else "(no engine image)", master)
    return text + write_chart(runs, Path.cwd() / f"linktest-{head.name}.svg")


def write_chart(runs: list[SparkRun], path: Path) -> str:
    """Write the SVG chart of the runs' results on the laptop (the results themselves are
    stored on each Spark); the report's line saying where ("" when no Spark gave one)."""
    results = [
        (spark.rank, spark.name, spark.run.result)
        for spark in sorted(runs, key=lambda spark: spark.rank)
        if spark.run is not None and spark.run.result is not None
    ]
    if not results:
        return ""
    first = results[0][2]
    title = (
        f"Link test {first.when}: {first.nodes} Sparks, {'passed' if first.passed else 'FAILED'}"
    )
    text = svg_chart(
        result_series([(name, result) for _, name, result in results]), first.min_busbw, title
    )
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        return f"\n    chart: not written to {path} ({error.strerror})"
    return f"\n    chart: {path} (bus bandwidth per size, the threshold dashed)"


def run_link_test(while_serving: bool = False) -> None:
    """Run the link test on this Spark with the others of its pair or cluster (each host's
    greenlet calls it), record what it gave, and judge it."""
    place: Place = host.data.place
    spark: SparkSettings = host.data.spark
    notices.install(final_only=False)
    notices.at_end(RESULT, report)
    refusal = group_refusal(host, while_serving)
    ready = readiness(host) if place.rails else None
    speeds = rail_speeds(host, ready) if ready is not None else ()
    run: RunOutput | None = None
    if not refusal:
        planned = link_test_run(host.data.engine_plan, place, spark)
        run = gathered(
            host,
            LinkTestRun,
            words=list(planned.words),
            timeout=spark.link_test_timeout + GRACE,
        )
    mine = SparkRun(host.name, place.rank, run, refusal, speeds)
    run_store(state).results[(host.name, RESULT)] = mine
    passed, verdict = judge([mine])
    judged(
        name="Judge the link test",
        failed="" if passed else f"the link test did not pass: {verdict}",
        then=(status_command(host.name) + "   (its rails, RoCE GID and last link test)",),
    )


# ---------------------------------------------------------------------------------------
# Before the first start of a pair or cluster (link_test_before_start).


def first_start(group: list[Host]) -> bool:
    """No engine unit of any Spark of the group is enabled or active yet."""
    for member in group:
        plan: EnginePlan | None = member.data.get("engine_plan")
        units = host_state(member).units
        for unit in plan.units if plan else ():
            active, enabled = units.get(unit, ("inactive", "absent"))
            if active == "active" or enabled not in ("absent", "not-found", ""):
                return False
    return True


@expected(
    "link test before the first start",
    then=(status_command() + "   (the rails, RoCE GIDs and last link test)",),
)
def _prove(state, host, words: list[str], timeout: int) -> None:
    command = LinkTestRun().command(words, timeout)
    ok, output = host.run_shell_command(StringCommand(command), _sudo=True)
    run = LinkTestRun().process(output.stdout_lines)
    mine = SparkRun(host.name, host.data.place.rank, run, "", ())
    passed, verdict = judge([mine])
    for line in run.lines:
        if line.startswith("PASS") or line.startswith("FAIL") or "GB/s" in line:
            logger.info(f"{host.print_prefix}{line}")
    if not passed:
        tail = "\n".join(run.lines[-20:])
        raise OperationError(
            f"the link test before the first start did not pass: {verdict}\n{tail}"
        )


@operation()
def link_test_proven(words: list[str], timeout: int):
    """
    Run the link test on this Spark (every Spark of the pair or cluster runs it in the same
    operation, so at once) and fail unless it passes; its result is stored as the on-demand
    test stores it.

    + words: the test's `docker run` command line (engine_plan.linktest.link_test_run)
    + timeout: seconds it may take
    """
    yield FunctionCommand(_prove, (words, timeout), {})


def link_test_before_start(plan: EnginePlan | None, spark: SparkSettings, place: Place) -> None:
    """The hook of ``link_test_before_start``: called by the engine deploy after the image,
    environment files and units are in place and before the units are started. Plans the
    test when the setting is on and no engine unit of the pair or cluster was ever enabled
    or active; the setting must be the same on every Spark of the group, or no Spark runs it
    (a lone rank would wait at the rendezvous until its timeout)."""
    if not spark.link_test_before_start or plan is None or not place.linked:
        return
    group = members(host)
    if not all(member.data.spark.link_test_before_start for member in group):
        notices.add(
            host.name,
            "link_test_before_start is not set on every Spark of the group: no link test before "
            "the first start",
            logging.WARNING,
        )
        return
    problems = problems_of(group)
    if problems:
        notices.add(host.name, "no link test before the first start: " + "; ".join(problems))
        return
    if not first_start(group):
        return
    planned = link_test_run(plan, place, spark)
    link_test_proven(
        name=f"Prove the link before the first start ({CONTAINER}, rank {place.rank})",
        words=list(planned.words),
        timeout=spark.link_test_timeout + GRACE,
    )
