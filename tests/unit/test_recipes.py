"""
Engine recipes Spark operators publish (tests/recipes/*.yaml, each with its source): the
configurations published as working are said in the inventory and come out as the command
line the recipe runs; the ones the evidence shows crashing are refused by the rule that
names the crash. tests/recipes/README.md has the format; each recipe's ``expect`` block says
what the deploy does with it and why.

The recipes name images by the tags their sources use. An image the inventory needs pinned
(a rolling tag such as ``latest``) is pinned here the way the operator would: a registry
image by a digest, an image built on the Spark by its image ID (a stand-in digest, fixed per
image, since the real ones are not published).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sparkdeploy.config import load as inventory_load
from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.engine.units import docker_run, start_command
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.inventory import Inventory, build_inventory
from sparkdeploy.knowledge import load_yaml
from sparkdeploy.knowledge.flags import load_catalogue
from sparkdeploy.knowledge.images import pinning_problem
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from tests.twins import harness

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
RECIPES = sorted(RECIPES_DIR.glob("[0-9][0-9]-*.yaml"))
OUTCOMES = ("accepted", "refused")
# The recipes run on up to eight Sparks (sparkdeploy/engine_plan/effective.py MAX_NODES).
MAX_NODES = 8


def load(path: Path) -> dict[str, Any]:
    """The recipe, a copy of its own for each caller (a test may change what it gets)."""
    return copy.deepcopy(_parsed(path))


@cache
def _parsed(path: Path) -> dict[str, Any]:
    """Each recipe parsed once per process, by the loader of the knowledge files (libyaml
    where PyYAML has it): every worker collects this module, and parsing the recipes three
    times in pure Python took 0.4 s of each worker's collection (2026-11-27)."""
    return load_yaml(path)


def pinned(engine: str, image: str) -> str:
    """The image as the operator pins it: unchanged when the inventory takes it as it is."""
    if not pinning_problem(engine, image):
        return image
    digest = hashlib.sha256(image.encode()).hexdigest()
    registry_image = "/" in image or "." in image.split(":")[0]
    return f"{image.split('@')[0]}@sha256:{digest}" if registry_image else f"sha256:{digest}"


def document(recipe: dict[str, Any]) -> dict[str, Any]:
    """The inventory document of a recipe: its keys for every Spark of the recipe (the
    engine under defaults:), each on the QSFP fabric when there are several (rail N of every
    Spark in one subnet, as through a switch; a pair is cabled the same way)."""
    keys = copy.deepcopy(recipe["inventory"])
    keys["engine"]["image"] = pinned(keys["engine"]["name"], keys["engine"]["image"])
    defaults = {"ssh_user": "nvidia", "model_dir": "/opt/models", **keys}
    nodes = recipe["nodes"]
    sparks = {
        f"spark-{node}": {"ssh_host": f"spark-{node}.local"}
        | ({"qsfp": harness.qsfp_plan(node)} if nodes > 1 else {})
        for node in range(1, nodes + 1)
    }
    return {"defaults": defaults, "sparks": sparks}


@contextmanager
def up_to_eight_sparks() -> Iterator[None]:
    """Inventories of up to eight Sparks: the inventory loader takes them once the fabric
    work (issue 14, helper C) raises its limit; until then the recipes raise it here, so the
    engine plan of a 3..8-Spark recipe is what is tested."""
    with mock.patch.object(inventory_load, "MAX_SPARKS", max(inventory_load.MAX_SPARKS, MAX_NODES)):
        yield


def model_reader(recipe: dict[str, Any]):
    """The model class the recipe's ``expect.model`` config.json fields give, else unknown
    (as when the Hub cannot be reached)."""
    config = recipe.get("expect", {}).get("model")

    def read(spark: SparkSettings) -> ModelClass | UnknownModel:
        if config is None:
            return UnknownModel("the recipe gives no config.json")
        fields = {key: value for key, value in config.items() if key != "source"}
        return ModelClass.from_config(fields, source=config.get("source", "recipe"))

    return read


def plan_of(path: Path) -> tuple[dict[str, Any], Inventory]:
    recipe = load(path)
    with up_to_eight_sparks():
        return recipe, build_inventory(document(recipe), str(path), model_reader(recipe))


def after_image(plan: EnginePlan) -> list[str]:
    """The main service's words after the image: what the container runs."""
    words = start_command(plan, plan.main, [])
    if plan.main.part_of:  # docker exec CONTAINER sh -c SCRIPT sh COMMAND...
        return list(words[words.index("-c") + 3 :])
    return list(words[words.index(plan.image) + 1 :])


def container_words(inventory: Inventory) -> dict[str, list[str]]:
    """Each role's container other than the server's (ray-head, ray-worker): its
    ``--entrypoint`` if it replaces the image's, then the words after the image."""
    found: dict[str, list[str]] = {}
    for plan in inventory.engine_plans.values():
        for service in plan.services:
            if service.part_of or service.role == "server":
                continue
            words = docker_run(plan, service, [])
            entrypoint = ["--entrypoint", service.entrypoint] if service.entrypoint else []
            found.setdefault(service.role, entrypoint + words[words.index(plan.image) + 1 :])
    return found


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.stem)
def test_recipe_files_name_their_source_and_expectation(path):
    recipe = load(path)
    assert recipe["source"].get("url") or recipe["source"].get("repo"), path.name
    assert recipe["evidence"] in ("works", "crashes")
    expect = recipe["expect"]
    assert expect["outcome"] in OUTCOMES and expect["why"].strip()
    if expect["outcome"] == "refused":
        assert expect.get("refused_by") or expect.get("refused_for"), "a refusal says why"
    # What the evidence says and what the deploy does agree, or the recipe says why not.
    agrees = (recipe["evidence"] == "works") == (expect["outcome"] == "accepted")
    assert agrees or expect.get("differs_because"), path.name


ACCEPTED = [path for path in RECIPES if load(path).get("expect", {}).get("outcome") == "accepted"]
REFUSED = [path for path in RECIPES if load(path).get("expect", {}).get("outcome") == "refused"]


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda path: path.stem)
def test_a_working_recipe_is_said_and_runs_its_command_line(path):
    recipe, inventory = plan_of(path)
    expect = recipe["expect"]
    engine = recipe["inventory"]["engine"]
    settings = inventory.sparks["spark-1"].engine
    assert settings is not None
    catalogue = load_catalogue(engine["name"], settings.version)
    plan = inventory.engine_plans["spark-1"]
    words = after_image(plan)
    # Every flag the recipe writes reaches the engine, as the release reads it (with
    # launch: image, as written: the image's launcher reads them).
    for flag, value in (
        (engine.get("args") or {}).items() if engine.get("launch") != "image" else ()
    ):
        reading = catalogue.read(flag)
        if reading is None:  # not in the catalogue: an image that is not its release decides
            assert settings.image_decides() and flag in words, flag
            continue
        if value is None:  # the profile's flag dropped: the release's own default applies
            assert reading.flag not in words, f"{flag} was dropped but is in {words}"
            continue
        assert reading.flag in words, f"{flag} ({reading.flag}) is not in {words}"
        if value is not True and not reading.path:
            shown = words[words.index(reading.flag) + 1]
            rendered = value if not isinstance(value, list) else value[0]
            assert str(rendered).lower() in shown.lower() or isinstance(value, dict), flag
    # Launched as the recipe launches it: the server command, or flags for the entrypoint.
    starts_with_flag = words[0].startswith("-")
    if not plan.main.part_of:
        assert starts_with_flag == (engine.get("launch") in ("entrypoint", "image")), words[:4]
    container = docker_run(plan, next(s for s in plan.services if not s.part_of), [])
    for mount in engine.get("mounts") or []:
        assert f"{mount['host']}:{mount['container']}:ro" in container, mount
    # The docker options the recipe's container gets (engine.docker_args with the deploy's).
    assert all(word in container for word in expect.get("docker", [])), container
    assert not set(expect.get("docker_absent", [])) & set(container), container
    # The exact command line, reviewed once and kept (on several Sparks: the head's).
    assert words == expect["command"], path.name
    # The containers beside the server's (the Ray head's and a worker's), when kept.
    containers = container_words(inventory)
    for role, kept in expect.get("containers", {}).items():
        assert containers.get(role) == kept, (path.name, role)
    # On several Sparks every one runs the engine with its rank; only the head serves.
    plans = list(inventory.engine_plans.values())
    assert [(p.nodes, p.rank, p.serves_api) for p in plans] == [
        (recipe["nodes"], rank, rank == 0) for rank in range(recipe["nodes"])
    ]
    warned = " ".join(inventory.warnings)
    for rule in expect.get("warned_by", []):
        assert f"[{rule}]" in warned, rule
    for text in expect.get("warned_for", []):
        assert text in warned, text


@pytest.mark.parametrize("path", REFUSED, ids=lambda path: path.stem)
def test_a_recipe_that_crashes_is_refused_by_the_rule_that_names_the_crash(path):
    recipe = load(path)
    with up_to_eight_sparks(), pytest.raises(InventoryError) as caught:
        build_inventory(document(recipe), str(path), model_reader(recipe))
    message = str(caught.value)
    for rule in recipe["expect"].get("refused_by", []):
        assert f"[{rule}]" in message, (rule, message)
    for text in recipe["expect"].get("refused_for", []):
        assert text in message, (text, message)
    assert "no host was contacted" in message


def test_the_recipes_cover_what_operators_run():
    recipes = [load(path) for path in RECIPES]
    assert len(recipes) >= 25
    engines = {r["inventory"]["engine"]["name"] for r in recipes}
    assert engines == {"sglang", "vllm"}
    assert {r["nodes"] for r in recipes} >= {1, 2}
    images = " ".join(r["inventory"]["engine"]["image"] for r in recipes)
    for family in ("nvcr.io/nvidia/vllm", "nvcr.io/nvidia/sglang", "vllm/vllm-openai"):
        assert family in images
    assert "lmsysorg/sglang" in images and "vllm-node" in images
    args = [r["inventory"]["engine"].get("args") or {} for r in recipes]
    assert any("--speculative-config" in a or "--speculative_config" in a for a in args)
    assert any(r["inventory"]["engine"].get("mounts") for r in recipes)
    assert sum(r["expect"]["outcome"] == "accepted" for r in recipes) >= 20
