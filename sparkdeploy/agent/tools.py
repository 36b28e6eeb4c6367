"""
The MCP server's tools, as plain functions of a ``SparkContext`` and what they read. Every
tool is read-only: it runs only the read commands of ``readings/`` (``systemctl show``,
``journalctl``, ``nvidia-smi``, ``spark-engine-rollback state``), reads files the deploy
left readable, and asks the engine's API on 127.0.0.1. Nothing a caller passes reaches a
shell: a unit must be one of the plan's, and a proposed command line is only parsed.

- ``diagnose``: the engine units' journals and the kernel log against the known GB10
  failure signatures, as ``diagnose.py`` reports them.
- ``explain_rule``: a GB10 rule (gb10_rules.yaml) or failure signature (signatures.yaml),
  with its scope and sources.
- ``check_command``: a proposed engine command line, read with the flag catalogue of the
  release in the Spark's engine image and planned with the GB10 rules, as the deploy would.
- ``status``: the units, which one holds the GPU, the API, memory against the guard, the GPU,
  the kept configuration and the last rollback.
"""

from __future__ import annotations

import difflib
import json
import shlex
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sparkdeploy.agent.context import SparkContext
from sparkdeploy.config.paths import IMAGE_READINGS, LINK_TEST_RESULT, ROLLBACK_BIN
from sparkdeploy.engine_plan.plan import EnginePlanError, plan_engine
from sparkdeploy.engine_plan.rules import load_book
from sparkdeploy.escape import shell
from sparkdeploy.knowledge.flags import (
    ENGINE_TITLES,
    CatalogueNotFound,
    available_versions,
    from_argv,
    load_catalogue,
)
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from sparkdeploy.knowledge.profiles import managed_flags
from sparkdeploy.knowledge.signatures import Diagnosis, signatures
from sparkdeploy.readings.diagnosis import (
    JOURNAL_LINES,
    KERNEL_LINES,
    TAIL_LINES,
    kernel_findings,
    kernel_report,
    report,
    unit_findings,
)
from sparkdeploy.readings.journals import (
    JOURNAL_MARK,
    journals_command,
    parse_journals,
    parse_units,
    units_command,
)

Runner = Callable[[str], list[str]]  # runs a read-only shell command: its output lines
Fetcher = Callable[[str], tuple[int, str]]  # GET a URL on 127.0.0.1: (HTTP status, body)
COMMAND_TIMEOUT = 60  # seconds a reading may take (journalctl over a long journal)
API_TIMEOUT = 5  # seconds the engine's API may take to answer
MAX_COMMAND = 16384  # characters of a proposed command line


def run_shell(command: str) -> list[str]:
    """Run a read command with ``sh`` on this Spark; its standard output's lines."""
    done = subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    return done.stdout.splitlines()


def http_get(url: str) -> tuple[int, str]:
    """GET ``url``: its status and body (0 and the reason when nothing answered)."""
    try:
        with urllib.request.urlopen(url, timeout=API_TIMEOUT) as answer:  # noqa: S310 -- loopback
            return answer.status, answer.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read(4096).decode("utf-8", "replace")
    except (OSError, ValueError) as error:
        return 0, str(getattr(error, "reason", error))


@dataclass
class Tools:
    """The tools of one Spark. ``run``, ``get`` and ``readings`` are what they read through:
    the Spark itself by default, recorded outputs in the tests."""

    context: SparkContext
    run: Runner = run_shell
    get: Fetcher = http_get
    readings: Path = field(default_factory=lambda: Path(IMAGE_READINGS))

    # -- diagnose ------------------------------------------------------------------------------

    def known_units(self) -> list[str]:
        return list(dict.fromkeys([*self.context.units, *self.context.gpu_units.values()]))

    def diagnose(self, unit: str = "", lines: int = JOURNAL_LINES) -> dict[str, Any]:
        """Each unit's state and last journal lines, and the kernel log of this boot and the
        previous one, matched against the known GB10 failure signatures."""
        known = self.known_units()
        if unit and unit not in known:
            raise ValueError(f"{unit!r} is not a unit of this Spark's plan: {', '.join(known)}")
        lines = max(1, min(int(lines), 5000))
        units = tuple([unit] if unit else known)
        journals = parse_journals(self.run(journals_command(units, lines, KERNEL_LINES)))
        texts, found_units = [], []
        for journal in journals.units:
            found = unit_findings(journal)
            texts.append(report(journal, lines, found)[1])
            found_units.append(
                {
                    "unit": journal.unit,
                    "state": journal.summary(),
                    "active": journal.active,
                    "findings": [_finding(item) for item in found],
                    "last_lines": list(journal.lines[-TAIL_LINES:]),
                }
            )
        kernel = kernel_findings(journals.boots)
        texts.append(kernel_report(journals.boots, found=kernel)[1])
        return {
            "spark": self.context.spark,
            "units": found_units,
            "kernel": [_finding(item) for item in kernel],
            "report": "\n".join(texts),
        }

    # -- explain_rule --------------------------------------------------------------------------

    def explain_rule(self, rule_id: str = "") -> dict[str, Any]:
        """A GB10 rule or failure signature by its id; every id with its summary when none
        is given."""
        rules = {rule.id: rule for rule in load_book().rules}
        known = {signature.id: signature for signature in signatures()}
        if not rule_id:
            return {
                "rules": {rule.id: f"[{rule.engine}] {rule.summary}" for rule in rules.values()},
                "signatures": {item.id: item.cause for item in known.values()},
            }
        if rule_id in rules:
            rule = rules[rule_id]
            return {
                "kind": "GB10 rule",
                "id": rule.id,
                "engine": rule.engine,
                "severity": rule.severity,
                "where_seen": rule.scope.describe(),
                "outside_that": dict(rule.otherwise) if rule.otherwise else None,
                "summary": rule.summary,
                "reason": rule.reason,
                "fix": rule.fix,
                "sources": [
                    {"seen": s.seen, "where": s.where, "date": s.date} for s in rule.sources
                ],
                "failure_signatures": sorted(s.id for s in known.values() if s.rule == rule.id),
            }
        if rule_id in known:
            item = known[rule_id]
            return {
                "kind": "failure signature",
                "id": item.id,
                "pattern": item.pattern.pattern,
                "scope": item.scope,
                "cause": item.cause,
                "fix": item.fix,
                "rule": item.rule or None,
                "prevented_by": item.prevented_by or None,
                "rule_needed": item.rule_needed or None,
                "sources": [str(source) for source in item.sources],
            }
        close = difflib.get_close_matches(rule_id, [*rules, *known], n=5, cutoff=0.4)
        raise ValueError(
            f"no GB10 rule or failure signature is called {rule_id!r}"
            + (f"; closest: {', '.join(close)}" if close else "")
            + f" ({len(rules)} rules and {len(known)} signatures are known; "
            "call explain_rule without an id to list them)"
        )

    # -- check_command -------------------------------------------------------------------------

    def image_release(self, engine: str) -> tuple[str, str]:
        """The engine release read from the Spark's engine image (spark-fetch's reading of
        it), and where it was read; ("", why not) when there is none."""
        found = []
        for path in self.readings.glob("*.json"):
            try:
                reading = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if reading.get("image") == self.context.image and reading.get("engine") == engine:
                found.append((path.stat().st_mtime, str(reading.get("release") or ""), path))
        if not found:
            return "", f"no reading of {self.context.image} on this Spark"
        _, release, path = max(found)
        return release, str(path)

    def check_command(self, command: str) -> dict[str, Any]:
        """A proposed engine command line checked as the deploy would check it."""
        engine, flag_words, notes = _engine_words(_command_words(command), self.context)
        if self.context.engine is None or self.context.engine.get("name") != engine:
            raise ValueError(
                f"this Spark runs no {ENGINE_TITLES[engine]} engine (engine: in its inventory); "
                "check_command checks command lines for the engine the deploy planned here"
            )
        version = self._release_to_check(engine, notes)
        parsed = from_argv(engine, version, flag_words)
        if parsed.positional:
            model = parsed.positional[-1]
            if model != self.context.model_folder:
                notes.append(
                    f"model {model!r}: the deploy serves {self.context.model_folder} "
                    "(model_repo); the model is not checked here"
                )
        args = _unmanaged(engine, version, dict(parsed.args), notes)
        problems, warnings, flags = self._plan(engine, version, args)
        return {
            "verdict": "refused" if problems else "accepted",
            "engine": engine,
            "release": version,
            "problems": problems,
            "warnings": warnings,
            "notes": notes,
            "args": args,
            "server_flags": flags,
        }

    def _release_to_check(self, engine: str, notes: list[str]) -> str:
        """The release whose catalogue reads the command: the image's when one is committed
        here, else the planned one (each said in ``notes``)."""
        release, where = self.image_release(engine)
        version = self.context.version
        if release and release != version:
            try:
                load_catalogue(engine, release)
                version = release
            except CatalogueNotFound:
                notes.append(
                    f"the image holds {ENGINE_TITLES[engine]} {release}, which has no flag "
                    f"catalogue here; checked with {version}, the release the deploy planned"
                )
        notes.append(
            f"flags read with the catalogue of {ENGINE_TITLES[engine]} {version} "
            + (f"(the release found in the image, {where})" if version == release else f"({where})")
        )
        return version

    def _plan(
        self, engine: str, version: str, args: dict[str, Any]
    ) -> tuple[list[str], list[str], list[str]]:
        """Plan the engine with ``args`` in place of the inventory's: the problems, the
        warnings and, when it may start, the server flags the unit would run."""
        try:
            settings = self.context.engine_settings(args=args, version=version)
        except ValidationError as error:
            problems = []
            for item in error.errors():
                where = ".".join(str(part) for part in item["loc"])
                problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
            return problems, [], []
        try:
            plan, warnings = plan_engine(
                settings,
                self.context.model_folder,
                self.context.draft_folder,
                self.context.multinode_place(),
                self.model_class(),
                api_key=self.context.api_key,
            )
        except EnginePlanError as error:
            return error.problems, error.warnings, []
        return [], warnings, list(plan.flags)

    def model_class(self) -> ModelClass | UnknownModel:
        """The class of the Spark's model, from its config.json in the model folder."""
        folder = self.context.model_folder
        if not folder:
            return UnknownModel("no model_repo in the inventory")
        path = Path(folder) / "config.json"
        try:
            return ModelClass.from_config(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (OSError, ValueError) as error:
            return UnknownModel(f"{path} was not read ({type(error).__name__})")

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The units and which holds the GPU, the API, memory, the GPU, the kept
        configuration and the last rollback, and the last link test."""
        units = tuple(self.known_units())
        command = "\n".join(
            [
                units_command(units, 0),
                f"printf '{JOURNAL_MARK} value mem %s\\n'"
                " \"$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)\"",
                f"printf '{JOURNAL_MARK} value gpu %s\\n' \"$(nvidia-smi"
                " --query-gpu=name,driver_version,temperature.gpu"
                ' --format=csv,noheader 2>/dev/null | head -n1)"',
                f"printf '{JOURNAL_MARK} value rollback %s\\n'"
                f' "$({ROLLBACK_BIN} state 2>/dev/null)"',
                f"printf '{JOURNAL_MARK} value linktest %s\\n'"
                f' "$(cat {shell(LINK_TEST_RESULT)} 2>/dev/null)"',
            ]
        )
        output = self.run(command)
        values: dict[str, str] = {}
        unit_lines = []
        for line in output:
            if line.startswith(f"{JOURNAL_MARK} value "):
                key, _, value = line[len(JOURNAL_MARK) + 7 :].partition(" ")
                values[key] = value.strip()
            else:
                unit_lines.append(line)
        journals = parse_units(unit_lines)
        states = {journal.unit: journal for journal in journals}
        holders = [
            name
            for name, unit in self.context.gpu_units.items()
            if unit in states and states[unit].active
        ]
        available_kb = int(values["mem"]) if values.get("mem", "").isdigit() else None
        return {
            "spark": self.context.spark,
            "units": {journal.unit: journal.summary() for journal in journals},
            "gpu_holder": holders[0] if len(holders) == 1 else (holders or None),
            "api": self._api(),
            "memory": {
                "available_gib": round(available_kb / 2**20, 1) if available_kb else None,
                "guard_gib": self.context.memory_guard_gb,
            },
            "gpu": values.get("gpu") or "nvidia-smi did not answer",
            "rollback": _json_or_none(values.get("rollback", "")),
            "link_test": _json_or_none(values.get("linktest", "")),
        }

    def _api(self) -> dict[str, Any] | None:
        if not self.context.serves_api or not self.context.port:
            return None
        base = f"http://127.0.0.1:{self.context.port}"
        health, _ = self.get(f"{base}/health")
        code, body = self.get(f"{base}/v1/models")
        if code == 200:
            try:
                models = [str(model["id"]) for model in json.loads(body)["data"]]
            except (ValueError, KeyError, TypeError):
                return {"health": health, "state": f"answers, but not a model list: {body[:80]}"}
            return {"health": health, "state": "serving", "models": models}
        if code in (401, 403):
            return {"health": health, "state": "up, requires its API key"}
        if code == 0:
            return {"health": health, "state": f"not answering: {body}"}
        return {"health": health, "state": f"HTTP {code}: {body[:120]}"}


def _finding(item: Diagnosis) -> dict[str, Any]:
    signature = item.signature
    return {
        "id": signature.id,
        "rule": signature.rule or None,
        "seen": item.line.strip(),
        "where": item.where,
        "cause": signature.cause,
        "fix": signature.fix,
        "sources": [str(source) for source in signature.sources],
    }


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


# How a server command line starts: the words before the flags, by engine.
LAUNCHERS = {
    ("vllm", "serve"): "vllm",
    ("-m", "vllm.entrypoints.openai.api_server"): "vllm",
    ("-m", "sglang.launch_server"): "sglang",
}


def _command_words(command: str) -> list[str]:
    """A proposed command line's words, as a shell splits them (bounded in length)."""
    if len(command) > MAX_COMMAND:
        raise ValueError(f"a command line of more than {MAX_COMMAND} characters")
    try:
        return shlex.split(command)
    except ValueError as error:
        raise ValueError(f"not a shell command line: {error}") from None


def _unmanaged(engine: str, version: str, args: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``args`` less the flags the deploy sets itself from a setting (each said in ``notes``)."""
    managed = managed_flags(engine, version, placed=False)  # the rest: planned
    catalogue = load_catalogue(engine, version)
    for flag in list(args):
        reading = catalogue.read(flag)
        setting = reading and (managed.get(reading.key) or managed.get(reading.flag))
        if setting:
            notes.append(f"{flag}: set by the deploy from {setting}; left out of the check")
            del args[flag]
    return args


def _engine_words(words: list[str], context: SparkContext) -> tuple[str, list[str], list[str]]:
    """The engine a command line starts and the words after its launcher; a line of flags
    alone is for the Spark's own engine. Anything before the launcher (``docker run ...
    IMAGE``, ``python3``) is left out, and said."""
    for index in range(len(words) - 1):
        first = words[index].rsplit("/", 1)[-1]
        engine = LAUNCHERS.get((first, words[index + 1]))
        if engine:
            before = [word.rsplit("/", 1)[-1] for word in words[:index]]
            notes = []
            if before and before not in (["python"], ["python3"]):
                notes.append(f"the words before {words[index]!r} are not checked")
            rest = words[index + 2 :]
            return engine, rest, notes
    if words and words[0].startswith("-") and context.engine:
        return str(context.engine["name"]), words, []
    releases = "; ".join(
        f"{ENGINE_TITLES[name]} {', '.join(available_versions(name)[-3:])} ..."
        for name in ("sglang", "vllm")
    )
    raise ValueError(
        "not a command line of SGLang or vLLM: write it as `vllm serve MODEL --flag ...`, "
        "`python3 -m sglang.launch_server --flag ...`, or the flags alone "
        f"(catalogued: {releases})"
    )
