"""EngineSettings: per-engine defaults, pinned images, catalogued versions, checked overrides."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.engine_plan.effective import EngineConfigError, effective_args
from sparkdeploy.knowledge.flags import available_versions
from sparkdeploy.knowledge.images import image_tag, images, version_for_image


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
        ("lmsysorg/sglang", "is not pinned: it has no tag (untagged means latest); pin it"),
        ("lmsysorg/sglang:latest", "tag 'latest' moves with every push, so it is not pinned"),
        ("registry:5000/sglang", "is not pinned: it has no tag (untagged means latest); pin it"),
    ],
)
def test_unpinned_images_are_refused(image, message):
    assert errors(name="sglang", image=image)["image"].startswith(message)


def test_a_bad_image_is_reported_once_not_again_as_a_version():
    assert set(errors(name="vllm", image="vllm/vllm-openai:latest")) == {"image"}


def test_release_tags_and_digests_give_the_version():
    assert version_for_image("sglang", "lmsysorg/sglang:v0.5.12-cu130") == "0.5.12"
    assert EngineSettings(name="sglang", image="lmsysorg/sglang:v0.5.12-cu130").version == "0.5.12"
    assert image_tag("registry:5000/vllm/vllm-openai:v0.33.0") == "v0.33.0"
    digest = "vllm/vllm-openai@sha256:" + "a" * 64
    assert EngineSettings(name="vllm", image=digest, version="0.33.0").version == "0.33.0"


def test_an_image_of_unknown_release_is_checked_against_the_newest_with_a_warning():
    image = "lmsysorg/sglang:nightly-dev-cu13-20990101-abcdef1"
    guessed = EngineSettings(name="sglang", image=image)
    newest = available_versions("sglang")[-1]
    assert guessed.version == newest
    assert guessed.unknown_version_warning() == (
        f"image {image} is of no sglang release sparkdeploy/knowledge/images.yaml knows; "
        f"its flags are checked against the newest catalogued release, sglang {newest}. "
        "Set engine.version to the release the image holds (catalogued: "
        f"{', '.join(available_versions('sglang'))})"
    )
    pinned = EngineSettings(name="sglang", image=image, version="0.5.10")
    assert pinned.version == "0.5.10" and pinned.unknown_version_warning() is None
    named_newest = EngineSettings(name="sglang", image=image, version=newest)
    assert named_newest.unknown_version_warning() is None  # the inventory said so


def test_version_must_name_a_release_and_agree_with_the_image():
    digest = "vllm/vllm-openai@sha256:" + "a" * 64
    refused = errors(name="vllm", image=digest, version="newest")["version"]
    assert "no flag catalogue for vllm newest" in refused
    assert "give the release number the image holds" in refused
    found = errors(name="sglang", version="0.5.12")
    assert found["version"] == (
        "image lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a is release 0.5.10, not 0.5.12; "
        "drop version or change the image"
    )


def test_args_are_checked_against_the_pinned_release_all_at_once():
    found = errors(
        name="sglang",
        args={
            "--mem-fracton": 0.7,
            "--port": 1234,
            "--enable-metrics": True,
            "--cuda-graph-max-bs": 1.5,
        },
    )
    assert found["args"] == (
        "--port: set by the deploy from engine.port; set that instead; "
        "--mem-fracton: not a flag of SGLang 0.5.10; closest: --mem-fraction-static; "
        "--cuda-graph-max-bs: needs an integer (got 1.5); image "
        "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a is sglang 0.5.10 "
        "(sparkdeploy/knowledge/images.yaml), whose parser refuses what "
        "sparkdeploy/knowledge/catalogues/sglang-0.5.10.json does not list: remove the flag or "
        "fix its value, or use an image that has it (an image of no catalogued release, such as "
        "a fork or a build of your own, is judged on the Spark by its own flag list); if that "
        'catalogue is stale, rebuild it with `make catalogues ENGINE=sglang VERSIONS="0.5.10"`'
    )


def test_managed_flags_are_refused_in_every_spelling():
    found = errors(name="vllm", args={"--max_model_len": 1, "--served_model_name": "x"})
    assert "--max_model_len: set by the deploy from engine.context_length" in found["args"]
    assert "--served_model_name: set by the deploy from engine.served_model_name" in found["args"]
    # The rest of --speculative-config is the operator's: MTP needs no draft model.
    mtp: dict[str, Any] = {"--speculative-config": {"method": "mtp", "num_speculative_tokens": 2}}
    assert EngineSettings(name="vllm", args=mtp).args == mtp


def test_flags_set_from_the_sparks_place_are_checked_when_it_is_known():
    """-tp and the draft model inside --speculative-config depend on the pair and on
    draft_model_repo: a recipe's `-tp 1` on one Spark, or its draft repository, agrees."""
    alone = EngineSettings(name="vllm", args={"-tp": 1, "--speculative-config.model": "org/eagle"})
    args = effective_args(alone, "/opt/models/m", "/opt/models/eagle")
    assert args["--tensor-parallel-size"] == 1
    assert args["--speculative-config"]["model"] == "/opt/models/eagle"
    with pytest.raises(EngineConfigError) as caught:
        effective_args(EngineSettings(name="vllm", args={"-tp": 2}), "/opt/models/m")
    assert caught.value.problems[0].startswith("-tp 2: 2 GPUs, but one Spark has one GPU")
    other = EngineSettings(name="vllm", args={"--speculative-config": {"model": "org/other"}})
    with pytest.raises(EngineConfigError) as caught:
        effective_args(other, "/opt/models/m", "/opt/models/eagle")
    assert caught.value.problems[0].startswith(
        "--speculative-config key 'model': the draft model comes from draft_model_repo"
    )


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


def test_names_that_only_mention_tokens_are_no_secrets():
    """Flags and variables operators set all the time pass; names that carry a secret not."""
    settings = EngineSettings(
        name="vllm",
        args={"--max-num-batched-tokens": 8192, "--tokenizer-mode": "mistral"},
        env={"TOKENIZERS_PARALLELISM": "false"},
    )
    assert settings.env == {"TOKENIZERS_PARALLELISM": "false"}
    found = errors(name="vllm", args={"--api-key": "x"}, env={"HF_TOKEN": "x", "apiKey": "y"})
    assert "--api-key: carries a secret" in found["args"]
    assert "HF_TOKEN: secrets never go in the inventory" in found["env"]
    assert "apiKey: secrets never go in the inventory" in found["env"]


# --- issue 24: refuse what is unsafe; leave to the image what only it can know -------------

IMAGE_ID = "sha256:" + "b" * 64  # a build of the Spark's own: no catalogued release
B12X_ARGS: dict[str, Any] = {
    "--gdn-decode-kernel": "b12x",
    "--attention-backend": "B12X_MLA_SPARSE",
    "--load-format": "b12x",
}


def test_flags_no_catalogue_has_are_warnings_on_an_image_that_is_no_catalogued_release():
    settings = EngineSettings(name="vllm", image=IMAGE_ID, launch="command", args=B12X_ARGS)
    assert settings.image_decides()
    (warning,) = settings.flag_warnings()
    assert warning.startswith("engine.args: --gdn-decode-kernel: not a flag of vLLM 0.33.0")
    assert "--attention-backend: 'B12X_MLA_SPARSE' is not a choice" in warning
    assert f"Image {IMAGE_ID} is not vllm 0.33.0, so its own parser decides" in warning
    assert "refuses a flag it does not list" in warning
    # A wrong type is no build's business: still refused before any connection.
    found = errors(name="vllm", image=IMAGE_ID, args={"--max-num-seqs": "many"})
    assert found["args"] == "--max-num-seqs: needs an integer (got 'many')"


def test_the_same_flags_on_the_catalogued_release_are_refused_naming_catalogue_and_fix():
    found = errors(name="vllm", image="vllm/vllm-openai:v0.33.0", args=B12X_ARGS)["args"]
    assert found.startswith("--gdn-decode-kernel: not a flag of vLLM 0.33.0")
    assert "sparkdeploy/knowledge/catalogues/vllm-0.33.0.json" in found
    assert "an image of no catalogued release, such as a fork or a build of your own" in found
    assert 'make catalogues ENGINE=vllm VERSIONS="0.33.0"' in found
    assert not EngineSettings(name="vllm").image_decides()


def test_the_effective_flags_leave_the_images_flags_to_the_image():
    settings = EngineSettings(name="vllm", image=IMAGE_ID, launch="command", args=B12X_ARGS)
    args = effective_args(settings, "/opt/models/m")
    assert {flag: args[flag] for flag in B12X_ARGS} == B12X_ARGS


@pytest.mark.parametrize(
    ("image", "version", "asked"),
    [
        ("vllm/vllm-openai:v0.20.0", "", "0.20.0"),  # the tag names it
        ("vllm/vllm-openai:v0.20.0", "0.20.0", "0.20.0"),  # said, and agreeing with the tag
        (IMAGE_ID, "0.20.0", "0.20.0"),  # said for a build of the Spark's own
    ],
)
def test_a_release_without_catalogue_is_checked_against_the_nearest_with_a_warning(
    image, version, asked
):
    settings = EngineSettings(name="vllm", image=image, version=version)
    assert settings.version == "0.20.1"
    warning = settings.unknown_version_warning()
    assert warning is not None
    assert f"vllm {asked}, which has no flag catalogue" in warning
    assert "nearest catalogued release, vllm 0.20.1 (the nearest of the 0.20 line)" in warning
    assert 'make catalogues ENGINE=vllm VERSIONS="0.20.0"' in warning
    assert settings.image_decides()  # the image is not the 0.20.1 its flags are checked with


def test_scitrera_builds_name_their_release_with_a_suffix():
    settings = EngineSettings(name="sglang", image=IMAGE_ID, version="0.5.8-t5")
    assert settings.version == "0.5.8.post1"
    assert "(the same 0.5.8 release)" in (settings.unknown_version_warning() or "")


def test_a_flag_is_a_secret_by_what_it_takes_not_by_the_words_in_its_name():
    settings = EngineSettings(name="vllm", args={"--long-prefill-token-threshold": 2048})
    assert settings.args == {"--long-prefill-token-threshold": 2048}
    found = errors(name="vllm", args={"--api-key": "k", "--hf-token": "x"})["args"]
    assert "--api-key: carries a secret" in found and "--hf-token: carries a secret" in found
    # A flag no catalogue knows is judged by its name, unless no value reaches the unit.
    found = errors(name="vllm", image=IMAGE_ID, args={"--dist-token": 3})["args"]
    assert found.startswith("--dist-token: carries a secret")
    assert EngineSettings(name="vllm", image=IMAGE_ID, args={"--use-hf-token": True}).args
    # A value shaped like a token is refused under any name.
    token = "hf_" + "a" * 34
    found = errors(name="vllm", args={"--long-prefill-token-threshold": token})["args"]
    assert "looks like a secret" in found


def test_a_json_key_is_a_secret_by_what_it_holds():
    overrides: dict[str, Any] = {"--hf-overrides": {"pad_token_id": 0, "eos_token_id": [1, 2]}}
    assert EngineSettings(name="vllm", args=overrides).args == overrides
    found = errors(name="vllm", args={"--hf-overrides": {"pad_token": "<pad>"}})["args"]
    assert found.startswith("--hf-overrides: 'pad_token' carries a secret")  # text: refused
    loader = errors(name="vllm", args={"--model-loader-extra-config": {"hf_token": "x"}})
    assert "'hf_token' carries a secret" in loader["args"]
