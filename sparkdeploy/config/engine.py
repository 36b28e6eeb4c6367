"""
Engine settings: which engine serves the model on a Spark, from which pinned image, with
which overrides. Nested as ``engine:`` in the inventory::

    engine:
      name: vllm                        # or sglang
      image: nvcr.io/nvidia/vllm:26.05-py3          # default per engine
      version: "0.20.1"                 # optional: what images.yaml maps the image to
      launch: command                   # optional: entrypoint | command (images.yaml)
      args: {--max-num-seqs: 8, --kv-cache-dtype: null}   # null drops a default
      env: {VLLM_MARLIN_USE_ATOMIC_ADD: "1"}
      docker_args: [--shm-size=16g, --ulimit, memlock=-1]   # docker's own grammar
      mounts: [{host: /srv/kernels, container: /workspace/kernels}]   # read-only

Validation follows ``sparkdeploy/config/spark.py``: strict types, unknown keys refused, and
within a key every problem listed at once (each flag named, with what would be valid).
Engine flags are checked against the catalogue of the pinned release, never guessed. What
is unsafe (secrets, injection, options the deploy manages) is refused before any connection;
what only the engine can know is left to the image when it is not the catalogued release: a
flag or choice its catalogue lacks is a warning, and the image's own flag list decides it on
the Spark (engine_plan/image_check.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sparkdeploy.config.trust import ApiKeyVariable, mount_source_problem, overlaps
from sparkdeploy.config.values import (
    ENV_NAME,
    AbsolutePath,
    LauncherWord,
    ServedName,
    Text,
    UnitName,
    env_name,
    flag_value,
    image_reference,
    key_value,
    plain_text,
    secret_name,
    shown,
)
from sparkdeploy.knowledge.docker_options import parse_docker_args
from sparkdeploy.knowledge.flags import (
    Catalogue,
    CatalogueNotFound,
    available_versions,
    json_object,
    load_catalogue,
    nearest_release,
    nearness,
)
from sparkdeploy.knowledge.images import (
    describe_image,
    engine_of,
    images,
    is_image_id,
    pinning_problem,
    version_for_image,
)
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
# Paths a mount may not take in the container (what it needs to run): equal, under or a
# parent. On the host, sparkdeploy/config/trust.py decides (mount_source_problem).
CONTAINER_TREES_REFUSED = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr",
    "/var/run", "/tmp",
)  # fmt: skip


class Mount(BaseModel):
    """One extra read-only bind mount of ``engine.mounts``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    host: AbsolutePath = Field(description="Folder or file on the Spark (absolute path).")
    container: AbsolutePath = Field(description="Where the container sees it (absolute path).")

    @field_validator("host")
    @classmethod
    def _host_path(cls, value: str) -> str:
        problem = mount_source_problem(value)
        if problem:
            raise ValueError(
                f"{value} {problem}; the container would read the Spark's configuration, "
                "secrets or Docker itself. Mount a folder of its own, such as /srv/kernels"
            )
        return value

    @field_validator("container")
    @classmethod
    def _container_path(cls, value: str) -> str:
        return container_path(value)


def container_path(value: str) -> str:
    """A path inside the container a mount may cover: none of its system trees."""
    taken = [tree for tree in CONTAINER_TREES_REFUSED if overlaps(value, tree)]
    if value == "/" or taken:
        raise ValueError(
            f"{value} would cover a system path of the container ({', '.join(taken) or '/'})"
            "; mount under a folder of its own, such as /workspace/kernels"
        )
    return value


MAX_SHIPPED_BYTES = 1024 * 1024  # chat templates, kernel configs and patches are small text


class EngineFile(BaseModel):
    """One file of ``engine.files``: shipped from the laptop, mounted read-only."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    src: Text = Field(
        description="The file on this laptop: a path relative to the inventory file's folder, "
        "or absolute, below that folder (links followed). Text up to 1 MiB (chat templates, "
        "tuned kernel configs, parser plugins), with nothing shaped like a secret."
    )
    dest: AbsolutePath = Field(description="Where the container reads it (absolute path).")

    @field_validator("dest")
    @classmethod
    def _dest_path(cls, value: str) -> str:
        return container_path(value)


class EngineSettings(BaseModel):
    """The engine of one Spark. Field descriptions are the user documentation."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Literal["sglang", "vllm"] = Field(
        description="Engine serving the model: `sglang` or `vllm`. Required."
    )
    image: str = Field(
        "",
        description="Container image, any reference that is pinned: a release tag "
        "(`vllm/vllm-openai:v0.33.0`, `nvcr.io/nvidia/vllm:26.05-py3`, "
        "`lmsysorg/sglang:v0.5.23`), a digest (`repo:tag@sha256:...`, required for tags "
        "that move such as `latest`, `latest-cu130`, `nightly`, `spark`, `gemma4-cu130`), or "
        "the ID of an image built on the Spark (`sha256:<64 hex>`). Default: SGLang's "
        "nightly cu13 build from the field reports "
        "(lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a); vLLM: vllm/vllm-openai at "
        "the catalogued release.",
    )
    version: str = Field(
        "",
        validate_default=True,
        description="Engine release whose flag catalogue checks every flag "
        "(sparkdeploy/knowledge/catalogues/). Default: the release the image maps to in "
        "sparkdeploy/knowledge/images.yaml; for an image it cannot map, the newest "
        "catalogued release, with a warning. A release without a catalogue (`0.20.0`, a "
        "build's `0.5.8-t5`) is checked with the nearest catalogued one, with a warning "
        "saying which and why. On an image that is not the catalogued release (a fork, "
        "preview, nightly or local build), a flag or choice the catalogue lacks is a warning "
        "and the image's own flag list, read on the Spark after the pull, decides it.",
    )
    launch: Literal["entrypoint", "command", "image"] | None = Field(
        None,
        description="How the server starts in the image: `entrypoint` (the image's "
        "ENTRYPOINT runs the engine, as in vllm/vllm-openai: the container gets the flags "
        "only) or `command` (the container command is `vllm serve ...` or `python3 -m "
        "sglang.launch_server ...`, after the image's wrapper entrypoint, as in NGC and "
        "community images); in both the deploy writes the flags (GB10 profile, model, "
        "address) and checks them against the release's catalogue. `image`: the image's own "
        "ENTRYPOINT (a launcher wrapper of its own) gets engine.args and nothing else, with "
        "`{model}`, `{draft}`, `{port}`, `{bind}` and `{served_model_name}` filled in; the "
        "image decides the flags (docs/engines.md). Default: the image family's in "
        "sparkdeploy/knowledge/images.yaml; `command`, with a warning, for an image of no "
        "known family.",
    )
    launcher_words: list[LauncherWord] = Field(
        default_factory=list,
        description="With `launch: image`: the words the image's own launcher takes before "
        "engine.args, in order (a subcommand such as `run` for a `boot.py run`-style "
        "wrapper, or a positional `{model}`), with the same `{...}` placeholders filled in. "
        "Plain words only; flags go in engine.args.",
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
        description="Address the API binds to. 0.0.0.0 (every interface) needs an API key "
        "(api_key_env) or `api_open: true`.",
    )
    api_key_env: ApiKeyVariable = Field(
        "SPARK_API_KEY",
        description="Environment variable on this laptop holding the API key the engine "
        "requires (`Authorization: Bearer KEY`; 16 to 512 characters of letters, digits and "
        "`._~+/=-`, e.g. `openssl rand -hex 32`). Set: the key is stored root-only (0600) on "
        "the Spark and given to the engine without its command line (vLLM: VLLM_API_KEY "
        "from a root-only --env-file; SGLang: api-key in a root-only --config YAML); the "
        "health check uses it. Unset: no key, which engine.bind 0.0.0.0 refuses unless "
        "api_open is true.",
    )
    api_open: bool = Field(
        False,
        description="Say that the API is open on purpose: engine.bind 0.0.0.0 without a key "
        "(anyone who reaches the port can use the GPU). Refused together with a key.",
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
        description="Extra `docker run` options, read with docker's own grammar "
        "(sparkdeploy/knowledge/docker_options.yaml): any option `docker run` knows, "
        "`--opt=value` or `--opt value`, short ones too (`-m 16g`), with the values docker "
        "parses itself checked (sizes such as --shm-size=10.24gb, --ulimit name=soft[:hard], "
        "--device host[:container[:rwm]], capabilities). Refused before any connection: "
        "options docker does not know, options the deploy manages (-e/--env-file: engine.env, "
        "-v/--mount: engine.mounts, --rm/--restart/--name/--network/--entrypoint/-d/--gpus/"
        "--ipc/-p/--pull/--log-driver: the deploy), unsafe ones (--cap-add ALL/SYS_ADMIN/"
        "NET_ADMIN..., --pid=host, --userns, block or memory devices, --oom-kill-disable, "
        "--security-opt systempaths=unconfined ...) and a word that is no option's value, "
        "which docker would read as the image. Warned: --privileged, seccomp/apparmor "
        "unconfined, --memory (it does not cap unified memory), --user, undoing the deploy's "
        "hardening (--cap-add=NET_RAW).",
    )
    mounts: list[Mount] = Field(
        default_factory=list,
        description="Extra read-only bind mounts, `{host: /srv/kernels, container: "
        "/workspace/kernels}` (absolute paths), rendered as `-v host:container:ro`. System "
        "paths (/, /etc, /proc, /sys, /dev, /run, Docker's socket ...) and the model folders' "
        "mounts are refused.",
    )

    files: list[EngineFile] = Field(
        default_factory=list,
        description="Files a recipe needs beside the model (chat templates, tuned kernel "
        "configs, parser plugins): `{src: templates/chat.jinja, dest: /templates/chat.jinja}`. "
        "Read on this laptop before any host is touched, written to "
        "/var/lib/spark-deploy/engine-files/ on the Spark and mounted read-only at `dest`; a "
        "changed file restarts the engine.",
    )
    mods: list[Text] = Field(
        default_factory=list,
        description="Shell scripts on this laptop (paths as for `files`) that patch the engine "
        'inside the container before the server starts (the field\'s "mods"). They run in '
        "order with `sh` in a fresh container at every start, so each sees the image as "
        "shipped; one that fails stops the start. On Sparks serving one model together they "
        "run in every container: each rank's server, or with Ray the head's and each "
        "worker's before `ray start` (so a mod can install Ray, as NVIDIA's NGC pair does). "
        "Not with launch: image.",
    )

    accept: dict[str, str] = Field(
        default_factory=dict,
        description="GB10 rules accepted by id, each with the reason (`{rule-id: reason}`): "
        "an accepted error no longer refuses the configuration; it is shown among the plan's "
        "warnings and its reason is written into the engine unit as a comment. An unknown id "
        "is refused with the list of rules; an accepted rule that does not fire is a warning.",
    )

    rollback: bool = Field(
        True,
        description="Keep on the Spark the last configuration that passed its health check "
        "(the engine's unit, container environment and shipped files) and go back to it when "
        "a changed one does not become healthy (crash, crash loop, health timeout): the run "
        "fails with the diagnosis of the new configuration while the Spark serves with the "
        "last good one. One Spark per engine: Sparks serving one model together are not "
        "rolled back yet. false: a failed start stays failed, as before.",
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

    _version_asked: str = PrivateAttr("")

    @model_validator(mode="wrap")
    @classmethod
    def _remember_version(cls, data: Any, handler: Any) -> Any:
        """The version the inventory named, if any (a derived one, or the nearest catalogued
        release standing for one, may need a warning)."""
        settings = handler(data)
        asked = data.get("version") if isinstance(data, dict) else None
        settings._version_asked = asked if isinstance(asked, str) else ""
        return settings

    @field_validator("image")
    @classmethod
    def _pinned(cls, value: str, info: ValidationInfo) -> str:
        image_reference(value)
        name = info.data.get("name")
        if name is None:  # reported on its own key
            return value
        problem = pinning_problem(name, value)
        if problem:
            raise ValueError(problem)
        other = engine_of(value)
        if other is not None and other != name:
            raise ValueError(
                f"{value} is a {other} image (sparkdeploy/knowledge/images.yaml), and "
                f"engine.name is {name}; set name: {other} or use a {name} image"
            )
        return value

    @field_validator("version")
    @classmethod
    def _catalogued(cls, value: str, info: ValidationInfo) -> str:
        """The catalogued release that checks the flags: the one named or mapped, its nearest
        when it has no catalogue, the newest when the image's release is unknown."""
        name, image = info.data.get("name"), info.data.get("image")
        if name is None or image is None:  # reported on their own keys
            return value
        mapped = version_for_image(name, image) if image else None
        if value and mapped is not None and mapped != value:
            raise ValueError(
                f"image {image} is release {mapped}, not {value}; drop version or change the image"
            )
        asked = value or mapped
        if not asked:
            # Unknown: the newest catalogued release checks the flags, and the plan warns
            # (unknown_version_warning).
            return available_versions(name)[-1]
        # A release without a catalogue (vllm/vllm-openai:v0.20.0, a build of 0.5.8): the
        # nearest catalogued one checks the flags, and the plan says which and why.
        nearest = nearest_release(name, asked)
        try:
            load_catalogue(name, nearest or asked)
        except CatalogueNotFound as error:
            raise ValueError(f"{error}; or give the release number the image holds") from None
        return nearest or asked

    @field_validator("args")
    @classmethod
    def _known_flags(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Every flag safe to write and read as the release reads it; on an image that is not
        the catalogued release, what only the image can judge is left to it (flag_warnings)."""
        name, version = info.data.get("name"), info.data.get("version")
        catalogue = load_catalogue(name, version) if name is not None and version else None
        problems = [
            problem
            for flag, item in value.items()
            for problem in _arg_problems(flag, item, catalogue)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        if catalogue is None or info.data.get("launch") == "image":
            return value  # launch: image: the image decides (engine_plan/image_launch.py)
        managed = _managed_problems(catalogue, value)
        given = {
            flag: item for flag, item in value.items() if item is not None and flag not in managed
        }
        image = info.data.get("image") or ""
        lenient = image_decides(catalogue.engine, image, catalogue.version)
        problems = list(managed.values()) + catalogue.check(given, lenient)
        if not lenient and catalogue.undecided(given):
            problems.append(_release_hint(catalogue.engine, image, catalogue.version))
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("docker_args")
    @classmethod
    def _docker_options(cls, value: list[str]) -> list[str]:
        _, problems, _ = parse_docker_args(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("mounts")
    @classmethod
    def _distinct_mounts(cls, value: list[Mount]) -> list[Mount]:
        seen: set[str] = set()
        for mount in value:
            if mount.container in seen:
                raise ValueError(f"{mount.container} is mounted twice; give each mount its own")
            seen.add(mount.container)
        return value

    @property
    def catalogue(self) -> Catalogue:
        """The flag catalogue of the release these settings pin (``version``, the catalogued
        one the validator chose): the one lookup of it that a plan and its checks share."""
        return load_catalogue(self.name, self.version)

    def unknown_version_warning(self) -> str | None:
        """When the release of the image is not known, or has no catalogue: which release
        checks the flags instead, why that one, and how to say or build the right one."""
        held = self._version_asked or describe_image(self.name, self.image).version
        if held == self.version or (self._version_asked and not held):
            return None
        if held:
            said = "engine.version is" if self._version_asked else f"image {self.image} maps to"
            return (
                f"{said} {self.name} {held}, which has no flag catalogue; its flags are checked "
                f"against the nearest catalogued release, {self.name} {self.version} "
                f"({nearness(self.name, held, self.version)}), and on the Spark against the "
                "flag list of the image itself. For the release's own catalogue run `make "
                f'catalogues ENGINE={self.name} VERSIONS="{held}"`'
            )
        known = ", ".join(available_versions(self.name))
        return (
            f"image {self.image} is of no {self.name} release sparkdeploy/knowledge/images.yaml "
            f"knows; its flags are checked against the newest catalogued release, {self.name} "
            f"{self.version}. Set engine.version to the release the image holds (catalogued: "
            f"{known})"
        )

    def image_decides(self) -> bool:
        """Whether the image is not the catalogued release its flags are checked against (a
        fork, preview, nightly, local build or uncatalogued release): a flag or choice the
        catalogue lacks is then the image's to judge, on the Spark, not a refusal here."""
        return image_decides(self.name, self.image, self.version)

    def flag_warnings(self) -> list[str]:
        """engine.args the catalogue does not know, on an image that is not its release:
        what will decide them (the image's own flag list, read on the Spark after the pull)."""
        if not self.image_decides():
            return []
        given = {flag: item for flag, item in self.args.items() if item is not None}
        undecided = self.catalogue.undecided(given)
        if not undecided:
            return []
        return [
            f"engine.args: {'; '.join(undecided)}. Image {self.image} is not {self.name} "
            f"{self.version}, so its own parser decides: after the pull the deploy reads on the "
            "Spark the flags the image's engine lists (--help) and, before any unit changes, "
            "refuses a flag it does not list; a value it does not take stops the engine at start"
        ]

    def launch_warning(self) -> str | None:
        """When neither images.yaml nor the inventory says how the server starts, or the
        inventory says otherwise than images.yaml."""
        info = describe_image(self.name, self.image)
        if self.launch is not None and info.launch and self.launch != info.launch:
            return (
                f"engine.launch {self.launch} overrides images.yaml, where {info.family} "
                f"images launch by {info.launch}; the server would not start as the image "
                "expects unless the image was changed. Drop engine.launch if it was not"
            )
        if self.launch is not None or info.launch:
            return None
        what = "image built on the Spark" if is_image_id(self.image) else "image"
        return (
            f"{what} {self.image} is of no image family sparkdeploy/knowledge/images.yaml "
            f"knows, so the server is started as the container command ({self.name}'s "
            "server command after the image's entrypoint); set engine.launch to `entrypoint` "
            "if the image's ENTRYPOINT starts the engine itself, or to `command` to confirm"
        )

    def docker_warnings(self) -> list[str]:
        """What the docker options used warn about (docker_options.yaml `warned`)."""
        return parse_docker_args(self.docker_args)[2]

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
                    if key_value(key, item):
                        raise ValueError(
                            "its value looks like a key; secrets never go in the inventory "
                            "(the env file on the Spark is readable)"
                        )
            except ValueError as error:
                problems.append(f"{key if ENV_NAME.fullmatch(key) else shown(key)}: {error}")
        if problems:
            raise ValueError("; ".join(problems))
        return value


def image_decides(engine: str, image: str, version: str) -> bool:
    """Whether ``image`` is not the catalogued release ``version`` (images.yaml maps it to
    none, or to another): its own parser then judges what the catalogue does not know."""
    return version_for_image(engine, image) != version if image else False


def _release_hint(engine: str, image: str, version: str) -> str:
    """Why a flag unknown to the catalogue is refused on a catalogued release, and the fixes."""
    return (
        f"image {image} is {engine} {version} (sparkdeploy/knowledge/images.yaml), whose "
        f"parser refuses what sparkdeploy/knowledge/catalogues/{engine}-{version}.json does not "
        "list: remove the flag or fix its value, or use an image that has it (an image of "
        "no catalogued release, such as a fork or a build of your own, is judged on the Spark "
        "by its own flag list); if that catalogue is stale, rebuild it with `make catalogues "
        f'ENGINE={engine} VERSIONS="{version}"`'
    )


def _managed_problems(catalogue: Catalogue, args: dict[str, Any]) -> dict[str, str]:
    """Flags (or keys of a JSON flag) in ``args`` that the deploy sets from a setting, in
    whatever spelling the release reads them -> what to set instead."""
    managed = managed_flags(catalogue.engine, catalogue.version, placed=False)  # planned: rest
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
    return [str(key) for key in json_object(value) or {}]


def _secret_flag(flag: str, value: object, catalogue: Catalogue | None) -> bool:
    """Whether ``flag`` would put a secret on the command line: its name says so (--api-key,
    --hf-token) and what it takes can hold one. What the catalogue says it takes decides
    (--long-prefill-token-threshold takes an int: no secret); a flag it does not know is
    judged by its name, unless it is a switch (true: no value reaches the command line)."""
    if not secret_name(flag) and flag.removeprefix("--") not in ("token", "hf-token"):
        return False
    reading = catalogue.read(flag) if catalogue is not None else None
    if catalogue is not None and reading is not None and not reading.path:
        spec = catalogue.spec(reading.flag)
        return spec is None or spec.type not in ("int", "float", "bool")
    return value is not True


def _arg_problems(flag: object, value: object, catalogue: Catalogue | None = None) -> list[str]:
    """What is wrong with one ``engine.args`` entry whatever the release reads: a flag name
    that is not one, a flag that carries a secret (``_secret_flag``), a value that is a flag,
    control characters or a secret anywhere in the value."""
    if not isinstance(flag, str) or not FLAG_NAME.fullmatch(flag):
        return [f"{shown(flag)}: flags are written with their dashes, like --context-length"]
    if _secret_flag(flag, value, catalogue):
        return [f"{flag}: {SECRET_FLAG_HINT}"]
    items = value if isinstance(value, list) else [value]
    problems = []
    for item in items:
        try:
            if isinstance(item, str):
                flag_value(item)
            elif isinstance(item, dict):
                _json_value(item)
            _finite(json_object(item) if isinstance(item, str) else item)
        except ValueError as error:
            problems.append(f"{flag}: {error}")
    return problems


def _finite(value: object) -> None:
    """No NaN or infinity anywhere in a flag's value: JSON has none (json.dumps would write
    NaN, which the engine's JSON parser refuses), and no engine setting means one."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number; give a number")
    for item in (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    ):
        _finite(item)


def _json_value(value: object) -> None:
    """Every key and string inside a JSON flag value is plain text and no secret. A key whose
    name says secret is judged by what it holds: numbers, true/false or null are none
    (--hf-overrides {pad_token_id: 0, eos_token_id: [1, 2]}); text under it is refused."""
    if isinstance(value, str):
        plain_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            plain_text(str(key))
            numbers = item if isinstance(item, list) else [item]
            textless = all(one is None or isinstance(one, (bool, int, float)) for one in numbers)
            if secret_name(str(key)) and not textless:
                raise ValueError(f"{shown(key)} {SECRET_FLAG_HINT}")
            _json_value(item)
    elif isinstance(value, list):
        for item in value:
            _json_value(item)


# An API key as it lands in an HTTP header, a docker --env-file line and a single-quoted YAML
# scalar: RFC 6750's token characters (b64token), none of which needs escaping in any of them.
API_KEY_TEXT = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")


def laptop_api_key(engine: EngineSettings, environ: Mapping[str, str]) -> str:
    """The API key in the laptop's variable engine.api_key_env ("" when it is not set)."""
    return environ.get(engine.api_key_env, "").strip()


def api_key_problems(engine: EngineSettings, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, problem) for an API key the engine cannot use, or an API beyond loopback
    without one that the inventory does not say is open on purpose. The key is never shown."""
    key = laptop_api_key(engine, environ)
    variable = engine.api_key_env
    if key and not API_KEY_TEXT.fullmatch(key):
        return [
            (
                "engine.api_key_env",
                f"${variable} on this laptop is not usable as an API key: 16 to 512 "
                "characters of letters, digits and ._~+/=- (make one with `openssl rand -hex "
                "32`)",
            )
        ]
    if key and engine.api_open:
        return [
            (
                "engine.api_open",
                f"true says the API is open, but ${variable} on this laptop holds a key: "
                f"remove api_open to require the key, or unset ${variable} to leave it open",
            )
        ]
    if not key and engine.bind != "127.0.0.1" and not engine.api_open:
        return [
            (
                "engine.bind",
                f"{engine.bind} serves the API beyond this Spark, and ${variable} is not set "
                f"on this laptop: export {variable}=<key> (e.g. `export {variable}=$(openssl "
                "rand -hex 32)`, kept where your clients find it) so the engine requires it, "
                "or set engine.api_open: true to serve it without a key on purpose",
            )
        ]
    return []
