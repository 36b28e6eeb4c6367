"""
Hash-locked package sets for the venvs the deploy makes as root on a Spark (the ``hf``
command's, the MCP server's). Each lock (locks/TOOL-VERSION.txt, written by ``python -m
tools.lock``) lists every package pip resolves for the tool's pinned top-level set, pinned,
with the sha256 of every wheel PyPI has for that release, so ``pip install --require-hashes
--only-binary :all: -r LOCK`` installs nothing else: no unpinned transitive dependency, no
sdist whose build runs code as root, no file a mirror swapped.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

LOCKS = Path(__file__).resolve().parent / "locks"
TOOLS = ("hf-cli", "mcp")
# Besides the MCP SDK, the libraries the code the MCP server runs imports (the shipped part
# of sparkdeploy), at the releases the laptop plans with (requirements.txt).
SHIPPED_LIBRARIES = ("pydantic", "pyyaml", "packaging")
# The pip options every locked install takes (pip's docs, "Secure installs": hash-checking
# mode, and --only-binary :all: so no sdist's setup.py runs).
PIP_LOCKED = "--require-hashes --only-binary :all:"
TOP_LINE = "# top: "
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;.*?)?\s*\\?$")
HASH = re.compile(r"^\s+--hash=sha256:([0-9a-f]{64})\s*\\?$")


class LockError(ValueError):
    """No usable lock for what the inventory asks (the message names the fix)."""


def top_level(tool: str, version: str) -> list[str]:
    """The tool's pinned top-level set: ``huggingface_hub`` for the hf command; the MCP SDK
    and the shipped code's libraries at the laptop's releases for the MCP server."""
    if tool == "hf-cli":
        return [f"huggingface_hub=={version}"]
    if tool == "mcp":
        return [f"mcp=={version}"] + [
            f"{name}=={metadata.version(name)}" for name in SHIPPED_LIBRARIES
        ]
    raise LockError(f"no lock tool {tool!r}: one of {', '.join(TOOLS)}")


def lock_path(tool: str, version: str) -> Path:
    return LOCKS / f"{tool}-{version}.txt"


@dataclass(frozen=True)
class Lock:
    tool: str
    text: str
    top: tuple[str, ...]  # the `# top:` pins it was resolved from
    pins: dict[str, str]  # every package -> its release
    hashes: dict[str, tuple[str, ...]]  # package -> the sha256 of each of its wheels

    @property
    def digest(self) -> str:
        """The sha256 of the lock's text: the stamp a venv made from it keeps."""
        return hashlib.sha256(self.text.encode()).hexdigest()


def parse_lock(tool: str, text: str) -> Lock:
    """The pins, hashes and top-level set of a lock's text."""
    top: tuple[str, ...] = ()
    pins: dict[str, str] = {}
    hashes: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith(TOP_LINE):
            top = tuple(line[len(TOP_LINE) :].split())
        elif line.startswith("#") or not line.strip():
            continue
        elif match := HASH.match(line):
            hashes[current].append(match.group(1))
        elif match := PIN.match(line):
            current = match.group(1).lower()
            pins[current] = match.group(2)
            hashes[current] = []
        else:
            raise LockError(f"{tool} lock: unreadable line {line!r}")
    return Lock(tool, text, top, pins, {name: tuple(found) for name, found in hashes.items()})


def read_lock(tool: str, version: str) -> Lock:
    """The shipped lock of ``tool`` at ``version``, checked against the top-level set the
    deploy wants; raises ``LockError`` naming the command that writes it."""
    path = lock_path(tool, version)
    wanted = top_level(tool, version)
    fix = (
        f"run `python -m tools.lock {tool} {version}` on the laptop to write it "
        f"(it resolves {' '.join(wanted)} with pip and takes the wheels' sha256 from PyPI)"
    )
    if not path.is_file():
        raise LockError(f"no hash lock {path.relative_to(LOCKS.parents[2])} for {tool}: {fix}")
    lock = parse_lock(tool, path.read_text())
    if sorted(lock.top) != sorted(wanted):
        raise LockError(
            f"{path.name} locks {' '.join(lock.top)}, not {' '.join(wanted)} (the laptop's "
            f"libraries changed): {fix}"
        )
    return lock


def pip_install(venv: str, lock_file: str) -> str:
    """The locked install into ``venv`` from the lock uploaded at ``lock_file``."""
    return (
        f"{venv}/bin/pip install --quiet --disable-pip-version-check --no-input "
        f"{PIP_LOCKED} -r {lock_file}"
    )
