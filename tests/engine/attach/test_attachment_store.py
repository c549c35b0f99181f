"""The kept copies (engine/attach/store.py): one per distinct content, private, written whole or
not at all, reopened from what the history says (a missing copy is said, not fatal)."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from conftest import read_only_dir
from vibechat.engine.attach.reading import read_attachment
from vibechat.engine.attach.store import MISSING_NOTE, AttachmentError, AttachmentStore
from vibechat.engine.paths import data_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_default_lives_under_the_data_dir():
    assert AttachmentStore.default().root == data_dir() / "attachments"


def test_one_private_copy_per_digest(tmp_path):
    store = AttachmentStore(tmp_path / "a" / "kept")
    digest, path = store.put(b"hello", "txt")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert path == store.root / f"{digest}.txt" and path.read_bytes() == b"hello"
    assert mode(store.root) == 0o700 and mode(path) == 0o600
    again = store.put(b"hello", "txt")
    assert again == (digest, path)
    store.put(b"other", "txt")
    assert sorted(p.name for p in store.root.iterdir()) == sorted(
        [f"{digest}.txt", f"{hashlib.sha256(b'other').hexdigest()}.txt"]
    )


def test_the_same_file_read_twice_is_kept_once(tmp_path):
    store = AttachmentStore(tmp_path / "kept")
    source = tmp_path / "notes.md"
    source.write_text("same\n")
    first, second = read_attachment(source, store), read_attachment(source, store)
    assert first == second and len(list(store.root.iterdir())) == 1


def test_path_of_refuses_what_is_not_a_digest(tmp_path):
    store = AttachmentStore(tmp_path)
    good = "a" * 64
    assert store.path_of(good, "image/jpeg") == tmp_path / f"{good}.jpg"
    for bad in ("../../etc/passwd", "A" * 64, "a" * 63, ""):
        with pytest.raises(ValueError):
            store.path_of(bad, "image/png")


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    store = AttachmentStore(tmp_path / "kept")
    real_write = os.write
    calls = []

    def full(fd, data):
        if calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        calls.append(1)
        return real_write(fd, bytes(data[:10]))  # a first part lands, then the disk is full

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(AttachmentError) as exc:
        store.put(b"x" * 1000, "png")
    assert str(exc.value).startswith("no space left to keep the attachment under ")
    assert "\n" not in str(exc.value)
    assert list(store.root.iterdir()) == []


def test_a_failed_rename_leaves_nothing_either(tmp_path, monkeypatch):
    store = AttachmentStore(tmp_path / "kept")
    monkeypatch.setattr(
        os, "replace", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    with pytest.raises(AttachmentError):
        store.put(b"data", "png")
    assert list(store.root.iterdir()) == []


def test_an_unwritable_folder_is_one_line(tmp_path):
    with read_only_dir(tmp_path / "locked") as parent:
        with pytest.raises(AttachmentError) as exc:
            AttachmentStore(parent / "kept").put(b"x", "png")
    assert str(exc.value).startswith("cannot write the attachments folder ")
    assert str(exc.value).endswith(": check its permissions")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(AttachmentError) as exc:  # a file where the folder should be
        AttachmentStore(blocked / "kept").put(b"x", "png")
    assert "\n" not in str(exc.value) and str(exc.value).endswith(
        "check that folder and attach it again"
    )


def test_reopen_reads_a_files_text_back_and_says_when_a_copy_is_missing(tmp_path):
    store = AttachmentStore(tmp_path / "kept")
    source = tmp_path / "notes.md"
    source.write_text("kept words\n")
    a = read_attachment(source, store, "file")
    again = store.reopen("file", a.name, a.digest, a.mime, a.size, note="")
    assert again == a
    image_digest, image_path = store.put(b"\x89PNG not really", "png")
    img = store.reopen("image", "p.png", image_digest, "image/png", 16, 4, 3, "scaled from 8×6")
    assert (img.path, img.width, img.height, img.note) == (str(image_path), 4, 3, "scaled from 8×6")
    Path(a.path).unlink()
    gone = store.reopen("file", a.name, a.digest, a.mime, a.size)
    assert (gone.path, gone.text, gone.note, gone.name, gone.digest) == (
        "",
        "",
        MISSING_NOTE,
        a.name,
        a.digest,
    )
    forged = store.reopen("image", "x.png", "../../etc/passwd", "image/png", 1)
    assert forged.path == "" and forged.note == MISSING_NOTE


def test_prune_removes_only_old_unreferenced_copies(tmp_path):
    store = AttachmentStore(tmp_path / "kept")
    keep, keep_path = store.put(b"keep", "txt")
    drop, drop_path = store.put(b"drop", "txt")
    young, young_path = store.put(b"young", "txt")
    stray = store.root / "notes.txt"
    stray.write_text("not ours")
    old = time.time() - 7200
    for path in (keep_path, drop_path, stray):
        os.utime(path, (old, old))
    assert store.prune({keep}) == 1
    assert keep_path.exists() and not drop_path.exists() and young_path.exists() and stray.exists()
    # Putting a copy again makes it young: a prompt being saved keeps it.
    os.utime(keep_path, (old, old))
    store.put(b"keep", "txt")
    assert store.prune(set()) == 0 and keep_path.exists()
