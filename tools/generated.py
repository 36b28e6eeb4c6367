"""Write a generated file, or check that the committed one is what would be written: the
shared tail of the build-time generators (``python -m tools.docs``, ``python -m tools.schema``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def write_or_check(target: Path, text: str, root: Path, command: str, check: bool) -> int:
    """Write ``text`` to ``target`` (exit status 0), or with ``check`` write nothing and
    return 1 when the committed file differs; ``command`` is what regenerates it."""
    name = target.relative_to(root)
    if check:
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current != text:
            print(
                f"{name} differs from what the settings models generate; run "
                f"{command} and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"{name} is up to date")
        return 0
    target.parent.mkdir(exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {name}")
    return 0


def generator_main(
    argv: list[str] | None, command: str, target: Path, root: Path, text: Callable[[], str]
) -> int:
    """The command line of a generator: write ``target`` from ``text()``, or check it with
    ``--check``."""
    parser = argparse.ArgumentParser(
        prog=command,
        description=f"Write {target.relative_to(root)} from the settings models.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when the committed file differs"
    )
    args = parser.parse_args(argv)
    return write_or_check(target, text(), root, command, args.check)
