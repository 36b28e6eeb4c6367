"""
How a value is written where it lands: one function per destination, used everywhere (the
templates get them as jinja filters). Each either writes the value so that the destination's
own parser gives back exactly that value, or refuses it (``UnsafeValue``); none ever lets a
value end a line, start a directive or run a command. What values the inventory may hold at
all is ``config/values.py``; this is the last guard, where the text is written.

- ``shell``: one word of a POSIX shell command line (``shlex.quote``).
- ``systemd_word``: one word of a unit's ``Exec*=`` line (systemd's own quoting; ``%`` and
  ``$`` doubled so no specifier or variable is expanded).
- ``systemd_text``: free text of a unit setting such as ``Description=`` (``%`` doubled).
- ``env_value``: a value in a file read both by systemd ``EnvironmentFile=`` and by
  ``docker --env-file``: they parse differently, so only values that need no quoting in
  either are written, and anything else is refused.
- ``docker_env``: a value in a file read only by ``docker --env-file``, which takes the rest
  of the line as it is: anything but a line break.
- ``sudoers_user``: a user name in a sudoers rule; only plain user names pass.
- ``redact`` / ``redact_lines``: a log line as a reader other than root may see it (the MCP
  server's answers, diagnose.py, the deploy's output): every secret in it replaced.
"""

from __future__ import annotations

import re
import shlex

# Control characters, Unicode line and paragraph separators, and lone surrogates (which
# cannot even be written as UTF-8); config/values.py refuses the same set.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
SYSTEMD_PLAIN = re.compile(r"[^\s\"'\\;]+")
ENV_PLAIN = re.compile(r"[^\s\"'\\$`]([^\"'\\$`]*[^\s\"'\\$`])?")
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # Ubuntu's adduser rule, without a final $


class UnsafeValue(ValueError):
    """A value that cannot be written safely where it would land."""


def _no_control(value: str, where: str) -> str:
    if CONTROL.search(value):
        raise UnsafeValue(f"{value!r} holds a control character; it cannot go into {where}")
    return value


def shell(value: str) -> str:
    """One shell word, quoted so the shell reads back exactly ``value`` (single quotes keep
    even a line break literal: a file's whole content may be one word)."""
    return shlex.quote(str(value))


def systemd_word(value: str) -> str:
    """One word of an ``ExecStart=``-style line, as systemd reads it back: ``%`` and ``$``
    doubled; quoted (with ``\\`` and ``"`` escaped) when it holds a space, quote, ``;`` or
    backslash, or is empty."""
    word = _no_control(str(value), "a systemd unit").replace("%", "%%").replace("$", "$$")
    if SYSTEMD_PLAIN.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_text(value: str) -> str:
    """Free text of a unit setting (``Description=``): specifiers doubled, one line."""
    return _no_control(str(value), "a systemd unit").replace("%", "%%")


def systemd_comment(value: str) -> str:
    """Text of one ``#`` comment line of a unit: one line, and never ending in a backslash
    (which would continue the line into the next directive)."""
    text = _no_control(str(value), "a systemd unit").rstrip()
    if text.endswith("\\"):
        raise UnsafeValue(f"{text!r} ends in a backslash; it cannot end a comment line")
    return text


def env_value(value: str) -> str:
    """A value both ``EnvironmentFile=`` and ``docker --env-file`` read back unchanged."""
    text = _no_control(str(value), "an environment file")
    if text and not ENV_PLAIN.fullmatch(text):
        raise UnsafeValue(
            f"{text!r} needs quoting, which systemd and docker read differently; it cannot go "
            "into a shared environment file"
        )
    return text


def docker_env(value: str) -> str:
    """A value of a ``docker --env-file`` line (taken to the end of the line as it is)."""
    return _no_control(str(value), "a docker env file")


def sudoers_user(value: str) -> str:
    """A user name in a sudoers rule: a plain user name, never ``ALL``, ``%group``, a list or
    a rule."""
    if not USER_NAME.fullmatch(value):
        raise UnsafeValue(f"{value!r} is not a plain user name; it cannot go into sudoers")
    return value


FILTERS = {
    "shell": shell,
    "systemd_word": systemd_word,
    "systemd_text": systemd_text,
    "systemd_comment": systemd_comment,
    "env_value": env_value,
    "docker_env": docker_env,
    "sudoers_user": sudoers_user,
}


# --- secrets in log lines -------------------------------------------------------------------

REDACTED = "<redacted>"
# A name that says its value is a secret: api_key, api-key, hf_token, HF_TOKEN, access_token,
# password, secret, authorization, any *_key/-key (AWS_SECRET_ACCESS_KEY, private_key). Whole
# words, so max_tokens, tokenizer and token_budget are not.
_NAME = (
    r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*"
    r"(?:api[_-]?keys?|[A-Za-z0-9]+[_-]key|token|password|passwd|secret|authorization)"
    r"(?![A-Za-z0-9_])"
)
# NAME=VALUE, NAME: VALUE, 'NAME': VALUE as engines log them: SGLang's
# `server_args=ServerArgs(... api_key='K' ...)`, vLLM's `non-default args: {'api_key': ['K']}`
# and `Namespace(... api_key='K')`, `hf_token=K`, `Authorization: K`, a YAML `api-key: 'K'`.
NAMED_SECRET = re.compile(
    rf"(?P<name>['\"]?{_NAME}['\"]?\s*[:=]\s*)"
    r"(?P<value>\[[^\]]*\]|'[^']*'|\"[^\"]*\"|[^\s,;)}\]]+)",
    re.IGNORECASE,
)
# --api-key K, --hf-token K on a logged command line.
SECRET_FLAG = re.compile(rf"(?P<name>--{_NAME}\s+)(?P<value>[^\s-]\S*)", re.IGNORECASE)
# Tokens by their shape, wherever they stand: Hugging Face, OpenAI-style, GitHub (classic and
# fine-grained), GitLab, Slack, AWS keys (long-term and temporary), Google API keys, NVIDIA
# NGC / build.nvidia.com keys (nvapi-), JWTs. The one list: config/values.py refuses the same
# shapes in an inventory (its SECRET adds bearer headers, PEM keys and named assignments).
TOKEN_SHAPES = (
    r"hf_[A-Za-z0-9]{30,}|\bsk-[A-Za-z0-9_-]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}|\bglpat-[A-Za-z0-9_-]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}|(?-i:\b(?:AKIA|ASIA)[0-9A-Z]{16}\b)|\bAIza[0-9A-Za-z_-]{35}"
    r"|\bnvapi-[A-Za-z0-9_-]{20,}"
    r"|\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"
)
SECRET_SHAPE = re.compile(TOKEN_SHAPES, re.IGNORECASE)
BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
# Values that name no secret and help a diagnosis: left as they are.
_NOT_SECRET = frozenset(
    {"none", "null", "true", "false", "''", '""', "[]", "<redacted>", "'<redacted>'"}
)


def _named(match: re.Match[str]) -> str:
    value = match.group("value")
    bare = value.strip("'\"").lower()
    if value.lower() in _NOT_SECRET or bare.split(" ")[0] in ("bearer", "basic", "token"):
        return match.group(0)
    quote = value[0] if value[0] in "'\"" else ""
    return f"{match.group('name')}{quote}{REDACTED}{quote}"


def redact(line: str) -> str:
    """``line`` with every secret in it replaced by ``<redacted>``: values under a secret's
    name (``api_key='K'``, ``'api_key': ['K']``, ``--api-key K``, ``Authorization: Bearer K``)
    and values shaped like a token wherever they are."""
    text = BEARER.sub(lambda m: f"{m.group('scheme')} {REDACTED}", line)
    text = NAMED_SECRET.sub(_named, text)
    text = SECRET_FLAG.sub(lambda m: f"{m.group('name')}{REDACTED}", text)
    return SECRET_SHAPE.sub(REDACTED, text)


def redact_lines(lines: list[str] | tuple[str, ...]) -> list[str]:
    """Each line ``redact``-ed, and a PEM private key's lines hidden whole."""
    shown: list[str] = []
    inside = False
    for line in lines:
        if PEM_BEGIN.search(line):
            inside = True
        shown.append(REDACTED if inside else redact(line))
        if inside and PEM_END.search(line):
            inside = False
    return shown
