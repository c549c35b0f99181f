"""The tiny test projector (tests/projector.py) as llama.cpp's multimodal library takes it:
it loads beside the starter model, an image becomes its 16 image tokens between Gemma 3's
markers, and they evaluate into the starter's KV cache. The engine's own use of it is
test_vision.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from projector import IMAGE_TOKENS, write_projector, write_test_image

pytestmark = pytest.mark.model


def _image(tmp_path: Path, seed: int = 0):
    from vibechat.engine.turns.attachments import Attachment

    path = write_test_image(tmp_path / f"picture{seed}.png", seed=seed)
    return Attachment(
        kind="image",
        name=path.name,
        digest=f"{seed:064x}",
        mime="image/png",
        size=path.stat().st_size,
        path=str(path),
        width=48,
        height=40,
    )


def test_the_projector_loads_and_an_image_evaluates_through_mtmd(
    backend, starter_projector, tmp_path
):
    import llama_cpp as ll

    from vibechat.engine.llama.prompt_eval import decode_all
    from vibechat.engine.llama.vision import Vision, is_image_start

    vision = Vision(starter_projector, backend._model, n_threads=2, use_gpu=False)
    try:
        pieces = vision.layout(_image(tmp_path))
        start_of_image = backend._prompt.single_token("<start_of_image>")
        end_of_image = backend._prompt.single_token("<end_of_image>")
        assert [len(p) for p in pieces] == [1, IMAGE_TOKENS, 1]
        assert pieces[0] == (start_of_image,) and pieces[2] == (end_of_image,)
        run = pieces[1]
        assert is_image_start(run[0]) and all(t < 0 for t in run)
        assert vision.encodes == 0  # laying an image out does not encode it
        assert decode_all(backend._reading(list(pieces[0])))
        assert vision.evaluate(backend._ctx, run[0], len(backend._kv.tokens), 512) == 0
        assert vision.encodes == 1
        assert ll.llama_memory_seq_pos_max(backend._mem, 0) == IMAGE_TOKENS  # positions 0..16
    finally:
        vision.close()


def test_a_projector_for_another_width_is_one_line(backend, tmp_path):
    from vibechat.engine.llama.vision import Vision
    from vibechat.engine.llama.vision_errors import ProjectorError

    wrong = write_projector(tmp_path / "mmproj-wide.gguf", 1024)
    with pytest.raises(ProjectorError) as caught:
        Vision(wrong, backend._model, n_threads=1, use_gpu=False)
    assert str(caught.value) == (
        "the projector mmproj-wide.gguf does not fit this model (it projects to 1024, "
        "the model takes 640): use the mmproj file made for this model."
    )


def test_placeholder_runs_mark_their_start_and_a_cut_inside_one_backs_up_to_it():
    from vibechat.engine.llama.vision import has_images, image_start, is_image_start, placeholders

    a, b = placeholders("aa" * 32, 1, 4), placeholders("bb" * 32, 1, 4)
    assert a == placeholders("aa" * 32, 1, 4)  # the same picture in the same place: equal
    assert a[0] != b[0] and a[1:] != b[1:]  # another picture differs from its start
    assert (
        is_image_start(a[0]) and not any(is_image_start(t) for t in a[1:]) and all(t < 0 for t in a)
    )
    tokens = [5, 6, *a, 7, *b]
    assert has_images(tokens) and not has_images([5, 6, 7])
    assert [image_start(tokens, k) for k in range(len(tokens) + 1)] == [
        0,
        1,
        2,
        2,
        2,
        2,
        6,
        7,
        7,
        7,
        7,
        11,
    ]
