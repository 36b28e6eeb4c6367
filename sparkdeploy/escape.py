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
