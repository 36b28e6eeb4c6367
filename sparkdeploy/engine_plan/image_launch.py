"""
``engine.launch: image``: the image's own ENTRYPOINT (a launcher of its own, such as a
`boot.py run`-style wrapper or a fork's server) runs with engine.launcher_words (its
subcommand or positional words, plain words only) and engine.args as its arguments and
nothing of the deploy's making: no GB10 profile flags, no model, address or port flags.
The deploy fills in what it knows where the operator asks for it (``{model}``, ``{draft}``,
``{port}``, ``{bind}``, ``{served_model_name}``) and still checks what it can:

- the words: no secret, no control character, no value that is a flag (config/engine.py);
- the address: a ``--host`` must be engine.bind and a ``--port`` engine.port (the firewall and
  the health check go by these); without ``--host`` the image picks the address, so the API
  needs the key (engine.api_key_env) or ``api_open: true``;
- the served name: a ``--served-model-name`` must be engine.served_model_name when that is set;
- the flags by name against the flag list read from the image (``make catalogue IMAGE=...``,
  knowledge/image_catalogues.py) when there is one; otherwise a warning says the image
  decides, and after the pull the Spark's own reading of the image (image_check.py) refuses a
  flag its --help does not list;
- health: the health check still waits for /v1/models on engine.port and a one-token answer.

Not with engine.mods (the deploy would have to replace the entrypoint it runs), not on Sparks
serving one model together (the deploy sets each rank's flags), not with SGLang's API key
(the deploy gives it as a --config flag of its own making).

Room: engine_plan. May import config and knowledge; knows nothing of hosts or pyinfra.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from sparkdeploy.engine_plan.planners import PlanInput, Planned
from sparkdeploy.knowledge.image_catalogues import IMAGE_CATALOGUES_DIR, find_image_catalogue

IMAGE_VALUE = re.compile(r"\{(model|draft|port|bind|served_model_name)\}")
# engine.args flags that must agree with the setting the deploy checks the engine by.
AGREES = {"--host": "bind", "--port": "port", "--served-model-name": "served_model_name"}


def image_values(given: PlanInput) -> dict[str, str]:
    """What ``{name}`` in engine.args stands for on this Spark."""
    settings = given.settings
    return {
        "model": given.model_folder,
        "draft": given.draft_folder or "",
        "port": str(settings.port),
        "bind": settings.bind,
        "served_model_name": settings.served_model_name
        or posixpath.basename(given.model_folder.rstrip("/")),
    }


def _fill(value: Any, values: dict[str, str]) -> Any:
    """``value`` with the ``{name}`` placeholders filled in (strings, in lists and mappings)."""
    if isinstance(value, str):
        return IMAGE_VALUE.sub(lambda match: values[match.group(1)], value)
    if isinstance(value, list):
        return [_fill(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, values) for key, item in value.items()}
    return value


def plain_argv(args: dict[str, Any]) -> tuple[str, ...]:
    """engine.args as words, in their order and spelling: `true` a flag alone, `false` left
    out, a list its values after the flag, a mapping as JSON."""
    words: list[str] = []
    for flag, value in args.items():
        if value is False:
            continue
        words.append(flag)
        items = [] if value is True else value if isinstance(value, list) else [value]
        words += [json.dumps(item) if isinstance(item, dict) else str(item) for item in items]
    return tuple(words)


def image_argv(given: PlanInput, args: dict[str, Any]) -> tuple[str, ...]:
    """What the image's launcher gets: engine.launcher_words (placeholders filled in), then
    engine.args as words."""
    words = _fill(list(given.settings.launcher_words), image_values(given))
    return (*words, *plain_argv(args))


def plan_image_args(given: PlanInput) -> Planned[dict[str, Any]]:
    """engine.args as the image's launcher gets them, the problems that stop the engine and
    the warning that the image decides (when no flag list was read from it)."""
    values = image_values(given)
    args = {
        flag: _fill(value, values)
        for flag, value in given.settings.args.items()
        if value is not None
    }
    problems = [*_unsupported(given), *_agreement(given, args, values)]
    checked, warnings = _flag_list(given, args)
    return Planned(args, tuple(problems + checked), tuple(warnings))


def _unsupported(given: PlanInput) -> list[str]:
    """What launch: image cannot do (module docstring)."""
    settings, problems = given.settings, []
    if given.multinode is not None:
        problems.append(
            "engine.launch image: not on Sparks serving one model together (the deploy sets "
            "each rank's flags, which the image's launcher would have to); use `entrypoint` "
            "or `command`, or serve on one Spark"
        )
    if any(item.kind == "mod" for item in given.shipped):
        problems.append(
            "engine.mods with engine.launch image: the mods would replace the image's "
            "entrypoint, which this launch keeps; bake them into the image, or use "
            "`entrypoint` or `command`"
        )
    if given.api_key and settings.name == "sglang":
        problems.append(
            "engine.launch image with an API key: SGLang reads it from a --config file the "
            f"deploy adds to its command, which this launch leaves to the image; unset "
            f"${settings.api_key_env} or use `entrypoint` or `command`"
        )
    return problems


def _agreement(given: PlanInput, args: dict[str, Any], values: dict[str, str]) -> list[str]:
    """Flags of engine.args that disagree with the settings the deploy checks the engine
    by, and an address the image would choose for an API without key."""
    settings, problems = given.settings, []
    spelled = {flag.replace("_", "-"): value for flag, value in args.items()}
    for flag, setting in AGREES.items():
        given_value = spelled.get(flag)
        if given_value is None or (
            setting == "served_model_name" and not settings.served_model_name
        ):
            continue
        if str(given_value) != values[setting]:
            problems.append(
                f"engine.args {flag} {given_value} is not engine.{setting} {values[setting]}: "
                f"the deploy's firewall and health check go by engine.{setting}; write "
                f'`{flag}: "{{{setting}}}"` or set engine.{setting} to it'
            )
    if "--host" not in spelled and not given.api_key and not settings.api_open:
        problems.append(
            "engine.launch image: engine.args give no --host, so the image chooses the address "
            "its API binds to (vLLM's own default is every interface); write "
            '`--host: "{bind}"`, or set the API key (engine.api_key_env) or api_open: true'
        )
    return problems


def _flag_list(given: PlanInput, args: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Problems for flags the image's flag list does not have; without a list, the warning
    that the image decides."""
    settings = given.settings
    found = find_image_catalogue(settings.name, settings.image)
    if found is None:
        return [], [
            f"engine.launch image: the flags of engine.args are not checked before connecting: "
            f"{settings.image} decides what it takes. After the pull the Spark reads the "
            "image's --help and refuses a flag it does not list; `make catalogue "
            f"IMAGE={settings.image} ENGINE={settings.name}` checks them here (docs/engines.md)"
        ]
    where = posixpath.join(IMAGE_CATALOGUES_DIR.parent.name, "images", found.path.name)
    return [
        f"engine.args {flag}: the flag list read from {settings.image} (knowledge/{where}) has "
        "no such flag; remove it, or rebuild the list if the image changed"
        for flag in args
        if flag.split("=", 1)[0] not in found.flags
    ], []
