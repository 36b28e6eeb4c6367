"""
Build flag catalogues from engines' published wheels.

    python -m tools.catalogue sglang 0.5.23 0.5.22 0.5.10.post1
    python -m tools.catalogue vllm 0.33.0 [--wheel-dir DIR] [--out DIR] [--discard-wheels]
    python -m tools.catalogue --image IMAGE [--engine vllm]   # an image's flags (image.py)

Each wheel is fetched once from PyPI with ``pip download --no-deps`` into ``--wheel-dir``
(default ``.cache/engine-wheels``, ignored by git; a vLLM wheel is 400-500 MB, and
``--discard-wheels`` deletes the ones this run downloaded once their catalogue is
written), opened with ``zipfile`` and read with ``ast``: the engine is neither installed
nor imported. The result is written as JSON to
``sparkdeploy/knowledge/catalogues/<engine>-<version>.json`` (the version exactly as PyPI
names it, ``0.5.10.post1``) and committed, so the deploy and its tests never need the
network:

    {"engine": ..., "version": ..., "source": {"wheel": ..., "sha256": ...},
     "layout": how the release declares its flags (extract_sglang / extract_vllm),
     "parser": {"prog": ..., "allow_abbrev": ..., "underscores": ..., "dotted_json": ...,
                "source": "<file> <function>"},
     "env": [environment variable names the release reads (environment.py)],
     "flags": {"--name": {"type": ..., "choices": [...], "default": ...}, ...}}

``parser`` says how the engine reads a command line: ``allow_abbrev`` (argparse accepts a
unique prefix of a long option, so a flag removed in this release may still parse as a
prefix of a longer one), ``underscores`` (``--foo_bar`` is read as ``--foo-bar``) and
``dotted_json`` (``--json-flag.key value`` sets one key of a JSON flag). Each extractor
says where it reads them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdeploy.knowledge.flags import FLAGS_DIR
from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue import extract_sglang, extract_vllm
from tools.catalogue.environment import EnvironmentNotFound
from tools.catalogue.pysource import WheelSource

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WHEEL_DIR = ROOT / ".cache" / "engine-wheels"
VLLM_LAYOUT = "make_arg_parser"  # vLLM: one layout, see extract_vllm


@dataclass(frozen=True)
class Engine:
    """What is read from one engine's wheel, and by which functions."""

    flags: Callable[[WheelSource], tuple[dict[str, FlagSpec], list[str], str]]
    parser: Callable[[WheelSource], dict[str, Any]]
    env: Callable[[WheelSource], list[str]]


def _vllm_flags(source: WheelSource) -> tuple[dict[str, FlagSpec], list[str], str]:
    flags, unresolved = extract_vllm.extract(source)
    return flags, unresolved, VLLM_LAYOUT


EXTRACTORS: dict[str, Engine] = {
    "sglang": Engine(
        extract_sglang.extract_with_layout,
        extract_sglang.parser_facts,
        extract_sglang.environment,
    ),
    "vllm": Engine(_vllm_flags, extract_vllm.parser_facts, extract_vllm.environment),
}
ERRORS = (extract_sglang.ExtractionError, extract_vllm.ExtractionError, EnvironmentNotFound)


class CatalogueError(Exception):
    """The wheel could not be fetched or read."""


def find_wheel(engine: str, version: str, wheel_dir: Path) -> Path | None:
    """A wheel of ``engine==version`` already in ``wheel_dir``, if any."""
    matches = sorted(wheel_dir.glob(f"{engine}-{version}-*.whl"))
    return matches[0] if matches else None


def download_wheel(engine: str, version: str, wheel_dir: Path) -> Path:
    """The engine's wheel from PyPI (downloaded once; later calls reuse the file)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    existing = find_wheel(engine, version, wheel_dir)
    if existing is not None:
        return existing
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:",
        "--disable-pip-version-check", "-d", str(wheel_dir), f"{engine}=={version}",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheel = find_wheel(engine, version, wheel_dir)
    if result.returncode != 0 or wheel is None:
        raise CatalogueError(
            f"pip download {engine}=={version} failed (exit {result.returncode}); no wheel in "
            f"{wheel_dir}:\n{result.stderr.strip()[-2000:]}"
        )
    return wheel


def build(engine: str, version: str, wheel: Path) -> dict:
    """The catalogue document for one wheel."""
    source = WheelSource(wheel)
    extractor = EXTRACTORS[engine]
    flags, unresolved, layout = extractor.flags(source)
    document = {
        "engine": engine,
        "version": version,
        "source": {"wheel": wheel.name, "sha256": source.sha256},
        "layout": layout,
        "parser": extractor.parser(source),
        "env": sorted(extractor.env(source)),
        "flags": {name: flags[name].to_json() for name in sorted(flags)},
    }
    if unresolved:
        document["unresolved"] = unresolved
    return document


def catalogue_path(engine: str, version: str, flags_dir: Path = FLAGS_DIR) -> Path:
    return flags_dir / f"{engine}-{version}.json"


def write(document: dict, flags_dir: Path = FLAGS_DIR) -> Path:
    path = catalogue_path(document["engine"], document["version"], flags_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def refresh(
    engine: str, version: str, wheel_dir: Path, out: Path, discard_wheel: bool = False
) -> Path:
    """Download (once), read and write the catalogue of one release; its path."""
    had_wheel = find_wheel(engine, version, wheel_dir) is not None
    wheel = download_wheel(engine, version, wheel_dir)
    document = build(engine, version, wheel)
    path = write(document, out)
    if discard_wheel and not had_wheel:
        wheel.unlink()
    flags = document["flags"]
    canonical = sum(
        1 for spec in flags.values() if not spec.get("alias_of") and not spec.get("negates")
    )
    print(
        f"{path}: {len(flags)} flag spellings ({canonical} canonical), "
        f"layout {document['layout']}, {len(document['env'])} environment variables, "
        f"from {wheel.name}"
    )
    for item in document.get("unresolved", []):
        print(f"  unresolved: {item}")
    return path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(word == "--image" or word.startswith("--image=") for word in argv):
        from tools.catalogue.image import main as image_main  # an image's flag list

        return image_main(argv)
    parser = argparse.ArgumentParser(
        prog="python -m tools.catalogue", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("engine", choices=sorted(EXTRACTORS))
    parser.add_argument("versions", nargs="+", metavar="VERSION", help="PyPI releases, e.g. 0.5.10")
    parser.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
    parser.add_argument("--out", type=Path, default=FLAGS_DIR, help="folder for the JSON")
    parser.add_argument(
        "--discard-wheels",
        action="store_true",
        help="delete each wheel this run downloaded once its catalogue is written",
    )
    args = parser.parse_args(argv)
    failed = 0
    for version in args.versions:
        try:
            refresh(args.engine, version, args.wheel_dir, args.out, args.discard_wheels)
        except (CatalogueError, *ERRORS) as error:
            print(f"error: {args.engine} {version}: {error}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
