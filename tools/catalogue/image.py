"""
Build an image's flag list on any machine with docker (``make catalogue IMAGE=...``):

    python -m tools.catalogue --image IMAGE [--engine sglang|vllm] [--out DIR]

The image is read exactly as spark-fetch reads it on the Spark after the pull: the same
function (``read_image`` of sparkdeploy/files/fetch_docker.py, imported by fetch_job.py loaded
from its file as the Spark runs it) runs
the same script (knowledge/images.py ``reading_script``: the engine's release, whether it has
`ray`, its server's --help) in a container without network, and parses the flags the same
way. The image is pulled first when docker does not have it. The list is written to
``sparkdeploy/knowledge/catalogues/images/<engine>-<image>.json``
(knowledge/image_catalogues.py), which the deploy then uses for that image: an engine with
``launch: image`` has its flags checked by name against it before any host is touched. The
file names the image's ID and registry digests, so an inventory naming the image by digest
finds it too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from sparkdeploy.knowledge.image_catalogues import IMAGE_CATALOGUES_DIR, catalogue_file_name
from sparkdeploy.knowledge.images import ENGINES, engine_of, images, reading_script
from sparkdeploy.render import FILES

FETCH_JOB = FILES / "fetch_job.py"


class ImageCatalogueError(RuntimeError):
    """The image could not be read: what went wrong, and what to do."""


def fetch_docker(docker: str) -> ModuleType:
    """spark-fetch's part that pulls and reads images (files/fetch_docker.py), as
    sparkdeploy/files/fetch_job.py loaded as a file (as the Spark runs it) imports it,
    talking to ``docker``."""
    spec = importlib.util.spec_from_file_location("fetch_job", FETCH_JOB)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # its parts on sys.path
    module = importlib.import_module("fetch_docker")
    setattr(module, "DOCKER", docker)  # noqa: B010 -- every docker command line starts with it
    return module


class _Quiet:
    """The job status spark-fetch keeps: nothing to keep here."""

    def update(self, force: bool = False, **values: Any) -> None:
        del force, values


def read_image(engine: str, image: str, docker: str) -> dict[str, Any]:
    """What spark-fetch would read from ``image`` for ``engine`` (pulled when missing)."""
    job = fetch_docker(docker)
    if not job.image_id(image):
        print(f"pulling {image}", flush=True)
        pulled = job.docker("pull", image)
        if pulled.returncode != 0:
            raise ImageCatalogueError(f"docker pull {image} failed: {pulled.stderr.strip()}")
    with tempfile.TemporaryDirectory() as readings:
        spec = SimpleNamespace(engine=engine, readings=readings, read_script=reading_script(engine))
        try:
            return dict(job.read_image(image, spec, _Quiet()))
        except job.JobError as error:
            raise ImageCatalogueError(str(error)) from None


def image_catalogue(engine: str, image: str, reading: dict[str, Any]) -> dict[str, Any]:
    """The flag list's JSON from spark-fetch's reading (knowledge/image_catalogues.py)."""
    if reading.get("flags") is None:
        raise ImageCatalogueError(
            f"{image}: its {engine} --help gave no flag list "
            f"({reading.get('help_error') or 'no output'}); is it a {engine} image?"
        )
    return {
        "engine": engine,
        "image": image,
        "release": reading.get("release", ""),
        "ray": bool(reading.get("ray")),
        "source": {
            "id": reading["id"],
            "repo_digests": reading.get("repo_digests") or [],
            "entrypoint": reading.get("entrypoint") or [],
            "cmd": reading.get("cmd") or [],
            "help": images()[engine]["introspection"]["help"],
            "built_by": f"make catalogue IMAGE={image} ENGINE={engine}",
        },
        "flags": sorted(reading["flags"]),
    }


def write_image_catalogue(engine: str, image: str, out: Path, docker: str) -> Path:
    """Read ``image`` and write its flag list under ``out``; the file written."""
    data = image_catalogue(engine, image, read_image(engine, image, docker))
    out.mkdir(parents=True, exist_ok=True)
    path = out / catalogue_file_name(engine, image)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.catalogue --image", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--image", required=True, help="the image, as the inventory names it")
    parser.add_argument("--engine", choices=ENGINES, help="default: the image's family's")
    parser.add_argument("--out", type=Path, default=IMAGE_CATALOGUES_DIR)
    args = parser.parse_args(argv)
    engine = args.engine or engine_of(args.image)
    docker = shutil.which("docker")
    if engine is None or docker is None:
        what = "ENGINE=sglang|vllm (the image is of no family images.yaml knows)"
        print(f"error: {args.image}: give {what if docker else 'docker on PATH'}", file=sys.stderr)
        return 2
    try:
        path = write_image_catalogue(engine, args.image, args.out, docker)
    except ImageCatalogueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0
