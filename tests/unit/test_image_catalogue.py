"""make catalogue IMAGE=... (tools/catalogue/image.py) with a fake docker on PATH: the image is
read by the script and parser spark-fetch uses on the Spark, and the flag list it writes is
the one the deploy finds for that image (knowledge/image_catalogues.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sparkdeploy.knowledge.image_catalogues import find_image_catalogue
from sparkdeploy.knowledge.images import reading_script
from tools.catalogue.build import main

IMAGE = "sparkarena/spark-vllm-docker:mxfp4"
ID = "sha256:" + "c" * 64
DIGEST = "sha256:" + "d" * 64
HELP = """usage: vllm serve [model_tag] [options]
options:
  --host HOST           Host name.
  --port PORT           Port number.
  --model MODEL         Name or path of the model.
  --mxfp4-backend {CUTLASS,TRITON}
  --mxfp4-layers MXFP4_LAYERS
  --enable-prefix-caching, --no-enable-prefix-caching
  --max-num-seqs=MAX_NUM_SEQS
"""
# docker as the tool calls it: `image inspect -f {{.Id}} IMAGE`, `image inspect IMAGE`,
# `run ... --entrypoint sh ID -c SCRIPT` (each call's words logged to $DOCKER_LOG, each
# word ended by a NUL, each call by the word END).
FAKE_DOCKER = f"""#!/bin/sh
printf '%s\\0' "$@" END >> "$DOCKER_LOG"
case "$1 $2" in
  "image inspect")
    if [ "$3" = "-f" ]; then echo {ID}; exit 0; fi
    echo '[{{"RepoDigests": ["sparkarena/spark-vllm-docker@{DIGEST}"],
      "Config": {{"Entrypoint": ["vllm", "serve"], "Cmd": null}}}}]'; exit 0;;
  "run --rm")
    echo 'release 0.20.1.dev7'; echo 'ray no'; echo '--- help'; cat "$HELP_TEXT"; exit 0;;
esac
echo "unexpected: $*" >&2; exit 1
"""


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake docker first on PATH; returns the log of its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "help.txt").write_text(HELP)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_LOG", str(log))
    monkeypatch.setenv("HELP_TEXT", str(tmp_path / "help.txt"))
    return log


def test_an_image_is_read_as_the_spark_reads_it_and_its_flag_list_is_found(tmp_path, docker):
    out = tmp_path / "lists"
    assert main(["--image", IMAGE, "--engine", "vllm", "--out", str(out)]) == 0
    [written] = out.iterdir()
    data = json.loads(written.read_text())
    assert data["flags"] == sorted(
        ["--host", "--port", "--model", "--mxfp4-backend", "--mxfp4-layers",
         "--enable-prefix-caching", "--no-enable-prefix-caching", "--max-num-seqs"]
    )  # fmt: skip
    assert (data["release"], data["ray"], data["source"]["id"]) == ("0.20.1.dev7", False, ID)
    # One definition: the container ran spark-fetch's own reading script, without network.
    words = docker.read_text().split("\0")
    calls: list[list[str]] = []
    call: list[str] = []
    for word in words:
        if word == "END":
            calls.append(call)
            call = []
        else:
            call.append(word)
    [run] = [call for call in calls if call[0] == "run"]
    assert run[run.index("-c") + 1] == reading_script("vllm")
    assert run[run.index("--network") + 1] == "none" and ID in run
    # The deploy finds it by the tag it was read for and by the image's digest.
    for name in (IMAGE, f"sparkarena/spark-vllm-docker@{DIGEST}", ID):
        found = find_image_catalogue("vllm", name, out)
        assert found is not None and "--mxfp4-layers" in found.flags, name
    assert find_image_catalogue("vllm", "sparkarena/spark-vllm-docker:other", out) is None


def test_an_image_whose_help_gives_no_flags_writes_nothing(tmp_path, docker, capsys):
    (tmp_path / "help.txt").write_text("Traceback: ImportError: libcuda.so.1\n")
    out = tmp_path / "lists"
    assert main(["--image", IMAGE, "--engine", "vllm", "--out", str(out)]) == 1
    assert "gave no flag list (Traceback: ImportError: libcuda.so.1)" in capsys.readouterr().err
    assert not out.exists()


def test_an_image_of_no_known_family_needs_the_engine(tmp_path, docker, capsys):
    assert main(["--image", IMAGE, "--out", str(tmp_path)]) == 2
    assert "give ENGINE=sglang|vllm" in capsys.readouterr().err
