"""Hugging Face operations (IPv4 preference, the hf command): facts in, commands or no-op
reason out; and the model-folder settings a shell could misread."""

from __future__ import annotations

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.paths import GAI_CONF, HF_CLI_VENV
from sparkdeploy.deploys.models.huggingface import hf_cli, ipv4_preferred
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.knowledge.locks import read_lock
from tests.unit.operations import HOST_STATE, Outcome, given, host_state, run, spark

# --- ipv4_preferred --------------------------------------------------------------------

ADD_GAI = (
    "printf '%s\\n' '# spark-deploy: prefer IPv4 (the Hub'\"'\"'s IPv6 endpoint is unreachable "
    f"from a Spark)' 'precedence ::ffff:0:0/96  100' >> {GAI_CONF}"
)
REMOVE_GAI = (
    "sed -i -e '/^# spark-deploy: prefer IPv4/d' "
    f"-e '/^precedence[[:space:]]\\+::ffff:0:0\\/96[[:space:]]\\+100$/d' {GAI_CONF}"
)


def ipv4_with(present: bool, enabled: bool) -> Outcome:
    host = spark()
    given(host, SparkHostState, host_state(gai_ipv4=present))
    return run(ipv4_preferred, host, enabled=enabled)


@pytest.mark.parametrize("enabled, word", [(True, "on"), (False, "off")])
def test_the_ipv4_preference_already_as_asked_is_a_noop(enabled: bool, word: str):
    outcome = ipv4_with(present=enabled, enabled=enabled)
    assert outcome.commands == []
    assert outcome.noop == f"IPv4 preference in {GAI_CONF} already {word}"


@pytest.mark.parametrize("enabled, command", [(True, ADD_GAI), (False, REMOVE_GAI)])
def test_the_ipv4_preference_is_added_or_removed(enabled: bool, command: str):
    outcome = ipv4_with(present=not enabled, enabled=enabled)
    assert outcome.commands == [command] and outcome.noop is None


# --- hf_cli ----------------------------------------------------------------------------

INSTALL_VENV = (
    "export DEBIAN_FRONTEND=noninteractive; "
    "apt-get install -y -q --no-install-recommends python3-venv "
    "|| { apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv; }"
)


HF_LOCK = read_lock("hf-cli", "2.4.0")


def hf_cli_with(
    installed: str, packages: dict[str, str], version: str = "2.4.0", lock: str = HF_LOCK.digest
) -> Outcome:
    host = spark()
    given(host, SparkHostState, host_state(hf_cli=installed, packages=packages, hf_lock=lock))
    return run(hf_cli, host, version=version)


def install_hf() -> list[str]:
    """The locked install (before 22, `pip install huggingface_hub==V` let pip take any
    transitive release and build sdists as root)."""
    stamp = f"{HF_CLI_VENV}/spark-deploy.lock"
    return [
        f"rm -rf {HF_CLI_VENV} && python3 -I -m venv {HF_CLI_VENV}",
        f"upload {stamp}.new",
        f"{HF_CLI_VENV}/bin/pip install --quiet --disable-pip-version-check --no-input "
        f"--require-hashes --only-binary :all: -r {stamp}.new && mv -f {stamp}.new {stamp}",
        f"ln -sfn {HF_CLI_VENV}/bin/hf /usr/local/bin/hf",
    ]


def test_the_asked_hf_version_already_installed_from_its_lock_is_a_noop():
    outcome = hf_cli_with("2.4.0", HOST_STATE.packages)
    assert outcome.commands == []
    assert outcome.noop == f"hf 2.4.0 is installed in {HF_CLI_VENV} from its lock"


def test_the_sample_fact_reads_the_hf_lock_stamp():
    assert HOST_STATE.hf_lock == HF_LOCK.digest


def test_another_hf_version_is_installed_over_it_when_python3_venv_is_there():
    assert "python3-venv" in HOST_STATE.packages
    outcome = hf_cli_with("2.3.0", HOST_STATE.packages, version="2.4.0")
    assert outcome.commands == install_hf() and outcome.noop is None
    assert outcome.uploads[f"{HF_CLI_VENV}/spark-deploy.lock.new"] == HF_LOCK.text


def test_an_hf_venv_made_without_the_lock_is_made_again_from_it():
    outcome = hf_cli_with("2.4.0", HOST_STATE.packages, lock="")
    assert outcome.commands == install_hf()


def test_python3_venv_is_installed_first_when_it_is_missing():
    outcome = hf_cli_with("", {"nvidia-driver-580-open": "580.95.05-0ubuntu1"})
    assert outcome.commands == [INSTALL_VENV, *install_hf()]


def test_an_hf_version_without_a_shipped_lock_is_refused_before_anything_runs():
    with pytest.raises(OperationError, match=r"python -m tools.lock hf-cli 9.9.9"):
        hf_cli_with("", HOST_STATE.packages, version="9.9.9")


# --- model folder settings ---------------------------------------------------------------


def test_the_inventory_refuses_a_folder_revision_or_user_that_needs_quoting():
    with pytest.raises(InventoryError) as caught:
        spark(
            model_dir="/opt/my models",
            model_repo="o/m",
            model_revision="it's v1",
            ssh_user="o'brien",
        )
    assert [problem.split(": ", 2)[1] for problem in caught.value.problems] == [
        "host 'spark-1', key 'ssh_user'",
        "host 'spark-1', key 'model_dir'",
        "host 'spark-1', key 'model_revision'",
    ]
