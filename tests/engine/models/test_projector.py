"""Finding a vision model's projector (issue 29.1): by name in a repo or a folder, beside the
model on disk, and checking a file given with ``--mmproj``. Real files, real GGUF headers."""

from __future__ import annotations

import os

import pytest

from ggufgen import gguf_bytes, write_gguf
from vibechat.engine.errors import ModelFileError
from vibechat.engine.models.projector import (
    check_projector,
    find_projector,
    is_projector_name,
    pick_projector,
    refuse_projector_as_model,
)
from vibechat.engine.settings.refs import RepoFile, group_quants


def test_a_projector_is_known_by_its_name_and_is_never_a_chat_model():
    names = [
        "mmproj-model-f16.gguf",
        "mmproj-F16.gguf",
        "gemma-3-4b-it.mmproj-Q8_0.gguf",
        "Model-mmproj-bf16.gguf",
    ]
    assert all(is_projector_name(n) for n in names)
    assert not is_projector_name("gemma-3-4b-it-Q4_K_M.gguf") and not is_projector_name(
        "mmproj-notes.txt"
    )
    listed = [n for n in names if n.lower().startswith("mmproj") or "-mmproj-" in n.lower()]
    options = group_quants(
        [RepoFile(n, 10) for n in listed] + [RepoFile("gemma-3-4b-it-Q4_K_M.gguf", 10)]
    )
    assert [o.first.path for o in options] == ["gemma-3-4b-it-Q4_K_M.gguf"]


def test_the_projector_whose_name_matches_the_model_is_chosen_then_f16_bf16_q8_0():
    repo = [
        "mmproj-google_gemma-3-4b-it-q8_0.gguf",
        "mmproj-google_gemma-3-4b-it-bf16.gguf",
        "mmproj-google_gemma-3-4b-it-f16.gguf",
        "mmproj-google_gemma-3-4b-it-f32.gguf",
        "mmproj-google_gemma-3-12b-it-f16.gguf",
    ]
    assert (
        pick_projector("google_gemma-3-4b-it-Q4_K_M.gguf", repo)
        == "mmproj-google_gemma-3-4b-it-f16.gguf"
    )
    assert (
        pick_projector("google_gemma-3-12b-it-Q8_0.gguf", repo)
        == "mmproj-google_gemma-3-12b-it-f16.gguf"
    )
    without_f16 = [n for n in repo if "-f16" not in n]
    assert (
        pick_projector("google_gemma-3-4b-it-Q4_K_M.gguf", without_f16)
        == "mmproj-google_gemma-3-4b-it-bf16.gguf"
    )
    assert (
        pick_projector("x-Q4_K_M.gguf", ["mmproj-F32.gguf", "mmproj-Q8_0.gguf"])
        == "mmproj-Q8_0.gguf"
    )
    assert pick_projector("model-Q4_K_M.gguf", ["model-Q8_0.gguf", "README.md"]) is None


def test_auto_finds_the_projector_beside_the_model_and_passes_over_a_bad_one(tmp_path):
    model = write_gguf(tmp_path / "Tiny-Vision-Q4_K_M.gguf")
    assert find_projector(model) is None  # a text model: nothing, silently
    write_gguf(tmp_path / "mmproj-Tiny-Vision-Q8_0.gguf", architecture="clip", file_type=7)
    best = write_gguf(tmp_path / "mmproj-Tiny-Vision-F16.gguf", architecture="clip", file_type=1)
    assert find_projector(model) == best
    best.write_bytes(b"<html>not found</html>")  # a broken download of the best match
    assert find_projector(model) == tmp_path / "mmproj-Tiny-Vision-Q8_0.gguf"
    recorded = write_gguf(tmp_path / "sub" / "mmproj-other.gguf", architecture="clip")
    assert find_projector(model, recorded) == recorded  # the one pulled with it comes first


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p, "does not exist"),
        (lambda p: (p.mkdir(), p)[1], "is a folder"),
        (lambda p: (os.mkfifo(p), p)[1], "FIFO"),
        (lambda p: (p.write_text("hello\n"), p)[1], "not a GGUF"),
        (
            lambda p: (p.write_bytes(gguf_bytes(architecture="gemma3")), p)[1],
            "not a vision projector",
        ),
    ],
)
def test_a_bad_projector_file_is_one_line_naming_the_fix(tmp_path, make, words):
    path = make(tmp_path / "mmproj-x.gguf")
    with pytest.raises(ModelFileError) as caught:
        check_projector(path)
    message = str(caught.value)
    assert words in message and "--mmproj" in message and "\n" not in message


def test_a_projector_given_as_the_model_is_refused(tmp_path):
    projector = write_gguf(tmp_path / "mmproj-Tiny-F16.gguf", architecture="clip")
    with pytest.raises(
        ModelFileError, match="is a vision projector \\(mmproj\\), not a chat model.*--mmproj"
    ):
        refuse_projector_as_model(projector)
    refuse_projector_as_model(write_gguf(tmp_path / "Tiny-Q4_K_M.gguf"))  # a chat model: fine
    assert check_projector(projector) == projector


def test_an_ollama_vision_model_has_its_projector_layer_which_auto_finds(tmp_path, monkeypatch):
    """Ollama keeps a vision model's projector as a layer of its manifest (a blob named by its
    sha256, no name to find it by): the listing and --mmproj auto take it from the manifest."""
    import hashlib
    import json

    from vibechat.engine.models import discover
    from vibechat.engine.models.discover import ollama_models
    from vibechat.engine.models.resolve import known_projector

    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setattr(discover, "OLLAMA_SYSTEM_MODELS", tmp_path / "no-system-ollama")
    blobs = {}
    for kind, data in (
        ("model", gguf_bytes(architecture="llama")),
        ("projector", gguf_bytes(architecture="clip")),
    ):
        digest = hashlib.sha256(data).hexdigest()
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "blobs" / f"sha256-{digest}").write_bytes(data)
        blobs[kind] = (digest, root / "blobs" / f"sha256-{digest}")
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "llava" / "7b"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "layers": [
                    {
                        "mediaType": f"application/vnd.ollama.image.{kind}",
                        "digest": f"sha256:{digest}",
                        "size": 1,
                    }
                    for kind, (digest, _) in blobs.items()
                ],
            }
        )
    )
    [model] = ollama_models(root)
    assert model.name == "ollama:llava:7b" and model.path == blobs["model"][1]
    assert model.projector == blobs["projector"][1]
    assert (
        known_projector(model.path)
        == model.projector
        == find_projector(model.path, known_projector(model.path))
    )
    assert known_projector(write_gguf(tmp_path / "elsewhere-Q4_K_M.gguf")) is None
