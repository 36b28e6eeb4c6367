"""
The spec of a spark-fetch job: what the deploy (sparkdeploy/deploys/fetch/jobs.py) writes in
JOBS/ID.json and spark-fetch (files/fetch_job.py) reads, typed once for both sides. One
dataclass per kind of job: a model folder fetched from the Hub, an engine image pulled and
read, the copy of either from the head over the QSFP link, and the head's server of those
copies. ``to_json`` writes a spec, ``JobSpec.from_json`` reads one back and refuses a spec
whose keys are not exactly its kind's (an unknown key, a missing one), naming them.

Shipped to the Spark beside spark-fetch (config/paths.py: FETCH_SPEC, in a root-owned 0755
folder spark-fetch puts on its sys.path) and imported by the deploy (through
sparkdeploy/deploys/fetch/spec.py), so the two cannot drift apart. May import: the
standard library only (the Spark's own python3). Must not know: the deploy, pyinfra, or
spark-fetch's other parts (each of them may import it).

It also holds what every Python program shipped with it shares: ``DOCKER``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

# The docker CLI that spark-fetch runs (pull, load, save, inspect, run): the one definition
# for the Python of files/ shipped with this module. spark-ray-wait, installed alone by the
# engine deploy, keeps its own (the same path); shell scripts would keep their own too.
DOCKER = "/usr/bin/docker"

# A field only the Spark side sets (never in the JSON): where spark-fetch reads the copy
# channel's token, a root-only file beside the specs named after the job.
LOCAL = {"local": True}


class SpecError(ValueError):
    """A job spec that is not one of the kinds below, or not exactly its keys."""


@dataclass(frozen=True)
class Head:
    """How a copy reaches the head's server: its fabric address and port, how long it waits
    for the head, and the file holding the run's token."""

    source: str
    port: int
    wait_limit: float = 0
    token_file: str = ""


@dataclass(frozen=True, kw_only=True)
class FromHead:
    """What a copy adds to the spec of its kind: the head's server it copies from, and how
    long it waits for the head to have the thing whole."""

    source: str  # the head's fabric address
    port: int
    wait_limit: int  # seconds
    token_file: str = field(default="", metadata=LOCAL)

    @property
    def head(self) -> Head:
        return Head(self.source, self.port, self.wait_limit, self.token_file)


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What every job's spec says: its kind (the class) and what the laptop calls it."""

    kind: ClassVar[str] = ""
    label: str

    def to_dict(self) -> dict[str, Any]:
        """The spec as the JSON object spark-fetch reads (its kind included)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if not f.metadata}
        return {"kind": self.kind, **values}

    def to_json(self) -> str:
        """The spec's JSON, keys sorted: the same text for the same spec."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def json_keys(cls) -> set[str]:
        """The keys of this kind's JSON (its kind aside)."""
        return {f.name for f in fields(cls) if not f.metadata}

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        """The spec of ``text``: of the kind it names (which must be ``cls``'s kind, when
        called on a kind), with exactly that kind's keys; else a SpecError naming them."""
        try:
            data = json.loads(text)
        except ValueError as error:
            raise SpecError(f"the job spec is not JSON: {error}") from None
        kind = data.get("kind") if isinstance(data, dict) else None
        known = KINDS.get(kind) if isinstance(kind, str) else None
        if known is None or (cls is not JobSpec and known is not cls):
            raise SpecError(f"the job spec's kind {kind!r} is not one of {sorted(KINDS)}")
        values = {key: value for key, value in data.items() if key != "kind"}
        unknown, missing = set(values) - known.json_keys(), known.json_keys() - set(values)
        if unknown or missing:
            raise SpecError(
                f"the {kind} job spec has unknown keys {sorted(unknown)} and lacks "
                f"{sorted(missing)}: written by another release of the deploy? run it again"
            )
        return known(**values)


@dataclass(frozen=True, kw_only=True)
class ModelSpec(JobSpec):
    """A model folder downloaded from the Hub (``hf download``) as the operator, then sealed
    by spark-model-check."""

    kind: ClassVar[str] = "model"
    repo: str
    revision: str
    want: str  # repo@revision: what the folder's seal names
    folder: str
    needs_tokenizer: bool
    base_repo: str | None  # where config.json and tokenizer.json come from when missing
    user: str  # the operator: the download runs as them, with their Hub token
    group: str
    env: dict[str, str]  # the Hugging Face environment of the download
    hf_venv: str  # the hf command's venv
    model_check: str  # spark-model-check


@dataclass(frozen=True, kw_only=True)
class ImageSpec(JobSpec):
    """An engine image pulled (unless it is there) and read for the deploy."""

    kind: ClassVar[str] = "image"
    image: str
    engine: str
    read_script: str  # what runs in the image to read it (knowledge/images.py)
    readings: str  # the folder of the readings, by image ID
    docker_config: str  # the operator's ~/.docker ("" when unknown)
    user: str  # the operator ("" when unknown)


@dataclass(frozen=True, kw_only=True)
class CopyModelSpec(ModelSpec, FromHead):
    """A model folder copied from the head over the link, checked against the digests the
    deploy read from the head over SSH (``files``: name -> [size, sha256])."""

    kind: ClassVar[str] = "copy-model"
    files: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CopyImageSpec(ImageSpec, FromHead):
    """An engine image copied from the head (its `docker save`), refused unless its ID is
    the one the deploy read from the head over SSH (``image_id``)."""

    kind: ClassVar[str] = "copy-image"
    image_id: str = ""


@dataclass(frozen=True, kw_only=True)
class ServeSpec(JobSpec):
    """The head's server of the copies: these folders (want -> folder) and images only, on
    its fabric address, to the other Sparks' addresses only."""

    kind: ClassVar[str] = "serve"
    bind: str
    allow: list[str]  # the other Sparks' fabric addresses
    port: int
    models: dict[str, str]
    images: list[str]
    token_file: str = field(default="", metadata=LOCAL)


KINDS: dict[str, type[JobSpec]] = {
    kind.kind: kind for kind in (ModelSpec, ImageSpec, CopyModelSpec, CopyImageSpec, ServeSpec)
}
