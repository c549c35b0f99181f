"""Which images a prompt takes (engine/llama/vision.py ``images_in_prompt``): the bounds, a
model without a projector, kept copies that are gone. No model needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from vibechat.engine.llama.vision import MAX_IMAGES, images_in_prompt
from vibechat.engine.llama.vision_errors import ImagesNotSupported, ImageUnreadable
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import ChatMessage


def image(folder: Path, n: int, kept: bool = True) -> Attachment:
    path = folder / f"p{n}.png"
    if kept:
        path.write_bytes(b"\x89PNG")
    return Attachment(
        kind="image", name=path.name, digest=f"{n:064x}", mime="image/png", size=4, path=str(path)
    )


def test_the_newest_images_are_kept_up_to_the_bound(tmp_path):
    old = tuple(image(tmp_path, n) for n in range(10))
    new = tuple(image(tmp_path, n) for n in range(10, 20))
    messages = [
        ChatMessage("user", "a", attachments=old),
        ChatMessage("assistant", "b"),
        ChatMessage("user", "c", attachments=new),
    ]
    taken = images_in_prompt(messages, True, True)
    assert taken[2] == new and taken[0] == old[-(MAX_IMAGES - len(new)) :]
    assert sum(len(v) for v in taken.values()) == MAX_IMAGES


def test_too_many_images_in_one_message_is_one_line(tmp_path):
    many = tuple(image(tmp_path, n) for n in range(MAX_IMAGES + 1))
    with pytest.raises(ImageUnreadable) as caught:
        images_in_prompt([ChatMessage("user", "look", attachments=many)], True, True)
    assert str(caught.value) == (
        f"a message takes at most {MAX_IMAGES} images ({MAX_IMAGES + 1} were attached): send fewer."
    )


def test_a_model_without_a_projector(tmp_path):
    one = (image(tmp_path, 1),)
    newest = [ChatMessage("user", "look", attachments=one)]
    with pytest.raises(ImagesNotSupported):
        images_in_prompt(newest, False, True)
    assert images_in_prompt(newest, False, False) == {}  # counting the context never raises
    earlier = [*newest, ChatMessage("assistant", "ok"), ChatMessage("user", "more")]
    assert images_in_prompt(earlier, False, True) == {}  # earlier turns' images are left out


def test_a_kept_copy_that_is_gone_is_left_out_of_earlier_turns(tmp_path):
    gone, here = image(tmp_path, 1, kept=False), image(tmp_path, 2)
    messages = [
        ChatMessage("user", "a", attachments=(gone, here)),
        ChatMessage("assistant", "b"),
        ChatMessage("user", "c"),
    ]
    assert images_in_prompt(messages, True, True) == {0: (here,)}
    newest = [ChatMessage("user", "a", attachments=(gone,))]
    assert images_in_prompt(newest, True, True) == {0: (gone,)}  # its layout says it is missing
    assert images_in_prompt(newest, True, False) == {}
