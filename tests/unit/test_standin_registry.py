"""The registry stand-in and the docker stand-in's images, run on this machine: pull (plain and
on a terminal), a pull killed in the middle and resumed, image inspect, save | load into another
store, `run --pull never`, `manifest inspect -v` and `info`."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests.unit.standin_registry import ROOT, StandinRegistry

DOCKER = ROOT / "tests" / "twins" / "standins" / "engine" / "docker"
CATALOGUES = ROOT / "sparkdeploy" / "knowledge" / "catalogues"
VLLM = "vllm/vllm-openai:v0.33.0"  # three layers: 2, 6 and 12 MB (images.json)
PLAIN = "debian:bookworm-slim"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    made = StandinRegistry(tmp_path_factory.mktemp("registry"))
    yield made
    made.stop()


class Docker:
    """The docker stand-in with its own store and state, on the module's registry."""

    def __init__(self, registry: StandinRegistry, tmp: Path):
        tmp.mkdir(parents=True, exist_ok=True)  # the state folder's parent: the "socket"
        self.env = {
            "PATH": os.environ["PATH"],
            "SPARK_TWIN_DOCKER_STATE": str(tmp / "state"),
            "SPARK_TWIN_CATALOGUES": str(CATALOGUES),
            "SPARK_TWIN_IMAGE_PROGRAMS": str(tmp / "image"),
            **registry.docker_env(tmp / "store"),
        }

    def __call__(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(DOCKER), *args], env=self.env, capture_output=True, timeout=60, **kwargs
        )

    def text(self, *args: str) -> subprocess.CompletedProcess:
        return self(*args, text=True)


@pytest.fixture
def docker(registry, tmp_path):
    return Docker(registry, tmp_path)


def blob_bytes(registry: StandinRegistry, since: int = 0) -> dict[str, int]:
    """Body bytes sent per blob digest, from the registry's request log."""
    sent: dict[str, int] = {}
    for method, path, _status, count, _range in registry.requests()[since:]:
        if method == "GET" and "/blobs/" in path:
            digest = path.rsplit("/", 1)[1]
            sent[digest] = sent.get(digest, 0) + int(count)
    return sent


def arm64_layers(docker: Docker, image: str) -> list[dict]:
    listed = json.loads(docker.text("manifest", "inspect", "-v", image).stdout)
    arm = next(m for m in listed if m["Descriptor"]["platform"]["architecture"] == "arm64")
    return arm["OCIManifest"]["layers"]


def test_plain_pull_prints_dockers_status_lines_then_is_up_to_date(docker, registry):
    done = docker.text("pull", VLLM)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ids = [layer["digest"][7:19] for layer in arm64_layers(docker, VLLM)]
    assert lines[0] == "v0.33.0: Pulling from vllm/vllm-openai"
    assert lines[1:4] == [f"{i}: Pulling fs layer" for i in ids]
    for i in ids:
        order = [lines.index(f"{i}: {s}") for s in ("Verifying Checksum", "Download complete",
                                                    "Pull complete")]  # fmt: skip
        assert order == sorted(order)
    assert not any("Downloading" in line for line in lines)  # progress is for terminals
    index = re.fullmatch(r"Digest: (sha256:[0-9a-f]{64})", lines[-3])
    assert index, lines[-3]
    assert lines[-2:] == [
        "Status: Downloaded newer image for vllm/vllm-openai:v0.33.0",
        "docker.io/vllm/vllm-openai:v0.33.0",
    ]
    again = docker.text("pull", VLLM)
    assert again.stdout.splitlines() == [
        "v0.33.0: Pulling from vllm/vllm-openai",
        lines[-3],
        "Status: Image is up to date for vllm/vllm-openai:v0.33.0",
        "docker.io/vllm/vllm-openai:v0.33.0",
    ]
    unknown = docker.text("pull", "vllm/vllm-openai:v9")
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "Error response from daemon: manifest for vllm/vllm-openai:v9 not found: manifest "
        "unknown: manifest unknown\n",
    )


def read_until_exit(fd: int, process: subprocess.Popen) -> bytes:
    output = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    return output


def test_a_pull_on_a_terminal_redraws_each_layers_progress_bar(docker, registry):
    # go-units HumanSize: decimal, 4 significant digits (2000960 -> 2.001MB, 12004292 -> 12MB)
    totals = {f"{layer['size'] / 1e6:.4g}MB" for layer in arm64_layers(docker, VLLM)}
    registry.rate.write_text("20000000")  # 20 MB/s: about a second, several bars a layer
    main, child = pty.openpty()
    window = struct.pack("HHHH", 40, 160, 0, 0)  # a 160-column terminal: bars shown
    fcntl.ioctl(child, termios.TIOCSWINSZ, window)
    try:
        process = subprocess.Popen(
            [str(DOCKER), "pull", VLLM], env=docker.env, stdout=child, stderr=child
        )
        os.close(child)
        output = read_until_exit(main, process).decode()
        assert process.wait(timeout=30) == 0
    finally:
        os.close(main)
        registry.rate.unlink()
    bar = re.compile(
        r"\x1b\[(\d+)A\x1b\[2K\r([0-9a-f]{12}): Downloading \[(=*)>( *)\] +"
        r"(\d[\d.]*[kMG]?B)/(\d[\d.]*[kMG]?B)\r\x1b\[\1B"
    )
    bars = bar.findall(output)
    assert len(bars) >= 6
    for _up, _layer, done, left, _current, total in bars:
        assert len(done) + len(left) == 50 or (len(done) == 50 and left == "")
        assert total in totals  # go-units HumanSize of the blob sizes
    assert re.search(r"\x1b\[\d+A\x1b\[2K\r[0-9a-f]{12}: Pull complete \r\x1b\[\d+B", output)
    assert output.startswith("v0.33.0: Pulling from vllm/vllm-openai\r\n")  # the tty adds \r
    assert "Status: Downloaded newer image for vllm/vllm-openai:v0.33.0" in output


def test_a_pull_killed_in_the_middle_resumes_its_partial_layer(docker, registry):
    layers = arm64_layers(docker, VLLM)
    since = len(registry.requests())
    registry.rate.write_text("4000000")  # 4 MB/s a request: the 12 MB layer is cut off
    store = Path(docker.env["SPARK_TWIN_DOCKER_IMAGES"])
    big = layers[2]["digest"]
    ingest = store / "ingest" / big.replace(":", "-")
    try:
        process = subprocess.Popen(
            [str(DOCKER), "pull", VLLM],
            env=docker.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        # the two smaller layers done (unpacked), the big one half-way
        while len(list(store.glob("layers/*.tar"))) < 2 or ingest.stat().st_size < 7_000_000:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        registry.rate.unlink()
    kept = ingest.stat().st_size
    assert 0 < kept < layers[2]["size"]
    time.sleep(0.3)  # the registry logs the cut-off request when its next write fails
    resumed_from = len(registry.requests())
    again = docker.text("pull", VLLM)
    assert again.returncode == 0, again.stderr
    assert f"{big[7:19]}: Pull complete" in again.stdout
    after = registry.requests()[resumed_from:]
    ranged = [r for r in after if r[1].endswith(big)]
    assert [(r[2], r[4]) for r in ranged] == [("206", f"bytes={kept}-")]
    assert int(ranged[0][3]) == layers[2]["size"] - kept
    fetched = blob_bytes(registry, since)
    for layer in layers[:2]:  # finished before the kill: fetched once, never again
        assert fetched[layer["digest"]] == layer["size"]
        assert not any(r[1].endswith(layer["digest"]) for r in after)
    # the cut-off request counts what left the registry, some of it lost in the socket buffers
    assert layers[2]["size"] <= fetched[big] < layers[2]["size"] + 1_000_000


def test_image_inspect_and_a_container_run_from_the_image(docker):
    assert docker.text("pull", "-q", VLLM).stdout == "docker.io/vllm/vllm-openai:v0.33.0\n"
    inspected = json.loads(docker.text("image", "inspect", VLLM).stdout)[0]
    layers = arm64_layers(docker, VLLM)
    listed = json.loads(docker.text("manifest", "inspect", VLLM).stdout)
    index_digest = json.loads(docker.text("manifest", "inspect", "-v", VLLM).stdout)[0]["Ref"]
    assert inspected["Id"].startswith("sha256:") and len(inspected["Id"]) == 71
    assert inspected["RepoTags"] == [VLLM]
    [repo_digest] = inspected["RepoDigests"]
    assert repo_digest.startswith("vllm/vllm-openai@sha256:")
    assert (inspected["Os"], inspected["Architecture"]) == ("linux", "arm64")
    assert inspected["Config"]["Entrypoint"] == ["vllm", "serve"]
    assert inspected["Config"]["Env"][0].startswith("PATH=/opt/spark-twin/image/vllm:")
    assert inspected["RootFS"]["Type"] == "layers" and len(inspected["RootFS"]["Layers"]) == 3
    assert inspected["Size"] > sum(layer["size"] for layer in layers) * 0.99
    assert listed["mediaType"] == "application/vnd.docker.distribution.manifest.list.v2+json"
    assert "@sha256:" in index_digest
    # by ID, by repo@digest, and the container's Image is the image's ID
    assert docker.text("image", "inspect", "-f", "{{.Id}}", inspected["Id"][7:19]).stdout == (
        inspected["Id"] + "\n"
    )
    version = docker.text(
        "run", "--rm", "--pull", "never", "--entrypoint", "python3", repo_digest, "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
    )  # fmt: skip
    assert (version.returncode, version.stdout) == (0, "0.33.0\n"), version.stderr
    docker.text("run", "--name", "made", "--pull", "never", VLLM, "--help")
    assert docker.text("inspect", "-f", "{{.Image}}", "made").stdout == inspected["Id"] + "\n"
    refused = docker.text("rmi", VLLM)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        'Error response from daemon: conflict: unable to remove repository reference "'
        f'{VLLM}" (must force) - container '
    )
    missing = docker.text("image", "inspect", "nothing:here")
    assert (missing.returncode, missing.stderr) == (1, "Error: No such image: nothing:here\n")
    assert docker.text("images", "--no-trunc", "-q", VLLM).stdout == inspected["Id"] + "\n"
    table = docker.text("images").stdout.splitlines()
    assert table[0].split() == ["REPOSITORY", "TAG", "IMAGE", "ID", "CREATED", "SIZE"]
    assert table[1].split()[:3] == ["vllm/vllm-openai", "v0.33.0", inspected["Id"][7:19]]


def test_run_pull_never_on_a_missing_image_fails_as_docker_does(docker):
    done = docker.text("run", "--rm", "--pull", "never", PLAIN, "true")
    assert (done.returncode, done.stderr) == (
        125,
        "docker: Error response from daemon: No such image: debian:bookworm-slim\n\n"
        "Run 'docker run --help' for more information\n",
    )
    pulled = docker.text("run", "--rm", PLAIN, "echo", "ran")  # --pull missing: pulls first
    assert pulled.stdout == "ran\n"
    assert pulled.stderr.splitlines()[:2] == [
        "Unable to find image 'debian:bookworm-slim' locally",
        "bookworm-slim: Pulling from library/debian",
    ]
    assert docker.text("run", "--rm", PLAIN).returncode == 0  # its CMD: bash, stdin empty


def test_save_then_load_into_another_store_gives_the_same_image(docker, registry, tmp_path):
    docker.text("pull", "-q", VLLM)
    image_id = docker.text("image", "inspect", "-f", "{{.Id}}", VLLM).stdout
    archive = docker("save", VLLM)
    assert archive.returncode == 0
    other = Docker(registry, tmp_path / "other")
    loaded = other("load", input=archive.stdout)
    assert loaded.stdout.decode() == f"Loaded image: {VLLM}\n", loaded.stderr
    assert other.text("image", "inspect", "-f", "{{.Id}}", VLLM).stdout == image_id
    (tmp_path / "again.tar").write_bytes(archive.stdout)
    assert other.text("load", "-q", "-i", str(tmp_path / "again.tar")).returncode == 0
    ran = other.text(
        "run", "--rm", "--pull", "never", "--entrypoint", "python3", VLLM, "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
    )  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, "0.33.0\n"), ran.stderr


def test_manifest_inspect_lists_the_arm64_layers_with_the_blob_sizes(docker, registry):
    layers = arm64_layers(docker, VLLM)
    assert [layer["size"] for layer in layers] == [
        (registry.cache / "blobs" / layer["digest"].replace(":", "-")).stat().st_size
        for layer in layers
    ]
    plain = json.loads(docker.text("manifest", "inspect", PLAIN).stdout)
    platforms = [(m["platform"]["os"], m["platform"]["architecture"]) for m in plain["manifests"]]
    assert platforms == [("linux", "arm64"), ("linux", "amd64")]


def test_info_and_gpus_follow_daemon_json(docker, tmp_path):
    assert docker.text(
        "info", "-f", "{{.Driver}} {{.DockerRootDir}} {{.DefaultRuntime}}"
    ).stdout == ("overlay2 /var/lib/docker runc\n")
    runtimes = json.loads(docker.text("info", "-f", "{{json .Runtimes}}").stdout)
    assert "nvidia" in runtimes and "runc" in runtimes
    assert (
        docker.text("info", "-f", "{{json .CDISpecDirs}}").stdout == '["/etc/cdi","/var/run/cdi"]\n'
    )
    docker.env["SPARK_TWIN_DOCKER_DAEMON_JSON"] = str(tmp_path / "absent.json")
    docker.env["PATH"] = "/usr/bin:/bin"
    done = docker.text("run", "--rm", "--gpus", "all", PLAIN, "true")
    assert (done.returncode, done.stderr.splitlines()[-3]) == (
        125,
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]]",
    )
    assert "nvidia" not in docker.text("info", "-f", "{{json .Runtimes}}").stdout
