"""engine.launch: image: the image's own ENTRYPOINT gets engine.args and nothing of the
deploy's making; flags are not checked against a release's catalogue before connecting (the
image decides, with a warning, or the flag list read from it with make catalogue IMAGE=...);
what the deploy checks still holds (secrets, the address, the served name, managed docker
options)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.deploys.engine.units import docker_run
from sparkdeploy.engine_plan import image_launch
from sparkdeploy.engine_plan.image_check import ImageReading, image_problems
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.inventory import Inventory, build_inventory
from sparkdeploy.knowledge.image_catalogues import catalogue_file_name, find_image_catalogue
from tests.twins import harness

FORK = "sparkarena/spark-vllm-docker:mxfp4"
FORK_ARGS: dict[str, Any] = {
    "--model": "{model}",
    "--host": "{bind}",
    "--port": "{port}",
    "--mxfp4-backend": "CUTLASS",
    "--mxfp4-layers": "moe,qkv,o,lm_head",
    "--enable-prefix-caching": True,
    "--compilation-config": {"cudagraph_mode": "FULL"},
}


def inventory(engine: dict[str, Any], pair: bool = False, laptop: Path | None = None) -> Inventory:
    keys = {"ssh_user": "nvidia", "model_repo": "openai/gpt-oss-120b", "engine": engine}
    sparks = {
        f"s{node}": {"ssh_host": f"s{node}.local"}
        | ({"qsfp": harness.qsfp_plan(node)} if pair else {})
        for node in ((1, 2) if pair else (1,))
    }
    folder = laptop or Path("/nonexistent")
    return build_inventory({"defaults": keys, "sparks": sparks}, str(folder / "sparks.yml"))


def fork(**engine: Any) -> dict[str, Any]:
    return {"name": "vllm", "image": FORK, "launch": "image", "args": dict(FORK_ARGS), **engine}


def refused(engine: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(InventoryError) as caught:
        inventory(engine, **kwargs)
    return str(caught.value)


def after_image(plan: EnginePlan) -> list[str]:
    words = docker_run(plan, plan.main, [])
    assert "--entrypoint" not in words  # the image's own entrypoint runs
    return words[words.index(plan.image) + 1 :]


def test_the_image_gets_the_operators_args_alone_with_what_the_deploy_knows_filled_in():
    found = inventory(fork())
    plan = found.engine_plans["s1"]
    assert after_image(plan) == [
        "--model", "/opt/models/gpt-oss-120b", "--host", "127.0.0.1", "--port", "8000",
        "--mxfp4-backend", "CUTLASS", "--mxfp4-layers", "moe,qkv,o,lm_head",
        "--enable-prefix-caching", "--compilation-config", '{"cudagraph_mode": "FULL"}',
    ]  # fmt: skip
    assert plan.launch == "image" and plan.flags == tuple(after_image(plan))
    # No catalogue said no to the fork's flags: the image decides, and the plan says so.
    [warning] = [w for w in found.warnings if "engine.launch image" in w]
    assert "host 's1', key 'engine'" in warning and f"make catalogue IMAGE={FORK}" in warning


def test_what_the_deploy_checks_the_engine_by_must_agree():
    message = refused(fork(args={**FORK_ARGS, "--port": 9000, "--host": "0.0.0.0"}))
    assert "engine.args --port 9000 is not engine.port 8000" in message
    assert "engine.args --host 0.0.0.0 is not engine.bind 127.0.0.1" in message
    named = fork(served_model_name="gpt", args={**FORK_ARGS, "--served-model-name": "other"})
    assert "--served-model-name other is not engine.served_model_name gpt" in refused(named)
    # Without --host the image picks the address: a key or api_open must say it may be open.
    bare = {key: value for key, value in FORK_ARGS.items() if key != "--host"}
    assert "engine.args give no --host" in refused(fork(args=bare))
    assert inventory(fork(args=bare, api_open=True)).engine_plans["s1"] is not None


def test_safety_checks_still_apply():
    secret = refused(fork(args={**FORK_ARGS, "--hf-token": "x"}))
    assert "--hf-token" in secret and "secret" in secret
    injected = refused(fork(args={**FORK_ARGS, "--x": "a\nb"}))
    assert "--x" in injected
    key = refused(fork(args={**FORK_ARGS, "--api-key": "abcdefabcdefabcdef"}))
    assert "--api-key: carries a secret" in key and "abcdefabcdef" not in key
    flag = refused(fork(args={**FORK_ARGS, "--chat-template": "--evil"}))
    assert "a value that is a flag is refused" in flag
    managed = refused(fork(docker_args=["--entrypoint=/bin/sh"]))
    assert "'docker_args'" in managed and "--entrypoint: managed" in managed


def test_not_on_a_pair_nor_with_mods(tmp_path):
    assert "engine.launch image: not on Sparks serving one model" in refused(fork(), pair=True)
    (tmp_path / "fix.sh").write_text("echo fix\n")
    message = refused(fork(mods=["fix.sh"]), laptop=tmp_path)
    assert "engine.mods with engine.launch image" in message


def test_a_flag_list_read_from_the_image_checks_the_flags_before_connecting(tmp_path):
    listed = sorted({*FORK_ARGS, "--help"} - {"--mxfp4-layers"})
    entry = {
        "engine": "vllm",
        "image": FORK,
        "release": "0.20.1.dev1",
        "flags": listed,
        "source": {"id": "sha256:" + "a" * 64, "repo_digests": [f"{FORK}@sha256:{'b' * 64}"]},
    }
    (tmp_path / catalogue_file_name("vllm", FORK)).write_text(json.dumps(entry))
    found = find_image_catalogue("vllm", f"{FORK.split(':')[0]}@sha256:{'b' * 64}", tmp_path)
    assert found is not None and found.id == "sha256:" + "a" * 64

    def local(engine: str, image: str) -> Any:
        return find_image_catalogue(engine, image, tmp_path)

    with mock.patch.object(image_launch, "find_image_catalogue", local):
        message = refused(fork())
        assert "engine.args --mxfp4-layers: the flag list read from" in message
        args = {key: value for key, value in FORK_ARGS.items() if key != "--mxfp4-layers"}
        checked = inventory(fork(args=args))
    assert not [w for w in checked.warnings if "engine.launch image" in w]


def test_on_the_spark_the_images_own_flag_list_judges_the_args_and_not_its_release():
    plan = inventory(fork()).engine_plans["s1"]
    listed = sorted({*FORK_ARGS} - {"--mxfp4-layers"})
    reading = {"id": "sha256:" + "e" * 64, "engine": "vllm", "release": "0.20.1", "flags": listed}
    problems, warnings = image_problems(plan, ImageReading.of(reading))
    assert problems == [
        f"--mxfp4-layers: the engine in {FORK} (sha256:eeeeeeeeeeee, vllm 0.20.1) does not "
        "accept it (its --help lists no such flag); engine.launch image passes engine.args as "
        "written. Fix: remove it from engine.args, or choose an image whose launcher has it"
    ]
    assert warnings == []  # the release is the image's business: no catalogue was asked


def test_a_launchers_own_words_come_before_the_flags():
    """A `boot.py run`-style wrapper: its subcommand and a positional model path, then the
    flags; placeholders are filled in the words too."""
    plan = inventory(fork(launcher_words=["run", "{model}"])).engine_plans["s1"]
    assert after_image(plan)[:4] == [
        "run",
        "/opt/models/gpt-oss-120b",
        "--model",
        "/opt/models/gpt-oss-120b",
    ]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["--run"], "flags go in engine.args"),
        (["run now"], "one plain word"),
        (["$(id)"], "one plain word"),
        (["hf_" + "a" * 34], "secret"),
    ],
)
def test_a_launcher_word_is_one_plain_word(words: list[str], expected: str):
    assert expected in refused(fork(launcher_words=words))


def test_launcher_words_need_the_images_own_launcher():
    engine = {"name": "vllm", "launcher_words": ["run"]}
    assert "engine.launcher_words: only with engine.launch image" in refused(engine)
