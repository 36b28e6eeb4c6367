"""Flag validation against the committed catalogues: every problem, with what is valid."""

from __future__ import annotations

import pytest

from sparkdeploy.knowledge.flags import (
    CatalogueNotFound,
    Reading,
    available_versions,
    check_flags,
    from_argv,
    load_catalogue,
    nearest_release,
    nearness,
    release_ranges,
    renames,
    to_argv,
)

SGLANG, VLLM = ("sglang", "0.5.10"), ("vllm", "0.33.0")


def test_valid_flags_pass():
    assert check_flags(*SGLANG, {"--attention-backend": "triton", "--enable-metrics": True}) == []
    assert check_flags(*VLLM, {"--no-enable-prefix-caching": True, "--max-model-len": "64k"}) == []
    assert check_flags(*VLLM, {"-tp": 1, "--attention-backend": "triton_mla"}) == []  # alias, case


def test_unknown_flag_names_the_closest_valid_ones():
    [problem] = check_flags(*SGLANG, {"--mem-fracton-static": 0.7})
    assert problem == (
        "--mem-fracton-static: not a flag of SGLang 0.5.10; closest: --mem-fraction-static"
    )
    [problem] = check_flags(*SGLANG, {"--zzzz": 1})
    assert problem.endswith("no close match")


def test_every_problem_is_listed_at_once():
    problems = check_flags(
        *SGLANG,
        {
            "--attention-backend": "flashinfr",
            "--cuda-graph-max-bs": "32x",
            "--enable-metrics": False,
            "context-length": 4096,
            "--stream-output": True,
        },
    )
    assert problems == [
        "--attention-backend: 'flashinfr' is not one of triton, torch_native, flex_attention, nsa, "
        "cutlass_mla, fa3, fa4, flashinfer, flashmla, trtllm_mla, trtllm_mha, "
        "dual_chunk_flash_attn, aiter, wave, intel_amx, ascend, intel_xpu",
        "--cuda-graph-max-bs: needs an integer (got '32x')",
        "--enable-metrics: takes no value: write true to emit it; leave it out to keep it off "
        "(got False)",
        "'context-length': flags are written with their dashes, like --context-length",
        "--stream-output: deprecated in SGLang 0.5.10; use --incremental-streaming-output",
    ]


def test_booleans_are_flags_without_value_and_point_at_their_no_form():
    [problem] = check_flags(*VLLM, {"--enable-prefix-caching": False})
    assert "to turn it off write --no-enable-prefix-caching: true" in problem
    [problem] = check_flags(*VLLM, {"--enforce-eager": "yes"})
    assert problem.startswith("--enforce-eager: takes no value")


def test_lists_only_where_the_flag_takes_several_values():
    assert check_flags(*VLLM, {"--cudagraph-capture-sizes": [1, 2, 4]}) == []
    [problem] = check_flags(*VLLM, {"--cudagraph-capture-sizes": [1, "x"]})
    assert problem == "--cudagraph-capture-sizes: needs an integer (got 'x')"
    [problem] = check_flags(*VLLM, {"--max-num-seqs": [1, 2]})
    assert problem == "--max-num-seqs: takes one value (got the list [1, 2])"


def test_long_choice_lists_are_summarised_with_the_closest():
    [problem] = check_flags(*VLLM, {"--attention-backend": "TRITON_MLAA"})
    assert problem.startswith(
        "--attention-backend: 'TRITON_MLAA' is not a choice (closest: TRITON_MLA"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("--num-nodes", "--nnodes"),
        ("--master-addr", "--dist-init-addr"),
        ("--master-port", "--dist-init-addr"),
        ("--gpu-memory-utilization", "--mem-fraction-static"),
        ("--max-model-len", "--context-length"),
        ("--fp8-gemm-runner-backend", "--fp8-gemm-backend"),
    ],
)
@pytest.mark.parametrize("version", ["0.5.10", "0.5.12"])
def test_report_003_renames_get_the_new_name(old, new, version):
    [problem] = check_flags("sglang", version, {old: 1})
    assert problem.startswith(f"{old}: not a flag of SGLang {version}; use {new}")


def test_renames_are_checked_against_the_catalogues():
    """No old name is a flag of any catalogued release; every new name is in the newest."""
    for engine in ("sglang", "vllm"):
        newest = load_catalogue(engine, available_versions(engine)[-1]).flags
        for rename in renames(engine)["flags"]:
            assert rename["new"] in newest, (engine, rename)
            for version in available_versions(engine):
                flags = load_catalogue(engine, version).flags
                assert rename["old"] not in flags, (engine, version, rename)
    # The vLLM spellings in report 003's table are vLLM flags indeed.
    vllm = load_catalogue(*VLLM).flags
    assert {"--master-addr", "--master-port", "--gpu-memory-utilization", "--max-model-len"} <= set(
        vllm
    )


def test_a_flag_of_the_other_engine_is_named_as_such():
    [problem] = check_flags(*SGLANG, {"--max-model-len": 4096})
    assert (
        problem
        == "--max-model-len: not a flag of SGLang 0.5.10; use --context-length (it is a vLLM flag)"
    )
    [problem] = check_flags(*VLLM, {"--mem-fraction-static": 0.7})
    assert problem == (
        "--mem-fraction-static: not a flag of vLLM 0.33.0; use --gpu-memory-utilization "
        "(it is an SGLang flag)"
    )


def test_flag_missing_from_this_release_names_the_release_that_has_it():
    [problem] = check_flags("sglang", "0.5.12", {"--enable-double-sparsity": True})
    assert problem.startswith(
        "--enable-double-sparsity: not a flag of SGLang 0.5.12 (it is in SGLang 0.5.3.post3 to "
        "0.5.10.post1)"
    )


def test_value_renames_give_the_new_value():
    [problem] = check_flags(*SGLANG, {"--kv-cache-dtype": "fp8"})
    assert problem == "--kv-cache-dtype: 'fp8' is not a choice in SGLang 0.5.10; use fp8_e4m3"


def test_unknown_release_names_the_catalogued_ones():
    listed = r"0\.5\.3\.post3, 0\.5\.4\.post3, 0\.5\.5\.post3, .*, 0\.5\.10, 0\.5\.10\.post1, .*, 0\.5\.23\)"
    with pytest.raises(CatalogueNotFound, match=rf"\(catalogued: {listed}"):
        load_catalogue("sglang", "0.4.0")


def test_argv_spells_bools_lists_repeats_and_json():
    args = {
        "--no-enable-flashinfer-autotune": True,
        "--cudagraph-capture-sizes": [1, 2],
        "--speculative-config": {"method": "eagle", "num_speculative_tokens": 3},
        "--middleware": ["a.b", "c.d"],
        "--port": 8000,
    }
    assert to_argv(*VLLM, args) == [
        "--no-enable-flashinfer-autotune",
        "--cudagraph-capture-sizes", "1", "2",
        "--speculative-config", '{"method":"eagle","num_speculative_tokens":3}',
        "--middleware", "a.b", "--middleware", "c.d",
        "--port", "8000",
    ]  # fmt: skip


def test_flags_are_read_the_way_each_release_reads_them():
    vllm, sglang = load_catalogue(*VLLM), load_catalogue(*SGLANG)
    # vLLM: `_` and `-` alike, dotted keys of JSON flags, and (FlexibleArgumentParser keeps
    # argparse's default) abbreviations.
    assert vllm.read("--max_model_len").flag == "--max-model-len"  # type: ignore[union-attr]
    dotted = vllm.read("--speculative_config.method")
    assert dotted is not None and dotted.key == "--speculative-config.method"
    assert vllm.read("--max-model") == Reading("--max-model-len", abbreviates=True)
    assert check_flags(*VLLM, {"--max_num_seqs": 4, "--compilation-config.mode": 3}) == []
    [problem] = check_flags(*VLLM, {"--gpu-memory-utilization.x": 1})
    assert "is not a JSON flag in vLLM 0.33.0, so it has no dotted keys" in problem
    # SGLang: argparse abbreviations, no `_` spellings, no dotted keys.
    assert sglang.read("--mem-frac").flag == "--mem-fraction-static"  # type: ignore[union-attr]
    assert sglang.read("--mem_fraction_static") is None
    [problem] = check_flags(*SGLANG, {"--cuda-graph": 8})
    assert problem == (
        "--cuda-graph: not a flag of SGLang 0.5.10 but an abbreviation of several: its parser "
        'stops with "ambiguous option: --cuda-graph could match --cuda-graph-bs, '
        '--cuda-graph-max-bs"; write one of them'
    )


def test_quoted_numbers_pass_as_argparse_reads_them():
    assert check_flags(*VLLM, {"--gpu-memory-utilization": "0.90", "--max-num-seqs": "4"}) == []
    [problem] = check_flags(*VLLM, {"--gpu-memory-utilization": "nan"})
    assert problem == "--gpu-memory-utilization: needs a number (got 'nan')"


def test_releases_are_named_as_runs():
    assert release_ranges("sglang", ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.23"]) == (
        "0.5.9 to 0.5.10.post1, 0.5.23"
    )
    assert release_ranges("vllm", ["0.33.0"]) == "0.33.0"


# --- issue 24: JSON values, vLLM's spellings, the nearest release, what the image decides ----


@pytest.mark.parametrize(
    ("engine", "version", "flag"),
    [
        ("vllm", "0.33.0", "--limit-mm-per-prompt"),  # typed str in 0.31-0.33, JSON before
        ("vllm", "0.33.0", "--model-loader-extra-config"),
        ("vllm", "0.33.0", "--compilation-config"),
        ("vllm", "0.33.0", "--speculative-config"),
        ("vllm", "0.33.0", "--hf-overrides"),
        ("vllm", "0.33.0", "--kv-transfer-config"),
        ("sglang", "0.5.23", "--json-model-override-args"),
        ("sglang", "0.5.23", "--model-loader-extra-config"),
    ],
)
def test_a_json_valued_flag_takes_a_mapping_written_as_one_compact_json_word(engine, version, flag):
    catalogue = load_catalogue(engine, version)
    value = {"image": 2, "video": {"count": 0}}
    assert catalogue.takes_json(flag)
    assert catalogue.check({flag: value}) == []
    assert catalogue.argv({flag: value}) == [flag, '{"image":2,"video":{"count":0}}']
    assert catalogue.check({flag: ["a", "b"]}) == []
    assert catalogue.argv({flag: ["a", "b"]}) == [flag, '["a","b"]']


def test_a_string_flag_that_is_no_json_still_refuses_a_mapping():
    catalogue = load_catalogue("vllm", "0.33.0")
    assert not catalogue.takes_json("--tokenizer-mode")
    assert catalogue.check({"--tokenizer-mode": {"a": 1}}) == [
        "--tokenizer-mode: needs a string (got {'a': 1})"
    ]


def test_vllm_reads_dotted_keys_on_short_aliases_and_the_O_spellings():
    """vllm/utils/argparse_utils.py (FlexibleArgumentParser.parse_args): any dashed word with
    a dot is a JSON flag and its keys (`-cc.mode 3`), and -O3 / -O=3 / -O 3 become
    --optimization-level; -O.level is no spelling since -O stopped being -cc."""
    catalogue = load_catalogue("vllm", "0.33.0")
    assert catalogue.read("-cc.mode") == Reading("--compilation-config", ("mode",))
    assert catalogue.read("--compilation-config.mode") == Reading("--compilation-config", ("mode",))
    assert catalogue.check({"-cc.mode": 3, "--compilation-config.mode": 3}) == []
    assert catalogue.read("-O3") == Reading("--optimization-level", value=3)
    assert catalogue.check({"-O3": True, "-O=2": True, "-O": 1}) == []
    assert catalogue.argv({"-O3": True}) == ["-O3"]
    assert catalogue.check({"-O3": 3}) == ["-O3: carries its value in its name; write -O3: true"]
    assert catalogue.check({"-O7": True}) == ["--optimization-level: 7 is not one of 0, 1, 2, 3"]
    assert catalogue.read("-O.level") is None
    assert catalogue.read("-tp.x") is None  # -tp is no JSON flag
    assert from_argv("vllm", "0.33.0", ["-O3", "-cc.mode", "3"]).args == {
        "-O3": True,
        "-cc.mode": "3",
    }
    # SGLang's parser has neither.
    assert load_catalogue("sglang", "0.5.23").read("-O3") is None


@pytest.mark.parametrize(
    ("engine", "version", "nearest", "why"),
    [
        ("vllm", "0.20.0", "0.20.1", "the nearest of the 0.20 line"),
        ("sglang", "0.5.8", "0.5.8.post1", "the same 0.5.8 release"),
        ("sglang", "0.5.8-t5", "0.5.8.post1", "the same 0.5.8 release"),
        ("vllm", "0.24.0-dev", "0.24.0", "the same 0.24.0 release"),
        ("vllm", "0.34.0", "0.33.0", "0.34.0 is newer than every catalogued release"),
        ("vllm", "0.10.2", "0.16.0", "0.10.2 is older than every catalogued release"),
    ],
)
def test_a_release_without_catalogue_is_checked_with_the_nearest(engine, version, nearest, why):
    assert nearest_release(engine, version) == nearest
    assert nearness(engine, version, nearest) == why


def test_nearest_release_needs_a_release_number():
    assert nearest_release("vllm", "newest") is None
    assert nearest_release("vllm", "0.33.0") == "0.33.0"


def test_what_only_the_image_can_judge_is_left_to_it():
    """On an image that is not the catalogued release, a flag the catalogue lacks and a value
    outside its choices are the image's to judge; a wrong type is still refused."""
    catalogue = load_catalogue("vllm", "0.33.0")
    args = {
        "--gdn-decode-kernel": "b12x",
        "--attention-backend": "B12X_MLA_SPARSE",
        "--max-num-seqs": "many",
    }
    assert catalogue.check(args, image_decides=True) == [
        "--max-num-seqs: needs an integer (got 'many')"
    ]
    undecided = catalogue.undecided(args)
    assert [problem.split(":")[0] for problem in undecided] == [
        "--gdn-decode-kernel",
        "--attention-backend",
    ]
    assert len(catalogue.check(args)) == 3  # the catalogued release itself refuses all three


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_aliases_are_every_other_name_of_a_flag_in_the_catalogues_order(engine):
    """Catalogue.aliases (gathered once per catalogue) lists exactly the flags that are
    alias_of the canonical one, each read back as it; none for an alias or an unknown name."""
    for version in available_versions(engine):
        catalogue = load_catalogue(engine, version)
        for name, spec in catalogue.flags.items():
            expected = tuple(n for n, s in catalogue.flags.items() if s.alias_of == name)
            assert catalogue.aliases(name) == (expected if spec.alias_of is None else ())
            assert all(catalogue.canonical(alias) == name for alias in expected)
        assert catalogue.aliases("--no-such-flag") == ()
    assert load_catalogue("vllm", "0.33.0").aliases("--tensor-parallel-size") == ("-tp",)
