"""
Model folders: download the configured model (and draft model) once, repair releases that
omit config.json / tokenizer.json from a base repository, and verify the folder before an
engine may use it. A complete folder is never downloaded again.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api import deploy, operation

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import MODEL_CHECK, host_state

REPAIRABLE = ("config.json", "tokenizer.json")


def hf_environment(spark: SparkSettings) -> str:
    """The `env` prefix of hf commands: the same settings login shells get."""
    values = ["HF_HUB_DISABLE_TELEMETRY=1", "HF_HUB_DISABLE_UPDATE_CHECK=1"]
    if spark.hf_disable_xet:
        values.append("HF_HUB_DISABLE_XET=1")
    if spark.hf_endpoint:
        values.append(f"HF_ENDPOINT={shell(spark.hf_endpoint)}")
    return "env " + " ".join(values)


@operation()
def model_folder(
    repo: str,
    folder: str,
    revision: str = "main",
    needs_tokenizer: bool = True,
    base_repo: str | None = None,
    user: str = "root",
    group: str = "root",
    hf_env: str = "env",
):
    """
    Make ``folder`` a complete copy of ``repo`` at ``revision``, downloading only when it is
    not complete, then fetch exactly the missing config.json / tokenizer.json from
    ``base_repo`` and seal the folder with a marker once every needed file is there.

    + repo: Hub repository id (org/name)
    + folder: absolute path of the local folder
    + revision: branch, tag or commit
    + needs_tokenizer: whether an engine needs tokenizer.json in this folder
    + base_repo: repository holding the files some releases omit
    + user: owner of the folder and of the download (its HF token is used)
    + group: group of the folder
    + hf_env: ``env ...`` prefix for the hf command (Xet, endpoint)

    **Example:**

    .. code:: python

        models.model_folder(
            repo="mistralai/Mistral-Small-4-119B-2603-NVFP4",
            folder="/opt/models/Mistral-Small-4-119B-2603-NVFP4",
            base_repo="mistralai/Mistral-Small-4-119B-2603",
            user="nvidia",
            group="nvidia",
        )
    """
    want = f"{repo}@{revision}"
    state = host_state().models.get(folder, {})
    if state.get("complete"):
        host.noop(f"{folder} is complete ({want}); not downloaded again")
        return
    q_folder, q_user, q_group = shell(folder), shell(user), shell(group)
    as_user = f"sudo -u {q_user} -H {hf_env} hf download"
    yield f"install -d -o {q_user} -g {q_group} -m 755 {q_folder}"
    yield (f"{as_user} {shell(repo)} --revision {shell(revision)} --local-dir {q_folder} --quiet")
    if base_repo:
        wanted = REPAIRABLE if needs_tokenizer else REPAIRABLE[:1]
        checks = "; ".join(
            f'[ -s {q_folder}/{name} ] || missing="$missing {name}"' for name in wanted
        )
        yield (
            f'missing=""; {checks}; [ -z "$missing" ] || '
            f"{as_user} {shell(base_repo)} $missing --local-dir {q_folder} --quiet"
        )
    tokenizer = "1" if needs_tokenizer else "0"
    yield (
        f"sudo -u {q_user} python3 -c {shell(MODEL_CHECK)} --seal "
        f"{q_folder} {shell(want)} {tokenizer}"
    )


def folder_arguments(spark: SparkSettings, group: str) -> list[dict[str, Any]]:
    """The ``model_folder`` arguments of each model folder the Spark has (model, draft)."""
    arguments = []
    for folder, want, needs_tokenizer in spark.model_folders():
        repo, revision = want.rsplit("@", 1)
        arguments.append({
            "repo": repo,
            "folder": folder,
            "revision": revision,
            "needs_tokenizer": needs_tokenizer,
            "base_repo": spark.model_base_repo if needs_tokenizer else None,
            "user": spark.user,
            "group": group,
            "hf_env": hf_environment(spark),
        })  # fmt: skip
    return arguments


@deploy("Download and verify the model folders")
def prepare_models() -> None:
    spark: SparkSettings = host.data.spark
    for arguments in folder_arguments(spark, host_state().user_group):
        model_folder(
            name=f"Make {arguments['folder']} a complete copy of {arguments['repo']}",
            **arguments,
        )
