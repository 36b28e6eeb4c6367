"""Model operations (IPv4 preference, the hf command, model folders): facts in, commands or
no-op reason out."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.paths import GAI_CONF, HF_CLI_VENV
from sparkdeploy.deploys.models.folders import model_folder
from sparkdeploy.deploys.models.huggingface import hf_cli, ipv4_preferred
from sparkdeploy.facts.host_state import MODEL_CHECK, SparkHostState
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


def hf_cli_with(installed: str, packages: dict[str, str], version: str = "2.4.0") -> Outcome:
    host = spark()
    given(host, SparkHostState, host_state(hf_cli=installed, packages=packages))
    return run(hf_cli, host, version=version)


def install_hf(version: str) -> str:
    return (
        f"python3 -m venv {HF_CLI_VENV} && {HF_CLI_VENV}/bin/pip install --quiet "
        f"--disable-pip-version-check huggingface_hub=={version} && "
        f"ln -sfn {HF_CLI_VENV}/bin/hf /usr/local/bin/hf"
    )


def test_the_asked_hf_version_already_installed_is_a_noop():
    outcome = hf_cli_with("2.4.0", HOST_STATE.packages)
    assert outcome.commands == [] and outcome.noop == f"hf 2.4.0 is installed in {HF_CLI_VENV}"


def test_another_hf_version_is_installed_over_it_when_python3_venv_is_there():
    assert "python3-venv" in HOST_STATE.packages
    outcome = hf_cli_with("2.3.0", HOST_STATE.packages, version="2.4.0")
    assert outcome.commands == [install_hf("2.4.0")] and outcome.noop is None


def test_python3_venv_is_installed_first_when_it_is_missing():
    outcome = hf_cli_with("", {"nvidia-driver-580-open": "580.95.05-0ubuntu1"})
    assert outcome.commands == [INSTALL_VENV, install_hf("2.4.0")]


# --- model_folder ----------------------------------------------------------------------

FOLDER = "/opt/models/m"
HF_ENV = "env HF_HUB_DISABLE_XET=1"
AS_NVIDIA = f"sudo -u nvidia -H {HF_ENV} hf download"


def folder_with(models: dict[str, dict], **arguments: Any) -> Outcome:
    host = spark()
    given(host, SparkHostState, host_state(models=models))
    defaults = {
        "repo": "o/m",
        "folder": FOLDER,
        "user": "nvidia",
        "group": "nvidia",
        "hf_env": HF_ENV,
    }
    return run(model_folder, host, **{**defaults, **arguments})


def seal(want: str, tokenizer: str, folder: str = FOLDER, user: str = "nvidia") -> str:
    check = shlex.quote(MODEL_CHECK)
    return f"sudo -u {user} python3 -c {check} --seal {folder} {want} {tokenizer}"


def repair(names: list[str]) -> str:
    checks = "; ".join(f'[ -s {FOLDER}/{name} ] || missing="$missing {name}"' for name in names)
    return (
        f'missing=""; {checks}; [ -z "$missing" ] || '
        f"{AS_NVIDIA} o/base $missing --local-dir {FOLDER} --quiet"
    )


def test_a_complete_folder_is_not_downloaded_again():
    outcome = folder_with({FOLDER: {"folder": FOLDER, "complete": True}}, revision="v1")
    assert outcome.commands == []
    assert outcome.noop == f"{FOLDER} is complete (o/m@v1); not downloaded again"


def test_an_incomplete_folder_is_downloaded_repaired_from_the_base_and_sealed():
    incomplete = {FOLDER: {"folder": FOLDER, "complete": False, "missing": ["config.json"]}}
    outcome = folder_with(incomplete, base_repo="o/base")
    assert outcome.commands == [
        f"install -d -o nvidia -g nvidia -m 755 {FOLDER}",
        f"{AS_NVIDIA} o/m --revision main --local-dir {FOLDER} --quiet",
        repair(["config.json", "tokenizer.json"]),
        seal("o/m@main", "1"),
    ]
    assert outcome.noop is None


def test_a_draft_model_needs_no_tokenizer_and_without_a_base_nothing_is_repaired():
    outcome = folder_with({}, needs_tokenizer=False)
    assert outcome.commands[2:] == [seal("o/m@main", "0")]
    outcome = folder_with({}, needs_tokenizer=False, base_repo="o/base")
    assert outcome.commands[2:] == [repair(["config.json"]), seal("o/m@main", "0")]


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


def test_the_operation_quotes_every_value_all_the_same():
    host = spark(model_repo="o/m")
    given(host, SparkHostState, host_state(models={}))
    outcome = run(
        model_folder,
        host,
        repo="o/m",
        folder="/opt/my models/m",
        revision="it's v1",
        user="o'brien",
        group="o'brien",
        hf_env=HF_ENV,
    )
    q_folder, q_user = "'/opt/my models/m'", "'o'\"'\"'brien'"
    assert outcome.commands[0] == f"install -d -o {q_user} -g {q_user} -m 755 {q_folder}"
    assert f"--revision 'it'\"'\"'s v1' --local-dir {q_folder}" in outcome.commands[1]
    assert all(f"sudo -u {q_user} " in command for command in outcome.commands[1:])
