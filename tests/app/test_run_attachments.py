"""`vibechat run --image PATH` / `--file PATH` end to end, in a subprocess: against the stub
server on 127.0.0.1 (tests/openai_stub.py, which records what it received: the image as a
content part whose data: URI decodes to the kept copy, the file inlined with its name), and
on the real starter model, which has no projector (one line). Each bad input is one line on
stderr, exit status 2, no traceback, and nothing sent, loaded or saved."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from openai_stub import StubServer, image_parts


def vibechat(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def on_stub(stub: StubServer, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return vibechat(
        "run",
        "--backend",
        "openai",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        *args,
        timeout=timeout,
    )


def png(
    path: Path, size: tuple[int, int] = (12, 8), color: tuple[int, int, int] = (10, 200, 30)
) -> Path:
    from PIL import Image

    Image.new("RGB", size, color).save(path, "PNG")
    return path


def saved_conversations() -> list:
    out = vibechat("history", "list", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def decoded(part: dict) -> tuple[str, bytes]:
    head, _, data = part["image_url"]["url"].partition(",")
    assert head.startswith("data:") and head.endswith(";base64"), head[:40]
    return head[len("data:") : -len(";base64")], base64.b64decode(data, validate=True)


def test_run_image_goes_to_the_server_as_a_content_part_of_the_kept_copy(
    stub: StubServer, tmp_path
):
    from vibechat.engine.attach.store import AttachmentStore

    picture = png(tmp_path / "leaf.png")
    out = on_stub(stub, "--image", str(picture), "-p", "What is in this picture?", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["text"] == stub.reply
    [listed] = obj["attachments"]
    assert {k: listed[k] for k in ("kind", "name", "width", "height")} == {
        "kind": "image",
        "name": "leaf.png",
        "width": 12,
        "height": 8,
    }
    content = stub.last_body["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "What is in this picture?"}
    [part] = image_parts(stub.last_body)
    mime, data = decoded(part)
    kept = AttachmentStore.default().path_of(listed["digest"], mime)
    assert data == kept.read_bytes() and hashlib.sha256(data).hexdigest() == listed["digest"]
    assert listed["size"] == len(data)


def test_run_file_is_inlined_with_its_name_before_the_prompt(stub: StubServer, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Shopping\n- apples\n- pears\n")
    out = on_stub(stub, "--file", str(notes), "-p", "Summarise the file.")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == stub.reply
    sent = stub.last_body["messages"][-1]["content"]
    assert isinstance(sent, str)  # no image: plain text, as always
    assert (
        "File: notes.md" in sent
        and "- apples\n- pears" in sent
        and sent.endswith("Summarise the file.")
    )
    assert image_parts(stub.last_body) == []


def test_continue_with_an_image_adds_it_to_the_new_turn(stub: StubServer, tmp_path):
    assert on_stub(stub, "-p", "Hello.").returncode == 0
    out = on_stub(stub, "--continue", "--image", str(png(tmp_path / "dot.png")), "-p", "And this?")
    assert out.returncode == 0, out.stderr
    sent = stub.last_body["messages"]
    assert sent[0] == {"role": "user", "content": "Hello."}  # the earlier turn: unchanged
    assert sent[-1]["content"][0] == {"type": "text", "text": "And this?"}
    assert len(image_parts(stub.last_body)) == 1
    assert len(saved_conversations()) == 1


def test_a_large_image_is_scaled_and_said_once_on_stderr(stub: StubServer, tmp_path):
    out = on_stub(
        stub, "--image", str(png(tmp_path / "wide.png", size=(4000, 100))), "-p", "Hi", "--json"
    )
    assert out.returncode == 0, out.stderr
    [listed] = json.loads(out.stdout)["attachments"]
    assert listed["width"] < 4000
    assert [line for line in out.stderr.splitlines() if line.startswith("vibechat: wide.png: ")]
    assert "Traceback" not in out.stderr


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def _binary(tmp_path: Path) -> Path:
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def _text(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a picture\n")
    return path


BAD = {  # what is given, how: the flag and the path
    "text as an image": ("--image", _text),
    "a truncated image": ("--image", lambda tmp: _truncated(tmp)),
    "a FIFO as an image": ("--image", _fifo),
    "a FIFO as a file": ("--file", _fifo),
    "/dev/zero as a file": ("--file", lambda tmp: Path("/dev/zero")),
    "a binary file": ("--file", _binary),
    "a missing path": ("--image", lambda tmp: tmp / "nowhere.png"),
    "a folder": ("--file", lambda tmp: tmp),
}


def _truncated(tmp_path: Path) -> Path:
    whole = png(tmp_path / "whole.png", size=(64, 64)).read_bytes()
    path = tmp_path / "cut.png"
    path.write_bytes(whole[: len(whole) // 2])
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_each_bad_attachment_is_one_line_exit_2_and_nothing_is_sent_or_saved(
    stub: StubServer, tmp_path, case
):
    flag, make = BAD[case]
    path = make(tmp_path)
    out = on_stub(stub, flag, str(path), "-p", "Hi", timeout=60)
    assert out.returncode == 2, (case, out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: error: ") and path.name in lines[0], (
        case,
        out.stderr,
    )
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert stub.requests == []  # read before anything: the server was not even asked for its models
    assert saved_conversations() == []


def test_a_bad_attachment_under_json_is_one_object_with_the_error(stub: StubServer, tmp_path):
    out = on_stub(stub, "--image", str(_text(tmp_path)), "-p", "Hi", "--json")
    assert out.returncode == 2
    obj = json.loads(out.stdout)
    assert obj["error"]["exit_status"] == 2 and obj["error"]["kind"] == "attachment"
    assert obj["error"]["message"] in out.stderr
    assert "with --file" in obj["error"]["message"]  # run's flag, not the chat's /file


def test_prompts_file_refuses_attachments_in_one_line(stub: StubServer, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n')
    out = on_stub(stub, "--prompts-file", str(prompts), "--image", str(png(tmp_path / "a.png")))
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "--prompts-file and --image do not mix" in lines[0]
    assert stub.requests == []


@pytest.mark.model
def test_an_image_to_the_local_starter_without_a_projector_is_one_line(starter_installed, tmp_path):
    out = vibechat(
        "run",
        "--image",
        str(png(tmp_path / "leaf.png")),
        "-p",
        "What is this?",
        "-n",
        "4",
        "--json",
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    errors = [line for line in out.stderr.splitlines() if line.startswith("vibechat: error: ")]
    assert len(errors) == 1 and "takes no images" in errors[0] and "--mmproj" in errors[0]
    assert "Traceback" not in out.stderr
    obj = json.loads(out.stdout)
    assert (
        obj["error"]["kind"] == "attachment"
        and obj["error"]["exit_status"] == 1
        and obj["text"] == ""
    )
    assert [a["name"] for a in obj["attachments"]] == ["leaf.png"] and obj["engine"][
        "backend"
    ] == "llama.cpp"
    assert saved_conversations() == []  # refused before the prompt was saved
