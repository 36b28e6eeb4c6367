"""
Engine settings: which engine serves the model on a Spark, from which pinned image, with
which overrides. Nested as ``engine:`` in the inventory::

    engine:
      name: sglang                      # or vllm
      image: lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a   # default per engine
      args: {--max-running-requests: 8, --moe-runner-backend: null}   # null drops a default
      env: {SGLANG_ENABLE_SPEC_V2: "False"}

Validation follows ``sparkdeploy/config/spark.py``: strict types, unknown keys refused, and
within a key every problem listed at once (each flag named, with what would be valid).
Engine flags are checked against the catalogue of the pinned release, never guessed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sparkdeploy.config.values import (
    ENV_NAME,
    ServedName,
    Text,
    UnitName,
    env_name,
    flag_value,
    image_reference,
    plain_text,
    secret_name,
    shown,
)
from sparkdeploy.knowledge.flags import (
    CatalogueNotFound,
    available_versions,
    check_flags,
    load_catalogue,
)
from sparkdeploy.knowledge.images import image_tag, images, version_for_image
from sparkdeploy.knowledge.profiles import managed_flags

DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}
ACCEPT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")  # ids as gb10_rules.yaml spells them
FLAG_NAME = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*")
SECRET_FLAG_HINT = (
    "carries a secret, and a flag's value lands in the unit's command line (ps, journal); "
    "secrets never go in the inventory"
)

Scalar = bool | int | float | str
ArgValue = bool | int | float | str | list[Scalar] | dict[str, Any]


class EngineSettings(BaseModel):
    """The engine of one Spark. Field descriptions are the user documentation."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Literal["sglang", "vllm"] = Field(
        description="Engine serving the model: `sglang` or `vllm`. Required."
    )
    image: str = Field(
        "",
        description="Container image, pinned by tag or digest (`latest` and untagged images "
        "are refused). Default: SGLang's nightly cu13 build from the field reports "
        "(lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a); vLLM: vllm/vllm-openai at "
        "the catalogued release.",
    )
    version: str = Field(
        "",
        validate_default=True,
        description="Engine release whose flag catalogue checks every flag "
        "(sparkdeploy/knowledge/catalogues/). Default: the release the image maps to in "
        "sparkdeploy/knowledge/images.yaml.",
    )
    args: dict[str, ArgValue | None] = Field(
        default_factory=dict,
        description="Engine flags over the GB10 profile: `--flag: value`, `true` for a flag "
        "without value, a list for several values, null to drop a profile default.",
    )
    env: dict[str, str | None] = Field(
        default_factory=dict,
        description="Environment variables over the profile's (name: value; null drops one). "
        "No secrets: names with the word TOKEN, SECRET, PASSWORD or API_KEY are refused "
        "(TOKENIZERS_PARALLELISM is fine).",
    )
    port: int = Field(
        0,
        ge=1,
        le=65535,
        description="Port the engine's OpenAI-compatible API listens on. Default: SGLang "
        "30000, vLLM 8000.",
    )
    bind: Literal["127.0.0.1", "0.0.0.0"] = Field(
        "127.0.0.1",
        description="Address the API binds to. 0.0.0.0 exposes the unauthenticated API on "
        "every interface (allowed, with a warning); prefer a reverse proxy.",
    )
    served_model_name: ServedName | None = Field(
        None,
        description="Model name clients send in requests. Unset: the model folder's name.",
    )
    context_length: int | None = Field(
        None,
        ge=1,
        description="Maximum context length in tokens. Unset: the profile's (SGLang 65536, "
        "vLLM 262144).",
    )
    other_gpu_services: list[UnitName] = Field(
        default_factory=list,
        description="systemd services that must not run alongside the engine (they share the "
        "128 GB unified memory), e.g. a TTS or image service (`tts.service`). Units the Spark "
        "needs (ssh, NetworkManager, docker, systemd-*, ...) are refused.",
    )
    speculative: bool | None = Field(
        None,
        description="Speculative decoding (EAGLE) with the draft model. Unset: on when "
        "draft_model_repo is set.",
    )
    docker_args: list[Text] = Field(
        default_factory=list,
        description="Extra `docker run` options. The deploy manages the container's "
        "lifecycle itself: the GB10 rules refuse --rm and --restart here.",
    )

    accept: dict[str, str] = Field(
        default_factory=dict,
        description="GB10 rules accepted by id, each with the reason (`{rule-id: reason}`): "
        "an accepted error no longer refuses the configuration; it is shown among the plan's "
        "warnings and its reason is written into the engine unit as a comment. An unknown id "
        "is refused with the list of rules; an accepted rule that does not fire is a warning.",
    )

    alerts: bool = Field(
        False,
        description="Render Prometheus alert rules and a scrape config for the engine under "
        "/etc/spark-deploy/prometheus/ (engine down; speculative accept rate low). SGLang "
        "then runs with --enable-metrics. false removes the files.",
    )
    alert_accept_rate: float = Field(
        0.15,
        ge=0,
        le=1,
        description="Speculative decoding accept rate (accepted / proposed draft tokens) below "
        "which, averaged over alert_window, the alert fires.",
    )
    alert_window: str = Field(
        "15m",
        pattern=r"^[1-9][0-9]*[smh]$",
        description="Window the accept rate is averaged over, as a Prometheus duration "
        "(`15m`, `1h`).",
    )

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data: Any) -> Any:
        """Image and port defaults depend on the engine."""
        if isinstance(data, dict) and data.get("name") in DEFAULT_PORTS:
            data = dict(data)
            data.setdefault("image", images()[data["name"]]["default_image"])
            data.setdefault("port", DEFAULT_PORTS[data["name"]])
        return data

    @field_validator("image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        image_reference(value)
        tag = image_tag(value)
        if "@sha256:" in value:
            return value
        if tag is None:
            raise ValueError("is not pinned: add a tag (untagged means latest) or a digest")
        if tag == "latest":
            raise ValueError("`latest` is not pinned: name a dated or versioned tag")
        return value

    @field_validator("version")
    @classmethod
    def _catalogued(cls, value: str, info: ValidationInfo) -> str:
        name, image = info.data.get("name"), info.data.get("image")
        if name is None or image is None:  # reported on their own keys
            return value
        known = ", ".join(available_versions(name))
        if not value:
            derived = version_for_image(name, image) if image else None
            if derived is None:
                raise ValueError(
                    f"cannot tell the {name} release of image {image!r}; set version to one "
                    f"of the catalogued releases: {known}"
                )
            value = derived
        try:
            load_catalogue(name, value)
        except CatalogueNotFound as error:
            raise ValueError(str(error)) from None
        mapped = version_for_image(name, image) if image else None
        if mapped is not None and mapped != value:
            raise ValueError(
                f"image {image} is release {mapped}, not {value}; drop version or change the image"
            )
        return value

    @field_validator("args")
    @classmethod
    def _known_flags(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        problems = [
            problem for flag, item in value.items() for problem in _arg_problems(flag, item)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        name, version = info.data.get("name"), info.data.get("version")
        if name is None or not version:
            return value
        managed = _managed_problems(name, version, value)
        given = {
            flag: item for flag, item in value.items() if item is not None and flag not in managed
        }
        problems = list(managed.values()) + check_flags(name, version, given)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("accept")
    @classmethod
    def _accepted_rules(cls, value: dict[str, str]) -> dict[str, str]:
        """Rule ids as the rules file spells them; a reason is one line of plain text."""
        problems = []
        for rule_id, reason in value.items():
            if not ACCEPT_ID.fullmatch(rule_id):
                problems.append(f"{shown(rule_id)}: a rule id is lower-case letters, digits and -")
                continue
            try:
                plain_text(reason)
                if not reason.strip() or len(reason) > 300 or reason.rstrip().endswith("\\"):
                    raise ValueError(
                        "give the reason as one line of 1-300 characters, not ending in '\\'"
                    )
            except ValueError as error:
                problems.append(f"{rule_id}: {error}")
        if problems:
            raise ValueError("; ".join(problems))
        return {rule_id: reason.strip() for rule_id, reason in value.items()}

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        problems = []
        for key, item in value.items():
            try:
                env_name(key)
                if secret_name(key):
                    raise ValueError(
                        "secrets never go in the inventory; the deploy passes the HF token "
                        "from the laptop itself"
                    )
                if item is not None:
                    plain_text(item)
            except ValueError as error:
                problems.append(f"{key if ENV_NAME.fullmatch(key) else shown(key)}: {error}")
        if problems:
            raise ValueError("; ".join(problems))
        return value


def _managed_problems(engine: str, version: str, args: dict[str, Any]) -> dict[str, str]:
    """Flags (or keys of a JSON flag) in ``args`` that the deploy sets from a setting, in
    whatever spelling the release reads them -> what to set instead."""
    catalogue = load_catalogue(engine, version)
    managed = managed_flags(engine, version)
    problems: dict[str, str] = {}
    for flag, item in args.items():
        reading = catalogue.read(flag)
        if reading is None:
            continue
        setting = managed.get(reading.key) or managed.get(reading.flag)
        if setting:
            problems[flag] = f"{flag}: set by the deploy from {setting}; set that instead"
            continue
        keys = [f"{reading.flag}.{key}" for key in _json_keys(item) if not reading.path]
        for key in keys:
            if key in managed:
                problems[flag] = (
                    f"{flag}: its key {key.split('.', 1)[1]!r} is set by the deploy from "
                    f"{managed[key]}; leave it out"
                )
    return problems


def _json_keys(value: object) -> list[str]:
    """The top-level keys of a JSON flag's value, given as a mapping or as JSON text."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [str(key) for key in value] if isinstance(value, dict) else []


def _arg_problems(flag: object, value: object) -> list[str]:
    """What is wrong with one ``engine.args`` entry before the catalogue is asked: a flag
    name that is not one, a flag that carries a secret, a value that is a flag, control
    characters or a secret anywhere in the value."""
    if not isinstance(flag, str) or not FLAG_NAME.fullmatch(flag):
        return [f"{shown(flag)}: flags are written with their dashes, like --context-length"]
    if secret_name(flag) or flag.removeprefix("--") in ("token", "hf-token"):
        return [f"{flag}: {SECRET_FLAG_HINT}"]
    items = value if isinstance(value, list) else [value]
    problems = []
    for item in items:
        try:
            if isinstance(item, str):
                flag_value(item)
            elif isinstance(item, dict):
                _json_value(item)
        except ValueError as error:
            problems.append(f"{flag}: {error}")
    return problems


def _json_value(value: object) -> None:
    """Every key and string inside a JSON flag value is plain text and no secret."""
    if isinstance(value, str):
        plain_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            plain_text(str(key))
            if secret_name(str(key)):
                raise ValueError(f"{shown(key)} {SECRET_FLAG_HINT}")
            _json_value(item)
    elif isinstance(value, list):
        for item in value:
            _json_value(item)
