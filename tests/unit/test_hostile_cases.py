"""
Hostile inventory values, case by case, per class of attack: each is refused before any
host is contacted (``load_inventory`` raises ``InventoryError``, the way ``inventory.py``
stops pyinfra) with a message that names the file, the host and the key, and never shows
the raw value when it holds a control character or a token; or it is accepted and written
harmlessly, read back strictly as its consumer reads it (tests/unit/hostile.py). Each class
also has plain values that must still be accepted, so the guards do not over-refuse.

Every case goes through a real YAML file: the document is dumped with every non-ASCII or
control character escaped, and read back identical before the inventory is loaded.

Holes found are ``xfail(strict=True)`` cases saying what is wrong: they pass the day the
hole is closed, and then the mark must go.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.load import MAX_FLOW_DEPTH, read_document
from sparkdeploy.inventory import Inventory, load_inventory
from tests.unit.hostile import TOKEN, control_characters, written

HOST = "s1"
DIGEST = "0123456789abcdef" * 4
DEFAULT_IMAGE = "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"
INJECTION = "x\nExecStartPre=/some/script\n#"
UNIT = f"{HOST}: spark-engine-sglang.service"


def spark(**keys: Any) -> dict[str, Any]:
    """One Spark with a model; ``keys`` over its own keys."""
    own = {"ssh_host": "192.0.2.10", "ssh_user": "nvidia", "model_repo": "org/model", **keys}
    return {"sparks": {HOST: own}}


def engine(**keys: Any) -> dict[str, Any]:
    """One Spark serving its model with SGLang; ``keys`` over the engine's keys."""
    return spark(engine={"name": "sglang", **keys})


def args(**flags: Any) -> dict[str, Any]:
    """``engine.args`` with ``flags`` (``chat_template`` for ``--chat-template``)."""
    return engine(args={"--" + flag.replace("_", "-"): value for flag, value in flags.items()})


def served(**keys: Any) -> dict[str, Any]:
    """One Spark serving its model with SGLang; ``keys`` over the Spark's keys."""
    return spark(engine={"name": "sglang"}, **keys)


def rail(address: str, interface: str = "enp1s0f0np0", **keys: Any) -> dict[str, Any]:
    return spark(qsfp=[{"interface": interface, "address": address}], **keys)


@dataclass(frozen=True)
class Refused:
    """A document (or YAML text) refused naming ``key`` (and ``host``, unless None)."""

    id: str
    document: dict[str, Any] | str
    key: str
    host: str | None = HOST
    hidden: tuple[str, ...] = ()  # texts the message must not hold, besides the token


@dataclass(frozen=True)
class Harmless:
    """A document accepted and written harmlessly: ``check`` gets the inventory and
    everything written, read back strictly."""

    id: str
    document: dict[str, Any]
    check: Callable[[Inventory, dict[str, Any]], None]


def load(document: dict[str, Any] | str, tmp_path: Path) -> tuple[str, Callable[[], Inventory]]:
    """The document as an inventory file, and how to load it."""
    path = tmp_path / "sparks.yml"
    if isinstance(document, str):
        path.write_text(document, encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(document, allow_unicode=False, width=1 << 20))
        assert read_document(str(path)) == document  # the file holds exactly this document
    return str(path), lambda: load_inventory(str(path))


def assert_names(error: InventoryError, path: str, host: str | None, key: str) -> None:
    problems = error.problems
    assert problems and all(problem.startswith(path) for problem in problems), problems
    assert any(
        (host is None or f"'{host}'" in problem) and re.search(rf"\b{re.escape(key)}\b", problem)
        for problem in problems
    ), problems


def assert_shows_nothing_raw(error: InventoryError, hidden: tuple[str, ...] = ()) -> None:
    """No problem holds a control character (a raw value would), and the message holds no
    token and none of ``hidden``."""
    message = str(error)
    for problem in error.problems:
        assert not control_characters(problem), problem
    assert TOKEN not in message and not re.search(r"hf_[A-Za-z0-9]{20,}", message), message
    for text in hidden:
        assert text not in message, (text, message)


def refuse(case: Refused, tmp_path: Path) -> None:
    path, loading = load(case.document, tmp_path)
    with pytest.raises(InventoryError) as caught:
        loading()
    assert_names(caught.value, path, case.host, case.key)
    raw = [
        value for value in _strings(case.document) if control_characters(value) or TOKEN in value
    ]
    assert_shows_nothing_raw(caught.value, (*case.hidden, *raw))


def accept(case: Harmless, tmp_path: Path) -> None:
    _, loading = load(case.document, tmp_path)
    inventory = loading()
    read = written(inventory, commands=True)
    case.check(inventory, read)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (*_strings(key), *_strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


# --- reading what is written -------------------------------------------------------------


def exec_start(read: dict[str, Any], unit: str = UNIT) -> tuple[str, ...]:
    [words] = [value[1] for _, key, value in read[unit] if key == "ExecStart"]
    return tuple(words)


def after(words: tuple[str, ...], flag: str) -> str:
    return words[words.index(flag) + 1]


def unit_keys(read: dict[str, Any], unit: str = UNIT) -> list[str]:
    return [key for _, key, _ in read[unit]]


BASE_KEYS = [
    "Description",
    "Wants",
    "After",
    "StartLimitIntervalSec",
    "StartLimitBurst",
    "Type",
    "EnvironmentFile",
    "ExecStartPre",
    "ExecStartPre",
    "ExecStartPre",
    "ExecStartPre",
    "ExecStart",
    "ExecStop",
    "ExecStopPost",
    "Restart",
    "RestartSec",
    "TimeoutStartSec",
    "TimeoutStopSec",
    "WantedBy",
]


def flag_word(flag: str, value: str) -> Callable[[Inventory, dict[str, Any]], None]:
    """The value is the one word after ``flag`` in ExecStart, and the unit has no
    directive more than a plain one."""

    def check(_: Inventory, read: dict[str, Any]) -> None:
        assert after(exec_start(read), flag) == value
        assert unit_keys(read) == BASE_KEYS

    return check


def docker_word(value: str) -> Callable[[Inventory, dict[str, Any]], None]:
    def check(_: Inventory, read: dict[str, Any]) -> None:
        words = exec_start(read)
        assert words[words.index(DEFAULT_IMAGE) - 1] == value
        assert unit_keys(read) == BASE_KEYS

    return check


def container_env(name: str, value: str) -> Callable[[Inventory, dict[str, Any]], None]:
    def check(_: Inventory, read: dict[str, Any]) -> None:
        assert read[f"{HOST}: spark-engine-sglang.env"][name] == value

    return check


def user_rule(user: str) -> Callable[[Inventory, dict[str, Any]], None]:
    def check(_: Inventory, read: dict[str, Any]) -> None:
        [rule] = read[f"{HOST}: sudoers spark-engine-sglang"]
        assert rule.split(" ", 1)[0] == user
        assert re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user)

    return check


def endpoint(url: str) -> Callable[[Inventory, dict[str, Any]], None]:
    def check(_: Inventory, read: dict[str, Any]) -> None:
        assert read[f"{HOST}: hf-profile.sh"] == (
            ("export", "HF_HUB_DISABLE_XET=1"),
            ("export", f"HF_ENDPOINT={url}"),
        )
        assert dict(read[f"{HOST}: hf.env"])["HF_ENDPOINT"] == url
        assert read[f"{HOST}: hf env"]["HF_ENDPOINT"] == url

    return check


def model_check(folder: str, want: str) -> Callable[[Inventory, dict[str, Any]], None]:
    def check(_: Inventory, read: dict[str, Any]) -> None:
        pre = [value[1] for _, key, value in read[UNIT] if key == "ExecStartPre"]
        assert ("/usr/local/sbin/spark-model-check", "--verify", folder, want, "1") in pre
        words = exec_start(read)
        assert f"{folder}:{folder}:ro" in words and after(words, "--model-path") == folder

    return check


def conflicts(*units: str) -> Callable[[Inventory, dict[str, Any]], None]:
    def check(_: Inventory, read: dict[str, Any]) -> None:
        [value] = [value for _, key, value in read[UNIT] if key == "Conflicts"]
        assert value == units

    return check


def accepted(_: Inventory, __: dict[str, Any]) -> None:
    """Accepted, and everything it writes reads back strictly (``written`` checks that)."""


def hole(reason: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=f"hole: {reason}")


# --- newlines and control characters in strings that reach a unit ------------------------

CONTROL_REFUSED = [
    Refused(
        "served_model_name with a directive",
        engine(served_model_name=INJECTION),
        "served_model_name",
    ),
    Refused("flag value with a directive", args(chat_template=INJECTION), "args"),
    Refused("list item with a newline", args(lora_paths=["a", "b\nc"]), "args"),
    Refused(
        "docker_args item with a directive",
        engine(docker_args=["--shm-size=1g\nExecStartPre=/some/script"]),
        "docker_args",
    ),
    Refused(
        "env value with a second variable", engine(env={"A": "a\nLD_PRELOAD=/tmp/x.so"}), "env"
    ),
    Refused("env name with a newline", engine(env={"A\nB": "1"}), "env"),
    Refused("model_repo with a trailing newline", spark(model_repo="org/model\n"), "model_repo"),
    Refused(
        "model_revision with a trailing newline", spark(model_revision="main\n"), "model_revision"
    ),
    Refused("image with a trailing newline", engine(image=DEFAULT_IMAGE + "\n"), "image"),
    Refused(
        "other_gpu_services item with a trailing newline",
        engine(other_gpu_services=["tts.service\n"]),
        "other_gpu_services",
    ),
    Refused("ssh_user with a trailing newline", spark(ssh_user="nvidia\n"), "ssh_user"),
    Refused("model_dir with a carriage return", spark(model_dir="/opt/models\r"), "model_dir"),
    Refused("sysfs_root with a trailing newline", spark(sysfs_root="/sys\n"), "sysfs_root"),
    Refused(
        "qsfp interface with a trailing newline", rail("192.168.100.1/24", "enp1s0f0np0\n"), "qsfp"
    ),
    Refused("flag value with a carriage return", args(chat_template="a\rExecStartPre=/x"), "args"),
    Refused(
        "docker_args item with a line separator",
        engine(docker_args=["--label=a\u2028ExecStartPre=/x"]),
        "docker_args",
    ),
    Refused(
        "docker_args item with a next-line character",
        engine(docker_args=["--label=a\x85b"]),
        "docker_args",
    ),
    Refused("env value with a NUL", engine(env={"A": "a\x00b"}), "env"),
    Refused("env value with an escape sequence", engine(env={"A": "\x1b[31mred"}), "env"),
    Refused("flag value with a tab", args(chat_template="a\tb"), "args"),
]
CONTROL_HARMLESS = [
    Harmless(
        "flag value ending in a backslash",
        args(chat_template="template\\"),
        flag_word("--chat-template", "template\\"),
    ),
    Harmless(
        "docker_args item ending in a backslash",
        engine(docker_args=["--label=a\\"]),
        docker_word("--label=a\\"),
    ),
    Harmless(
        "flag value with quotes and a backslash inside",
        args(chat_template="say \"hi\" \\ 'x'"),
        flag_word("--chat-template", "say \"hi\" \\ 'x'"),
    ),
    Harmless(
        "env value with spaces, = and #",
        engine(env={"A": " a b = c # d "}),
        container_env("A", " a b = c # d "),
    ),
]

# --- systemd specifiers and variables in values that reach Exec lines --------------------

SPECIFIER_REFUSED = [
    Refused("served_model_name %h", engine(served_model_name="%h"), "served_model_name"),
    Refused("served_model_name ${X}", engine(served_model_name="${X}"), "served_model_name"),
    Refused("model_dir with %h", spark(model_dir="/opt/%h/models"), "model_dir"),
    Refused("model_dir with ${X}", spark(model_dir="/opt/${X}/models"), "model_dir"),
    Refused("model_revision %n", spark(model_revision="%n"), "model_revision"),
    Refused(
        "other_gpu_services %i.service",
        engine(other_gpu_services=["%i.service"]),
        "other_gpu_services",
    ),
    Refused("sysfs_root with %h", spark(sysfs_root="/sys/%h"), "sysfs_root"),
    Refused("image with $X", engine(image="lmsysorg/sglang:$X-cu13"), "image"),
]
SPECIFIER_HARMLESS = [
    Harmless(
        "flag value %h",
        args(chat_template="%h/.ssh/id_rsa"),
        flag_word("--chat-template", "%h/.ssh/id_rsa"),
    ),
    Harmless("flag value %Z", args(chat_template="%Z"), flag_word("--chat-template", "%Z")),
    Harmless("flag value ${X}", args(chat_template="${X}"), flag_word("--chat-template", "${X}")),
    Harmless(
        "flag value $HOME", args(chat_template="$HOME"), flag_word("--chat-template", "$HOME")
    ),
    Harmless("flag value 100%", args(chat_template="100%"), flag_word("--chat-template", "100%")),
    Harmless(
        "docker_args item with %h and ${X}",
        engine(docker_args=["--label=%h${X}"]),
        docker_word("--label=%h${X}"),
    ),
    Harmless(
        "env value %h ${X} (docker reads it literally)",
        engine(env={"A": "%h ${X}"}),
        container_env("A", "%h ${X}"),
    ),
]

# --- shell code in login shells (hf_endpoint) -------------------------------------------

SHELL_REFUSED = [
    Refused(
        "hf_endpoint with $()", spark(hf_endpoint="https://hf.example/$(reboot)"), "hf_endpoint"
    ),
    Refused(
        "hf_endpoint with backticks",
        spark(hf_endpoint="https://hf.example/`reboot`"),
        "hf_endpoint",
    ),
    Refused(
        "hf_endpoint closing a quote",
        spark(hf_endpoint="https://hf.example/'; reboot; '"),
        "hf_endpoint",
    ),
    Refused(
        "hf_endpoint with a space and ;",
        spark(hf_endpoint="https://hf.example/ ; reboot"),
        "hf_endpoint",
    ),
    Refused(
        "hf_endpoint with a second export",
        spark(hf_endpoint="https://hf.example\nexport LD_PRELOAD=/tmp/x.so"),
        "hf_endpoint",
    ),
    Refused("hf_endpoint with ${X}", spark(hf_endpoint="https://hf.example/${X}"), "hf_endpoint"),
    Refused(
        "hf_endpoint with a backslash", spark(hf_endpoint="https://hf.example/\\"), "hf_endpoint"
    ),
    Refused("hf_endpoint with a pipe", spark(hf_endpoint="https://hf.example/|sh"), "hf_endpoint"),
    Refused(
        "hf_endpoint http without hf_endpoint_allow_http",
        spark(hf_endpoint="http://hf.example"),
        "hf_endpoint",
    ),
    Refused(
        "hf_endpoint with credentials",
        spark(hf_endpoint="https://user:pass@hf.example"),
        "hf_endpoint",
    ),
    Refused("hf_endpoint file://", spark(hf_endpoint="file:///etc/passwd"), "hf_endpoint"),
    Refused("hf_endpoint without a scheme", spark(hf_endpoint="hf.example; reboot"), "hf_endpoint"),
]
SHELL_HARMLESS = [
    Harmless(
        "hf_endpoint with & in the query",
        spark(hf_endpoint="https://hf.example/m?a=1&b=2"),
        endpoint("https://hf.example/m?a=1&b=2"),
    ),
    Harmless(
        "hf_endpoint with ; and & in the path",
        spark(hf_endpoint="https://hf.example/a;reboot&x"),
        endpoint("https://hf.example/a;reboot&x"),
    ),
    Harmless(
        "hf_endpoint with a # fragment",
        spark(hf_endpoint="https://hf.example/#x"),
        endpoint("https://hf.example/#x"),
    ),
    Harmless(
        "http hf_endpoint allowed for a trusted mirror",
        spark(hf_endpoint="http://mirror.lan:8080", hf_endpoint_allow_http=True),
        endpoint("http://mirror.lan:8080"),
    ),
]

# --- sudoers widening through the user names ---------------------------------------------

WIDENING = {
    "ALL": "ALL",
    "%group": "%sudo",
    "list": "a,b",
    "whole rule": "nvidia ALL=(ALL) NOPASSWD: ALL",
    "semicolon": "a;b",
    "newline and rule": "nvidia\nALL ALL=(ALL) NOPASSWD: ALL",
    "#uid": "#0",
    "+netgroup": "+admins",
    "negation": "!nvidia",
    "upper case": "Nvidia",
    "space": "a b",
    "empty": "",
}
SUDOERS_REFUSED = [
    Refused(f"{key} {what}", spark(**{key: value}), key)
    for key in ("ssh_user", "operator_user")
    for what, value in WIDENING.items()
]
SUDOERS_HARMLESS = [
    Harmless("operator_user svc_llm", served(operator_user="svc_llm"), user_rule("svc_llm")),
    Harmless("ssh_user nvidia as operator", served(), user_rule("nvidia")),
    Harmless("operator_user _svc", served(operator_user="_svc"), user_rule("_svc")),
    Harmless("operator_user llm-ops", served(operator_user="llm-ops"), user_rule("llm-ops")),
]

# --- escaping the model folder -----------------------------------------------------------

FOLDER_REFUSED = [
    Refused("model_repo org/..", spark(model_repo="org/.."), "model_repo"),
    Refused("model_repo org/.", spark(model_repo="org/."), "model_repo"),
    Refused("model_repo ../etc", spark(model_repo="../etc"), "model_repo"),
    Refused("model_repo org/../../etc", spark(model_repo="org/../../etc"), "model_repo"),
    Refused("model_repo /etc/passwd", spark(model_repo="/etc/passwd"), "model_repo"),
    Refused("draft_model_repo org/..", spark(draft_model_repo="org/.."), "draft_model_repo"),
    Refused("model_base_repo org/..", spark(model_base_repo="org/.."), "model_base_repo"),
    Refused("model_dir /", spark(model_dir="/"), "model_dir"),
    Refused("model_dir /usr", spark(model_dir="/usr"), "model_dir"),
    Refused("model_dir /etc/x", spark(model_dir="/etc/x"), "model_dir"),
    Refused("model_dir /usr/local/models", spark(model_dir="/usr/local/models"), "model_dir"),
    Refused("model_dir /var/lib/models", spark(model_dir="/var/lib/models"), "model_dir"),
    Refused("model_dir /home (a parent of home folders)", spark(model_dir="/home"), "model_dir"),
    Refused(
        "model_dir with : (a second docker -v field)",
        spark(model_dir="/opt/models:/host"),
        "model_dir",
    ),
    Refused("model_dir /opt/../etc", spark(model_dir="/opt/../etc"), "model_dir"),
    Refused("model_dir relative", spark(model_dir="opt/models"), "model_dir"),
    Refused("model_dir with a space", spark(model_dir="/opt/my models"), "model_dir"),
    Refused(
        "model_dir with a comma (a docker --mount field)",
        spark(model_dir="/opt/a,dst=/etc"),
        "model_dir",
    ),
    Refused("model_revision with @", spark(model_revision="main@evil"), "model_revision"),
    Refused("model_revision ../x", spark(model_revision="../x"), "model_revision"),
    Refused(
        "model_revision with .. inside", spark(model_revision="refs/../../x"), "model_revision"
    ),
    Refused("model_revision a flag", spark(model_revision="--help"), "model_revision"),
]
# Found by this suite as holes, then closed; they stay as cases.
FOLDER_FOUND = [
    pytest.param(
        Refused(
            "model_dir //etc/systemd (POSIX double slash)",
            spark(model_dir="//etc/systemd", model_repo="org/system"),
            "model_dir",
        ),
        id="model_dir //etc/systemd (POSIX double slash)",
    ),
    pytest.param(
        Refused("model_dir //usr/lib", spark(model_dir="//usr/lib"), "model_dir"),
        id="model_dir //usr/lib",
    ),
]
FOLDER_HARMLESS = [
    Harmless(
        "model_revision refs/pr/1",
        served(model_revision="refs/pr/1"),
        model_check("/opt/models/model", "org/model@refs/pr/1"),
    ),
    Harmless(
        "model_dir /home/nvidia/models",
        served(model_dir="/home/nvidia/models"),
        model_check("/home/nvidia/models/model", "org/model@main"),
    ),
    Harmless(
        "model_dir with a trailing slash, normalized",
        served(model_dir="/opt/models/"),
        model_check("/opt/models/model", "org/model@main"),
    ),
    Harmless(
        "model_repo with dots in the name",
        served(model_repo="org/model.v1..2"),
        model_check("/opt/models/model.v1..2", "org/model.v1..2@main"),
    ),
]

# --- flags smuggled in values -------------------------------------------------------------

FLAG_REFUSED = [
    Refused("--lora-paths item --host=0.0.0.0", args(lora_paths=["a", "--host=0.0.0.0"]), "args"),
    Refused("flag value --host=0.0.0.0", args(chat_template="--host=0.0.0.0"), "args"),
    Refused("flag value -v", args(chat_template="-v"), "args"),
    Refused("flag name with =value", engine(args={"--host=0.0.0.0": True}), "args"),
    Refused("flag name without dashes", engine(args={"host": "0.0.0.0"}), "args"),
    Refused("managed flag --host", engine(args={"--host": "0.0.0.0"}), "args"),
    Refused("managed flag --model-path", engine(args={"--model-path": "/etc"}), "args"),
    Refused("image -v=/:/host@sha256", engine(image=f"-v=/:/host@sha256:{DIGEST}"), "image"),
    Refused("image --privileged", engine(image="--privileged"), "image"),
    Refused("image with a second word", engine(image=DEFAULT_IMAGE + " --privileged"), "image"),
    Refused("image untagged", engine(image="lmsysorg/sglang"), "image"),
    Refused("image latest", engine(image="lmsysorg/sglang:latest"), "image"),
    Refused("docker_args --rm", engine(docker_args=["--rm"]), "docker_args"),
    Refused(
        "docker_args --restart=always", engine(docker_args=["--restart=always"]), "docker_args"
    ),
]
# Found by this suite as holes, then closed; they stay as cases.
FLAG_FOUND = [
    pytest.param(
        Refused(
            "served_model_name --host", engine(served_model_name="--host"), "served_model_name"
        ),
        id="served_model_name --host",
    ),
]
FLAG_HARMLESS = [
    Harmless(
        "image pinned by tag and digest",
        engine(name="vllm", image=f"vllm/vllm-openai:v0.33.0@sha256:{DIGEST}"),
        accepted,
    ),
    Harmless(
        "image pinned by digest only",
        engine(name="vllm", version="0.33.0", image=f"vllm/vllm-openai@sha256:{DIGEST}"),
        accepted,
    ),
    Harmless(
        "--lora-paths with name=path items", args(lora_paths=["a=/opt/lora/a", "b"]), accepted
    ),
    Harmless(
        "flag value with = inside",
        args(chat_template="a=--host"),
        flag_word("--chat-template", "a=--host"),
    ),
]

# --- lockout -------------------------------------------------------------------------------

LOCKOUT_REFUSED = [
    *(
        Refused(
            f"other_gpu_services {unit}",
            engine(other_gpu_services=["tts.service", unit]),
            "other_gpu_services",
        )
        for unit in (
            "ssh.service",
            "sshd.service",
            "NetworkManager.service",
            "NetworkManager-wait-online.service",
            "systemd-logind.service",
            "systemd-networkd.service",
            "systemd-resolved.service",
            "docker.service",
            "containerd.service",
            "dbus.service",
            "getty@tty1.service",
            "user@1000.service",
            "tailscaled.service",
            "spark-engine-vllm.service",
            "ssh.socket",
            "sshd",
        )
    ),
    Refused("rail with a /1 prefix", rail("10.0.0.1/1"), "qsfp"),
    Refused("rail with a /8 prefix", rail("10.0.0.1/8"), "qsfp"),
    Refused("rail with a /32 prefix", rail("192.168.100.1/32"), "qsfp"),
    Refused("rail on the network address", rail("192.168.100.0/24"), "qsfp"),
    Refused("rail without a prefix", rail("192.168.100.1"), "qsfp"),
    Refused("rail on loopback", rail("127.0.0.2/24"), "qsfp"),
    Refused("rail interface lo", rail("192.168.100.1/24", "lo"), "qsfp"),
    Refused(
        "rail subnet holding the ssh_host",
        rail("192.168.100.1/24", ssh_host="192.168.100.5"),
        "qsfp",
    ),
    Refused(
        "rail subnet holding the bracketed ssh_host",
        rail("192.168.100.1/24", ssh_host="[192.168.100.5]"),
        "qsfp",
    ),
    Refused(
        "rail subnet holding the other Spark's ssh_host",
        {
            "defaults": {"ssh_user": "nvidia"},
            "sparks": {
                f"s{n}": {
                    "ssh_host": f"192.168.100.{10 * n}",
                    "qsfp": [{"interface": "enp1s0f0np0", "address": f"192.168.100.{n}/24"}],
                }
                for n in (1, 2)
            },
        },
        "qsfp",
    ),
]
# Found by this suite as holes, then closed; they stay as cases.
LOCKOUT_FOUND = [
    pytest.param(
        Refused(
            f"other_gpu_services {unit}", engine(other_gpu_services=[unit]), "other_gpu_services"
        ),
        id=f"other_gpu_services {unit}",
    )
    for unit, target in (
        ("dbus-org.freedesktop.NetworkManager.service", "NetworkManager.service"),
        ("dbus-org.freedesktop.login1.service", "systemd-logind.service"),
    )
]
LOCKOUT_HARMLESS = [
    Harmless(
        "other_gpu_services tts and comfyui",
        engine(other_gpu_services=["tts.service", "comfyui.service"]),
        conflicts("tts.service", "comfyui.service"),
    ),
    Harmless("rail on its own subnet", rail("192.168.100.1/24", ssh_host="192.168.1.50"), accepted),
    Harmless("rail /31", rail("192.168.100.0/31"), accepted),
]

# --- YAML ------------------------------------------------------------------------------------

BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{chr(98 + n)}: &{chr(98 + n)} [" + ",".join([f"*{chr(97 + n)}"] * 9) + "]"
            for n in range(8)
        ),
        "sparks: {s1: {ssh_host: a, ssh_user: nvidia}}",
        "",
    ]
)
YAML_REFUSED = [
    Refused(
        "duplicate key allow_reboot",
        "sparks:\n  s1:\n    ssh_host: a\n    ssh_user: nvidia\n"
        "    allow_reboot: false\n    allow_reboot: true\n",
        "allow_reboot",
        host=None,
    ),
    Refused(
        "duplicate key under defaults",
        "defaults:\n  ssh_user: nvidia\n  ssh_user: root\nsparks:\n  s1: {ssh_host: a}\n",
        "ssh_user",
        host=None,
    ),
    Refused(
        "duplicate host",
        "sparks:\n  s1: {ssh_host: a, ssh_user: nvidia}\n  s1: {ssh_host: b, ssh_user: nvidia}\n",
        "s1",
        host=None,
    ),
    Refused(
        "duplicate quoted and plain key",
        "sparks:\n  s1: {ssh_host: a, ssh_user: nvidia,\n"
        '    allow_reboot: false, "allow_reboot": true}\n',
        "allow_reboot",
        host=None,
    ),
    Refused(
        "python object tag",
        "sparks:\n  s1: !!python/object/apply:os.system [reboot]\n",
        "python/object/apply",
        host=None,
    ),
    Refused("a list, not a mapping", "- sparks\n", "sparks", host=None),
    Refused(
        "unknown top-level key",
        "sparks: {s1: {ssh_host: a, ssh_user: nvidia}}\nhosts: {}\n",
        "hosts",
        host=None,
    ),
    Refused(
        "unknown host key",
        "sparks: {s1: {ssh_host: a, ssh_user: nvidia, ExecStartPre: /x}}\n",
        "ExecStartPre",
    ),
]


def test_yaml_anchors_and_merge_keys_are_read(tmp_path: Path) -> None:
    text = (
        "x-common: &common {ssh_user: nvidia, allow_reboot: false}\n"
        "sparks:\n  s1: {<<: *common, ssh_host: a, allow_reboot: true}\n"
    )
    path, _ = load(text, tmp_path)
    with pytest.raises(InventoryError) as caught:  # x-common is no inventory key
        load_inventory(path)
    assert_names(caught.value, path, None, "x-common")
    text = (
        "defaults: &common {ssh_user: nvidia}\n"
        "sparks:\n  s1: {<<: *common, ssh_host: a, allow_reboot: true}\n"
    )
    path, _ = load(text, tmp_path)
    spark = load_inventory(path).sparks["s1"]
    assert (spark.ssh_user, spark.allow_reboot) == ("nvidia", True)


# A bound, not a speed target (make bench has those): wide enough for a loaded 2-core machine.
BOUNDED = 15


def test_a_billion_laughs_is_refused_fast(tmp_path: Path) -> None:
    path, loading = load(BILLION_LAUGHS, tmp_path)
    start = time.monotonic()
    with pytest.raises(InventoryError) as caught:
        loading()
    assert time.monotonic() - start < BOUNDED  # a blow-up takes minutes, not seconds
    assert_names(caught.value, path, None, "aliases")


def test_deep_nesting_is_refused_fast(tmp_path: Path) -> None:
    path, loading = load("sparks: " + "[" * 5000 + "]" * 5000 + "\n", tmp_path)
    start = time.monotonic()
    with pytest.raises(InventoryError) as caught:
        loading()
    assert time.monotonic() - start < BOUNDED  # a blow-up takes minutes, not seconds
    assert caught.value.problems[0].startswith(path)


def test_nesting_is_refused_at_its_bound_before_the_scanner_slows(tmp_path: Path) -> None:
    """64 brackets inside each other are still read (then judged as values), 65 are refused
    at once: PyYAML's scanner is quadratic in the depth (3 s for 5,000 of them)."""
    path, _ = load("sparks: " + "[" * MAX_FLOW_DEPTH + "]" * MAX_FLOW_DEPTH + "\n", tmp_path)
    assert read_document(path) is not None
    path, loading = load(
        "sparks: " + "[" * (MAX_FLOW_DEPTH + 1) + "]" * (MAX_FLOW_DEPTH + 1) + "\n", tmp_path
    )
    with pytest.raises(InventoryError) as caught:
        loading()
    assert caught.value.problems == [f"{path}: nested too deep to be an inventory"]


def test_a_huge_file_and_a_binary_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "sparks.yml"
    path.write_text("# " + "x" * (1 << 20) + "\nsparks: {}\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(str(path))
    assert caught.value.problems[0].startswith(str(path))
    path.write_bytes(b"sparks: {s1: {ssh_host: \xff\xfe}}\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(str(path))
    assert "UTF-8" in caught.value.problems[0]


# --- secrets ---------------------------------------------------------------------------------

SECRET_REFUSED = [
    Refused("token as an engine.env value", engine(env={"HUB_AUTH": TOKEN}), "env"),
    Refused("token as an engine.env name", engine(env={TOKEN: "1"}), "env"),
    Refused("HF_TOKEN as an engine.env name", engine(env={"HF_TOKEN": "x"}), "env"),
    Refused("token as --hf-token", engine(args={"--hf-token": TOKEN}), "args"),
    Refused("token as --api-key", engine(args={"--api-key": TOKEN}), "args"),
    Refused("token as --admin-api-key", engine(args={"--admin-api-key": TOKEN}), "args"),
    Refused("--api-key with any value", engine(args={"--api-key": "s3cr3t"}), "args"),
    Refused("token as hf_token_env", spark(hf_token_env=TOKEN), "hf_token_env"),
    Refused("token as a host key", spark(**{TOKEN: "x"}), "a key"),
    Refused("token as a top-level key", {**spark(), TOKEN: 1}, "a key", host=None),
    Refused("token as a host name", {"sparks": {TOKEN: {"ssh_host": "a"}}}, "a key", host=None),
    Refused(
        "token in a defaults value",
        {"defaults": {"ssh_user": TOKEN}, "sparks": {HOST: {"ssh_host": "a"}}},
        "ssh_user",
        host=None,
    ),
    Refused(
        "token in hf_endpoint's user",
        spark(hf_endpoint=f"https://{TOKEN}@hf.example"),
        "hf_endpoint",
    ),
    Refused(
        "token in hf_endpoint's query",
        spark(hf_endpoint=f"https://hf.example/?token={TOKEN}"),
        "hf_endpoint",
    ),
    Refused("token in docker_args", engine(docker_args=[f"--env=HF_TOKEN={TOKEN}"]), "docker_args"),
    Refused("token as served_model_name", engine(served_model_name=TOKEN), "served_model_name"),
    Refused("token as model_revision", spark(model_revision=TOKEN), "model_revision"),
    Refused(
        "token in a JSON flag value",
        engine(name="vllm", args={"--speculative-config": {"method": "eagle", "key": TOKEN}}),
        "args",
    ),
    Refused(
        "Bearer header in an env value",
        engine(env={"AUTH": "Bearer " + TOKEN[3:]}),
        "env",
        hidden=(TOKEN[3:],),
    ),
]
GLUED = "main" + TOKEN
# Found by this suite as holes, then closed; they stay as cases.
SECRET_FOUND = [
    pytest.param(
        Refused("token glued to a word, accepted", engine(env={"A": "x" + TOKEN}), "env"),
        id="token glued to a word, accepted",
    ),
    pytest.param(
        Refused(
            "token glued to a word, echoed", spark(model_revision=GLUED + "@x"), "model_revision"
        ),
        id="token glued to a word, echoed",
    ),
    pytest.param(
        Refused(
            "token in a YAML tag",
            f"sparks:\n  s1: !<{TOKEN}> {{ssh_host: a}}\n",
            "sparks",
            host=None,
        ),
        id="token in a YAML tag",
    ),
]
SECRET_HARMLESS = [
    Harmless(
        "an env variable that is no secret",
        engine(env={"HF_HUB_ENABLE_HF_TRANSFER": "1"}),
        container_env("HF_HUB_ENABLE_HF_TRANSFER", "1"),
    ),
    Harmless("hf_token_env naming a laptop variable", spark(hf_token_env="MY_HF_TOKEN"), accepted),
    Harmless(
        "a short hf_ word in a flag value",
        args(chat_template="hf_chat"),
        flag_word("--chat-template", "hf_chat"),
    ),
]

# --- docker options, mounts and images that would escape the pinned container ------------

DOCKER_REFUSED = [
    Refused("docker_args bare word as the image", engine(docker_args=["ubuntu"]), "docker_args"),
    Refused(
        "docker_args bare word after a flag option",
        engine(docker_args=["--privileged", "alpine", "sh"]),
        "docker_args",
    ),
    Refused("docker_args -v / to the host", engine(docker_args=["-v", "/:/host"]), "docker_args"),
    Refused("docker_args --volume=", engine(docker_args=["--volume=/:/host"]), "docker_args"),
    Refused(
        "docker_args --mount", engine(docker_args=["--mount=type=bind,src=/,dst=/h"]), "docker_args"
    ),  # fmt: skip
    Refused("docker_args -e", engine(docker_args=["-e", "LD_PRELOAD=/x.so"]), "docker_args"),
    Refused(
        "docker_args --entrypoint", engine(docker_args=["--entrypoint=/bin/sh"]), "docker_args"
    ),  # fmt: skip
    Refused("docker_args --network", engine(docker_args=["--network", "bridge"]), "docker_args"),
    Refused("docker_args -p", engine(docker_args=["-p", "0.0.0.0:30000:30000"]), "docker_args"),
    Refused("docker_args --cap-add=ALL", engine(docker_args=["--cap-add=ALL"]), "docker_args"),
    Refused(
        "docker_args --device=/dev/sda", engine(docker_args=["--device=/dev/sda"]), "docker_args"
    ),  # fmt: skip
    Refused("docker_args --pid=host", engine(docker_args=["--pid=host"]), "docker_args"),
    Refused("docker_args unknown option", engine(docker_args=["--pidd=host"]), "docker_args"),
    Refused("docker_args --userns=host", engine(docker_args=["--userns=host"]), "docker_args"),
    Refused(
        "docker_args --cap-add in lower case",
        engine(docker_args=["--cap-add", "sys_admin"]),
        "docker_args",
    ),  # fmt: skip
    Refused(
        "docker_args --oom-kill-disable", engine(docker_args=["--oom-kill-disable"]), "docker_args"
    ),  # fmt: skip
    Refused(
        "docker_args --cidfile writes as root",
        engine(docker_args=["--cidfile=/etc/cron.d/x"]),
        "docker_args",
    ),  # fmt: skip
    Refused(
        "docker_args a keyboard device",
        engine(docker_args=["--device=/dev/input/event0"]),
        "docker_args",
    ),  # fmt: skip
    Refused(
        "docker_args a disk behind a dotted path",
        engine(docker_args=["--device=/dev/infiniband/../sda"]),
        "docker_args",
    ),
    Refused("docker_args -it clustered", engine(docker_args=["-it"]), "docker_args"),
    Refused(
        "docker_args value with a newline",
        engine(docker_args=["--shm-size", "16g\nExecStartPre=/x"]),
        "docker_args",
    ),
    Refused(
        "docker_args token as a label",
        engine(docker_args=["--label", f"t={TOKEN}"]),
        "docker_args",
    ),
    Refused("mount host /", engine(mounts=[{"host": "/", "container": "/h"}]), "mounts"),
    Refused("mount host /etc", engine(mounts=[{"host": "/etc", "container": "/h"}]), "mounts"),
    Refused(
        "mount of docker's socket",
        engine(mounts=[{"host": "/var/run/docker.sock", "container": "/s"}]),
        "mounts",
    ),
    Refused(
        "mount host with ..",
        engine(mounts=[{"host": "/srv/../etc", "container": "/h"}]),
        "mounts",
    ),
    Refused(
        "mount host with : (a mode)",
        engine(mounts=[{"host": "/srv/k:rw", "container": "/h"}]),
        "mounts",
    ),
    Refused(
        "mount container with , (a second option)",
        engine(mounts=[{"host": "/srv/k", "container": "/h,rw"}]),
        "mounts",
    ),
    Refused(
        "mount host with a newline",
        engine(mounts=[{"host": "/srv/k\nExecStartPre=/x", "container": "/h"}]),
        "mounts",
    ),
    Refused(
        "mount over the model folder",
        engine(mounts=[{"host": "/srv/k", "container": "/opt/models/model"}]),
        "engine",
    ),
    Refused(
        "mount read-write",
        engine(mounts=[{"host": "/srv/k", "container": "/h", "read_only": False}]),
        "mounts",
    ),  # fmt: skip
    Refused("image with a rolling tag", engine(image="lmsysorg/sglang:latest-cu130"), "image"),
    Refused("image launch a command", engine(launch="sh -c id"), "launch"),
    Refused(
        "file source with a newline",
        engine(files=[{"src": "t.jinja\nExecStartPre=/x", "dest": "/t/chat.jinja"}]),
        "files",
    ),
    Refused(
        "file destination with : (a second mount option)",
        engine(files=[{"src": "t.jinja", "dest": "/t/chat.jinja:rw"}]),
        "files",
    ),
    Refused(
        "file over a system path of the container",
        engine(files=[{"src": "t.jinja", "dest": "/etc/ld.so.preload"}]),
        "files",
    ),
    Refused(
        "file that is not on the laptop",
        engine(files=[{"src": "../../etc/nowhere-at-all", "dest": "/t/x"}]),
        "engine.files[0].src",
    ),
    Refused("mod path with an escape", engine(mods=["fix.sh\x1b[2J"]), "mods"),
    Refused("mod that is not on the laptop", engine(mods=["no-such-mod.sh"]), "engine.mods"),
]
DOCKER_HARMLESS = [
    Harmless(
        "docker_args a go-units size as sparkrun writes it",
        engine(docker_args=["--shm-size=10.24gb"]),
        docker_word("--shm-size=10.24gb"),
    ),
    Harmless(
        "docker_args a health command with shell metacharacters is one word",
        engine(docker_args=["--health-cmd", "curl -f localhost:30000 || exit 1; reboot"]),
        docker_word("--health-cmd=curl -f localhost:30000 || exit 1; reboot"),
    ),
    Harmless(
        "docker_args in two words written as one",
        engine(docker_args=["--ulimit", "memlock=-1"]),
        docker_word("--ulimit=memlock=-1"),
    ),
    Harmless(
        "mount with dots and plus signs",
        engine(mounts=[{"host": "/srv/k.v1+x", "container": "/workspace/k.v1+x"}]),
        lambda _, read: (
            None
            if "/srv/k.v1+x:/workspace/k.v1+x:ro" in exec_start(read)
            and unit_keys(read) == BASE_KEYS
            else pytest.fail(str(exec_start(read)))
        ),
    ),
    Harmless(
        "a rolling tag pinned by digest",
        engine(image=f"lmsysorg/sglang:latest-cu130@sha256:{DIGEST}", version="0.5.12"),
        lambda _, read: (
            None
            if f"lmsysorg/sglang:latest-cu130@sha256:{DIGEST}" in exec_start(read)
            else pytest.fail(str(exec_start(read)))
        ),
    ),
]


# --- control characters the YAML escapes can carry ---------------------------------------------

# Found by this suite as holes, then closed; they stay as cases.
SURROGATE_FOUND = pytest.param(
    Refused(
        "env value with a lone surrogate",
        "sparks:\n  s1:\n    ssh_host: a\n    ssh_user: nvidia\n    model_repo: org/model\n"
        '    engine: {name: sglang, env: {A: "\\ud800"}}\n',
        "env",
    ),
    id="env value with a lone surrogate",
)


# --- what a copied inventory may make the laptop do (issue 22) -----------------------------

CREDENTIALS = [
    "GITHUB_TOKEN", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY", "NGC_API_KEY", "SSH_AUTH_SOCK", "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_CLIENT_SECRET", "GITLAB_TOKEN", "NPM_TOKEN", "KUBECONFIG",
]  # fmt: skip
PASTED = ["sk-abc123", "hf_xxxABC123", "nvapi-abc", "ghp_abc", "github_pat_11AB", "AKIA1234"]
SENSITIVE_MOUNTS = [
    "/", "/etc", "/root", "/home", "/home/nvidia", "/home/nvidia/", "//home//nvidia",
    "/home/nvidia/.cache", "/home/nvidia/.cache/huggingface", "/home/nvidia/.ssh", "/tmp",
    "/tmp/ssh-XXXXabcd", "/var/tmp", "/run", "/run/user/1000", "/var/run/docker.sock",
    "/run/docker.sock", "/proc", "/sys", "/dev", "/boot", "/var/lib/docker", "/var/lib",
    "/var", "/var/lib/spark-deploy", "/opt/spark-deploy", "/opt/spark-deploy/hf-cli",
    "/opt/spark-deploy/mcp/venv", "/home/nvidia/./.docker/",
]  # fmt: skip
SENSITIVE_MODEL_DIRS = [
    "/opt/spark-deploy/hf-cli", "/opt/spark-deploy", "/opt/spark-deploy/models",
    "/home/nvidia/bin", "/opt/x/bin/models", "/usr/local/sbin", "/usr/local/bin/m", "/tmp/models",
    "/var/tmp/m", "/dev/shm/m", "/run/m", "/root/m", "/", "/etc/m", "/var/lib/spark-deploy/m",
    "/home/nvidia", "/home/nvidia/.cache/models", "//tmp//models/",
]  # fmt: skip
KEY_SHAPES = {
    "nvapi": "nvapi-" + "Ab1_" * 12,
    "PEM": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "RSA PEM": "-----BEGIN RSA PRIVATE KEY-----",
    "github_pat": "github_pat_11ABCDEFG0" + "a1b2" * 10,
    "glpat": "glpat-" + "x1Y2" * 6,
    "AIza": "AIza" + "B" * 35,
    "ASIA": "ASIA" + "ABCDEFGHIJ234567",
    "assigned": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCY",
}


def nan_flag(value: str) -> str:
    """A document as YAML text (NaN is no value a dict can be compared with)."""
    return (
        "sparks:\n  s1: {ssh_host: 192.0.2.10, ssh_user: nvidia, model_repo: org/model, "
        f"engine: {{name: vllm, args: {{--hf-overrides: {value}}}}}}}\n"
    )


TRUST_REFUSED = [
    *(Refused(f"hf_token_env {n}", spark(hf_token_env=n), "hf_token_env") for n in CREDENTIALS),
    *(Refused(f"api_key_env {n}", engine(api_key_env=n), "api_key_env") for n in CREDENTIALS),
    *(
        Refused(f"api_key_env {n}", engine(api_key_env=n), "api_key_env")
        for n in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
    ),
    Refused(
        "api_key_env the same as hf_token_env",
        spark(hf_token_env="MY_HF", engine={"name": "sglang", "api_key_env": "MY_HF"}),
        "engine",
    ),
    *(
        Refused(
            f"pasted {v[:6]} as hf_token_env", spark(hf_token_env=v), "hf_token_env", hidden=(v,)
        )
        for v in PASTED
    ),
    *(
        Refused(f"pasted {v[:6]} as api_key_env", engine(api_key_env=v), "api_key_env", hidden=(v,))
        for v in PASTED
    ),
    *(
        Refused(f"mount {p}", engine(mounts=[{"host": p, "container": "/x"}]), "mounts")
        for p in SENSITIVE_MOUNTS
    ),
    *(Refused(f"model_dir {p}", served(model_dir=p), "model_dir") for p in SENSITIVE_MODEL_DIRS),
    Refused(
        "a/qwen and b/qwen",
        spark(model_repo="a/qwen", draft_model_repo="b/qwen"),
        "draft_model_repo",
    ),
    Refused(
        "a/Qwen and b/qwen",
        spark(model_repo="a/Qwen", draft_model_repo="b/qwen"),
        "draft_model_repo",
    ),
    *(
        Refused(f"{shape} key in an env value", engine(env={"X": key}), "env", hidden=(key,))
        for shape, key in KEY_SHAPES.items()
    ),
    *(
        Refused(
            f"{shape} key in an accept reason",
            engine(accept={"bind-all-interfaces": key}),
            "accept",
            hidden=(key,),
        )
        for shape, key in KEY_SHAPES.items()
    ),
    *(
        Refused(
            f"{shape} key in a JSON flag",
            engine(args={"--json-model-override-args": {"a": key}}),
            "args",
            hidden=(key,),
        )
        for shape, key in KEY_SHAPES.items()
    ),
    *(
        Refused(
            f"{shape} key in a gpu service command",
            spark(
                gpu_services=[
                    {
                        "name": "tts",
                        "image": "a/b:1",
                        "port": 9000,
                        "memory_gb": 4,
                        "command": ["--key", key],
                    }
                ]
            ),
            "gpu_services",
            hidden=(key,),
        )
        for shape, key in KEY_SHAPES.items()
    ),
    Refused("a key-shaped value of NGC_KEY", engine(env={"NGC_KEY": "abcd1234efgh5678ij"}), "env"),
    *(
        Refused(f"rail {address}", rail(address), "qsfp")
        for address in (
            "255.255.255.255/24",
            "240.0.0.1/24",
            "0.1.2.3/24",
            "127.0.0.2/24",
            "224.0.0.5/24",
            "239.1.1.1/24",
            "192.168.100.0/24",
            "192.168.100.255/24",
        )
    ),  # fmt: skip
    Refused("NaN in a JSON flag", nan_flag("{a: .nan}"), "args"),
    Refused("Infinity in a JSON flag", nan_flag("{a: -.inf}"), "args"),
    Refused("NaN in JSON flag text", nan_flag("'{\"a\": NaN}'"), "args"),
    Refused(
        "link_test_min_busbw .inf", spark(link_test_min_busbw=float("inf")), "link_test_min_busbw"
    ),
]
TRUST_HARMLESS = [
    Harmless("hf_token_env HF_TOKEN", spark(hf_token_env="HF_TOKEN"), accepted),
    Harmless(
        "hf_token_env HUGGING_FACE_HUB_TOKEN",
        spark(hf_token_env="HUGGING_FACE_HUB_TOKEN"),
        accepted,
    ),
    Harmless("api_key_env MY_SPARK_KEY", engine(api_key_env="MY_SPARK_KEY"), accepted),
    Harmless(
        "mount under a home",
        engine(mounts=[{"host": "/home/nvidia/kernels", "container": "/k"}]),
        accepted,
    ),
    Harmless(
        "mount a recipe file",
        engine(mounts=[{"host": "/opt/spark-deploy/recipes/a.jinja", "container": "/t/a.jinja"}]),
        accepted,
    ),
    Harmless(
        "mount /srv/kernels",
        engine(mounts=[{"host": "/srv/kernels/", "container": "/k"}]),
        accepted,
    ),
    Harmless(
        "model_dir /srv/models",
        served(model_dir="/srv/models"),
        model_check("/srv/models/model", "org/model@main"),
    ),
    Harmless(
        "a variable ending in _KEY that is no key",
        engine(env={"SGLANG_LOG_DECODE_GRAPH_KEY": "1"}),
        accepted,
    ),
    Harmless(
        "a finite float in a JSON flag",
        engine(name="vllm", args={"--hf-overrides": {"rope_theta": 1e6}}),
        accepted,
    ),
    Harmless("rail /31 first address", rail("192.168.100.0/31"), accepted),
    Harmless(
        "model and draft of other names",
        spark(model_repo="a/qwen", draft_model_repo="a/qwen-eagle"),
        accepted,
    ),
]


# --- the tables ---------------------------------------------------------------------------------

REFUSED: dict[str, list[Any]] = {
    "control": [*CONTROL_REFUSED, SURROGATE_FOUND],
    "specifier": SPECIFIER_REFUSED,
    "shell": SHELL_REFUSED,
    "sudoers": SUDOERS_REFUSED,
    "folder": [*FOLDER_REFUSED, *FOLDER_FOUND],
    "flag": [*FLAG_REFUSED, *FLAG_FOUND],
    "lockout": [*LOCKOUT_REFUSED, *LOCKOUT_FOUND],
    "yaml": YAML_REFUSED,
    "secret": [*SECRET_REFUSED, *SECRET_FOUND],
    "docker": DOCKER_REFUSED,
    "trust": TRUST_REFUSED,
}
HARMLESS: dict[str, list[Any]] = {
    "control": CONTROL_HARMLESS,
    "specifier": SPECIFIER_HARMLESS,
    "shell": SHELL_HARMLESS,
    "sudoers": SUDOERS_HARMLESS,
    "folder": FOLDER_HARMLESS,
    "flag": FLAG_HARMLESS,
    "lockout": LOCKOUT_HARMLESS,
    "secret": SECRET_HARMLESS,
    "docker": DOCKER_HARMLESS,
    "trust": TRUST_HARMLESS,
}


def _params(table: dict[str, list[Any]]) -> list[Any]:
    params = []
    for kind, cases in table.items():
        for case in cases:
            if isinstance(case, (Refused, Harmless)):
                params.append(pytest.param(case, id=f"{kind}: {case.id}"))
            else:  # already a pytest.param (a hole)
                params.append(pytest.param(*case.values, marks=case.marks, id=f"{kind}: {case.id}"))
    return params


@pytest.mark.parametrize("case", _params(REFUSED))
def test_refused_before_any_host_is_contacted(case: Refused, tmp_path: Path) -> None:
    refuse(case, tmp_path)


@pytest.mark.parametrize("case", _params(HARMLESS))
def test_accepted_and_written_harmlessly(case: Harmless, tmp_path: Path) -> None:
    accept(case, tmp_path)


def test_the_ids_are_unique() -> None:
    ids = [param.id for param in (*_params(REFUSED), *_params(HARMLESS))]
    assert len(ids) == len(set(ids))


# --- files and mods shipped from the laptop ------------------------------------------------


def _ship(tmp_path: Path, src: str, kind: str = "files") -> InventoryError:
    item: Any = {"src": src, "dest": "/templates/x"} if kind == "files" else src
    path, loading = load(engine(**{kind: [item]}), tmp_path)
    with pytest.raises(InventoryError) as caught:
        loading()
    assert_names(caught.value, path, HOST, kind)
    return caught.value


@pytest.fixture
def laptop_secret(tmp_path: Path) -> Path:
    """A private key on the laptop, outside the inventory's folder."""
    home = tmp_path / "home" / ".ssh"
    home.mkdir(parents=True)
    key = home / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    (tmp_path / "recipe").mkdir()
    return key


@pytest.mark.parametrize("kind", ["files", "mods"])
@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink", "symlinked folder"])
def test_a_laptop_file_outside_the_inventory_folder_is_not_shipped(
    laptop_secret: Path, tmp_path: Path, kind: str, how: str
) -> None:
    recipe = tmp_path / "recipe"
    src = {"absolute": str(laptop_secret), "dotdot": "../home/.ssh/id_ed25519"}.get(how, "")
    if how == "symlink":
        (recipe / "chat.jinja").symlink_to(laptop_secret)
        src = "chat.jinja"
    if how == "symlinked folder":
        (recipe / "templates").symlink_to(laptop_secret.parent)
        src = "templates/id_ed25519"
    error = _ship(recipe, src, kind)
    assert "outside the inventory file's folder" in str(error)
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in str(error)


def test_a_shipped_path_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    assert "not a regular file" in str(_ship(tmp_path, "templates"))


@pytest.mark.parametrize(("shape", "key"), list(KEY_SHAPES.items()))
def test_a_shipped_file_holding_a_secret_names_the_line_not_the_secret(
    tmp_path: Path, shape: str, key: str
) -> None:
    (tmp_path / "fix.sh").write_text(f"#!/bin/sh\necho patching\nexport X='{key}'\n")
    error = _ship(tmp_path, "fix.sh", "mods")
    assert "line 3" in str(error) and "shaped like a secret" in str(error)
    assert key not in str(error)


def test_a_link_that_stays_inside_the_inventory_folder_is_shipped(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "chat.jinja").write_text("{{ x }}\n")
    (tmp_path / "chat.jinja").symlink_to(tmp_path / "templates" / "chat.jinja")
    _, loading = load(engine(files=[{"src": "chat.jinja", "dest": "/t/chat.jinja"}]), tmp_path)
    plan = loading().engine_plans[HOST]
    assert plan is not None and [item.content for item in plan.shipped] == ["{{ x }}\n"]
