"""
Strict readers of what the deploy writes on a Spark, for the hostile-input tests
(test_hostile_properties.py, test_hostile_cases.py): each reads a rendered file the way its
consumer does (systemd, a POSIX shell, docker --env-file, sudo) and raises ``Malformed`` on
anything the deploy never means to write, so a test can compare what a value comes back as.

They are written from the consumers' rules, not from ``sparkdeploy/escape.py``:

- a unit: sections, ``Key=value`` lines and comments, nothing else, no line continued by a
  final backslash; specifiers (``%x``) expanded on the whole line first, where only ``%%``
  (a literal ``%``) is allowed; ``Exec*=`` lines split into words as systemd does
  (whitespace-separated, a word either plain or wholly in double quotes with ``\\\\`` and
  ``\\"`` escapes, a lone ``;`` separating commands), then ``$$`` read as ``$`` and any other
  ``$`` refused (it would expand a variable);
- an env file: ``NAME=value`` lines and comments, the value taken literally (docker);
  ``systemd_reads_literally`` says whether systemd's EnvironmentFile= parser would read the
  same value unquoted;
- a shell file or command: POSIX words with the operators (``;``, ``&``, ``|``, ...) as words
  of their own, so an injected operator shows;
- sudoers: comment lines and exactly one rule, for a plain user name (Ubuntu's rule), no
  ``#include`` / ``@include``.

``written(inventory)`` is everything a planned inventory writes and runs on its Sparks,
each file read back that way.
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkdeploy.deploys.engine.units import unit_text
from sparkdeploy.deploys.fetch import jobs as fetch_jobs
from sparkdeploy.deploys.qsfp.nccl_env import nccl_env
from sparkdeploy.facts.preflight import SparkPreflight
from sparkdeploy.facts.roce import Gid, RailGid, gid_table_command
from sparkdeploy.inventory import Inventory
from sparkdeploy.render import render

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"  # the shape of a Hugging Face token
assert len(TOKEN) == 3 + 34


class Malformed(ValueError):
    """A rendered file its consumer would read otherwise than the deploy means."""


def control_characters(text: str) -> list[str]:
    """Characters that end a line or are otherwise control characters, by Unicode category
    (Cc: C0, DEL, C1; Zl, Zp: the line and paragraph separators)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")]


def _lines(text: str) -> list[str]:
    """The lines of a rendered file: no control character but the line feeds."""
    odd = [c for c in control_characters(text) if c != "\n"]
    if odd:
        raise Malformed(f"control characters {odd!r} in the file")
    if not text.endswith("\n"):
        raise Malformed("the file does not end with a line feed")
    return text[:-1].split("\n")


# --- systemd units ---------------------------------------------------------------------

EXEC_KEYS = frozenset(
    {"ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload"}
)
WORD_LIST_KEYS = frozenset({"Conflicts", "After", "Before", "Wants", "Requires", "BindsTo"})


@dataclass(frozen=True)
class Directive:
    section: str
    key: str
    value: str  # as written after the "="


def parse_unit(text: str) -> list[Directive]:
    """The assignments of a unit file, in order; anything but a comment, an empty line, a
    section header or ``Key=value`` is ``Malformed``, and so is a continued line."""
    directives = []
    section = ""
    for number, line in enumerate(_lines(text), start=1):
        if line.endswith("\\"):
            raise Malformed(f"line {number} ends with a backslash (continued): {line!r}")
        if not line.strip():
            continue
        if line != line.strip():
            raise Malformed(f"line {number} has surrounding whitespace: {line!r}")
        if line.startswith(("#", ";")):
            continue
        header = re.fullmatch(r"\[([A-Za-z]+)\]", line)
        if header:
            section = header.group(1)
            continue
        assignment = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)=(.*)", line)
        if not assignment:
            raise Malformed(f"line {number} is no comment, section or Key=value: {line!r}")
        if not section:
            raise Malformed(f"line {number} is outside any section: {line!r}")
        directives.append(Directive(section, assignment.group(1), assignment.group(2)))
    return directives


def _undouble(text: str, sign: str, what: str) -> str:
    """``text`` with ``sign`` doubled read as one; any other use of it is ``Malformed``."""
    out = []
    i = 0
    while i < len(text):
        if text[i] == sign:
            if text[i + 1 : i + 2] != sign:
                raise Malformed(f"{what} {text[i : i + 2]!r} would be expanded in {text!r}")
            out.append(sign)
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def unspecify(text: str) -> str:
    """systemd's specifier expansion where the only specifier allowed is ``%%``."""
    return _undouble(text, "%", "specifier")


def unvariable(word: str) -> str:
    """systemd's variable expansion in an Exec word where the only form allowed is ``$$``."""
    return _undouble(word, "$", "variable")


def split_words(line: str) -> list[str]:
    """Words of an Exec line (after specifiers) as systemd splits them, strictly: a word is
    plain (no quote, backslash or ``;``) or wholly double-quoted with only ``\\\\`` and
    ``\\"`` escaped; words are separated by spaces."""
    words = []
    i, n = 0, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        if line[i] == '"':
            i += 1
            chars = []
            while True:
                if i >= n:
                    raise Malformed(f"unterminated quote in {line!r}")
                c = line[i]
                if c == "\\":
                    if line[i + 1 : i + 2] not in ("\\", '"'):
                        raise Malformed(f"escape {line[i : i + 2]!r} in {line!r}")
                    chars.append(line[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    chars.append(c)
                    i += 1
            if i < n and line[i] != " ":
                raise Malformed(f"a quoted word runs on into {line[i:]!r}")
            words.append("".join(chars))
        else:
            j = line.find(" ", i)
            j = n if j < 0 else j
            word = line[i:j]
            if re.search(r"[\"'\\;\t]", word):
                raise Malformed(f"plain word {word!r} holds a quote, backslash or ';'")
            words.append(word)
            i = j
    return words


def exec_command(value: str) -> tuple[str, tuple[str, ...]]:
    """An ``Exec*=`` value as systemd runs it: (prefix such as "-", the argv)."""
    prefix = re.match(r"[-@:+!|]*", value)
    assert prefix is not None
    rest = value[prefix.end() :]
    return prefix.group(), tuple(unvariable(word) for word in split_words(unspecify(rest)))


def systemd_word(text: str) -> str:
    """The one argument a text written by an Exec-word escape reads back as (after the
    executable, where no prefix applies)."""
    _, words = exec_command(f"/bin/x {text}")
    if len(words) != 2:
        raise Malformed(f"{text!r} reads as the words {words[1:]!r}")
    return words[1]


def read_unit(text: str) -> list[tuple[str, str, Any]]:
    """A unit as systemd reads it: (section, key, value) where an Exec value is its prefix
    and argv, a unit list its words, and any other value its text after specifiers (which
    may hold no ``$``)."""
    read: list[tuple[str, str, Any]] = []
    for directive in parse_unit(text):
        key = directive.key
        if key in EXEC_KEYS:
            read.append((directive.section, key, exec_command(directive.value)))
            continue
        if "$" in directive.value:
            raise Malformed(f"{key}= holds a $: {directive.value!r}")
        value = unspecify(directive.value)
        if key in WORD_LIST_KEYS:
            if re.search(r"[\"'\\]", value):
                raise Malformed(f"{key}= holds a quote or backslash: {value!r}")
            read.append((directive.section, key, tuple(value.split())))
        else:
            read.append((directive.section, key, value))
    return read


# --- environment files -----------------------------------------------------------------


def read_env_file(text: str) -> tuple[tuple[str, str], ...]:
    """``NAME=value`` lines (comments and empty lines skipped), values taken to the end of
    the line as docker --env-file reads them."""
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(_lines(text), start=1):
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", line)
        if not match:
            raise Malformed(f"line {number} is no NAME=value: {line!r}")
        if any(name == match.group(1) for name, _ in pairs):
            raise Malformed(f"line {number} sets {match.group(1)} again")
        pairs.append((match.group(1), match.group(2)))
    return tuple(pairs)


def systemd_reads_literally(value: str) -> bool:
    """Whether systemd's EnvironmentFile= parser reads ``value`` unquoted as it is: no
    quote, backslash or ``$`` (or backtick, kept out for shells sourcing the file), no
    whitespace at either end (it strips it)."""
    return not re.search(r"[\"'\\$`]", value) and value == value.strip(" \t")


# --- shell -----------------------------------------------------------------------------


def shell_words(command: str, comments: bool = False) -> tuple[str, ...]:
    """A shell command's words, each operator (; & | ( ) < >) a word of its own."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#" if comments else ""
    return tuple(lexer)


def read_profile(text: str) -> tuple[tuple[str, ...], ...]:
    """The commands of a login-shell profile, one tuple of words per non-comment line."""
    return tuple(words for line in _lines(text) if (words := shell_words(line, comments=True)))


# --- sudoers ---------------------------------------------------------------------------


USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # Ubuntu's rule, '_' first allowed


def read_sudoers(text: str) -> tuple[str, ...]:
    """The rule lines of an engine's sudoers file: one rule for one plain user name (never
    ALL, a %group, a +netgroup, a #uid or a list); an include directive is ``Malformed``."""
    rules = []
    for line in _lines(text):
        if re.match(r"\s*[#@]include", line):
            raise Malformed(f"include directive: {line!r}")
        if line.strip() and not line.startswith("#"):
            rules.append(line)
    if len(rules) != 1:
        raise Malformed(f"{len(rules)} rules: {rules!r}")
    user = rules[0].split(" ", 1)[0]
    if not USER_NAME.fullmatch(user):
        raise Malformed(f"the rule is for {user!r}, not a plain user name")
    return tuple(rules)


# --- everything a planned inventory writes on its Sparks ----------------------------------

OPERATOR_GROUP = "nvidia"  # the group the host-state sample gives the operator


JOB_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")  # a unit instance name systemd takes as is


def fetch_specs(inventory: Inventory) -> dict[str, tuple[Any, ...]]:
    """Per Spark, the specs of its model-folder jobs as spark-fetch reads them: the JSON the
    start command's printf writes, after the shell has read that command. A job ID that is
    not a plain unit instance name is ``Malformed``."""
    specs = {}
    for name, spark in inventory.sparks.items():
        jobs = fetch_jobs.model_jobs(spark, OPERATOR_GROUP)
        for job in jobs:
            if not JOB_ID.fullmatch(job.id):
                raise Malformed(f"job ID {job.id!r} is not a plain unit instance name")
        words = shell_words(fetch_jobs.start_command(jobs))
        found = []
        for word in words:
            if word.startswith('{"'):
                try:
                    found.append(json.loads(word))
                except ValueError:
                    raise Malformed(f"spec {word!r} is not JSON") from None
        if len(found) != len(jobs):
            raise Malformed(f"{len(jobs)} jobs, {len(found)} specs read back")
        specs[name] = tuple(found)
    return specs


def proven_rails(inventory: Inventory, name: str) -> list[RailGid]:
    """What a passed QSFP proof finds on Spark ``name``: a RoCE v2 GID on every rail."""
    return [
        RailGid(
            rail.interface,
            rail.ip,
            Gid(
                f"rocep{number}",
                1,
                3,
                f"0000:0000:0000:0000:0000:ffff:0a00:000{number}",
                "RoCE v2",
                rail.interface,
            ),  # fmt: skip
            [f"rocep{number}"],
        )
        for number, rail in enumerate(inventory.topology[name].rails, start=1)
    ]


def written(inventory: Inventory, commands: bool = False) -> dict[str, Any]:
    """Everything the deploy writes or runs on each Spark from this inventory, each read
    back strictly as its consumer reads it (``Malformed`` when one would read it
    otherwise): units, env files, the login-shell profile, sudoers, shell commands."""
    read: dict[str, Any] = {}
    for name, spark in inventory.sparks.items():
        values = {"hf_disable_xet": spark.hf_disable_xet, "hf_endpoint": spark.hf_endpoint}
        read[f"{name}: hf-profile.sh"] = read_profile(render("hf-profile.sh.j2", **values))
        hf_env = read_env_file(render("hf.env.j2", **values))
        for variable, value in hf_env:
            if not systemd_reads_literally(value):
                raise Malformed(f"hf.env: systemd would not read {variable}={value!r} as is")
        read[f"{name}: hf.env"] = hf_env
        read[f"{name}: preflight"] = shell_words(SparkPreflight().command(spark.model_dir))
        read[f"{name}: gid table"] = shell_words(gid_table_command(spark.sysfs_root))
        read[f"{name}: hf env"] = fetch_jobs.hf_env(spark)
        place = inventory.topology[name]
        if place.paired:
            nccl = read_env_file(nccl_env(place, proven_rails(inventory, name)))
            for variable, value in nccl:
                if not systemd_reads_literally(value):
                    raise Malformed(f"nccl.env: systemd would not read {variable}={value!r}")
            read[f"{name}: nccl.env"] = nccl
        plan = inventory.engine_plans.get(name)
        if plan is None:
            continue
        env_file = f"/etc/spark-deploy/{plan.name}.env"
        read[f"{name}: {plan.name}.env"] = dict(read_env_file(render("engine.env.j2", plan=plan)))
        for service in plan.services:
            read[f"{name}: {service.unit}"] = read_unit(unit_text(plan, service, spark, env_file))
            sudoers = render(
                "engine-sudoers.j2", user=spark.user, unit=service.unit, unit_base=service.unit_base
            )
            read[f"{name}: sudoers {service.unit_base}"] = read_sudoers(sudoers)
    if commands:
        for name, specs in fetch_specs(inventory).items():
            read[f"{name}: model folder jobs"] = specs
    return read


def substituted(value: Any, marks: Mapping[str, str]) -> Any:
    """``value`` (strings in nested tuples, lists and dicts) with every mark replaced by
    what it stands for, in one pass (a replacement is never replaced again)."""
    if not marks:
        return value
    pattern = re.compile("|".join(re.escape(mark) for mark in sorted(marks, key=len, reverse=True)))

    def replace(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(lambda match: marks[match.group()], item)
        if isinstance(item, tuple):
            return tuple(replace(part) for part in item)
        if isinstance(item, list):
            return [replace(part) for part in item]
        if isinstance(item, dict):
            return {replace(key): replace(part) for key, part in item.items()}
        return item

    return replace(value)


def strings_in(value: Any) -> Iterable[str]:
    """Every string in nested tuples, lists and dicts."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
