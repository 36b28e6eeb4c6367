"""
Build a flag catalogue from an engine's published wheel.

    python -m tools.catalogue sglang 0.5.10
    python -m tools.catalogue vllm 0.33.0 [--wheel-dir DIR] [--out DIR]

The wheel is fetched once from PyPI with ``pip download --no-deps`` into ``--wheel-dir``
(default ``.cache/engine-wheels``, ignored by git; the vLLM wheel is a few hundred MB),
opened with ``zipfile`` and read with ``ast``: the engine is neither installed nor
imported. The result is written as JSON to
``sparkdeploy/knowledge/catalogues/<engine>-<version>.json``
and committed, so the deploy and its tests never need the network:

    {"engine": ..., "version": ..., "source": {"wheel": ..., "sha256": ...},
     "flags": {"--name": {"type": ..., "choices": [...], "default": ...}, ...}}
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sparkdeploy.knowledge.flags import FLAGS_DIR
from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue import extract_sglang, extract_vllm
from tools.catalogue.pysource import WheelSource

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WHEEL_DIR = ROOT / ".cache" / "engine-wheels"

EXTRACTORS: dict[str, Callable[[WheelSource], tuple[dict[str, FlagSpec], list[str]]]] = {
    "sglang": extract_sglang.extract,
    "vllm": extract_vllm.extract,
}


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
    flags, unresolved = EXTRACTORS[engine](source)
    document = {
        "engine": engine,
        "version": version,
        "source": {"wheel": wheel.name, "sha256": source.sha256},
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.catalogue", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("engine", choices=sorted(EXTRACTORS))
    parser.add_argument("version", help="the PyPI release, e.g. 0.5.10")
    parser.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
    parser.add_argument("--out", type=Path, default=FLAGS_DIR, help="folder for the JSON")
    args = parser.parse_args(argv)
    try:
        wheel = download_wheel(args.engine, args.version, args.wheel_dir)
        document = build(args.engine, args.version, wheel)
    except (CatalogueError, extract_sglang.ExtractionError, extract_vllm.ExtractionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    path = write(document, args.out)
    flags = document["flags"]
    canonical = sum(
        1 for spec in flags.values() if not spec.get("alias_of") and not spec.get("negates")
    )
    print(f"{path}: {len(flags)} flag spellings ({canonical} canonical) from {wheel.name}")
    for item in document.get("unresolved", []):
        print(f"  unresolved: {item}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
