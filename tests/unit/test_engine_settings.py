"""EngineSettings: per-engine defaults, pinned images, catalogued versions, checked overrides."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sparkdeploy.config.engine import (
    EngineSettings,
    image_tag,
    images,
    version_for_image,
)
from sparkdeploy.knowledge.flags import available_versions


def errors(**raw) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        EngineSettings(**raw)
    return {
        ".".join(map(str, e["loc"])): e["msg"].removeprefix("Value error, ")
        for e in caught.value.errors()
    }


def test_defaults_per_engine():
    sglang = EngineSettings(name="sglang")
    assert sglang.image == "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"
    assert (sglang.version, sglang.port, sglang.bind) == ("0.5.10", 30000, "127.0.0.1")
    vllm = EngineSettings(name="vllm")
    assert (vllm.image, vllm.version, vllm.port) == ("vllm/vllm-openai:v0.33.0", "0.33.0", 8000)
    assert vllm.speculative is None and vllm.args == {} and vllm.env == {}


def test_every_field_is_documented():
    for name, field in EngineSettings.model_fields.items():
        assert field.description and len(field.description) > 20, name


def test_settings_are_strict_frozen_and_closed():
    found = errors(name="sglang", port="30000", colour="red", bind="0.0.0.1")
    assert set(found) == {"port", "colour", "bind"}
    settings = EngineSettings(name="vllm")
    with pytest.raises(ValidationError):
        settings.port = 1  # type: ignore[misc]  # frozen: the assignment must fail


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("lmsysorg/sglang", "is not pinned: add a tag (untagged means latest) or a digest"),
        ("lmsysorg/sglang:latest", "`latest` is not pinned: name a dated or versioned tag"),
        ("registry:5000/sglang", "is not pinned: add a tag (untagged means latest) or a digest"),
    ],
)
def test_unpinned_images_are_refused(image, message):
    assert errors(name="sglang", image=image)["image"] == message


def test_a_bad_image_is_reported_once_not_again_as_a_version():
    assert set(errors(name="vllm", image="vllm/vllm-openai:latest")) == {"image"}


def test_release_tags_and_digests_give_the_version():
    assert version_for_image("sglang", "lmsysorg/sglang:v0.5.12-cu130") == "0.5.12"
    assert EngineSettings(name="sglang", image="lmsysorg/sglang:v0.5.12-cu130").version == "0.5.12"
    assert image_tag("registry:5000/vllm/vllm-openai:v0.33.0") == "v0.33.0"
    digest = "vllm/vllm-openai@sha256:" + "a" * 64
    assert EngineSettings(name="vllm", image=digest, version="0.33.0").version == "0.33.0"


SGLANG_CATALOGUED = [  # sparkdeploy/knowledge/catalogues/sglang-*.json
    "0.5.4.post3", "0.5.5.post3", "0.5.6.post2", "0.5.7", "0.5.8.post1", "0.5.9", "0.5.10",
    "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13.post1", "0.5.14",
    "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22",
    "0.5.23",
]  # fmt: skip


def test_an_image_of_unknown_release_needs_a_version():
    found = errors(name="sglang", image="lmsysorg/sglang:nightly-dev-cu13-20990101-abc")
    assert found["version"].startswith("cannot tell the sglang release of image")
    assert found["version"].endswith("catalogued releases: " + ", ".join(SGLANG_CATALOGUED))
    pinned = EngineSettings(
        name="sglang", image="lmsysorg/sglang:nightly-dev-cu13-20990101-abc", version="0.5.12"
    )
    assert pinned.version == "0.5.12"


def test_version_must_be_catalogued_and_agree_with_the_image():
    assert "no flag catalogue for vllm 0.1.0" in errors(name="vllm", version="0.1.0")["version"]
    found = errors(name="sglang", version="0.5.12")
    assert found["version"] == (
        "image lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a is release 0.5.10, not 0.5.12; "
        "drop version or change the image"
    )


def test_args_are_checked_against_the_pinned_release_all_at_once():
    found = errors(
        name="sglang",
        args={
            "--mem-fraction": 0.7,
            "--port": 1234,
            "--enable-metrics": True,
            "--cuda-graph-max-bs": 1.5,
        },
    )
    assert found["args"] == (
        "--port: set by the deploy from engine.port; set that instead; "
        "--mem-fraction: not a flag of SGLang 0.5.10; closest: --mem-fraction-static; "
        "--cuda-graph-max-bs: needs an integer (got 1.5)"
    )


def test_managed_flags_are_refused_in_every_spelling():
    found = errors(name="vllm", args={"--max-model-len": 1, "-tp": 2, "--speculative-config": "{}"})
    assert "--max-model-len: set by the deploy from engine.context_length" in found["args"]
    assert "-tp: set by the deploy from the number of Sparks in the pair" in found["args"]
    assert "--speculative-config: set by the deploy from the draft model folder" in found["args"]


def test_null_drops_a_default_and_needs_no_value_check():
    settings = EngineSettings(name="sglang", args={"--moe-runner-backend": None})
    assert settings.args == {"--moe-runner-backend": None}


def test_env_names_and_secrets():
    found = errors(name="vllm", env={"HF_TOKEN": "x", "1BAD": "y", "OK": "z"})
    assert found["env"] == (
        "HF_TOKEN: secrets never go in the inventory; the deploy passes the HF token from the "
        "laptop itself; '1BAD': must be an environment variable name (letters, digits, _), "
        "such as HF_TOKEN"
    )
    assert "env.OK" in errors(name="vllm", env={"OK": 1})  # strict: strings only


def test_other_gpu_services_are_unit_names():
    assert EngineSettings(name="sglang", other_gpu_services=["voxtral.service"]).other_gpu_services
    assert errors(name="sglang", other_gpu_services=["a b"])["other_gpu_services.0"].startswith(
        "must be a systemd service name"
    )


def test_an_unknown_engine_reports_only_the_name():
    assert set(errors(name="tgi")) == {"name"}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_every_mapped_image_has_a_catalogue(engine):
    table = images()[engine]
    assert version_for_image(engine, table["default_image"]) in available_versions(engine)
    for image, entry in table["images"].items():
        assert str(entry["version"]) in available_versions(engine), image
