"""
python -m tools.lock TOOL VERSION | --shipped: write the hash lock of a venv the deploy makes
on a Spark (sparkdeploy/knowledge/locks.py says why).

pip itself resolves the tool's pinned top-level set (``pip install --dry-run --report``, wheels
only) for every target below; the lock is the union, each package pinned to the one release
pip chose (a marker says where it is needed when not on every target) with the sha256 of
every wheel PyPI lists for that release (its JSON API, ``urls[].digests.sha256``), so the one
file installs on an aarch64 Spark and on an x86_64 twin alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sparkdeploy.knowledge.locks import (
    LOCKS,
    PIP_LOCKED,
    TOOLS,
    TOP_LINE,
    lock_path,
    parse_lock,
    top_level,
)

PYPI = os.environ.get("PYPI_JSON", "https://pypi.org/pypi")


@dataclass(frozen=True)
class Target:
    """A Python the venv runs on: its version, machine and glibc (every manylinux tag up to
    it is given to pip --platform, which does not expand one itself)."""

    python: str
    machine: str
    glibc: str
    why: str

    @property
    def marker(self) -> str:
        return f'python_version == "{self.python}" and platform_machine == "{self.machine}"'

    @property
    def platforms(self) -> list[str]:
        newest = int(self.glibc.split("_")[1])
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(newest, 16, -1)]
        return [*tags, f"manylinux2014_{self.machine}"]


TARGETS = (
    # A Spark: DGX OS 7 is Ubuntu 24.04 (python3 3.12, glibc 2.39) on arm64.
    Target("3.12", "aarch64", "2_39", "a Spark (DGX OS 7, Ubuntu 24.04)"),
    # The twins (tests/twins/Dockerfile): Debian 12's python3 3.11, glibc 2.36, on the
    # machine's own architecture.
    Target("3.11", "x86_64", "2_36", "a twin (Debian 12) on x86_64"),
    Target("3.11", "aarch64", "2_36", "a twin (Debian 12) on arm64"),
)


def resolve(requirements: list[str], target: Target) -> dict[str, str]:
    """What pip installs for ``requirements`` on ``target``: name -> version, wheels only."""
    with tempfile.TemporaryDirectory(prefix="spark-lock-") as tmp:
        report = Path(tmp) / "report.json"
        command = [
            # --isolated: PyPI itself, not a local wheel folder, index or constraint file
            # of this machine; --target: pip takes --platform only with it (23.x)
            sys.executable, "-m", "pip", "--isolated", "install", "--dry-run",
            "--ignore-installed", "--target", str(Path(tmp) / "target"),
            "--quiet", "--disable-pip-version-check", "--no-input", "--only-binary", ":all:",
            "--implementation", "cp", "--python-version", target.python,
            "--abi", "cp" + target.python.replace(".", ""), *(f"--platform={tag}" for tag in target.platforms),
            "--report", str(report), *requirements,
        ]  # fmt: skip
        subprocess.run(command, check=True)
        installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def wheel_hashes(name: str, version: str) -> list[str]:
    """The sha256 of every wheel PyPI has for ``name`` ``version``: the project's JSON
    (``releases[VERSION][].digests.sha256``), else the release's own (``urls[]``)."""
    with urllib.request.urlopen(f"{PYPI}/{name}/json", timeout=60) as answer:
        files = json.load(answer).get("releases", {}).get(version)
    if files is None:
        with urllib.request.urlopen(f"{PYPI}/{name}/{version}/json", timeout=60) as answer:
            files = json.load(answer)["urls"]
    found = sorted(f["digests"]["sha256"] for f in files if f["packagetype"] == "bdist_wheel")
    if not found:
        raise SystemExit(f"{name}=={version} has no wheel on PyPI: it cannot be locked")
    return found


def render(tool: str, top: list[str], chosen: dict[Target, dict[str, str]]) -> str:
    """The lock's text: a header, then each package, its marker and its hashes."""
    names = sorted({name for found in chosen.values() for name in found})
    lines = [
        f"# The hash lock of {tool}: written by `python -m tools.lock {tool} ...`; do not edit.",
        f"# Installed with pip install {PIP_LOCKED} -r (sparkdeploy/knowledge/locks.py).",
        "# Resolved by pip for: " + "; ".join(f"{t.why} ({t.marker})" for t in chosen) + ".",
        TOP_LINE + " ".join(top),
    ]
    for name in names:
        versions = {found[name] for found in chosen.values() if name in found}
        if len(versions) > 1:
            raise SystemExit(f"{name}: pip chose {sorted(versions)} on different targets")
        version = versions.pop()
        where = [t for t, found in chosen.items() if name in found]
        marker = (
            "" if len(where) == len(chosen) else " ; " + " or ".join(f"({t.marker})" for t in where)
        )
        hashes = wheel_hashes(name, version)
        lines.append(f"{name}=={version}{marker} \\")
        lines += [f"    --hash=sha256:{h} \\" for h in hashes[:-1]]
        lines.append(f"    --hash=sha256:{hashes[-1]}")
    return "\n".join(lines) + "\n"


def write_lock(tool: str, version: str) -> Path:
    top = top_level(tool, version)
    chosen = {target: resolve(top, target) for target in TARGETS}
    text = render(tool, top, chosen)
    parse_lock(tool, text)  # the deploy reads it back
    path = lock_path(tool, version)
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lock", description=__doc__)
    parser.add_argument("tool", nargs="?", choices=TOOLS)
    parser.add_argument("version", nargs="?")
    parser.add_argument("--shipped", action="store_true", help="rewrite every shipped lock")
    args = parser.parse_args(argv)
    if args.shipped:
        wanted = [tuple(p.stem.rsplit("-", 1)) for p in sorted(LOCKS.glob("*.txt"))]
    elif args.tool and args.version:
        wanted = [(args.tool, args.version)]
    else:
        parser.error("give TOOL VERSION, or --shipped")
    for tool, version in wanted:
        print(f"wrote {write_lock(tool, version)}")
    return 0
