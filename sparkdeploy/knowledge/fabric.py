"""
What the container of a multi-node engine gets from `docker run` so NCCL can use the
ConnectX-7 RDMA devices (fabric.yaml, with sources): the options, and how they meet the
operator's own engine.docker_args.

    words, problems, warnings = rdma_options((("--shm-size", "16g"),))
    # words == ("--device=/dev/infiniband", "--ulimit=memlock=-1:-1"), problems == warnings == []
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sparkdeploy.knowledge import load_yaml

FABRIC_FILE = Path(__file__).resolve().parent / "fabric.yaml"


@dataclass(frozen=True)
class ContainerOption:
    """One `docker run` option every container of a multi-node engine gets."""

    option: str  # --device
    value: str  # /dev/infiniband
    same: frozenset[str]  # other spellings of the same value
    family: re.Pattern[str]  # values of the option that speak about the same thing
    other: str  # what such a value does: "kept" (with other_text, a warning) or "refused"
    other_text: str  # the warning (kept, {value} for the value) or why (refused)
    covered_by: tuple[str, ...]  # operator options that already give it
    why: str
    source: str

    @property
    def word(self) -> str:
        """The option as one `docker run` word."""
        return f"{self.option}={self.value}"

    def says_same(self, name: str, value: str | None) -> bool:
        """Whether an operator's option is this one, in any spelling docker reads alike."""
        return name == self.option and value is not None and value in {self.value, *self.same}

    def says_other(self, name: str, value: str | None) -> bool:
        """Whether an operator's option speaks about the same thing and says otherwise."""
        return (
            name == self.option
            and value is not None
            and bool(self.family.fullmatch(value))
            and not self.says_same(name, value)
        )


def _text(value: object) -> str:
    return " ".join(str(value or "").split())


@lru_cache(maxsize=1)
def _table() -> dict:
    return load_yaml(FABRIC_FILE)


@lru_cache(maxsize=1)
def container_options() -> tuple[ContainerOption, ...]:
    """The options of fabric.yaml, in the order the unit writes them."""
    return tuple(
        ContainerOption(
            option=entry["option"],
            value=str(entry["value"]),
            same=frozenset(str(item) for item in entry.get("same") or ()),
            family=re.compile(entry["family"]),
            other=str(entry["other"]),
            other_text=_text(entry.get("other_warning") or entry.get("other_why")),
            covered_by=tuple(entry.get("covered_by") or ()),
            why=_text(entry["why"]),
            source=_text(entry["source"]),
        )
        for entry in _table()["container"]
    )


@lru_cache(maxsize=1)
def capabilities() -> tuple[str, ...]:
    """The --cap-add values a multi-node container gets (fabric.yaml says why none)."""
    return tuple(_table().get("capabilities") or ())


def rdma_options(
    operator: tuple[tuple[str, str | None], ...],
) -> tuple[tuple[str, ...], list[str], list[str]]:
    """
    The `docker run` words the deploy adds to a multi-node engine's containers, given the
    operator's engine.docker_args (parsed: (name, value) pairs), the problems and warnings.

    An operator option that says the same as one of the deploy's is taken as the same: the
    deploy leaves its own out, so it is written once (the operator's word stays where
    engine.docker_args puts it). One that gives it already (``--privileged`` gives every
    device) leaves the deploy's out too. One that says something else about the same thing
    is as fabric.yaml's ``other`` says: kept next to the deploy's, which stays, with a warning
    (``--device=/dev/infiniband/uverbs0``, ``--device=/dev/infiniband:/dev/infiniband:r``),
    or refused where it would undo the deploy's (``--ulimit memlock=1024``).
    """
    names = {name for name, _ in operator}
    words: list[str] = [
        f"--cap-add={capability}"
        for capability in capabilities()
        if "--privileged" not in names and ("--cap-add", capability) not in operator
    ]
    problems: list[str] = []
    warnings: list[str] = []
    for wanted in container_options():
        if any(wanted.says_same(name, value) for name, value in operator):
            continue
        other = [value or "" for name, value in operator if wanted.says_other(name, value)]
        if other and wanted.other == "refused":
            problems.extend(_refused(wanted, value) for value in other)
            continue
        if names & set(wanted.covered_by):
            continue  # given already (--privileged): nothing of the deploy's to keep beside
        warnings.extend(wanted.other_text.replace("{value}", value) for value in other)
        words.append(wanted.word)
    return tuple(words), problems, warnings


def _refused(wanted: ContainerOption, value: str) -> str:
    """Why an operator's option that would undo one of the deploy's is refused, and the fix."""
    return (
        f"{wanted.option} {value}: on a multi-node Spark the deploy gives every engine "
        f"container {wanted.word} (sparkdeploy/knowledge/fabric.yaml): {wanted.other_text}; "
        "remove it from engine.docker_args"
    )
