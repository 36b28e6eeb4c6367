"""The spark-deploy command (sparkdeploy/cli.py): check offline, the pyinfra runs' command
lines, --version; and the one version the package, pyproject and the deploy agree on."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeploy import PYINFRA_VERSIONS, __version__, cli
from sparkdeploy.entry import path as entry_path
from sparkdeploy.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "sparks.example.yml"


def spark_deploy(*words: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it (a process of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "sparkdeploy.cli", *words],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
    )


def in_process(capsys: pytest.CaptureFixture[str], *words: str) -> subprocess.CompletedProcess[str]:
    """The command's main() in this process, read as spark_deploy's result: the same exit
    code, stdout and stderr without starting Python and importing the deploy once more (two
    seconds a run); an exception that would be a traceback fails the test."""
    capsys.readouterr()
    try:
        code = cli.main(list(words))
    except SystemExit as exit_:  # argparse's --version and usage errors
        code = exit_.code if isinstance(exit_.code, int) else 2
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["spark-deploy", *words], code, out, err)


def test_check_prints_each_units_exec_start_and_exits_0():
    done = spark_deploy("check", str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    assert "spark-1 (spark-1.local)" in done.stdout
    assert "unit spark-engine-sglang.service:" in done.stdout
    start = next(line for line in done.stdout.splitlines() if "ExecStart=" in line)
    assert start.strip().startswith("ExecStart=/usr/bin/docker run ")
    assert "python3 -m sglang.launch_server" in start
    assert "Security settings: the defaults." in done.stdout


def test_an_invalid_inventory_exits_2_with_the_loaders_message_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    bad = tmp_path / "bad.yml"
    bad.write_text("sparks:\n  s1:\n    ssh_host: a\n    ssh_user: nvidia\n    bogus: 1\n")
    done = in_process(capsys, "check", str(bad))
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"Invalid inventory {bad} (1 problem(s))")
    assert "host 's1', key 'bogus': unknown key" in done.stderr


def test_a_missing_inventory_exits_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    done = in_process(capsys, "check", str(tmp_path / "none.yml"))
    assert done.returncode == 2 and "file not found" in done.stderr
    assert "Traceback" not in done.stderr


def test_version(capsys: pytest.CaptureFixture[str]):
    done = in_process(capsys, "--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"spark-deploy {__version__}"


def test_check_says_what_changes_security(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    inventory = tmp_path / "sparks.yml"
    inventory.write_text(
        "sparks:\n  s1:\n    ssh_host: a\n    ssh_user: nvidia\n"
        '    ssh_strict_host_key_checking: "no"\n'
    )
    assert cli.check(str(inventory), environ={}) == 0
    out = capsys.readouterr().out
    assert "s1 (a)\n  no engine" in out
    assert "host key is never checked" in out


# A model whose config.json is in no local cache, and a rule scoped to the model's class.
UNREAD_MODEL = (
    "sparks:\n  s1:\n    ssh_host: a\n    ssh_user: nvidia\n    model_repo: org/none\n"
    "    engine:\n      name: vllm\n      args: {--attention-backend: TRITON_MLA}\n"
)
RULES_TITLE = "GB10 rules that may apply (the model's class could not be read):\n"


def test_check_lists_the_gb10_rules_that_may_apply_when_the_model_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """No config.json in the local cache and no request to the Hub: the rules scoped to a
    model class are listed apart, with why the class is unknown."""
    inventory = tmp_path / "sparks.yml"
    inventory.write_text(UNREAD_MODEL)
    assert cli.check(str(inventory), environ={}) == 0
    out = capsys.readouterr().out
    rules = out.split(RULES_TITLE)[1]
    assert "[vllm-mla-backend-non-mla-model]" in rules.split("\n\n")[0]
    assert "HF_HUB_OFFLINE: local cache only" in rules
    assert "--attention-backend TRITON_MLA" in out.split("ExecStart=")[1].splitlines()[0]


def test_the_environment_is_printed_with_its_secrets_redacted():
    """The loader refuses secrets in engine.env; what reaches the plan is redacted anyway."""
    inventory = load_inventory(str(EXAMPLE))
    plan = inventory.engine_plans["spark-1"]
    token = "hf_" + "abcdefghijklmnopqrstuvwxyz0123456789"
    plan = dataclasses.replace(plan, env=(("HF_TOKEN", token), ("PLAIN", "1")))
    lines = cli.engine_lines(plan, inventory.sparks["spark-1"])
    assert not any(token in line for line in lines)
    assert "    PLAIN=1" in lines and any(line.startswith("    HF_TOKEN=") for line in lines)


def test_the_pyinfra_runs_use_the_packaged_files(tmp_path: Path):
    words = cli.pyinfra_command("status", "sparks.yml", ["-y", "--limit", "s1"])
    assert words[-2:] == [str(entry_path("inventory")), str(entry_path("status"))]
    assert words[-5:-2] == ["-y", "--limit", "s1"]
    assert all(entry_path(name).is_file() for name in cli.PYINFRA_COMMANDS)


def test_a_pyinfra_run_of_a_missing_inventory_exits_2(tmp_path: Path):
    assert cli.main(["deploy", str(tmp_path / "none.yml"), "-y"]) == 2


def test_the_root_files_are_shims_of_the_packaged_ones():
    """One definition: each root file runs the packaged file of its name."""
    for name in ("deploy", "status", "diagnose", "linktest"):
        assert f'run("{name}", __file__)' in (ROOT / f"{name}.py").read_text()
    assert 'sparks = _run("inventory", __file__)["sparks"]' in (ROOT / "inventory.py").read_text()


def test_the_pyinfra_range_is_the_one_pinned_and_required():
    """The deploy requires the range pyproject allows, and requirements.txt pins a release
    inside it."""
    from packaging.specifiers import SpecifierSet

    pinned = re.search(r"^pyinfra==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned and pinned.group(1) in SpecifierSet(PYINFRA_VERSIONS)
    assert f'"pyinfra{PYINFRA_VERSIONS}"' in (ROOT / "pyproject.toml").read_text()
    deploy = entry_path("deploy").read_text()
    assert "config.REQUIRE_PYINFRA_VERSION = PYINFRA_VERSIONS" in deploy


def test_long_problems_are_wrapped_where_printed_and_kept_whole_in_the_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """The unknown-key message lists every valid key (700+ characters): on a terminal of 60
    columns it is wrapped under its bullet; the error's data and a pipe keep one line."""
    from sparkdeploy.config.errors import InventoryError

    monkeypatch.chdir(tmp_path)  # a short path: a word longer than the line stays whole
    bad = Path("bad.yml")
    bad.write_text("sparks:\n  s1:\n    ssh_host: a\n    ssh_user: nvidia\n    bogus: 1\n")
    monkeypatch.setattr(cli, "terminal_width", lambda stream: 60)
    assert cli.check(str(bad), environ={}) == 2
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) > 5 and max(map(len, printed[1:])) <= 60, printed
    assert printed[1].startswith("  - ") and all(line.startswith("    ") for line in printed[2:])
    with pytest.raises(InventoryError) as raised:
        load_inventory(str(bad))
    [problem] = raised.value.problems
    assert len(problem) > 300 and "\n" not in problem
    assert str(raised.value).splitlines()[1] == f"  - {problem}"
    assert " ".join(" ".join(printed[1:]).split()) == f"- {problem}"


def test_the_rules_that_may_apply_say_how_to_make_them_certain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    inventory = Path("sparks.yml")
    inventory.write_text(UNREAD_MODEL)
    assert cli.check(str(inventory), environ={}) == 0
    out = capsys.readouterr().out
    rules = out.split(RULES_TITLE)[1]
    assert f"To make it certain: spark-deploy check {inventory} --online reads" in rules
    assert "--online" in cli.parser().format_help() or "--online" in out
    text = cli.plan_text(load_inventory(str(inventory)), {}, online=True, width=50)
    said = text.split(RULES_TITLE)[1]
    assert "To make it certain: the Hub did not give" in said and "--online" not in said
    wrapped = [line for line in said.splitlines() if len(line.split()) > 1]  # not one long word
    assert max(map(len, wrapped)) <= 50
