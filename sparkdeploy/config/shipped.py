"""
Files an engine recipe needs beside the model, read on the laptop before any host is
touched: ``engine.files`` (chat templates, tuned kernel configs, parser plugins, mounted
read-only where the container reads them) and ``engine.mods`` (shell scripts run in the
container before the server starts). Each is a regular file of text of at most 1 MiB with no
secret in it, below the inventory file's folder (links followed): a copied recipe ships its
own files, never the laptop's (issue 22).
"""

from __future__ import annotations

import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkdeploy.config.engine import MAX_SHIPPED_BYTES, EngineSettings
from sparkdeploy.config.values import looks_like_secret, shown

SAFE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True)
class Shipped:
    """One file to write on the Spark for the engine."""

    kind: Literal["file", "mod"]
    name: str  # its file name on the Spark: NN-<name>, in the order given
    content: str
    dest: str = ""  # where the container reads a file ("" for a mod: run from the mods folder)


def read_shipped(
    engine: EngineSettings, base: Path
) -> tuple[tuple[Shipped, ...], list[tuple[str, str]]]:
    """The engine's files and mods read from the laptop, and (key, problem) for each that
    cannot be shipped."""
    shipped: list[Shipped] = []
    problems: list[tuple[str, str]] = []
    sources = [
        ("file", f"engine.files[{i}].src", f.src, f.dest) for i, f in enumerate(engine.files)
    ]
    sources += [("mod", f"engine.mods[{i}]", src, "") for i, src in enumerate(engine.mods)]
    counts = {"file": 0, "mod": 0}
    for kind, key, src, dest in sources:
        try:
            content = _read(base, src)
        except ValueError as error:
            problems.append((key, str(error)))
            continue
        counts[kind] += 1
        name = f"{counts[kind]:02d}-{_safe(posixpath.basename(src.replace(chr(92), '/')))}"
        shipped.append(Shipped(kind, name, content, dest))  # type: ignore[arg-type]
    return tuple(shipped), problems


def _read(base: Path, src: str) -> str:
    path = Path(src).expanduser()
    path = path if path.is_absolute() else base / path
    where = f"{shown(src)} (looked for {shown(str(path))})"
    inside = _inside(base, path, where)
    try:
        mode = inside.lstat().st_mode
    except OSError:
        raise ValueError(
            f"{where}: no such file on this laptop; paths are relative to the "
            "inventory file's folder"
        ) from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{where}: not a regular file; ship a text file")
    if inside.stat().st_size > MAX_SHIPPED_BYTES:
        raise ValueError(f"{where}: larger than 1 MiB; ship large files with the model instead")
    try:
        content = inside.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as error:
        raise ValueError(f"{where}: not readable UTF-8 text ({type(error).__name__})") from None
    line = secret_line(content)
    if line:
        raise ValueError(
            f"{where}: line {line} holds something shaped like a secret (a token or private "
            "key; not shown); secrets never go to the Spark this way"
        )
    return content


def _inside(base: Path, path: Path, where: str) -> Path:
    """``path`` with every symlink followed, when it stays below the inventory's folder
    (also resolved): a copied recipe may ship its own files, not the laptop's
    (``~/.ssh/id_ed25519``, or a link to it planted beside the recipe)."""
    folder = base.resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(folder):
        raise ValueError(
            f"{where}: outside the inventory file's folder {shown(str(folder))} (links "
            "followed); files and mods are shipped only from below it: copy the file there"
        )
    return resolved


def secret_line(content: str) -> int:
    """The number of the first line of ``content`` holding something shaped like a secret
    (0: none)."""
    for number, line in enumerate(content.splitlines(), start=1):
        if looks_like_secret(line):
            return number
    return 1 if looks_like_secret(content) else 0


def _safe(name: str) -> str:
    """A file name for the Spark: the source's name, other characters as `_`."""
    cleaned = "".join(c if c in SAFE_NAME_CHARS else "_" for c in name).lstrip(".")
    return cleaned or "file"
