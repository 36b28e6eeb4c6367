"""
The spark-deploy command, for an installed package (`pip install .`, pipx, uv tool):

    spark-deploy check INVENTORY            # offline: validate and print the plan, no SSH
    spark-deploy deploy INVENTORY [pyinfra options...]
    spark-deploy status INVENTORY [pyinfra options...]
    spark-deploy diagnose INVENTORY [pyinfra options...]
    spark-deploy linktest INVENTORY [pyinfra options...]
    spark-deploy --version

``check`` validates with the loader the pyinfra inventory uses (the model's class read from
the local Hugging Face cache only, unless --online) and prints per Spark what the deploy
would write: each engine unit's ExecStart line, the container's environment (secrets
redacted), the warnings, the security summary and the GB10 rules that may apply because the
model's class could not be read. The other commands run pyinfra with the packaged inventory
and deploy files (sparkdeploy/entry/) and SPARK_INVENTORY set; the words after INVENTORY
are pyinfra's (``-y``, ``--limit spark-1``, ``--dry``...).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

from sparkdeploy import __version__
from sparkdeploy.config.errors import InventoryError, terminal_width, wrap_item
from sparkdeploy.config.invocation import CLI_ENV, INVENTORY_ENV, STATUS_JSON_ENV
from sparkdeploy.config.model_source import read_model_class
from sparkdeploy.config.paths import CONTAINER_ENV
from sparkdeploy.config.security import security_summary
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.engine.units import unit_text
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.entry import path as entry_path
from sparkdeploy.escape import redact
from sparkdeploy.inventory import Inventory, load_inventory

INVALID = 2  # the inventory cannot be deployed (as inventory.py exits)
# The commands that run pyinfra, each with the packaged file of its name (sparkdeploy/entry/).
PYINFRA_COMMANDS = {
    "deploy": "prepare the Sparks (pyinfra inventory.py deploy.py)",
    "status": "the state of every Spark in one table, changing nothing",
    "diagnose": "the engines' journals and kernel log against the known GB10 failures",
    "linktest": "prove the link between the Sparks of a pair or cluster",
}
# Read-only runs: pyinfra's -y is passed for them, so they never wait for Enter (nor end in
# an EOFError without a terminal, in cron or CI).
READ_ONLY = ("status", "diagnose")
JSON_OPTION = "--json"  # status: the status as JSON (not pyinfra's operation JSON)
EPILOGS = {
    "status": "read-only: runs without asking (pyinfra -y). --json [FILE] (after INVENTORY) "
    "writes the status itself as JSON (checks x Sparks, verdict; docs/status.md) to FILE, or "
    "to stdout without FILE or with -, instead of pyinfra's operation JSON. Exits 1 when a "
    "check FAILs.",
    "diagnose": "read-only: runs without asking (pyinfra -y). Exits 1 when a unit failed.",
}
# What a GB10 rule scoped to a model class says when the class is unknown (engine_plan/rules.py).
MAY_APPLY = "applies if the model"


def parser() -> argparse.ArgumentParser:
    """The command line: check, and the pyinfra runs, each taking the inventory YAML."""
    top = argparse.ArgumentParser(
        prog="spark-deploy", description="Prepare NVIDIA DGX Sparks to serve LLMs."
    )
    top.add_argument("--version", action="version", version=f"spark-deploy {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser("check", help="validate the inventory and print the plan, offline")
    check.add_argument("inventory", metavar="INVENTORY", help="the inventory YAML")
    check.add_argument(
        "--online",
        action="store_true",
        help="read each model's config.json from the Hub when the local cache lacks it",
    )
    for name, text in PYINFRA_COMMANDS.items():
        command = commands.add_parser(name, help=text, description=text, epilog=EPILOGS.get(name))
        command.add_argument("inventory", metavar="INVENTORY", help="the inventory YAML")
        command.add_argument(
            "pyinfra_args", nargs=argparse.REMAINDER, metavar="...", help="pyinfra's options"
        )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    if arguments.command != "check":
        return run_pyinfra(arguments.command, arguments.inventory, arguments.pyinfra_args)
    try:
        return check(arguments.inventory, online=arguments.online)
    except BrokenPipeError:  # `spark-deploy check ... | head`: the reader left, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


# -- check ------------------------------------------------------------------------------------


def check(path: str, online: bool = False, environ: Mapping[str, str] | None = None) -> int:
    """Validate ``path`` as the pyinfra inventory does and print the plan; 0, or 2 with the
    loader's message when it is invalid."""
    environ = os.environ if environ is None else environ
    offline = {} if online else {"HF_HUB_OFFLINE": "1"}  # the local cache only, no request
    reader = functools.partial(read_model_class, environ={**environ, **offline})
    try:
        inventory = load_inventory(path, reader)
    except InventoryError as error:
        print(error.wrapped(terminal_width(sys.stderr)), file=sys.stderr)
        return INVALID
    print(plan_text(inventory, environ, online, terminal_width(sys.stdout)))
    return 0


def plan_text(
    inventory: Inventory,
    environ: Mapping[str, str],
    online: bool = False,
    width: int | None = None,
) -> str:
    """The plan per Spark, then the warnings, the rules that may apply with how to make them
    certain, and the security summary, as ``check`` prints them; the warnings wrapped at
    ``width`` (None: one line each; an ExecStart line is never wrapped: it is pasted)."""
    lines = [f"{inventory.path}: valid, {len(inventory.sparks)} Spark(s)"]
    for name, spark in inventory.sparks.items():
        lines += ["", f"{name} ({spark.ssh_host})"]
        plan = inventory.engine_plans.get(name)
        lines += engine_lines(plan, spark) if plan is not None else ["  no engine"]
    rules = [w for w in inventory.warnings if MAY_APPLY in w]
    others = [w for w in inventory.warnings if MAY_APPLY not in w]
    lines += section("warnings", others, width)
    lines += section(
        "GB10 rules that may apply (the model's class could not be read)", rules, width
    )
    lines += [*wrap_item(make_certain(inventory.path, online), width, "  ")] if rules else []
    summary = security_summary(inventory.sparks, environ)
    lines += ["", summary] if summary else ["", "Security settings: the defaults."]
    return "\n".join(lines)


def engine_lines(plan: EnginePlan, spark: SparkSettings) -> list[str]:
    """Each unit of ``plan`` with its ExecStart line as the unit file holds it, then the
    container's environment with its secrets redacted."""
    release = f" {plan.version}" if plan.version else ""
    lines = [f"  engine {plan.engine}{release}, image {plan.image}, port {plan.port}"]
    env_file = CONTAINER_ENV.format(name=plan.name)
    for service in plan.services:
        text = unit_text(plan, service, spark, env_file)
        starts = [line for line in text.splitlines() if line.startswith("ExecStart=")]
        lines += [f"  unit {service.unit}:", *(f"    {redact(line)}" for line in starts)]
    lines.append(f"  environment ({env_file}):")
    lines += [f"    {redact(f'{key}={value}')}" for key, value in plan.env] or ["    (none)"]
    return lines


def section(title: str, items: Sequence[str], width: int | None = None) -> list[str]:
    """A titled list (nothing when empty), each item wrapped at ``width``."""
    return (
        ["", f"{title}:", *(line for item in items for line in wrap_item(item, width))]
        if items
        else []
    )


def make_certain(path: str, online: bool) -> str:
    """How to turn "may apply" into a verdict: read the model's config.json."""
    if not online:
        return (
            f"To make it certain: spark-deploy check {path} --online reads each model's "
            "config.json from the Hub (with HF_TOKEN, or the variable hf_token_env names, for "
            "a gated repo); or put it in the local Hugging Face cache first (hf download REPO "
            "config.json). The deploy reads it from the Hub on this laptop and judges the rules with it."
        )
    return (
        "To make it certain: the Hub did not give the model's config.json (see why above): "
        "export HF_TOKEN (or the variable hf_token_env names) for a gated repo, check "
        "model_repo and model_revision, or put it in the local Hugging Face cache (hf download "
        "REPO config.json)."
    )


# -- the pyinfra runs -------------------------------------------------------------------------


def pyinfra_command(command: str, inventory: str, extra: Sequence[str]) -> list[str]:
    """pyinfra's command line for ``command``: the packaged inventory and deploy file."""
    beside = shutil.which("pyinfra", path=os.path.dirname(sys.executable))  # this venv's
    pyinfra = beside or shutil.which("pyinfra")
    program = [pyinfra] if pyinfra else [sys.executable, "-m", "pyinfra"]
    return [*program, *extra, str(entry_path("inventory")), str(entry_path(command))]


def status_json(extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``--json [FILE]`` taken out of a status run's pyinfra options, as the variable that
    makes the status write its own JSON (to FILE, or - for stdout)."""
    words = list(extra)
    for number, word in enumerate(words):
        if word.startswith(f"{JSON_OPTION}="):
            return words[:number] + words[number + 1 :], {STATUS_JSON_ENV: word.split("=", 1)[1]}
        if word == JSON_OPTION:
            after = words[number + 1] if number + 1 < len(words) else ""
            target = after if after and (after == "-" or not after.startswith("-")) else ""
            rest = words[:number] + words[number + 1 + bool(target) :]
            return rest, {STATUS_JSON_ENV: target or "-"}
    return words, {}


def pyinfra_options(command: str, extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """pyinfra's options for ``command`` and the variables its run needs besides: -y for
    the read-only runs, status's --json as its own JSON."""
    words, variables = status_json(extra) if command == "status" else (list(extra), {})
    if command in READ_ONLY and not {"-y", "--yes"} & set(words):
        words.insert(0, "-y")
    return words, variables


def run_pyinfra(command: str, inventory: str, extra: Sequence[str]) -> int:
    """Run pyinfra for ``command`` on the Sparks of ``inventory``; its exit status. The
    child learns the inventory (SPARK_INVENTORY) and that it runs under spark-deploy with
    the inventory as typed (config/invocation.py), so that the commands it prints next
    are spark-deploy's."""
    if not os.path.isfile(inventory):
        print(f"{inventory}: no such inventory file", file=sys.stderr)
        return INVALID
    words, variables = pyinfra_options(command, extra)
    environ = {
        **os.environ,
        INVENTORY_ENV: os.path.abspath(inventory),
        CLI_ENV: inventory,
        **variables,
    }
    try:
        return subprocess.call(pyinfra_command(command, inventory, words), env=environ)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
