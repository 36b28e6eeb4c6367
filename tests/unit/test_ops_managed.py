"""managed_file: the registry decides mode, owner and checks; facts in, commands out."""

from __future__ import annotations

from unittest import mock

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.paths import (
    API_KEY_FILE,
    CONTAINER_ENV,
    ENGINE_SUDOERS,
    HF_TOKEN,
    MEMORY_GUARD,
    MEMORY_GUARD_ENV,
)
from sparkdeploy.deploys.managed import AS_OPERATOR, managed_file
from sparkdeploy.escape import shell
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


def test_the_token_is_written_by_the_operator_from_roots_private_copy():
    # Root once made ~/.cache 0700 with install -d and chowned the staged file: both follow a
    # symlink the operator planted. Now root only reads its own private copy; every path in
    # the operator's home is made, written and renamed by the operator (runuser).
    host = spark()
    given(host, SparkHostState, host_state(files={HF_TOKEN: None}))
    outcome = run(managed_file, host, path=HF_TOKEN, content="hf_secret")
    staged = "/home/nvidia/.spark-deploy-upload/token"
    assert outcome.commands == [
        'install -d -m 700 -o "${SUDO_USER:-root}" /home/nvidia/.spark-deploy-upload',
        f"upload {staged}",
        "runuser -u nvidia -- sh -c "
        + shell(AS_OPERATOR.format(mode="600"))
        + f" spark-deploy /home/nvidia/.cache/huggingface /home/nvidia/.cache/huggingface/token"
        f" < {staged}; written=$?; rm -f {staged}; [ $written -eq 0 ]",
    ]
    assert outcome.uploads == {staged: "hf_secret"}
    assert not any("hf_secret" in command for command in outcome.commands)
    assert not any(
        word in " ".join(outcome.commands) for word in ("chown", "install -d -m 700 -o nvidia")
    )


def test_a_token_with_the_wrong_mode_is_rewritten_by_the_operator_not_chmodded_by_root():
    host = spark()
    given(
        host,
        SparkHostState,
        host_state(files={HF_TOKEN: file_state("hf_x", mode="644", user="nvidia", group="nvidia")}),
    )
    commands = run(managed_file, host, path=HF_TOKEN, content="hf_x").commands
    assert commands[-1].startswith("runuser -u nvidia -- ") and "chmod 600" in commands[-1]
    assert not any(command.startswith(("chown", "chmod")) for command in commands)


def test_an_api_key_file_makes_only_its_own_folder_and_is_never_readable_by_others():
    # The key's folder was once made with install -d -m 700 /etc /etc/spark-deploy: /etc 0700.
    path = API_KEY_FILE.format(name="spark-engine-sglang", kind="yaml")
    with mock.patch.dict("os.environ", {"SPARK_API_KEY": "k" * 40}):
        host = spark(model_repo="o/m", engine={"name": "sglang", "api_key_env": "SPARK_API_KEY"})
        given(host, SparkHostState, host_state(files={path: None}))
        outcome = run(managed_file, host, path=path, content="api-key: secret\n")
    staged = f"{path}.spark-deploy-new"
    assert outcome.commands == [
        "mkdir -p /etc/spark-deploy",
        'install -d -m 700 -o "${SUDO_USER:-root}" /home/nvidia/.spark-deploy-upload',
        f"rm -f {staged} && install -m 600 -o root -g root /dev/null {staged}",
        f"upload {staged}",
        f"chown root:root {staged} && chmod 600 {staged} && mv -f {staged} {path}",
    ]
    assert not any(
        " /etc " in f" {command} " or "-m 700 -o root" in command for command in outcome.commands
    )


def test_a_path_outside_the_registry_is_refused():
    host = spark()
    given(host, SparkHostState, host_state())
    with pytest.raises(OperationError, match="not in the managed-file registry"):
        run(managed_file, host, path="/etc/spark-deploy/unlisted.conf", content="x")
    with pytest.raises(OperationError, match="not in the managed-file registry"):
        run(
            managed_file, host, path=ENGINE_SUDOERS.format(name="spark-engine-sglang"), content="x"
        )  # no engine planned on this Spark: not its file


def test_the_engine_environment_is_staged_root_only_like_a_key():
    # engine.env values may carry what the recipe thinks is harmless; the file is 0600 root
    # and, like a key, never readable by others while it is written.
    host = spark(model_repo="o/m", engine={"name": "sglang"})
    path = CONTAINER_ENV.format(name="spark-engine-sglang")
    given(host, SparkHostState, host_state(files={path: None}))
    commands = run(managed_file, host, path=path, content="A=1\n").commands
    staged = f"{path}.spark-deploy-new"
    assert f"rm -f {staged} && install -m 600 -o root -g root /dev/null {staged}" in commands
    assert (
        commands[-1] == f"chown root:root {staged} && chmod 600 {staged} && mv -f {staged} {path}"
    )
