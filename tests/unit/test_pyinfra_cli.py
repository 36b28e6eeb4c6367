"""pyinfra's own commands on this inventory: ``debug-inventory`` prints every Spark's host
data (pyinfra's JSON encoder understands the settings, place and plan objects), and
``--data`` (or ``--ssh-user``/``--ssh-port``/``--ssh-key``) overriding a key the inventory
owns is refused before any host is contacted, naming the key and never its value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeploy.inventory import load_inventory
from sparkdeploy.overrides import DERIVED, link_test_limit_problems, override_problems, owned_keys
from tests.unit.test_docs import EXAMPLES, ROOT, read_model

PYINFRA = Path(sys.executable).parent / "pyinfra"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_host_data_prints_as_pyinfra_prints_it(path):
    """What ``debug-inventory`` does with host data, in process: ``json.dumps`` whose
    fallback, like pyinfra_cli.util.json_encode's last resort, calls ``to_json()``
    (pyinfra_cli itself is not imported here: importing it monkey-patches the process with
    gevent; the subprocess tests below run the real encoder)."""
    inventory = load_inventory(str(path), read_model)
    for name, data in inventory.pyinfra_hosts():
        printed = json.loads(json.dumps(data, default=lambda value: value.to_json()))
        assert printed["spark"]["ssh_host"] == inventory.sparks[name].ssh_host
        assert printed["place"]["name"] == name
        if inventory.sparks[name].engine is not None:
            assert printed["engine_plan"]["services"][0]["command"]


def test_an_override_of_an_inventory_key_is_refused_naming_it_and_the_file():
    [problem] = override_problems("inv.yml", ["engine=x"], {})
    assert problem.startswith("pyinfra --data engine=...: refused: 'engine' is an inventory key")
    assert "set engine there" in problem and "inv.yml" in problem


def test_derived_host_data_and_connection_options_are_refused_too():
    problems = override_problems("inv.yml", ["spark=x"], {"ssh_port": 2222, "ssh_user": None})
    assert [p.split(":")[0] for p in problems] == ["pyinfra --data spark=...", "pyinfra --ssh-port"]
    assert "host data the inventory makes" in problems[0]


def test_other_keys_pass_and_no_value_is_ever_shown():
    assert override_problems("inv.yml", ["ssh_password=hunter2", "_sudo_password=x"], {}) == []
    assert "hunter2" not in " ".join(override_problems("i", ["model_repo=hunter2"], {}))


def test_every_spark_key_and_derived_key_is_owned():
    assert {"engine", "model_repo", "ssh_user", "qsfp", *DERIVED} <= owned_keys()
    assert "ssh_password" not in owned_keys()


def pyinfra(*args: str, inventory: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``pyinfra ARGS`` with SPARK_INVENTORY set, offline (an empty HF cache): only
    commands that never connect."""
    env = {**os.environ, "SPARK_INVENTORY": str(inventory), "HF_HUB_OFFLINE": "1"}
    env["HF_HOME"] = str(tmp_path / "hf")
    return subprocess.run(
        [str(PYINFRA), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_debug_inventory_prints_a_pair_as_json(tmp_path):
    pair = ROOT / "examples" / "sglang-pair.yml"
    done = pyinfra("--json", "inventory.py", "debug-inventory", inventory=pair, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)
    assert [host["name"] for host in hosts] == ["spark-1", "spark-2"]
    assert hosts[1]["data"]["place"]["rank"] == 1
    assert hosts[0]["data"]["engine_plan"]["engine"] == "sglang"


def test_data_override_of_the_engine_is_refused_before_connecting(tmp_path):
    one = ROOT / "examples" / "one-spark-vllm.yml"
    args = ["inventory.py", "deploy.py", "--data", "engine=vllm", "--data", "ssh_password=hunter2"]
    done = pyinfra(*args, inventory=one, tmp_path=tmp_path)
    assert done.returncode == 2
    assert "pyinfra --data engine=...: refused: 'engine' is an inventory key" in done.stderr
    assert "Connecting" not in done.stderr + done.stdout and "hunter2" not in done.stderr


# --- --limit on the link test -----------------------------------------------------------------

PAIR = ("spark-1", "spark-2")
LINKTEST = ("sparkdeploy/entry/linktest.py",)


def test_a_link_test_limited_to_one_spark_of_a_pair_is_refused_naming_the_other():
    [problem] = link_test_limit_problems("pair.yml", LINKTEST, ["spark-1"], [], PAIR)
    assert problem.startswith("pyinfra --limit spark-1: refused: the link test runs on every")
    assert "this run leaves out spark-2." in problem
    assert "spark-deploy linktest pair.yml (no --limit)" in problem
    excluded = link_test_limit_problems("p", ("linktest.py",), [], ["spark-2"], PAIR)
    assert "pyinfra --exclude spark-2: refused" in excluded[0]


def test_a_limit_that_takes_every_spark_or_another_command_passes():
    assert link_test_limit_problems("p", LINKTEST, ["spark-*"], [], PAIR) == []
    assert link_test_limit_problems("p", LINKTEST, ["spark-1", "spark-2"], [], PAIR) == []
    assert link_test_limit_problems("p", ("deploy.py",), ["spark-1"], [], PAIR) == []
    assert link_test_limit_problems("p", LINKTEST, ["nothing"], [], PAIR) == []  # pyinfra says
    assert link_test_limit_problems("p", LINKTEST, ["spark-1"], [], ("spark-1",)) == []


def test_the_link_test_limited_to_one_spark_is_refused_before_connecting(tmp_path):
    pair = ROOT / "examples" / "sglang-pair.yml"
    args = ["inventory.py", "linktest.py", "--limit", "spark-1"]
    done = pyinfra(*args, inventory=pair, tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "this run leaves out spark-2" in done.stderr
    assert "Traceback" not in done.stderr and "Connecting" not in done.stderr + done.stdout
