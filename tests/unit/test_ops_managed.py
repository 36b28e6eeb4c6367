"""managed_file: the registry decides mode, owner and checks; facts in, commands out."""

from __future__ import annotations

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.paths import ENGINE_SUDOERS, HF_TOKEN, MEMORY_GUARD, MEMORY_GUARD_ENV
from sparkdeploy.deploys.managed import managed_file
from sparkdeploy.facts.host_state import SparkHostState
from tests.unit.operations import file_state, given, host_state, run, spark

TEXT = "MEMORY_GUARD_GB=70\n"


def test_a_missing_file_is_staged_checked_and_moved_into_place():
    host = spark()
    given(host, SparkHostState, host_state(files={MEMORY_GUARD_ENV: None}))
    outcome = run(managed_file, host, path=MEMORY_GUARD_ENV, content=TEXT)
    staged = f"{MEMORY_GUARD_ENV}.spark-deploy-new"
    assert outcome.commands == [
        "mkdir -p /etc/spark-deploy",
        f"upload {staged}",
        f"chown root:root {staged} && chmod 644 {staged} && mv -f {staged} {MEMORY_GUARD_ENV}",
    ]
    assert outcome.uploads == {staged: TEXT}


def test_an_up_to_date_file_is_a_noop():
    host = spark()
    given(host, SparkHostState, host_state(files={MEMORY_GUARD_ENV: file_state(TEXT)}))
    outcome = run(managed_file, host, path=MEMORY_GUARD_ENV, content=TEXT)
    assert outcome.commands == [] and outcome.noop == f"{MEMORY_GUARD_ENV} is up to date"


def test_the_registry_gives_the_mode_and_only_the_mode_is_fixed():
    host = spark()
    given(host, SparkHostState, host_state(files={MEMORY_GUARD: file_state("x", mode="644")}))
    outcome = run(managed_file, host, path=MEMORY_GUARD, content="x")
    assert outcome.commands == [f"chown root:root {MEMORY_GUARD} && chmod 755 {MEMORY_GUARD}"]


def test_a_sudoers_file_is_checked_by_visudo_before_it_goes_live():
    host = spark(model_repo="o/m", engine={"name": "sglang"})
    path = ENGINE_SUDOERS.format(name="spark-engine-sglang")
    given(host, SparkHostState, host_state(files={path: None}))
    last = run(managed_file, host, path=path, content="x\n").commands[-1]
    staged = f"{path}.spark-deploy-new"
    assert last == (
        f"chown root:root {staged} && chmod 440 {staged} && "
        f"{{ visudo -cf {staged} || {{ rm -f {staged}; exit 1; }}; }} && "
        f"mv -f {staged} {path}"
    )


def test_the_token_goes_through_private_folders_to_the_operators_home():
    host = spark()
    given(host, SparkHostState, host_state(files={HF_TOKEN: None}))
    outcome = run(managed_file, host, path=HF_TOKEN, content="hf_secret")
    token = "/home/nvidia/.cache/huggingface/token"
    assert outcome.commands == [
        'install -d -m 700 -o "${SUDO_USER:-root}" /home/nvidia/.spark-deploy-upload',
        "install -d -m 700 -o nvidia -g nvidia /home/nvidia/.cache /home/nvidia/.cache/huggingface",
        f"upload {token}.spark-deploy-new",
        f"chown nvidia:nvidia {token}.spark-deploy-new && chmod 600 {token}.spark-deploy-new"
        f" && mv -f {token}.spark-deploy-new {token}",
    ]
    assert not any("hf_secret" in command for command in outcome.commands)


def test_a_path_outside_the_registry_is_refused():
    host = spark()
    given(host, SparkHostState, host_state())
    with pytest.raises(OperationError, match="not in the managed-file registry"):
        run(managed_file, host, path="/etc/spark-deploy/unlisted.conf", content="x")
    with pytest.raises(OperationError, match="not in the managed-file registry"):
        run(
            managed_file, host, path=ENGINE_SUDOERS.format(name="spark-engine-sglang"), content="x"
        )  # no engine planned on this Spark: not its file
