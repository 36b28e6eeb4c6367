"""
What every string in the inventory may be, in one place. The inventory is untrusted (it is
often copied from someone else's recipe) and its values reach root shell commands, systemd
units, sudoers and env files, so each string setting has a type that says what it is: a
path, a user name, a Hub repository, a revision, a URL, an image reference, a unit name, an
environment variable, a flag value. Every check matches the whole value (``fullmatch``), and
no value anywhere may hold a control character (a newline would start a new unit directive or
sudoers rule). What a value is allowed to be is checked here; how it is written safely where
it lands is ``sparkdeploy/escape.py``.

Token-shaped values (``looks_like_secret``) are refused everywhere: secrets never go in the
inventory, and an error message never shows one.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

from sparkdeploy.escape import CONTROL, TOKEN_SHAPES, USER_NAME

# Secrets a recipe may carry by mistake: the token shapes escape.py redacts (TOKEN_SHAPES),
# bearer headers, PEM private keys (the header is enough: a key file's first line), and
# secrets assigned to a name that says so (AWS_SECRET_ACCESS_KEY=..., password: ...), as they
# appear in env files and configs. Matched anywhere in a value (issue 22: "Secrets that are
# not hf_/sk-/ghp_/AKIA/JWT-shaped").
SECRET = re.compile(
    TOKEN_SHAPES + r"|\bBearer\s+\S{8,}"
    r"|-----BEGIN[A-Z ]*PRIVATE KEY( BLOCK)?-----"
    r"|\b[A-Za-z0-9_]*(?:SECRET|PASSWORD|PASSWD|PRIVATE_KEY|API_KEY|ACCESS_KEY)[A-Za-z0-9_]*"
    r"\s*[=:]\s*['\"]?[A-Za-z0-9+/_.~-]{12,}",
    re.IGNORECASE,
)
SECRET_HINT = (
    "looks like a secret (a token or key); secrets never go in the inventory: export the HF "
    "token on the laptop (the variable named by hf_token_env) and the deploy installs it"
)

HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})|\[?[0-9A-Fa-f:.]+\]?")
PATH_CHARS = re.compile(r"/[A-Za-z0-9._+/-]*")
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@-]{1,247}\.service")
# The docker reference grammar (distribution/reference): [host[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)"
IMAGE = re.compile(
    rf"{_HOST}?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@sha256:[0-9a-f]{{64}})?"
)
# Units a GPU service may never stop by Conflicts=: what keeps the Spark reachable and
# running containers (and the deploy's own engine units).
PROTECTED_UNITS = re.compile(
    r"(ssh|sshd|NetworkManager|NetworkManager-[\w-]+|dbus|dbus-broker|docker|containerd"
    r"|systemd-[\w@.-]+|dbus-org\.[\w.-]+|getty@[\w.-]*|serial-getty@[\w.-]*|user@\d*|polkit|cron|rsyslog"
    r"|nvidia-persistenced|spark-engine-[\w.@-]+|wpa_supplicant|networkd-dispatcher"
    r"|tailscaled|avahi-daemon)\.service",
    re.IGNORECASE,
)


def looks_like_secret(text: str) -> bool:
    return bool(SECRET.search(text))


# Words that make a name (environment variable, flag, JSON key) one that carries a secret:
# HF_TOKEN, --api-key, AWS_SECRET_ACCESS_KEY, accessToken. Whole words only, so that
# num_speculative_tokens, --max-num-batched-tokens, --tokenizer-mode and
# TOKENIZERS_PARALLELISM, which operators set all the time, are not mistaken for one.
SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "credential", "credentials", "apikey", "privatekey"}
)
SECRET_WORD_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key")})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def secret_name(name: str) -> bool:
    """Whether ``name`` says it carries a secret (``HF_TOKEN``, ``--api-key``, ``apiKey``)."""
    words = [word for word in re.split(r"[^a-z0-9]+", _CAMEL.sub("_", name).lower()) if word]
    return any(word in SECRET_WORDS for word in words) or any(
        pair in SECRET_WORD_PAIRS for pair in zip(words, words[1:], strict=False)
    )


# A variable named like a key (NGC_KEY, SIGNING_KEY: its last word) whose value looks like
# one: 16 or more token characters, letters and digits mixed. Engines read variables ending
# in _KEY that are no secret (SGLANG_LOG_DECODE_GRAPH_KEY), so the value decides.
KEY_VALUE = re.compile(r"(?=.*[A-Za-z])(?=.*[0-9])[A-Za-z0-9+/=_.~-]{16,}")


def key_value(name: str, value: str) -> bool:
    """Whether ``value`` of the variable ``name`` looks like a key (``NGC_KEY=...``)."""
    words = [word for word in re.split(r"[^a-z0-9]+", _CAMEL.sub("_", name).lower()) if word]
    return bool(words) and words[-1] == "key" and bool(KEY_VALUE.fullmatch(value))


def shown(value: object, limit: int = 48) -> str:
    """A value as an error message may show it: escaped (never raw), short, and never a
    secret."""
    if isinstance(value, str) and looks_like_secret(value):
        return "<redacted: looks like a secret>"
    text = repr(value)
    if looks_like_secret(text):
        return "<redacted: looks like a secret>"
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def redact(text: str) -> str:
    """``text`` with anything shaped like a secret replaced (for messages from libraries
    that quote their input, such as a YAML error)."""
    return SECRET.sub("<redacted>", text)


def plain_text(value: str) -> str:
    """Any text, but no control character (newline, tab, escape, ...) and no secret."""
    if CONTROL.search(value):
        raise ValueError("must not contain control characters (newline, tab, escape ...)")
    if looks_like_secret(value):
        raise ValueError(SECRET_HINT)
    return value


def _matching(pattern: re.Pattern[str], what: str):
    def check(value: str) -> str:
        plain_text(value)
        if not pattern.fullmatch(value):
            raise ValueError(f"must be {what}")
        return value

    return check


LAUNCHER_WORD = re.compile(r"[A-Za-z0-9_.,:/@+={}][A-Za-z0-9_.,:/@+={}-]*")


def launcher_word(value: str) -> str:
    """A word an image's own launcher takes before the flags (``run``, ``serve``, ``boot.py``,
    a ``{model}`` placeholder): one plain word that is not a flag (flags go in engine.args)."""
    plain_text(value)
    if not LAUNCHER_WORD.fullmatch(value):
        raise ValueError(
            "must be one plain word (letters, digits and _ . , : / @ + = { } -), not starting "
            "with '-': flags go in engine.args"
        )
    return value


def user_name(value: str) -> str:
    """A Linux user name as Ubuntu allows it: no `ALL`, `%group`, list or rule."""
    return _matching(
        USER_NAME,
        "a user name: lower-case letters, digits, '_' and '-', "
        "starting with a letter or '_', at most 32, such as nvidia",
    )(value)


def absolute_path(value: str, example: str = "/sys") -> str:
    """An absolute path of plain characters, normalized (one leading slash: POSIX lets
    ``//etc`` mean something else, so normpath keeps it, but Linux reads it as ``/etc``);
    no `..`, no `:` (docker -v), no `%` or `$` (systemd), no spaces."""
    _matching(PATH_CHARS, f"an absolute path (letters, digits and . _ + - /), such as {example}")(
        value
    )
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    return posixpath.normpath("/" + value.lstrip("/"))


def served_name(value: str) -> str:
    return _matching(
        SERVED_NAME,
        "a model name of letters, digits and . _ : / @ + -, starting "
        "with a letter or digit, such as Mistral-Small-4",
    )(value)


def host_name(value: str) -> str:
    return _matching(HOST_NAME, "a host name or IP address, such as 192.168.1.50 or spark-1.local")(
        value
    )


def repo_id(value: str) -> str:
    return _matching(
        REPO_ID,
        "a Hub repository id org/name (letters, digits, . _ -, each "
        "part starting with a letter or digit), such as "
        "mistralai/Mistral-Small-4-119B-2603",
    )(value)


def revision(value: str) -> str:
    _matching(REVISION, "a branch, tag or commit (letters, digits, . _ - /), such as main")(value)
    if ".." in value:
        raise ValueError("must not contain '..'")
    return value


def env_name(value: str) -> str:
    return _matching(
        ENV_NAME, "an environment variable name (letters, digits, _), such as HF_TOKEN"
    )(value)


def unit_name(value: str) -> str:
    _matching(
        UNIT_NAME, "a systemd service name (letters, digits, : _ . @ -), such as tts.service"
    )(value)
    if PROTECTED_UNITS.fullmatch(value):
        raise ValueError(
            "is a unit the Spark needs (remote access, networking, containers, systemd or "
            "the deploy's own engines); an engine start would stop it. List only other GPU "
            "services"
        )
    return value


def image_reference(value: str) -> str:
    """A docker image reference: [registry[:port]/]name[:tag][@sha256:digest]."""
    return _matching(
        IMAGE,
        "an image reference [registry/]name[:tag][@sha256:digest], such "
        "as vllm/vllm-openai:v0.33.0",
    )(value)


def hf_endpoint(value: str) -> str:
    """A Hub URL: http(s), a host, no credentials, no spaces or quotes."""
    plain_text(value)
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("must be an https URL, such as https://huggingface.co")
    if parts.username or parts.password:
        raise ValueError("must not hold credentials (user:password@)")
    if re.search(r"[\s\"'`\\<>{}|^$]", value):
        raise ValueError("must be a URL without spaces, quotes, backslashes or $<>{}|^")
    return value


def flag_value(value: str) -> str:
    """A string flag value: plain text that is not itself a flag."""
    plain_text(value)
    if value.startswith("-"):
        raise ValueError(
            f"{shown(value)} starts with '-': a value that is a flag is refused "
            "(give the flag its own key)"
        )
    return value


def ipv4_network_ok(network: ipaddress.IPv4Network) -> bool:
    """A sensible rail subnet: /16 to /31."""
    return 16 <= network.prefixlen <= 31


Text = Annotated[str, AfterValidator(plain_text)]
UserName = Annotated[str, AfterValidator(user_name)]
AbsolutePath = Annotated[str, AfterValidator(absolute_path)]
HostName = Annotated[str, AfterValidator(host_name)]
RepoId = Annotated[str, AfterValidator(repo_id)]
Revision = Annotated[str, AfterValidator(revision)]
EnvName = Annotated[str, AfterValidator(env_name)]
UnitName = Annotated[str, AfterValidator(unit_name)]
ImageReference = Annotated[str, AfterValidator(image_reference)]
HubUrl = Annotated[str, AfterValidator(hf_endpoint)]
ServedName = Annotated[str, AfterValidator(served_name)]
LauncherWord = Annotated[str, AfterValidator(launcher_word)]
