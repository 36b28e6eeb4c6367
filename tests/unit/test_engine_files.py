"""engine.files and engine.mods: read on the laptop before any host is touched, written whole
on the Spark, mounted read-only, and the mods run in a fresh container before the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.paths import MODS_MOUNT
from sparkdeploy.deploys.engine.units import docker_run
from sparkdeploy.deploys.managed import managed_file
from sparkdeploy.engine_plan.files import managed_files
from sparkdeploy.engine_plan.plan import MODS_SCRIPT, EnginePlan
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.inventory import Inventory, build_inventory
from tests.twins import harness
from tests.unit import operations
from tests.unit.operations import file_state, given, host_state, run, spark

FOLDER = "/var/lib/spark-deploy/engine-files/spark-engine-vllm"
TEMPLATE = "{% for m in messages %}{{ m.content }}\n{% endfor %}"
MOD = "#!/bin/sh\nsed -i 's/a/b/' /usr/lib/python3/x.py\n"


@pytest.fixture
def laptop(tmp_path: Path) -> Path:
    """An inventory folder on the laptop with a chat template and a mod beside it."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "chat template.jinja").write_text(TEMPLATE)
    (tmp_path / "fix-parser.sh").write_text(MOD)
    return tmp_path


def inventory(laptop: Path, engine: dict[str, Any], pair: bool = False) -> Inventory:
    keys = {"ssh_user": "nvidia", "model_repo": "org/model", "engine": engine}
    sparks = {
        f"s{node}": {"ssh_host": f"s{node}.local"}
        | ({"qsfp": harness.qsfp_plan(node)} if pair else {})
        for node in ((1, 2) if pair else (1,))
    }
    document = {"defaults": keys, "sparks": sparks}
    return build_inventory(document, str(laptop / "sparks.yml"))


FILES = {"files": [{"src": "templates/chat template.jinja", "dest": "/templates/chat.jinja"}]}
MODS = {"mods": ["fix-parser.sh"]}


def plan(laptop: Path, **engine: Any) -> EnginePlan:
    found = inventory(laptop, {"name": "vllm", **engine}).engine_plans["s1"]
    assert found is not None
    return found


def test_files_are_read_on_the_laptop_and_mounted_read_only(laptop):
    planned = plan(laptop, **FILES)
    [shipped] = planned.shipped
    assert (shipped.kind, shipped.name, shipped.content) == (
        "file",
        "01-chat_template.jinja",
        TEMPLATE,
    )
    words = docker_run(planned, planned.main, [])
    assert f"{FOLDER}/01-chat_template.jinja:/templates/chat.jinja:ro" in words
    assert words.index("-v") < words.index(planned.image)


def test_mods_run_in_order_before_the_server_in_any_launch(laptop):
    # vllm/vllm-openai: the entrypoint is the engine, so a shell takes its place.
    entrypoint = plan(laptop, **MODS)
    words = docker_run(entrypoint, entrypoint.main, [])
    assert f"{FOLDER}/mods:{MODS_MOUNT}:ro" in words
    assert words[words.index("--entrypoint") + 1] == "sh"
    after = words[words.index(entrypoint.image) + 1 :]
    assert after[:5] == ["-c", MODS_SCRIPT, "sh", "vllm", "serve"]
    # NGC: the wrapper entrypoint stays and runs the shell as the command.
    ngc = plan(laptop, image="nvcr.io/nvidia/vllm:26.05-py3", **MODS)
    words = docker_run(ngc, ngc.main, [])
    assert "--entrypoint" not in words
    assert words[words.index(ngc.image) + 1 :][:6] == [
        "sh",
        "-c",
        MODS_SCRIPT,
        "sh",
        "vllm",
        "serve",
    ]
    assert [(s.kind, s.name) for s in ngc.shipped] == [("mod", "01-fix-parser.sh")]


def test_the_mods_script_stops_at_the_first_failure_and_execs_the_server():
    assert 'sh "$mod" || exit 1' in MODS_SCRIPT and MODS_SCRIPT.endswith('exec "$@"')
    assert MODS_SCRIPT.startswith(f"for mod in {MODS_MOUNT}/*;")


def test_the_registry_declares_each_shipped_file_so_the_fact_reads_it(laptop):
    built = inventory(laptop, {"name": "vllm", **FILES, **MODS})
    files = managed_files(built.sparks["s1"], built.engine_plans["s1"])
    assert files[f"{FOLDER}/01-chat_template.jinja"].mode == "644"
    assert files[f"{FOLDER}/mods/01-fix-parser.sh"].mode == "755"


def test_a_shipped_file_is_written_whole_and_a_current_one_is_left(laptop, monkeypatch):
    # The inventory beside the file: files ship only from below the inventory's folder.
    monkeypatch.setattr(operations, "PATH", str(laptop / "sparks.yml"))
    source = laptop / "templates" / "chat template.jinja"
    host = spark(
        model_repo="org/model",
        engine={"name": "vllm", "files": [{"src": str(source), "dest": "/templates/chat.jinja"}]},
    )
    path = f"{FOLDER}/01-chat_template.jinja"
    given(host, SparkHostState, host_state(files={path: None}))
    outcome = run(managed_file, host, path=path, content=TEMPLATE)
    assert outcome.uploads == {f"{path}.spark-deploy-new": TEMPLATE}
    assert outcome.commands[0] == f"mkdir -p {FOLDER}"
    host = spark(
        model_repo="org/model",
        engine={"name": "vllm", "files": [{"src": str(source), "dest": "/templates/chat.jinja"}]},
    )
    given(host, SparkHostState, host_state(files={path: file_state(TEMPLATE)}))
    assert run(managed_file, host, path=path, content=TEMPLATE).noop == f"{path} is up to date"


@pytest.mark.parametrize(
    ("write", "src", "message"),
    [
        (None, "missing.jinja", "no such file on this laptop"),
        (b"\xff\xfe\x00binary", "blob.bin", "not readable UTF-8 text"),
        (b"x" * (1024 * 1024 + 1), "big.json", "larger than 1 MiB"),
        (b"token: hf_abcdefghijklmnopqrstuvwxyzABCDEF12\n", "leak.txt", "shaped like a secret"),
    ],
    ids=["missing", "binary", "too-large", "secret"],
)
def test_a_file_that_cannot_be_shipped_is_refused_before_any_host(laptop, write, src, message):
    if write is not None:
        (laptop / src).write_bytes(write)
    engine = {"name": "vllm", "files": [{"src": src, "dest": "/templates/x"}]}
    with pytest.raises(InventoryError) as caught:
        inventory(laptop, engine)
    [problem] = caught.value.problems
    assert f"host 's1', key 'engine.files[0].src': '{src}'" in problem and message in problem
    assert "hf_abcdefghijklmnop" not in str(caught.value)


def test_a_file_over_the_model_folder_or_twice_on_one_path_is_refused(laptop):
    engine = {
        "name": "vllm",
        "files": [{"src": "fix-parser.sh", "dest": "/opt/models/model/config.json"}],
    }
    with pytest.raises(InventoryError) as caught:
        inventory(laptop, engine)
    assert "container path /opt/models/model/config.json would cover the model folder" in str(
        caught.value
    )
    twice = {
        "name": "vllm",
        "files": [{"src": "fix-parser.sh", "dest": "/x/a"}] * 2,
    }
    with pytest.raises(InventoryError) as caught:
        inventory(laptop, twice)
    assert "/x/a is mounted twice" in str(caught.value)


RAY_HEAD = [
    "ray", "start", "--head", "--port", "6379", "--include-dashboard", "false",
    "--dashboard-host", "127.0.0.1", "--ray-client-server-port", "0",
    "--node-ip-address", "192.168.100.1", "--disable-usage-stats", "--block",
]  # fmt: skip
RAY_WORKER = [
    "ray", "start", "--address", "192.168.100.1:6379",
    "--node-ip-address", "192.168.100.2", "--disable-usage-stats", "--block",
]  # fmt: skip


def after_image(plan: EnginePlan, unit: str) -> list[str]:
    """The words after the image of the `docker run` of ``unit`` (its entrypoint first)."""
    service = next(s for s in plan.services if s.unit == unit)
    words = docker_run(plan, service, [])
    entrypoint = words[words.index("--entrypoint") + 1] if "--entrypoint" in words else ""
    return [entrypoint, *words[words.index(plan.image) + 1 :]]


@pytest.mark.parametrize(
    ("image", "entrypoint", "shell"),
    [
        # No wrapper known: the shell replaces the entrypoint, as `ray` would.
        ("scitrera/dgx-spark-vllm:0.16.0-t5", "sh", []),
        # NGC: NVIDIA's wrapper entrypoint stays and runs the shell (NVIDIA's Ray install).
        ("nvcr.io/nvidia/vllm:26.05-py3", "", ["sh"]),
    ],
)
def test_mods_run_in_the_ray_head_and_worker_before_ray_starts(laptop, image, entrypoint, shell):
    ray = {
        "name": "vllm",
        "image": image,
        "args": {"--distributed-executor-backend": "ray"},
        "accept": {"vllm-ray-missing-in-image": "engine.mods install Ray"},
        **MODS,
    }
    plans = inventory(laptop, ray, pair=True).engine_plans
    mods = [*shell, "-c", MODS_SCRIPT, "sh"]
    head, worker = "spark-engine-vllm-ray-head.service", "spark-engine-vllm-ray-worker.service"
    assert after_image(plans["s1"], head) == [entrypoint, *mods, *RAY_HEAD]
    assert after_image(plans["s2"], worker) == [entrypoint, *mods, *RAY_WORKER]
    for plan in plans.values():  # every container reads the mods
        assert any(container == MODS_MOUNT for _, container in plan.extra_mounts)
    # The server runs in the head's container, where the mods ran: no second run.
    server = plans["s1"].main
    assert server.part_of == head and MODS_SCRIPT not in server.command


def test_mods_run_before_the_server_on_a_native_vllm_or_sglang_pair(laptop):
    ray = {"name": "vllm", "image": "scitrera/dgx-spark-vllm:0.16.0-t5", **MODS}
    native = {key: value for key, value in ray.items() if key != "args"}
    vllm = inventory(laptop, native, pair=True).engine_plans["s2"]
    words = docker_run(vllm, vllm.main, [])
    after = words[words.index(vllm.image) + 1 :]
    assert after[:6] == ["sh", "-c", MODS_SCRIPT, "sh", "vllm", "serve"]
    assert "--headless" in after
    sglang = inventory(laptop, {"name": "sglang", **MODS}, pair=True).engine_plans["s2"]
    assert sglang is not None
    words = docker_run(sglang, sglang.main, [])
    after = words[words.index(sglang.image) + 1 :]
    assert after[:6] == ["sh", "-c", MODS_SCRIPT, "sh", "python3", "-m"]
