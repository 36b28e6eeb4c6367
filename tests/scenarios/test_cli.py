"""
The spark-deploy command of an installed package, run from outside the checkout.

What is real: the package is the checkout's HEAD (`git archive HEAD`, so nothing uncommitted
and no file the repository has but the package does not ship), built and installed by pip
(setuptools' real build of pyproject.toml: the package data, templates, shipped files and
knowledge, and the `spark-deploy` console script) into a fresh venv; every command runs that
script, with the checkout neither the working directory nor on PYTHONPATH, HOME and the
Hugging Face cache empty, SPARK_INVENTORY unset (the command sets it) and an HTTPS proxy that
counts connections (`check` must make none).

What is shared, to keep it fast and offline: the dependencies (pyinfra, paramiko, pydantic,
huggingface_hub ...) are not downloaded from PyPI into the fresh venv but seen through a .pth
file naming .venv's site-packages, and the venv's `pyinfra` script is written here the way
pip writes a console script (pyinfra_cli.main:main) instead of coming with pyinfra's install.
The package is installed with `--no-deps --no-build-isolation`: setuptools too is .venv's.

`check` passes every example in examples/ (exit 0, the ExecStart lines printed for each
Spark) and refuses a bad inventory with every problem in one pass (exit 2, no traceback).
On a twin with SGLang (the prepared image), `deploy INVENTORY -y` converges, a second run
changes nothing, `status INVENTORY -y` prints the matrix and exits 0, and once the engine
unit is stopped behind the deploy's back it exits 1 naming the Spark.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sparkdeploy import __version__
from tests.scenarios.conftest import assert_idempotent
from tests.scenarios.test_invalid_inventory import Listener
from tests.twins import harness
from tests.twins.runner import DeployRun

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))
NAME = "cli"
UNIT = "spark-engine-sglang.service"
HEADER = f"--> Status (read-only; nothing was changed; spark-deploy {__version__}):\n"
# A console script as pip writes one, for pyinfra_cli.main:main.
PYINFRA_SCRIPT = """#!{python}
import re
import sys
from pyinfra_cli.main import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""
# Every kind of problem the loader finds, in two Sparks: all of them reported in one pass.
BAD = """\
sparks:
  spark-1:
    ssh_host: 127.0.0.1
    alow_reboot: true
    engine:
      name: sglang
      args: {--no-such-flag: 1}
  spark-2:
    ssh_port: 22
    allow_reboot: maybe
"""
BAD_PROBLEMS = [
    "host 'spark-1', key 'engine', 'args': --no-such-flag: not a flag of SGLang",
    "host 'spark-1', key 'alow_reboot': unknown key; did you mean 'allow_reboot'?",
    "host 'spark-2', key 'ssh_host': required",
    "host 'spark-2', key 'allow_reboot': Input should be a valid boolean (got 'maybe')",
]


def matrix(output: str) -> dict[str, str]:
    """The status matrix of one Spark's run: check -> state (the lines up to the details)."""
    block = output.split(HEADER, 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in block.splitlines()]
    return {" ".join(words[:-1]): words[-1] for words in rows if words}


@dataclass
class Installed:
    venv: Path
    work: Path  # the working directory of every command: outside the checkout
    proxy: Listener

    @property
    def command(self) -> Path:
        return self.venv / "bin" / "spark-deploy"

    def env(self, extra: dict[str, str] | None = None, proxied: bool = True) -> dict[str, str]:
        """A clean environment: this venv's bin first, no PYTHONPATH, no SPARK_INVENTORY,
        an empty HOME and Hugging Face cache, and (``proxied``) every HTTP(S) request through
        the counting proxy."""
        proxy = f"http://127.0.0.1:{self.proxy.port}"
        proxies = {
            name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        }
        return {
            "PATH": f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.work / "home"),
            "HF_HOME": str(self.work / "hf-home"),
            "LANG": "C.UTF-8",
            **(proxies if proxied else {}),
            **(extra or {}),
        }

    def run(
        self,
        *words: str,
        env: dict[str, str] | None = None,
        proxied: bool = True,
        timeout: float = 120,
    ) -> DeployRun:
        return _timed(
            [str(self.command), *words], self.work, self.env(env, proxied), timeout=timeout
        )


def _timed(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> DeployRun:
    started = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return DeployRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    """The checkout's HEAD installed by pip into a fresh venv (see the module docstring)."""
    base = tmp_path_factory.mktemp("cli")
    source, venv, work = base / "source", base / "venv", base / "work"
    for folder in (source, work / "home", work / "hf-home"):
        folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "_shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pyinfra = venv / "bin" / "pyinfra"
    pyinfra.write_text(PYINFRA_SCRIPT.format(python=python))
    pyinfra.chmod(0o755)
    proxy = Listener()
    made = Installed(venv, work, proxy)
    pip = _timed(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", str(source)],
        work,
        made.env(),
        timeout=600,
    )  # fmt: skip
    assert pip.returncode == 0, pip.explain()
    yield made
    proxy.sock.close()


def test_installed_outside_the_checkout(installed: Installed):
    """The command and the package come from the fresh venv, not from the checkout."""
    done = installed.run("--version")
    assert done.returncode == 0, done.explain()
    assert done.stdout.strip() == f"spark-deploy {__version__}"
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c",
         "import sparkdeploy.entry as e, sparkdeploy.knowledge as k; "
         "print(e.__file__); print(k.__file__)"],
        cwd=installed.work, env=installed.env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    for line in where.stdout.splitlines():
        assert line.startswith(str(installed.venv)), where.stdout
    site = Path(where.stdout.splitlines()[0]).parents[2]
    assert (site / "sparkdeploy" / "templates").is_dir()
    assert any((site / "sparkdeploy" / "knowledge" / "catalogues").iterdir())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_check_passes_every_example_offline(installed: Installed, example: Path):
    before = installed.proxy.count
    done = installed.run("check", str(example))
    assert done.returncode == 0, done.explain()
    assert "Traceback" not in done.stderr
    assert installed.proxy.count == before, "check made a network request"
    sparks = yaml.safe_load(example.read_text())["sparks"]
    assert done.stdout.startswith(f"{example}: valid, {len(sparks)} Spark(s)\n")
    blocks = done.stdout.split("\n\n")
    for name in sparks:
        [block] = [b for b in blocks if b.startswith(f"{name} (")]
        starts = [line.strip() for line in block.splitlines() if "ExecStart=" in line]
        assert starts, block
        assert all(line.startswith("ExecStart=/usr/bin/docker run ") for line in starts), block


def test_check_refuses_a_bad_inventory_with_every_problem_at_once(installed: Installed):
    bad = installed.work / "bad.yml"
    bad.write_text(BAD)
    done = installed.run("check", str(bad))
    assert done.returncode == 2, done.explain()
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"Invalid inventory {bad} ({len(BAD_PROBLEMS)} problem(s)); no host was contacted:"
    )
    for problem in BAD_PROBLEMS:
        assert f"  - {bad}: {problem}" in done.stderr, done.stderr


class TestCommandOnATwin:
    """deploy, status and a FAIL through the installed command, on one twin with SGLang."""

    twins = {NAME: {**harness.MODEL, "engine": {"name": "sglang"}}}

    @staticmethod
    def spark_deploy(installed: Installed, scenario, *words: str) -> DeployRun:
        """The command on the scenario's inventory, with the laptop env a twin deploy needs
        (tests/twins/runner.py: the Hub stand-in trusted, the gated repo's token), without
        the counting proxy (the laptop may ask the Hub stand-in for the model's class)."""
        command, *rest = words
        done = installed.run(
            command,
            str(scenario.inventory),
            *rest,
            env=harness.HUB_TOKEN_ENV,
            proxied=False,
            timeout=1800,
        )
        scenario.runs.append(done)
        return done

    def test_deploy_converges(self, installed, scenario):
        run = self.spark_deploy(installed, scenario, "deploy", "-y", "--json", "-vv")
        assert run.returncode == 0, run.explain()
        assert run.errors() == {} and NAME in run.changed(), run.explain()
        assert f"[{NAME}] spark-engine-health: ready after" in run.stderr
        twin = scenario.twins[NAME]
        assert twin.exec(f"systemctl is-active {UNIT}").stdout.strip() == "active"

    def test_second_deploy_changes_nothing(self, installed, scenario):
        run = self.spark_deploy(installed, scenario, "deploy", "-y", "--json", "-vv")
        assert_idempotent(run)
        assert run.remote_commands() == {NAME: 2}, run.explain()

    def test_status_prints_the_matrix(self, installed, scenario):
        run = self.spark_deploy(installed, scenario, "status", "-y")
        assert run.returncode == 0, run.explain()
        output = run.stdout + run.stderr
        print(HEADER + output.split(HEADER, 1)[1])  # the matrix, for -s
        rows = matrix(output)
        assert rows["CHECK"] == NAME, output
        assert rows["gpu"] == rows["unit"] == rows["engine"] == "ok", output
        assert "FAIL" not in rows.values() and "FAILED" not in output

    def test_status_fails_naming_the_spark(self, installed, scenario):
        twin = scenario.twins[NAME]
        twin.exec(f"systemctl stop {UNIT}")
        harness.wait_for(
            lambda: (
                twin.exec(f"systemctl is-active {UNIT}", check=False).stdout.strip()
                in ("inactive", "failed")
            ),
            "the engine unit to stop",
        )
        run = self.spark_deploy(installed, scenario, "status", "-y")
        assert run.returncode == 1, run.explain()
        output = run.stdout + run.stderr
        assert f"--> 1 Spark(s) FAILED: {NAME}" in output, run.explain()
        rows = matrix(output)
        assert rows["unit"] == rows["engine"] == "FAIL", output
        assert "Traceback" not in output
