"""The commands printed next (a failure's ``next``, a status row's ``explained by``) in the
form the operator ran the deploy: spark-deploy with the inventory as typed, or pyinfra in a
checkout with the run's inventory (config/invocation.py), and the spark-deploy command that
tells its pyinfra child so (cli.py)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from sparkdeploy import cli
from sparkdeploy.config.invocation import CLI_ENV, INVENTORY_ENV, command
from sparkdeploy.reports.failures import diagnose_command, failure_of, status_command
from sparkdeploy.reports.linktest import status_detail
from sparkdeploy.reports.status import explained_by

TWINS = "inventory/twins.yml"


def test_under_spark_deploy_the_commands_are_spark_deploys_with_the_inventory_as_typed():
    environ = {CLI_ENV: TWINS, INVENTORY_ENV: "/abs/inventory/twins.yml"}
    assert command("diagnose", "--limit", "spark-a", environ=environ) == (
        "spark-deploy diagnose inventory/twins.yml --limit spark-a"
    )
    assert command("status", environ=environ) == "spark-deploy status inventory/twins.yml"
    assert command("deploy", "--limit", "a", "--dry", environ=environ) == (
        "spark-deploy deploy inventory/twins.yml --limit a --dry"
    )
    assert command("linktest", environ=environ) == "spark-deploy linktest inventory/twins.yml -y"
    spaced = command("status", environ={CLI_ENV: "my sparks.yml"})
    assert shlex.split(spaced) == ["spark-deploy", "status", "my sparks.yml"]


def test_in_a_checkout_the_commands_are_pyinfras_with_the_runs_inventory():
    assert command("diagnose", "--limit", "s", environ={}) == (
        "pyinfra -y inventory.py diagnose.py --limit s"
    )
    default = {INVENTORY_ENV: "inventory/sparks.yml"}
    assert command("status", environ=default) == "pyinfra -y inventory.py status.py"
    other = {INVENTORY_ENV: TWINS}
    assert command("diagnose", "--limit", "s", environ=other) == (
        "SPARK_INVENTORY=inventory/twins.yml pyinfra -y inventory.py diagnose.py --limit s"
    )
    assert command("deploy", "--limit", "s", "--dry", environ=other) == (
        "SPARK_INVENTORY=inventory/twins.yml pyinfra inventory.py deploy.py --limit s --dry"
    )


def test_failure_blocks_and_status_rows_print_the_form_of_the_run(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv(CLI_ENV, raising=False)
    monkeypatch.setenv(INVENTORY_ENV, TWINS)
    pyinfra_form = "SPARK_INVENTORY=inventory/twins.yml pyinfra -y inventory.py diagnose.py"
    assert diagnose_command("spark-a") == f"{pyinfra_form} --limit spark-a"
    assert explained_by("unit", "spark-a") == f"{pyinfra_form} --limit spark-a"
    monkeypatch.setenv(CLI_ENV, TWINS)
    from pyinfra.api import OperationError

    failure = failure_of("spark-a", "fetch", OperationError("boom"))
    assert failure.then == ("spark-deploy diagnose inventory/twins.yml --limit spark-a",)
    assert explained_by("engine", "spark-a") == failure.then[0]
    assert explained_by("status", "s") == "spark-deploy status inventory/twins.yml --limit s -v"
    assert explained_by("link test", "s") == "spark-deploy linktest inventory/twins.yml -y"
    assert explained_by("driver", "s").startswith("spark-deploy deploy inventory/twins.yml ")
    assert status_command() == "spark-deploy status inventory/twins.yml"
    assert status_detail(None)[1] == "never run (spark-deploy linktest inventory/twins.yml -y)"


def test_the_printed_spark_deploy_command_parses_as_printed():
    printed = command("diagnose", "--limit", "spark-a", environ={CLI_ENV: TWINS})
    words = shlex.split(printed)
    assert words[0] == "spark-deploy"
    arguments = cli.parser().parse_args(words[1:])
    assert (arguments.command, arguments.inventory) == ("diagnose", TWINS)
    assert arguments.pyinfra_args == ["--limit", "spark-a"]


def run_captured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *words: str
) -> tuple[list[str], dict[str, str]]:
    """spark-deploy WORDS with the pyinfra child replaced: its command line and variables."""
    seen: dict[str, object] = {}

    def call(argv: list[str], env: dict[str, str]) -> int:
        seen.update(argv=argv, env=env)
        return 0

    monkeypatch.chdir(tmp_path)
    Path("twins.yml").write_text("sparks: {}\n")
    monkeypatch.setattr(subprocess, "call", call)
    assert cli.main(list(words)) == 0
    return seen["argv"], seen["env"]  # type: ignore[return-value]


def test_spark_deploy_tells_its_pyinfra_child_the_inventory_as_typed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    argv, env = run_captured(monkeypatch, tmp_path, "deploy", "twins.yml", "--limit", "a")
    assert env[CLI_ENV] == "twins.yml"
    assert env[INVENTORY_ENV] == str(tmp_path / "twins.yml")
    assert "-y" not in argv  # a deploy still asks before it changes anything
    assert command("diagnose", "--limit", "a", environ=env) == (
        "spark-deploy diagnose twins.yml --limit a"
    )


def test_a_next_command_made_when_the_run_ends_takes_the_runs_form(
    monkeypatch: pytest.MonkeyPatch,
):
    """The reboot's next command is a function: decided at failure time, not at import."""
    from pyinfra.api import OperationError

    from sparkdeploy.deploys.host.reboot import _after_no_answer

    monkeypatch.setenv(CLI_ENV, TWINS)
    failure = failure_of("s", "reboot", OperationError("gone"), then=(_after_no_answer,))
    assert failure.then[0].endswith("then: spark-deploy deploy inventory/twins.yml")
    monkeypatch.delenv(CLI_ENV)
    monkeypatch.delenv(INVENTORY_ENV, raising=False)
    failure = failure_of("s", "reboot", OperationError("gone"), then=(_after_no_answer,))
    assert failure.then[0].endswith("then: pyinfra inventory.py deploy.py")


def test_status_and_diagnose_never_wait_for_enter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Read-only: -y is passed, so without a terminal they end without pyinfra's
    "Press enter" and its EOFError; given once, it is not repeated."""
    for tool in ("status", "diagnose"):
        argv, _ = run_captured(monkeypatch, tmp_path, tool, "twins.yml", "--limit", "a")
        assert argv[-5:-2] == ["-y", "--limit", "a"]
        assert argv.count("-y") == 1
    argv, _ = run_captured(monkeypatch, tmp_path, "status", "twins.yml", "--yes")
    assert "-y" not in argv and argv.count("--yes") == 1


def test_status_json_is_the_status_not_pyinfras(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    cases = {
        ("--json",): "-",
        ("--json", "-"): "-",
        ("--json", "out.json"): "out.json",
        ("--json=out.json",): "out.json",
        ("--json", "--limit", "a"): "-",
    }
    for words, target in cases.items():
        argv, env = run_captured(monkeypatch, tmp_path, "status", "twins.yml", *words)
        assert env["SPARK_STATUS_JSON"] == target, words
        assert not any(word.startswith("--json") for word in argv), argv
        assert ("--limit" in argv) == ("--limit" in words)
    assert "out.json" not in run_captured(monkeypatch, tmp_path, "status", "twins.yml")[1].values()


def test_status_help_says_what_json_gives(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        cli.main(["status", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "--json [FILE]" in said and "instead of pyinfra's operation JSON" in said
    assert "runs without asking (pyinfra -y)" in said
