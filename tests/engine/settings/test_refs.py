"""Model references and quantization choice: the rules users know from llama.cpp and Ollama."""

from __future__ import annotations

import pytest

from vibechat.engine.errors import ModelRefError
from vibechat.engine.settings.refs import (
    HubRef,
    RepoFile,
    group_quants,
    is_model_file,
    is_safe_repo_path,
    parse_hub_ref,
    pick_file,
    pick_quant,
)


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("bartowski/Llama-3.2-1B-Instruct-GGUF", HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF")),
        (
            "bartowski/Llama-3.2-1B-Instruct-GGUF:q5_k_m",
            HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF", "q5_k_m"),
        ),
        (
            "unsloth/Qwen3-8B-GGUF/Q4_K_M/Qwen3-8B-Q4_K_M-00001-of-00002.gguf",
            HubRef("unsloth/Qwen3-8B-GGUF", file="Q4_K_M/Qwen3-8B-Q4_K_M-00001-of-00002.gguf"),
        ),
        ("hf://owner/repo:Q8_0", HubRef("owner/repo", "Q8_0")),
        ("https://huggingface.co/owner/repo", HubRef("owner/repo")),
        ("starter", None),
        ("./models/x.gguf", None),
        ("/abs/x.gguf", None),
        ("a/b/c", None),
        ("ollama:llama3.2:1b", None),
    ],
)
def test_parse_hub_ref(text, ref):
    assert parse_hub_ref(text) == ref


def test_a_reference_cannot_leave_the_repo():
    with pytest.raises(ModelRefError, match="outside the repo"):
        parse_hub_ref("owner/repo/../../etc/x.gguf")


def test_a_reference_to_a_file_with_an_unsafe_name_is_refused_by_name():
    with pytest.raises(ModelRefError) as err:
        parse_hub_ref("owner/repo/model-\x1b]0;T\x07.gguf")
    message = str(err.value)
    assert "'owner/repo/model-\\x1b]0;T\\x07.gguf' names a file vibechat does not save" in message
    assert "\x1b" not in message and "\n" not in message
    with pytest.raises(ModelRefError, match="does not save"):
        parse_hub_ref("owner/repo/two\nlines.gguf")


def test_unsafe_names_are_never_offered_and_are_named_when_asked():
    from vibechat.engine.settings.refs import refused_files, show_name

    listing = [
        RepoFile("ok-Q4_K_M.gguf", 1),
        RepoFile("bad\x1b[2J-Q8_0.gguf", 1),
        RepoFile("README\x07.md", 1),
    ]
    assert [o.label for o in group_quants(listing)] == ["Q4_K_M"]
    assert refused_files(listing) == ["bad\x1b[2J-Q8_0.gguf"]  # only model files are worth naming
    assert show_name("bad\x1b[2J-Q8_0.gguf") == "'bad\\x1b[2J-Q8_0.gguf'"
    assert show_name("x" * 200).endswith("'…") and len(show_name("x" * 200)) < 130


@pytest.mark.parametrize(
    ("path", "safe"),
    [
        ("model-Q4_K_M.gguf", True),
        ("sub/dir/model.gguf", True),
        ("../model.gguf", False),
        ("sub/../../model.gguf", False),
        ("/etc/model.gguf", False),
        ("C:/model.gguf", False),
        ("sub\\model.gguf", False),
        ("./model.gguf", False),
        ("", False),
        # Issue 13: nothing unsafe goes into a path on disk.
        ("model-[reverse]REV\x1b]0;T\x07.gguf", False),  # an escape sequence (and markup)
        ("a\x9b2Jb.gguf", False),
        ("a\nb.gguf", False),
        ("a\x7fb.gguf", False),  # C1, newline, DEL
        ("evil\u202egguf.exe.gguf", False),
        ("zero\u200bwidth.gguf", False),  # bidi override, zero width
        ("lone\ud800.gguf", False),
        ("nul\0.gguf", False),
        ("a<b.gguf", False),
        ("a|b.gguf", False),
        ("a?b.gguf", False),
        ("a*b.gguf", False),
        ('a"b.gguf', False),
        ("[red]x.gguf", False),
        ("dir /x.gguf", False),
        ("dir./x.gguf", False),
        ("x" * 256 + ".gguf", False),
        ("é" * 126 + ".gguf", False),  # over 255 bytes in UTF-8
        ("Qwen2.5 Coder/model (v2)+@~#%.gguf", True),
        ("日本語-モデル-Q4_K_M.gguf", True),
        ("x" * 250 + ".gguf", True),
        (42, False),
        (None, False),
    ],
)
def test_safe_repo_paths(path, safe):
    assert is_safe_repo_path(path) is safe


LISTING = [
    RepoFile("README.md", 10),
    RepoFile("Model-Q8_0.gguf", 800),
    RepoFile("Model-Q4_K_M.gguf", 400),
    RepoFile("Model-Q5_K_M.gguf", 500),
    RepoFile("mmproj-Model-F16.gguf", 90),
    RepoFile("Model.imatrix.gguf", 5),
    RepoFile("Big-Q6_K-00001-of-00003.gguf", 100),
    RepoFile("Big-Q6_K-00003-of-00003.gguf", 100),
    RepoFile("Big-Q6_K-00002-of-00003.gguf", 100),
    RepoFile("Broken-Q2_K-00001-of-00002.gguf", 100),  # its second shard is missing
    RepoFile("../evil-Q3_K_M.gguf", 1),
    RepoFile("/abs-Q3_K_S.gguf", 1),
]


def test_listing_grouped_by_quantization():
    options = group_quants(LISTING)
    assert [o.label for o in options] == ["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"]
    big = options[-1]
    assert [f.path for f in big.files] == [f"Big-Q6_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert big.size == 300 and big.first.path.endswith("00001-of-00003.gguf")


def test_same_quant_in_two_folders_is_told_apart_by_path():
    options = group_quants([RepoFile("a/M-Q4_K_M.gguf", 1), RepoFile("b/M-Q4_K_M.gguf", 2)])
    assert [o.label for o in options] == ["a/M-Q4_K_M.gguf", "b/M-Q4_K_M.gguf"]


def test_default_quant_like_llama_cpp():
    options = group_quants(LISTING)
    assert pick_quant(options, None).label == "Q4_K_M"
    assert pick_quant([o for o in options if o.label != "Q4_K_M"], None).label == "Q8_0"
    assert pick_quant([o for o in options if o.label in ("Q5_K_M", "Q6_K")], None).label == "Q5_K_M"
    no_quant = group_quants([RepoFile("tiny.gguf", 1)])
    assert pick_quant(no_quant, None).label == "tiny"


def test_wanted_quant_is_case_insensitive_and_missing_ones_are_named():
    options = group_quants(LISTING)
    assert pick_quant(options, "q6_k").label == "Q6_K"
    assert pick_quant(options, "Q5-K-M").label == "Q5_K_M"
    with pytest.raises(
        ModelRefError, match="no IQ2_XS file: choose one of Q8_0, Q4_K_M, Q5_K_M, Q6_K"
    ):
        pick_quant(options, "IQ2_XS", "owner/repo")
    with pytest.raises(ModelRefError, match="has no GGUF model files"):
        pick_quant([], None, "owner/repo")


def test_an_exact_file_picks_its_whole_split_model():
    options = group_quants(LISTING)
    assert pick_file(options, "Big-Q6_K-00002-of-00003.gguf").label == "Q6_K"
    with pytest.raises(ModelRefError, match="no model file"):
        pick_file(options, "mmproj-Model-F16.gguf")


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("gemma-3-4b-it-Q4_K_M.gguf", True),
        ("Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf", True),
        ("mmproj-model-f16.gguf", False),
        ("gemma-3-4b-it-mmproj-f16.gguf", False),
        (
            "gemma-3-4b-it.mmproj-Q8_0.gguf",
            False,
        ),  # a projector's other spelling: never offered as a chat model
        ("model.imatrix.gguf", False),
        ("notes.txt", False),
    ],
)
def test_projectors_and_imatrix_files_are_not_chat_models(name, model):
    assert is_model_file(name) is model
