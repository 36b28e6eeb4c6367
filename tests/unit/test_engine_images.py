"""Engine images of every family the field runs (pinning, release, launch), the docker options
engine.docker_args may hold, and engine.mounts: settings in, refusals, warnings and the exact
`docker run` / `docker exec` words of the rendered units out."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.errors import InventoryError
from sparkdeploy.deploys.engine.units import unit_text
from sparkdeploy.knowledge.docker_options import grammar, parse_docker_args
from sparkdeploy.knowledge.flags import available_versions
from sparkdeploy.knowledge.images import describe_image, images
from tests.unit.test_engine_units import exec_start, inventory

DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE_ID = "sha256:" + "fedcba9876543210" * 4
NGC_WITH_RAY = "nvcr.io/nvidia/vllm:26.03-py3"
RAY: dict = {"args": {"--distributed-executor-backend": "ray"}}  # Ray by choice
NGC = "nvcr.io/nvidia/vllm:26.05-py3"
WRAPPER = "/opt/nvidia/nvidia_entrypoint.sh"
MODEL = "/opt/models/Mistral-Small-4-119B-2603-NVFP4"


def refusal(**raw: Any) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        EngineSettings(**raw)
    return {
        ".".join(map(str, e["loc"])): e["msg"].removeprefix("Value error, ")
        for e in caught.value.errors()
    }


def problems(engine: dict[str, Any], pair: bool = False) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        inventory(engine, pair)
    return caught.value.problems


def words_of(engine: dict[str, Any], pair: bool = False, host: str = "s1") -> dict[str, list]:
    """The ExecStart words of every unit of ``host``'s plan, by unit name."""
    inv = inventory(engine, pair)
    plan = inv.engine_plans[host]
    return {
        service.unit: exec_start(unit_text(plan, service, inv.sparks[host], "/etc/x.env"))
        for service in plan.services
    }


def after_image(words: list[str], image: str) -> list[str]:
    return words[words.index(image) + 1 :]


# --- images: accepted, with their release and launch --------------------------------------


@pytest.mark.parametrize(
    ("engine", "image", "family", "version", "launch"),
    [
        ("vllm", "vllm/vllm-openai:v0.33.0", "vllm-openai", "0.33.0", "entrypoint"),
        ("vllm", "vllm/vllm-openai:v0.33.0-cu129", "vllm-openai", "0.33.0", "entrypoint"),
        ("vllm", "docker.io/vllm/vllm-openai:v0.31.0", "vllm-openai", "0.31.0", "entrypoint"),
        ("vllm", f"vllm/vllm-openai:latest@{DIGEST}", "vllm-openai", None, "entrypoint"),
        ("vllm", f"vllm/vllm-openai:gemma4-cu130@{DIGEST}", "vllm-openai", None, "entrypoint"),
        ("vllm", NGC, "ngc-vllm", "0.20.1", "command"),
        ("vllm", "nvcr.io/nvidia/vllm:26.05.post1-py3", "ngc-vllm", "0.20.1", "command"),
        ("vllm", "nvcr.io/nvidia/vllm:26.10-py3", "ngc-vllm", "0.31.0", "command"),
        ("vllm", "nvcr.io/nvidia/vllm:26.03-py3", "ngc-vllm", "0.17.1", "command"),
        ("vllm", "nvcr.io/nvidia/vllm:26.07-py3", "ngc-vllm", "0.24.0", "command"),  # 0.24.0-dev
        ("vllm", "nvcr.io/nvidia/vllm:26.08-py3", "ngc-vllm", "0.27.1", "command"),
        ("vllm", "nvcr.io/nvidia/vllm:26.09-py3", "ngc-vllm", None, "command"),  # no notes read
        ("vllm", "vllm/vllm-openai:v0.28.0-ubuntu2404", "vllm-openai", "0.28.0", "entrypoint"),
        ("vllm", f"eugr/spark-vllm:latest@{DIGEST}", "eugr-vllm-node", None, "command"),
        ("vllm", f"eugr/spark-vllm-b12x:latest@{DIGEST}", "eugr-vllm-b12x", None, "command"),
        (
            "sglang",
            "scitrera/dgx-spark-sglang:0.5.9-dev-2f592c3b-t5",
            "scitrera-sglang",
            None,
            "command",
        ),
        ("vllm", "scitrera/dgx-spark-vllm:0.20.1-t4", "scitrera-vllm", "0.20.1", "command"),
        ("vllm", f"vllm-node:latest@{DIGEST}", "eugr-vllm-node", None, "command"),
        (
            "vllm",
            f"ghcr.io/spark-arena/dgx-vllm-eugr-nightly:latest@{DIGEST}",
            "eugr-vllm-node",
            None,
            "command",
        ),
        ("vllm", IMAGE_ID, None, None, None),
        ("vllm", "ghcr.io/anemll/dspark-vllm-gx10:0.1.1", None, None, None),
        ("sglang", "lmsysorg/sglang:v0.5.23", "lmsysorg-sglang", "0.5.23", "command"),
        ("sglang", "lmsysorg/sglang:v0.5.12-cu129", "lmsysorg-sglang", "0.5.12", "command"),
        ("sglang", f"lmsysorg/sglang:latest-cu130@{DIGEST}", "lmsysorg-sglang", None, "command"),
        ("sglang", f"lmsysorg/sglang:spark@{DIGEST}", "lmsysorg-sglang", None, "command"),
        ("sglang", "nvcr.io/nvidia/sglang:26.02-py3", "ngc-sglang", None, "command"),
        ("sglang", "scitrera/dgx-spark-sglang:0.5.10", "scitrera-sglang", "0.5.10", "command"),
        (
            "sglang",
            "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a",
            "lmsysorg-sglang",
            "0.5.10",
            "command",
        ),
    ],
)
def test_image_forms_are_accepted_with_their_release_and_launch(
    engine: str, image: str, family: str | None, version: str | None, launch: str | None
):
    info = describe_image(engine, image)
    assert (info.family, info.version, info.launch) == (family, version, launch)
    assert info.pinned
    settings = EngineSettings.model_validate({"name": engine, "image": image})
    catalogued = available_versions(engine)
    expected = version if version in catalogued else catalogued[-1]
    assert settings.version == expected
    warned = settings.unknown_version_warning()
    assert (warned is None) == (version in catalogued), warned


@pytest.mark.parametrize(
    ("engine", "image", "tag"),
    [
        ("vllm", "vllm/vllm-openai:latest", "latest"),
        ("vllm", "vllm/vllm-openai:gemma4-cu130", "gemma4-cu130"),
        ("vllm", "vllm/vllm-openai:nightly-aarch64", "nightly-aarch64"),
        ("vllm", "vllm-node:latest", "latest"),
        ("vllm", "vllm-node:20261101", "20261101"),  # retagged by every local build
        ("vllm", "ghcr.io/spark-arena/dgx-vllm-eugr-nightly:latest", "latest"),
        ("vllm", "ghcr.io/someone/vllm-gb10:nightly-20261101", "nightly-20261101"),
        ("sglang", "lmsysorg/sglang:latest-cu130", "latest-cu130"),
        ("sglang", "lmsysorg/sglang:spark", "spark"),
        ("sglang", "lmsysorg/sglang:nightly-dev-cu13", "nightly-dev-cu13"),
        ("sglang", "nvcr.io/nvidia/sglang:latest", "latest"),
    ],
)
def test_rolling_tags_are_refused_saying_how_to_pin(engine: str, image: str, tag: str):
    message = refusal(name=engine, image=image)["image"]
    assert message.startswith(f"tag '{tag}' moves with every push, so it is not pinned; ")
    assert "docker buildx imagetools inspect IMAGE" in message
    assert "docker inspect --format '{{index .RepoDigests 0}}' IMAGE" in message
    assert "sha256:<64 hex>" in message  # the image ID of a local build


def test_an_untagged_image_is_refused_as_latest():
    message = refusal(name="vllm", image="vllm/vllm-openai")["image"]
    assert message.startswith("is not pinned: it has no tag (untagged means latest); pin it")


def test_an_image_of_the_other_engine_is_refused():
    assert refusal(name="vllm", image="lmsysorg/sglang:v0.5.23")["image"] == (
        "lmsysorg/sglang:v0.5.23 is a sglang image (sparkdeploy/knowledge/images.yaml), and "
        "engine.name is vllm; set name: sglang or use a vllm image"
    )


def test_an_explicit_version_contradicting_the_mapping_is_refused():
    assert refusal(name="vllm", image="vllm/vllm-openai:v0.31.0", version="0.33.0")[
        "version"
    ] == ("image vllm/vllm-openai:v0.31.0 is release 0.31.0, not 0.33.0; drop version or change "
          "the image")  # fmt: skip


def test_a_mapped_release_without_catalogue_is_checked_against_the_nearest_with_a_warning():
    settings = EngineSettings(name="vllm", image="nvcr.io/nvidia/vllm:25.10-py3")
    oldest = available_versions("vllm")[0]
    assert settings.version == oldest
    assert settings.unknown_version_warning() == (
        "image nvcr.io/nvidia/vllm:25.10-py3 maps to vllm 0.10.2, which has no flag "
        "catalogue; its flags are checked against the nearest catalogued release, vllm "
        f"{oldest} (0.10.2 is older than every catalogued release), and on the Spark against "
        "the flag list of the image itself. For the release's own catalogue run `make "
        'catalogues ENGINE=vllm VERSIONS="0.10.2"`'
    )


def test_the_unknown_release_and_launch_are_warnings_of_the_plan_naming_host_and_keys():
    warnings = inventory({"name": "vllm", "image": IMAGE_ID}).warnings
    prefix = "inventory/sparks.yml: host 's1', key 'engine': "
    assert all(warning.startswith(prefix) for warning in warnings)
    text = " ".join(warnings)
    assert f"image {IMAGE_ID} is of no vllm release" in text
    assert "Set engine.version to the release the image holds" in text
    assert f"image built on the Spark {IMAGE_ID} is of no image family" in text
    assert "set engine.launch to `entrypoint`" in text
    quiet = inventory(
        {"name": "vllm", "image": IMAGE_ID, "version": "0.33.0", "launch": "command"}
    ).warnings
    assert not any("engine.version" in w or "engine.launch" in w for w in quiet)


def test_every_family_says_where_its_facts_come_from():
    for engine in ("sglang", "vllm"):
        table = images()[engine]
        assert table["server"] and table["server_source"]
        for name, family in table["families"].items():
            assert family["launch"] in ("entrypoint", "command"), name
            assert len(family["source"]) > 80, name


# --- launch: the exact words of the units, alone and in a pair -----------------------------


def test_an_entrypoint_image_gets_the_flags_only():
    [words] = words_of({"name": "vllm"}).values()
    assert after_image(words, "vllm/vllm-openai:v0.33.0")[:2] == ["--model", MODEL]
    assert "--entrypoint" not in words


def test_an_ngc_image_runs_vllm_serve_after_its_wrapper_entrypoint():
    [words] = words_of({"name": "vllm", "image": NGC}).values()
    assert after_image(words, NGC)[:4] == ["vllm", "serve", "--model", MODEL]
    assert "--entrypoint" not in words  # the image's wrapper entrypoint is kept


def test_an_sglang_image_runs_the_launch_server_module():
    image = "lmsysorg/sglang:v0.5.12-cu130"
    [words] = words_of({"name": "sglang", "image": image}).values()
    assert after_image(words, image)[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--entrypoint" not in words


def test_engine_launch_overrides_the_family_and_the_default():
    [words] = words_of({"name": "vllm", "image": IMAGE_ID, "launch": "entrypoint"}).values()
    assert after_image(words, IMAGE_ID)[:2] == ["--model", MODEL]
    [words] = words_of({"name": "vllm", "image": IMAGE_ID}).values()  # default: command
    assert after_image(words, IMAGE_ID)[:3] == ["vllm", "serve", "--model"]
    [words] = words_of({"name": "vllm", "launch": "command"}).values()
    assert after_image(words, "vllm/vllm-openai:v0.33.0")[:3] == ["vllm", "serve", "--model"]
    [warning] = [w for w in inventory({"name": "vllm", "launch": "command"}).warnings
                 if "engine.launch" in w]  # fmt: skip
    assert warning.endswith(
        "engine.launch command overrides images.yaml, where vllm-openai images launch by "
        "entrypoint; the server would not start as the image expects unless the image was "
        "changed. Drop engine.launch if it was not"
    )


def test_a_ray_pair_with_an_entrypoint_image_replaces_it_with_ray_and_execs_vllm_serve():
    head = words_of({"name": "vllm", **RAY}, pair=True)
    ray = head["spark-engine-vllm-ray-head.service"]
    image = ray.index("vllm/vllm-openai:v0.33.0")
    assert ray[image - 2 : image] == ["--entrypoint", "ray"]
    assert ray[image + 1 : image + 3] == ["start", "--head"]
    server = head["spark-engine-vllm.service"]
    assert server[:3] == ["/usr/bin/docker", "exec", "spark-engine-vllm-ray-head"]
    assert server[6:10] == ["sh", "vllm", "serve", "--model"]


def test_a_ray_pair_with_an_ngc_image_keeps_the_wrapper_for_ray_and_the_server():
    # 26.03: NGC images from 26.05 ship without Ray (rule vllm-ray-missing-in-image)
    NGC = NGC_WITH_RAY
    head = words_of({"name": "vllm", "image": NGC, **RAY}, pair=True)
    ray = head["spark-engine-vllm-ray-head.service"]
    assert "--entrypoint" not in ray
    assert after_image(ray, NGC)[:3] == ["ray", "start", "--head"]
    server = head["spark-engine-vllm.service"]
    assert server[:3] == ["/usr/bin/docker", "exec", "spark-engine-vllm-ray-head"]
    # docker exec never applies the entrypoint: the wrapper is given, then vllm serve
    assert server[6:11] == ["sh", WRAPPER, "vllm", "serve", "--model"]
    [worker] = words_of({"name": "vllm", "image": NGC, **RAY}, pair=True, host="s2").values()
    assert "--entrypoint" not in worker
    assert after_image(worker, NGC)[:4] == ["ray", "start", "--address", "192.168.100.1:6379"]


def test_a_ray_pair_with_an_image_of_no_family_starts_ray_as_the_entrypoint():
    engine = {"name": "vllm", "image": IMAGE_ID, "version": "0.33.0", "launch": "command", **RAY}
    head = words_of(engine, pair=True)
    ray = head["spark-engine-vllm-ray-head.service"]
    image = ray.index(IMAGE_ID)
    assert ray[image - 2 : image] == ["--entrypoint", "ray"]
    assert head["spark-engine-vllm.service"][6:9] == ["sh", "vllm", "serve"]


def test_a_native_vllm_pair_runs_the_server_on_both_sparks_as_the_family_launches_it():
    for host in ("s1", "s2"):
        [words] = words_of({"name": "vllm", "image": NGC}, pair=True, host=host).values()
        assert "--entrypoint" not in words  # the wrapper entrypoint runs `vllm serve`
        assert after_image(words, NGC)[:3] == ["vllm", "serve", "--model"]
        assert words[words.index("--node-rank") + 1] == str(int(host[1]) - 1)


def test_an_sglang_pair_runs_the_server_as_the_command_on_both_sparks():
    image = "lmsysorg/sglang:v0.5.12-cu130"
    for host in ("s1", "s2"):
        [words] = words_of({"name": "sglang", "image": image}, pair=True, host=host).values()
        assert after_image(words, image)[:3] == ["python3", "-m", "sglang.launch_server"]
        assert words[words.index("--nnodes") + 1] == "2"


# --- docker options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "rendered"),
    [
        (["--shm-size=16g"], ["--shm-size=16g"]),
        (["--shm-size", "16g"], ["--shm-size=16g"]),
        (["--ulimit", "memlock=-1"], ["--ulimit=memlock=-1"]),
        (["--ulimit=stack=67108864"], ["--ulimit=stack=67108864"]),
        (["--device", "/dev/infiniband"], ["--device=/dev/infiniband"]),
        (["--device=/dev/infiniband/uverbs0"], ["--device=/dev/infiniband/uverbs0"]),
        (["--cap-add", "IPC_LOCK", "--cap-add=SYS_NICE"], ["--cap-add=IPC_LOCK", "--cap-add=SYS_NICE"]),
        (["--privileged"], ["--privileged"]),
        (["--group-add", "video"], ["--group-add=video"]),
        (["--security-opt", "seccomp=unconfined"], ["--security-opt=seccomp=unconfined"]),
        (["--runtime=nvidia"], ["--runtime=nvidia"]),
        (["--cpuset-cpus", "0-9"], ["--cpuset-cpus=0-9"]),
        (["--memory", "100g"], ["--memory=100g"]),
        (["--label", "team=ml"], ["--label=team=ml"]),
    ],
)  # fmt: skip
def test_allowed_options_in_both_spellings_reach_docker_run_before_the_image(
    given: list[str], rendered: list[str]
):
    [words] = words_of({"name": "vllm", "docker_args": given}).values()
    image = words.index("vllm/vllm-openai:v0.33.0")
    assert words[image - len(rendered) : image] == rendered


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["-e", "A=1"], "-e: use engine.env"),
        (["--env=A=1"], "--env: use engine.env"),
        (["--env-file", "/etc/x"], "--env-file: use engine.env"),
        (["-v", "/:/host"], "-v: use engine.mounts"),
        (["--volume=/:/host"], "--volume: use engine.mounts"),
        (["--mount", "type=bind,src=/,dst=/h"], "--mount: use engine.mounts"),
        (["--rm"], "--rm: managed by the unit (systemd restarts it"),
        (["--restart=always"], "--restart: managed by the unit"),
        (["--restart", "always"], "--restart: managed by the unit"),
        (["--name", "x"], "--name: managed by the deploy (the container is named after its unit"),
        (["--network", "bridge"], "--network: managed by the deploy (host network; the API"),
        (["--net=bridge"], "--net: managed by the deploy (host network"),
        (["--entrypoint", "/bin/sh"], "--entrypoint: managed by engine.launch"),
        (["-d"], "-d: managed by the unit (docker run stays in the foreground"),
        (["--detach"], "--detach: managed by the unit"),
        (["--gpus", "device=0"], "--gpus: managed by the deploy (--gpus all)"),
        (["--ipc=private"], "--ipc: managed by the deploy (--ipc host)"),
        (["-p", "8000:8000"], "-p: managed by engine.port and engine.bind"),
        (["--publish=8000:8000"], "--publish: managed by engine.port and engine.bind"),
    ],
)
def test_options_the_deploy_manages_are_refused_naming_the_setting(given: list[str], message: str):
    [problem] = problems({"name": "vllm", "docker_args": given})
    assert problem.startswith("inventory/sparks.yml: host 's1', key 'engine', 'docker_args'")
    assert message in problem and problem.count("; ") <= 2  # the value is not a second problem


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["--cap-add=ALL"], "--cap-add 'ALL' is refused as unsafe"),
        (["--device=/dev/sda"], "--device '/dev/sda' is refused as unsafe"),
        (["--security-opt", "systempaths=unconfined"], "'systempaths=unconfined' is refused"),
        (["--ulimit=memlocks=1024"], "--ulimit 'memlocks=1024' is not a value docker reads"),
        (["--shm-size"], "--shm-size needs a value, such as --shm-size=16g"),
        (["--shm-size", "--privileged"], "--shm-size needs a value"),
        (["--privileged=yes"], "--privileged takes no value (docker reads only true or false)"),
        (["--pids-limits=10"], "--pids-limits: docker run has no such option (did you mean"),
        (["-it"], "-i: managed by the unit"),
    ],
)
def test_other_options_and_bad_values_are_refused(given: list[str], message: str):
    assert message in refusal(name="vllm", docker_args=given)["docker_args"]


@pytest.mark.parametrize(
    "given",
    [["ubuntu"], ["--privileged", "ubuntu"], ["--shm-size=1g", "alpine:3"], ["busybox", "sh"]],
)
def test_a_bare_word_is_refused_because_docker_would_run_it_as_the_image(given: list[str]):
    message = refusal(name="vllm", docker_args=given)["docker_args"]
    assert "is no option's value: docker would read it as the image" in message


def test_privileged_and_memory_are_allowed_with_a_warning():
    warnings = inventory({"name": "vllm", "docker_args": ["--privileged", "--memory=64g"]}).warnings
    assert any("engine.docker_args: --privileged gives the container every device" in w
               for w in warnings)  # fmt: skip
    assert any("--memory sets a cgroup limit, which does not cap unified CUDA memory" in w
               for w in warnings)  # fmt: skip


def test_every_value_grammar_has_a_source_and_an_example_that_parses():
    for option in grammar().values():
        assert len(option.source) > 40, option.name
        parsed, found, _ = parse_docker_args(option.example.split(" "))
        assert found == [] and parsed[0][0] == option.name, option.name


# --- mounts -------------------------------------------------------------------------------


def test_mounts_are_read_only_binds_before_the_docker_options():
    engine = {
        "name": "vllm",
        "mounts": [{"host": "/srv/kernels", "container": "/workspace/kernels"}],
        "docker_args": ["--shm-size=16g"],
    }
    [words] = words_of(engine).values()
    index = words.index("/srv/kernels:/workspace/kernels:ro")
    assert words[index - 1] == "-v"
    assert words[index + 1 : index + 3] == ["--shm-size=16g", "vllm/vllm-openai:v0.33.0"]
    head = words_of({**engine, **RAY}, pair=True)["spark-engine-vllm-ray-head.service"]
    assert "/srv/kernels:/workspace/kernels:ro" in head  # the container the server runs in
    for host in ("s1", "s2"):  # vLLM's own multi-node mode: each Spark's server container
        [words] = words_of(engine, pair=True, host=host).values()
        assert "/srv/kernels:/workspace/kernels:ro" in words


@pytest.mark.parametrize(
    ("mount", "key", "message"),
    [
        ({"host": "srv/kernels", "container": "/k"}, "host", "must be an absolute path"),
        ({"host": "/srv/../etc", "container": "/k"}, "host", "must not contain '..'"),
        ({"host": "/srv/a:b", "container": "/k"}, "host", "must be an absolute path"),
        ({"host": "/srv/a,b", "container": "/k"}, "host", "must be an absolute path"),
        ({"host": "/srv/k", "container": "/k:rw"}, "container", "must be an absolute path"),
        ({"host": "/", "container": "/k"}, "host", "is or holds a system path"),
        ({"host": "/etc", "container": "/k"}, "host", "is or holds a system path (/etc)"),
        ({"host": "/proc/1", "container": "/k"}, "host", "is or holds a system path (/proc)"),
        ({"host": "/var", "container": "/k"}, "host", "(/var/run, /var/lib/docker"),
        ({"host": "/var/run/docker.sock", "container": "/k"}, "host", "/var/run/docker.sock"),
        ({"host": "/home/nvidia/.ssh", "container": "/k"}, "host", "holds credentials"),
        ({"host": "/srv/k", "container": "/"}, "container", "would cover a system path"),
        ({"host": "/srv/k", "container": "/usr/lib/x"}, "container", "system path of the container (/usr)"),
        ({"host": "/srv/k", "container": "/etc"}, "container", "(/etc)"),
    ],
)  # fmt: skip
def test_mount_paths_are_refused(mount: dict[str, str], key: str, message: str):
    assert message in refusal(name="vllm", mounts=[mount])[f"mounts.0.{key}"]


def test_a_mount_is_refused_over_the_model_folders_and_twice_on_one_path():
    found = problems({"name": "vllm", "mounts": [{"host": "/srv/k", "container": "/opt/models"}]})
    assert found[0] == (
        "inventory/sparks.yml: host 's1', key 'engine': engine.mounts/files: container path "
        f"/opt/models would cover the model folder mount {MODEL}; mount it elsewhere, such as "
        "/workspace/extra"
    )
    twice = [{"host": "/srv/a", "container": "/k"}, {"host": "/srv/b", "container": "/k"}]
    assert refusal(name="vllm", mounts=twice)["mounts"] == (
        "/k is mounted twice; give each mount its own"
    )
    assert "mounts.0.mode" in refusal(name="vllm", mounts=[{"host": "/a", "container": "/b",
                                                             "mode": "rw"}])  # fmt: skip


# --- hardening every GPU container gets (issue 22) ---------------------------------------

HARDENING = ["--cap-drop=NET_RAW", "--security-opt=no-new-privileges"]


@pytest.mark.parametrize(
    "docker_args, added",
    [
        ([], HARDENING),
        (["--shm-size=16g", "--security-opt=seccomp=unconfined"], HARDENING),
        (["--privileged"], []),
        (["--security-opt=no-new-privileges"], ["--cap-drop=NET_RAW"]),
    ],
    ids=["none", "others", "privileged", "own-no-new-privileges"],
)
def test_engine_containers_drop_net_raw_and_gain_no_privileges(docker_args, added):
    [words] = words_of({"name": "vllm", "docker_args": docker_args}).values()
    options = words[: words.index("vllm/vllm-openai:v0.33.0")]
    after_ipc = options[options.index("--ipc") + 2 :]
    assert after_ipc[: len(added)] == added  # the deploy's, before the operator's options
    assert all(options.count(word) == (word in added or word in docker_args) for word in HARDENING)


@pytest.mark.parametrize(
    "tag", ["dev-v4f-2dgx", "dev-v4f-2dgx-v2", "qwen38-27b-dflash2", "dev-dsv41"]
)
def test_sglang_spark_previews_are_rolling_and_say_so(tag: str):
    message = refusal(name="sglang", image=f"lmsysorg/sglang:{tag}")["image"]
    assert message.startswith(f"tag '{tag}' moves with every push, so it is not pinned (a preview")
    assert "pin it by digest" in message
    assert describe_image("sglang", f"lmsysorg/sglang:{tag}@{DIGEST}").preview


def test_a_development_build_is_known_by_its_base_release_for_the_rules_only():
    info = describe_image("sglang", "scitrera/dgx-spark-sglang:0.5.9-dev-2f592c3b-t5")
    assert (info.version, info.release, info.pinned) == (None, "0.5.10.dev0", "fixed tag")
    ngc = describe_image("vllm", "nvcr.io/nvidia/vllm:26.07-py3")
    assert (ngc.version, ngc.release) == ("0.24.0", "0.24.0.dev0")
