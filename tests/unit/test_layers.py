"""
The folder tree is the architecture: data flows one way, and these tests keep it so.
Imports are read with ``ast`` from every module of sparkdeploy/ and tools/ (nothing is
imported to find them, so a cycle hidden behind ``TYPE_CHECKING`` counts too).
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparkdeploy"

# What each part may import (besides itself). Inventory YAML -> config -> engine_plan ->
# deploys -> files on the Spark; knowledge is data everyone may read; reports print.
ALLOWED: dict[str, set[str]] = {
    "knowledge": set(),
    "escape": set(),
    "render": {"escape"},
    "config": {"escape", "knowledge"},
    "engine_plan": {"config", "knowledge"},
    "inventory": {"config", "engine_plan"},
    # pyinfra's command-line overrides (--data, --ssh-*) judged against the inventory's keys,
    # by the inventory entry before anything connects.
    "overrides": {"config"},
    # What is read on a Spark and what it means (commands, parsers, findings): shared by the
    # facts (over SSH) and the MCP server (on the Spark).
    "readings": {"escape", "knowledge"},
    # The MCP server on the Spark: it runs the readings itself and checks with the planning
    # code, shipped to the Spark without pyinfra (deploys/agent.py).
    "agent": {"config", "engine_plan", "escape", "knowledge", "readings"},
    "facts": {"config", "engine_plan", "escape", "knowledge", "readings", "render"},
    "fitness": {"config", "facts"},
    "reports": {
        "config",
        "engine_plan",
        "escape",
        "facts",
        "fitness",
        "knowledge",
        "readings",
        "render",
    },
    # The Spark's own scripts, shipped as they are (package data that happens to be Python).
    "files": set(),
    "deploys": {
        "agent",
        "config",
        "engine_plan",
        "escape",
        "facts",
        "fitness",
        "knowledge",
        "readings",
        "render",
        "reports",
    },
    # The files pyinfra runs (the deploy's table of contents, the inventory, the read-only
    # tools) and the spark-deploy command, which checks offline and then hands them to pyinfra.
    "entry": {"config", "deploys", "inventory", "overrides", "reports"},
    "cli": {"config", "deploys", "engine_plan", "entry", "escape", "inventory"},
}
# Modules that must not touch pyinfra: the plan is made before any connection, and the MCP
# server runs them on the Spark, where pyinfra is not installed.
PURE = ("knowledge", "config", "engine_plan", "inventory", "readings", "agent")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def imports(path: Path) -> frozenset[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved). Parsed once
    a run: the layer tests each walk the whole package, and the parse was most of their time."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = (
        module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    )
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return frozenset(found)


def graph(*folders: str) -> dict[str, set[str]]:
    """Our modules -> the modules of ours they import."""
    paths = [p for folder in folders for p in (ROOT / folder).rglob("*.py")]
    names = {module_name(p): p for p in paths}
    return {
        name: {m for m in imports(path) if m in names and m != name} for name, path in names.items()
    }


def part(module: str) -> str:
    """sparkdeploy.deploys.qsfp.proof -> deploys."""
    return module.split(".")[1] if module.count(".") else module


def test_each_part_imports_only_what_its_layer_allows():
    wrong = [
        f"{module} imports {target}"
        for module, targets in graph("sparkdeploy").items()
        if module != "sparkdeploy"
        for target in targets
        if target != "sparkdeploy"
        and part(target) != part(module)
        and part(target) not in ALLOWED[part(module)]
    ]
    assert wrong == []


def test_no_import_circle():
    edges = graph("sparkdeploy", "tools")
    state: dict[str, int] = {}  # 1 visiting, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_planning_never_touches_pyinfra():
    touching = sorted(
        module
        for module, path in ((module_name(p), p) for p in PACKAGE.rglob("*.py"))
        if part(module) in PURE and any(m.split(".")[0] == "pyinfra" for m in imports(path))
    )
    assert touching == []


def test_no_deploy_module_imports_the_build_time_tools():
    users = sorted(
        module
        for module, targets in graph("sparkdeploy", "tools").items()
        if module.startswith("sparkdeploy") and any(t.startswith("tools") for t in targets)
    )
    assert users == []


# The rooms of engine_plan in the order data flows through them: each module may import only
# the ones before it. Knowledge applied to settings first (the effective flags and
# environment, the GB10 rules, the alerts), then the units and their command lines, the
# planners that each return their part of the plan, the pipeline that composes EnginePlan,
# and last what reads a finished plan.
ENGINE_PLAN_ROOMS = (
    "effective",
    "rules",
    "alerts",
    "launch",
    "planners",
    "mounts",
    "image_launch",
    "plan",
    "files",
    "image_check",
    "linktest",
)


def test_engine_plan_rooms_import_only_the_rooms_before_them():
    package = "sparkdeploy.engine_plan"
    modules = {
        module: targets
        for module, targets in graph("sparkdeploy").items()
        if module.startswith(package + ".")
    }
    assert sorted(m.rsplit(".", 1)[1] for m in modules) == sorted(ENGINE_PLAN_ROOMS)
    order = {f"{package}.{room}": index for index, room in enumerate(ENGINE_PLAN_ROOMS)}
    wrong = [
        f"{module} imports {target}"
        for module, targets in modules.items()
        for target in targets
        if target in order and order[target] >= order[module]
    ]
    assert wrong == []


def test_engine_plan_rooms_say_what_they_may_import():
    """Each new room of engine_plan names its room and what it may import in its docstring."""
    for room in ("launch", "planners", "mounts", "image_launch", "plan"):
        text = ast.get_docstring(ast.parse((PACKAGE / "engine_plan" / f"{room}.py").read_text()))
        assert text is not None and "Room: engine_plan. May import config and knowledge" in text


def test_probes_know_only_their_feature():
    """The host-state fact's probes (facts/probes/) are pure: no pyinfra, and nothing of the
    facts that run them (only the probes' own base module)."""
    reaching = sorted(
        f"{module} imports {target}"
        for module, targets in graph("sparkdeploy").items()
        if module.startswith("sparkdeploy.facts.probes")
        for target in targets
        if part(target) == "facts" and not target.startswith("sparkdeploy.facts.probes")
    )
    touching = sorted(
        module_name(path)
        for path in (PACKAGE / "facts" / "probes").rglob("*.py")
        if any(m.split(".")[0] == "pyinfra" for m in imports(path))
    )
    assert reaching == [] and touching == []


def test_config_knows_no_plans_shape():
    """No Protocol in config/ mirrors a plan: what reads a plan lives beside it
    (engine_plan/files.py holds the plan's managed files)."""
    protocols = sorted(
        f"{module_name(path)}.{node.name}"
        for path in (PACKAGE / "config").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).endswith("Protocol") for base in node.bases)
    )
    assert protocols == []


# spark-fetch's parts (files/<name>.py, shipped to the Spark beside spark-fetch and imported
# by name): what each may import of the others, one way, fetch_errors first. The job itself
# (fetch_job.py, the command and its main) may import them all.
BASE = {"fetch_spec", "fetch_errors", "fetch_progress", "fetch_names"}  # what a job builds on
FETCH_PARTS: dict[str, set[str]] = {
    "fetch_spec": set(),
    "fetch_errors": set(),
    "fetch_progress": {"fetch_errors"},
    "fetch_names": {"fetch_errors"},
    "fetch_hub": BASE,
    "docker_pull": set(),  # the pull through the Docker Engine API: only for fetch_docker
    "fetch_docker": BASE | {"docker_pull"},
    "fetch_channel": BASE,
    "fetch_serve": BASE | {"fetch_docker", "fetch_channel"},
    "fetch_copy": BASE | {"fetch_hub", "fetch_channel"},
    "fetch_copy_image": BASE | {"fetch_docker", "fetch_channel"},
}


def top_imports(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports (``__future__`` left out)."""
    tree = ast.parse(path.read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}  # fmt: skip
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return {module.split(".")[0] for module in modules} - {"__future__"}


def test_what_is_shipped_with_spark_fetch_needs_only_python():
    """sparkdeploy/files/fetch_spec.py (the job specs, imported by the deploy too), spark-fetch
    and its parts: the Spark's python3 and each other, nothing else (never sparkdeploy);
    DOCKER defined once, in the spec module."""
    from sparkdeploy.config.paths import FETCH_MODULES

    assert set(FETCH_PARTS) == set(FETCH_MODULES)  # every part is shipped (config/paths.py)
    shipped = [*(PACKAGE / "files").glob("fetch_*.py"), PACKAGE / "files" / "docker_pull.py"]
    assert {p.stem for p in shipped} == {*FETCH_PARTS, "fetch_job"}
    for name in ("fetch_job", *FETCH_PARTS):
        tops = top_imports(PACKAGE / "files" / f"{name}.py")
        allowed = set(FETCH_PARTS) if name == "fetch_job" else FETCH_PARTS[name]
        assert "sparkdeploy" not in tops, name
        assert tops - sys.stdlib_module_names <= allowed, (name, tops - sys.stdlib_module_names)
    texts = {p.name: p.read_text() for p in shipped}
    assert [name for name, text in texts.items() if "DOCKER = " in text] == ["fetch_spec.py"]
    assert texts["fetch_spec.py"].count("DOCKER = ") == 1


def test_spark_fetch_parts_say_what_they_may_import_and_must_not_know():
    for name in ("fetch_job", *FETCH_PARTS):
        text = ast.get_docstring(ast.parse((PACKAGE / "files" / f"{name}.py").read_text()))
        assert text is not None, name
        words = " ".join(text.split())
        assert "May import" in words or "may import" in words, name
        assert "Must not know" in words or "must not know" in words, name


def test_the_fetch_progress_renderer_is_pure_and_its_board_only_writes_it():
    """deploys/fetch/progress.py: statuses in, text out (no pyinfra, no I/O modules);
    deploys/fetch/board.py, the side effect, renders nothing itself: only with progress.py."""
    fetch = PACKAGE / "deploys" / "fetch"
    pure = {m.split(".")[0] for m in imports(fetch / "progress.py")} - {"__future__", "typing"}
    assert pure == set(), pure
    ours = {m for m in imports(fetch / "board.py") if m.startswith("sparkdeploy")}
    assert ours <= {"sparkdeploy.deploys.fetch.progress"} | {
        f"sparkdeploy.deploys.fetch.progress.{name}"
        for name in ("board_lines", "due_lines", "redraw")
    }, ours


ROOM_LINES = 60  # a function longer than this is a room to split (the developers' brief)


def python_sources() -> list[Path]:
    """Every Python source of the package: its modules and the scripts shipped to a Spark
    without a .py suffix (files/spark-engine-health, files/spark-link-test, ...)."""
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix not in ("", ".py"):
            continue
        if path.suffix == "" and not path.read_bytes().startswith(b"#!/usr/bin/env python3"):
            continue
        found.append(path)
    return found


def function_lengths(path: Path) -> list[tuple[int, str, int]]:
    """(first line, name, lines) of every function in ``path``."""
    return [
        (node.lineno, node.name, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_no_function_is_longer_than_a_room():
    sources = python_sources()
    assert PACKAGE / "files" / "spark-link-test" in sources  # the scripts are counted too
    long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length})"
        for path in sources
        for line, name, length in function_lengths(path)
        if length > ROOM_LINES
    ]
    assert not long, long
