"""engine/files.py's ``open_regular``: the one way vibechat opens a file from outside that it
reads as a stream (a prompts file, an attachment, and ``read_file`` for whole files). A named
pipe with no writer, a device or a folder is refused at once, named by its kind; a regular
file opens for plain, blocking reads."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from vibechat.app.commands.batch import open_prompts
from vibechat.engine.attach.reading import read_attachment
from vibechat.engine.attach.store import AttachmentError, AttachmentStore
from vibechat.engine.errors import VibechatError
from vibechat.engine.files import NotARegularFile, open_regular, read_file

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes (POSIX)")


def test_a_regular_file_opens_for_blocking_reads(tmp_path: Path):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'{"prompt": "hi"}\n')
    with open_regular(path) as file:
        assert os.get_blocking(file.fileno())
        assert file.read() == b'{"prompt": "hi"}\n'


@needs_fifo
def test_a_fifo_with_no_writer_is_refused_at_once_by_every_reader(tmp_path: Path):
    pipe = tmp_path / "pipe.txt"
    os.mkfifo(pipe)
    done = threading.Event()

    def refusals() -> list[str]:
        said = []
        with pytest.raises(NotARegularFile) as caught:
            open_regular(pipe)
        said.append(caught.value.kind)
        with pytest.raises(NotARegularFile):
            read_file(pipe, 100)
        with pytest.raises(VibechatError) as prompts:
            open_prompts(str(pipe), None)  # type: ignore[arg-type]
        said.append(str(prompts.value))
        with pytest.raises(AttachmentError) as attached:
            read_attachment(pipe, AttachmentStore(tmp_path / "kept"))
        said.append(str(attached.value))
        done.set()
        return said

    result: list[list[str]] = []
    worker = threading.Thread(target=lambda: result.append(refusals()), daemon=True)
    worker.start()
    worker.join(30)  # a blocking open would hang here: the test fails instead
    assert done.is_set(), "opening a FIFO with no writer blocked"
    kind, prompts, attached = result[0]
    assert kind == "a named pipe (FIFO)"
    assert "it is a named pipe (FIFO), not a file" in prompts
    assert "is a named pipe (FIFO), not a file: attach a regular file" in attached


def test_a_folder_and_a_device_are_named_as_such(tmp_path: Path):
    with pytest.raises(NotARegularFile) as folder:
        open_regular(tmp_path)
    assert folder.value.kind == "a directory" and str(folder.value).endswith(
        "is a directory, not a file"
    )
    if os.path.exists("/dev/zero"):
        with pytest.raises(NotARegularFile) as device:
            open_regular("/dev/zero")
        assert device.value.kind == "a character device"
