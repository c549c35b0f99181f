"""Images on an OpenAI-compatible server (engine/remote/images.py, request.py,
openai_backend.py) against the stub server on 127.0.0.1 (tests/openai_stub.py), which records
each request as it arrived: a message's images go as ``image_url`` content parts after its
text, each a ``data:`` URI of the kept copy's bytes; messages without images stay plain text;
a kept copy that is gone, and a server whose model takes no images, are one line each."""

from __future__ import annotations

import base64
import io
import os

import pytest

from conftest import collect
from openai_stub import StubServer, image_parts
from vibechat.engine.errors import GenerationError, RemoteServerError
from vibechat.engine.remote.images import IMAGE_TOKENS
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import ChatMessage

PARAMS = SamplingParams(temperature=0)


def kept_png(tmp_path, name="photo.png", color=(200, 30, 30), size=(8, 6)) -> Attachment:
    """An image as engine/attach keeps it: a real PNG file and its Attachment."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    data = buf.getvalue()
    path = tmp_path / f"{name}.kept"
    path.write_bytes(data)
    return Attachment(
        kind="image",
        name=name,
        digest="d" * 64,
        mime="image/png",
        size=len(data),
        path=str(path),
        width=size[0],
        height=size[1],
    )


def decoded(part: dict) -> tuple[str, bytes]:
    """A data URI part's mime type and bytes."""
    url = part["image_url"]["url"]
    head, _, data = url.partition(",")
    assert head.startswith("data:") and head.endswith(";base64")
    return head[len("data:") : -len(";base64")], base64.b64decode(data, validate=True)


def test_an_image_goes_as_a_content_part_after_the_text_and_decodes_to_the_kept_bytes(
    stub: StubServer, tmp_path
):
    image = kept_png(tmp_path)
    messages = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello."),
        ChatMessage("user", "What is in this picture?", attachments=(image,)),
    ]
    texts, done = collect(stub.backend(), messages, PARAMS)
    assert "".join(texts) == stub.reply and done.stats.finish_reason == "stop"
    sent = stub.last_body["messages"]
    assert sent[:3] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
    ]  # text-only messages: plain strings, as before
    content = sent[3]["content"]
    assert sent[3]["role"] == "user" and isinstance(content, list) and len(content) == 2
    assert content[0] == {"type": "text", "text": "What is in this picture?"}
    assert content[1]["type"] == "image_url"
    mime, data = decoded(content[1])
    assert mime == "image/png" and data == (tmp_path / "photo.png.kept").read_bytes()


def test_a_text_only_chat_is_unchanged_on_the_wire(stub: StubServer):
    messages = [ChatMessage("user", "Hi")]
    collect(stub.backend(), messages, PARAMS)
    assert stub.last_body["messages"] == [{"role": "user", "content": "Hi"}]
    assert image_parts(stub.last_body) == []


def test_several_images_keep_their_order_and_an_image_alone_sends_no_empty_text(
    stub: StubServer, tmp_path
):
    red = kept_png(tmp_path, "red.png", (255, 0, 0))
    blue = kept_png(tmp_path, "blue.png", (0, 0, 255), size=(5, 9))
    collect(stub.backend(), [ChatMessage("user", "", attachments=(red, blue))], PARAMS)
    content = stub.last_body["messages"][0]["content"]
    assert [part["type"] for part in content] == ["image_url", "image_url"]  # no empty text part
    assert [decoded(part)[1] for part in content] == [
        (tmp_path / "red.png.kept").read_bytes(),
        (tmp_path / "blue.png.kept").read_bytes(),
    ]


def test_an_earlier_turns_image_is_sent_again_with_the_next_turn(stub: StubServer, tmp_path):
    """The server keeps no conversation: every request carries the whole chat, images included."""
    image = kept_png(tmp_path)
    messages = [
        ChatMessage("user", "Look.", attachments=(image,)),
        ChatMessage("assistant", "A red square."),
        ChatMessage("user", "And its size?"),
    ]
    collect(stub.backend(), messages, PARAMS)
    sent = stub.last_body["messages"]
    assert isinstance(sent[0]["content"], list) and sent[2] == {
        "role": "user",
        "content": "And its size?",
    }
    assert len(image_parts(stub.last_body)) == 1


def test_a_file_attached_with_an_image_is_inlined_with_its_name(stub: StubServer, tmp_path):
    """Files are inlined before a backend sees them (Conversation.messages); a message that
    reaches the backend with a file still attached is inlined here too, never dropped."""
    image = kept_png(tmp_path)
    notes = Attachment(
        kind="file",
        name="notes.md",
        digest="e" * 64,
        mime="text/plain",
        size=11,
        path="",
        text="hello notes",
    )
    collect(stub.backend(), [ChatMessage("user", "Compare.", attachments=(notes, image))], PARAMS)
    content = stub.last_body["messages"][0]["content"]
    assert content[0]["type"] == "text" and "File: notes.md" in content[0]["text"]
    assert "hello notes" in content[0]["text"] and content[0]["text"].endswith("Compare.")
    assert [part["type"] for part in content] == ["text", "image_url"]


@pytest.mark.parametrize("gone", ["deleted", "never found", "a FIFO"])
def test_a_missing_kept_copy_is_one_line_and_nothing_is_sent(stub: StubServer, tmp_path, gone: str):
    image = kept_png(tmp_path, "cat.png")
    if gone == "deleted":
        (tmp_path / "cat.png.kept").unlink()
    elif gone == "a FIFO":  # put where the copy was: refused, never waited on
        (tmp_path / "cat.png.kept").unlink()
        os.mkfifo(tmp_path / "cat.png.kept")
    else:  # reopened from the history with its copy missing: path ""
        image = Attachment(
            kind="image",
            name="cat.png",
            digest="d" * 64,
            mime="image/png",
            size=10,
            path="",
            note="the kept copy is missing",
        )
    with pytest.raises(GenerationError) as caught:
        collect(stub.backend(), [ChatMessage("user", "What is it?", attachments=(image,))], PARAMS)
    message = str(caught.value)
    assert (
        "\n" not in message and "cat.png" in message and "attach the image again" in message.lower()
    )
    assert not [r for r in stub.requests if r["path"].endswith("/chat/completions")]


def test_a_server_whose_model_takes_no_images_is_one_line_naming_the_fix(
    stub: StubServer, tmp_path
):
    stub.refuse_images = True  # llama-server started without --mmproj
    backend = stub.backend()
    with pytest.raises(RemoteServerError) as caught:
        collect(
            backend, [ChatMessage("user", "What is it?", attachments=(kept_png(tmp_path),))], PARAMS
        )
    message = str(caught.value)
    assert "\n" not in message and "image input is not supported" in message
    assert (
        "the server's model takes no images" in message
        and "--mmproj" in message
        and "vision model" in message
    )
    texts, done = collect(
        backend, [ChatMessage("user", "Hi")], PARAMS
    )  # the same server, text only: fine
    assert "".join(texts) == stub.reply


def test_an_unrelated_server_failure_with_an_image_is_not_blamed_on_the_image(
    stub: StubServer, tmp_path
):
    stub.mode, stub.status = "status", 500  # "CUDA out of memory"
    with pytest.raises(RemoteServerError) as caught:
        collect(
            stub.backend(), [ChatMessage("user", "Hi", attachments=(kept_png(tmp_path),))], PARAMS
        )
    assert "CUDA out of memory" in str(caught.value) and "--mmproj" not in str(caught.value)


def test_the_context_meter_counts_an_image_as_a_fixed_cost(stub: StubServer, tmp_path):
    backend = stub.backend()
    plain = [ChatMessage("user", "What is in this picture?")]
    with_image = [
        ChatMessage("user", "What is in this picture?", attachments=(kept_png(tmp_path),))
    ]
    assert backend.count_tokens(with_image) == backend.count_tokens(plain) + IMAGE_TOKENS


def test_a_servers_model_may_take_images(stub: StubServer):
    """The server decides: vibechat sends images to any server's model (a refusal is one line)."""
    info = stub.backend().load()
    assert info.projector == "server" and info.takes_images
