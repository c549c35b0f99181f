"""Attachments in the chat history (engine/chat): saved with their prompt (migration 6, one
transaction), read back with their kept copies (a missing one said), carried by the turns a
reopened conversation sends the model, copied by a fork, taken in from another vibechat,
exported (JSON: what and its digest, never the bytes; Markdown: a line each), checked before
sending (images for a model without a projector, the files' text counted), and pruned from the
store when no message names them any more."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from pathlib import Path

import pytest
from PIL import Image

from fakes import INFO, RecordingBackend
from vibechat.engine.attach.reading import read_attachment
from vibechat.engine.attach.store import MISSING_NOTE, AttachmentStore
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.database import HistoryError, default_path
from vibechat.engine.chat.history import History
from vibechat.engine.chat.schema import MIGRATIONS, statements
from vibechat.engine.chat.session import NO_IMAGES, ChatSession, ImagesNotTaken
from vibechat.engine.errors import ContextOverflowError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.attachments import Attachment

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=1)
VISION = dataclasses.replace(INFO, projector="/models/mmproj.gguf")


@pytest.fixture
def store() -> AttachmentStore:
    return AttachmentStore.default()  # where the chat and `run` keep copies (a tmp dir in tests)


@pytest.fixture
def photo(tmp_path, store) -> Attachment:
    path = tmp_path / "photo.png"
    Image.new("RGB", (640, 480), (1, 2, 3)).save(path)
    return read_attachment(path, store, "image")


@pytest.fixture
def notes(tmp_path, store) -> Attachment:
    path = tmp_path / "notes.md"
    path.write_text("zanzibar is an island\n")
    return read_attachment(path, store, "file")


def new_log(history: History | None) -> ChatLog:
    return ChatLog(Conversation(params=GREEDY), history)


def test_a_prompts_attachments_are_saved_and_come_back_in_order(history, photo, notes):
    chat = new_log(history)
    sent = chat.add_user("what is this?", (photo, notes))
    assert sent.attachments == (photo, notes)
    stored = history.get(chat.conversation_id)
    [message] = stored.messages
    assert message.attachments == (
        photo,
        notes,
    )  # each reopened with its kept copy (and a file's text)
    assert message.attachments[1].text == "zanzibar is an island\n"
    turn = message.chat_message()
    assert turn.attachments == (photo, notes) and turn.images == (photo,)


def test_a_prompt_of_attachments_alone_is_titled_by_the_first(history, photo, notes):
    chat = new_log(history)
    chat.add_user("", (photo, notes))
    assert history.get(chat.conversation_id).title == "photo.png"


def test_an_attachment_row_that_fails_takes_its_prompt_with_it(history, photo):
    chat = new_log(history)
    chat.add_user("first")
    # refused by the table's CHECK
    bad = dataclasses.replace(photo, kind="video")  # type: ignore[arg-type]
    with pytest.raises(HistoryError):
        history.add_message(chat.conversation_id, "user", "second", attachments=(photo, bad))
    assert [m.content for m in history.get(chat.conversation_id).tree] == ["first"]
    assert history._read("SELECT COUNT(*) AS n FROM attachments")[0]["n"] == 0


def test_a_reopened_conversation_sends_its_attachments_again(history, photo, notes):
    backend = RecordingBackend("it is a picture", info=VISION)
    session = ChatSession(backend, new_log(history))
    session.load()
    session.chat.add_user("look", (photo, notes))
    session.answer()
    reopened = ChatLog.open(history, session.chat.conversation_id)
    assert reopened.conversation.turns[0].attachments == (photo, notes)
    again = ChatSession(backend, reopened)
    again.load()
    again.chat.add_user("and again?")
    again.answer()
    first = backend.requests[-1][0][0]
    # Sent as the backends take it: the file inlined with its name, the image as an image.
    assert first.role == "user" and first.images == (photo,) and first.attachments == (photo,)
    assert first.content.startswith(
        "File: notes.md\n```\nzanzibar is an island\n"
    ) and first.content.endswith("look")


def test_older_images_are_left_out_for_a_model_without_a_projector(photo, notes):
    chat = new_log(None)
    chat.add_user("look", (photo, notes))
    chat.conversation.add_assistant("ok")
    backend = RecordingBackend("text only")
    session = ChatSession(backend, chat)
    session.load()
    session.chat.add_user("go on")
    session.answer()
    first = backend.requests[-1][0][0]
    assert first.attachments == () and "File: notes.md" in first.content


def test_check_prompt_refuses_images_for_a_model_without_a_projector(photo, notes):
    session = ChatSession(RecordingBackend(), new_log(None))
    session.load()
    with pytest.raises(ImagesNotTaken) as exc:
        session.check_prompt("what is this?", (notes, photo))
    assert str(exc.value) == NO_IMAGES
    session.check_prompt("what is in it?", (notes,))  # a text file is fine
    vision = ChatSession(RecordingBackend(info=VISION), new_log(None))
    vision.load()
    vision.check_prompt("what is this?", (photo,))


def test_check_prompt_counts_the_files_text(tmp_path, store):
    small = dataclasses.replace(INFO, context_size=256)  # at most 64 KiB of text
    session = ChatSession(RecordingBackend(info=small), new_log(None))
    session.load()
    big = tmp_path / "big.txt"
    big.write_text("word " * 15_000)
    attached = read_attachment(big, store, "file")
    session.check_prompt("summarise this")
    with pytest.raises(ContextOverflowError) as exc:
        session.check_prompt("summarise this", (attached,))
    assert "more than a 256-token context can hold" in str(exc.value)


def test_a_missing_copy_is_said_and_the_conversation_still_opens(history, photo, notes):
    chat = new_log(history)
    chat.add_user("look", (photo, notes))
    Path(photo.path).unlink()
    Path(notes.path).unlink()
    [message] = history.get(chat.conversation_id).messages
    image, file = message.attachments
    assert (image.path, image.note, image.width, image.name) == ("", MISSING_NOTE, 640, "photo.png")
    assert (file.path, file.text, file.note) == ("", "", MISSING_NOTE)
    turn = ChatLog.open(history, chat.conversation_id).conversation.turns[0]
    assert turn.images == () and turn.attachments == (
        file,
    )  # the image cannot be sent; the note is


def test_a_fork_copies_the_attachments(history, photo):
    chat = new_log(history)
    chat.add_user("look", (photo,))
    leaf = history.add_message(chat.conversation_id, "assistant", "a picture")
    fork = history.fork(chat.conversation_id, leaf)
    assert history.get(fork).messages[0].attachments == (photo,)
    history.delete(chat.conversation_id)
    assert history.get(fork).messages[0].attachments == (photo,)


def test_another_vibechats_prompt_is_taken_in_with_its_attachments(history, photo):
    mine = new_log(history)
    mine.add_user("first")
    theirs = ChatLog.open(history, mine.conversation_id)
    theirs.add_user("and this?", (photo,))
    taken = mine.take_in(history.messages_after(mine.conversation_id, mine.seen))
    assert [m.attachments for m in taken] == [(photo,)]
    assert mine.conversation.turns[-1].attachments == (photo,)


def test_exports_say_what_was_attached_never_the_bytes(history, photo, notes):
    chat = new_log(history)
    chat.add_user("look", (photo, notes))
    stored = history.get(chat.conversation_id)
    data = stored.to_dict()["messages"][0]["attachments"]
    assert data == [
        {
            "kind": "image",
            "name": "photo.png",
            "digest": photo.digest,
            "mime": "image/png",
            "size": photo.size,
            "width": 640,
            "height": 480,
        },
        {
            "kind": "file",
            "name": "notes.md",
            "digest": notes.digest,
            "mime": "text/plain",
            "size": 22,
            "width": 0,
            "height": 0,
        },
    ]
    markdown = stored.to_markdown()
    assert f"Attached: {photo.label()}\n" in markdown and photo.label().startswith(
        "photo.png · 640×480 · "
    )
    assert "Attached: notes.md · 22 B\n" in markdown
    assert "zanzibar" not in markdown  # the file's text is in its kept copy, not the export


def write_v5_database(path: Path) -> None:
    """The schema as the first five migrations made it (raw SQL), with a branching conversation."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)"
    )
    for version, script in enumerate(MIGRATIONS[:5], start=1):
        for statement in statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01')", (version,))
    conn.execute(
        "INSERT INTO conversations(id, title, created, updated, leaf_id) "
        "VALUES (1, 'old', '2026-01-01', '2026-01-01', 3)"
    )
    for row in (
        (1, None, "user", "hello"),
        (2, 1, "assistant", "hi there"),
        (3, 1, "assistant", "hello!"),
    ):
        conn.execute(
            "INSERT INTO messages(id, conversation_id, parent_id, role, content, status, "
            "created, updated) "
            "VALUES (?, 1, ?, ?, ?, 'complete', '2026-01-01', '2026-01-01')",
            row,
        )
    conn.commit()
    conn.close()


def test_migration_6_keeps_every_message_of_a_schema_5_database(tmp_path, photo):
    path = tmp_path / "history.db"
    write_v5_database(path)
    with History(path) as db:
        assert db.schema_version == len(MIGRATIONS) >= 6
        old = db.get(1)
        assert [(m.id, m.parent_id, m.content) for m in old.tree] == [
            (1, None, "hello"),
            (2, 1, "hi there"),
            (3, 1, "hello!"),
        ]
        assert [m.id for m in old.messages] == [1, 3] and all(m.attachments == () for m in old.tree)
        assert "attachments" not in old.to_dict()["messages"][0]
        chat = ChatLog.open(db, 1)
        chat.add_user("and this?", (photo,))
    with History(path) as db:
        assert db.get(1).messages[-1].attachments == (photo,)


def test_deleting_a_conversation_removes_copies_no_message_names(store, photo, notes):
    with History(default_path()) as db:
        gone, kept = new_log(db), new_log(db)
        gone.add_user("look", (photo, notes))
        kept.add_user("also", (notes,))
        old = time.time() - 7200
        for a in (photo, notes):
            os.utime(a.path, (old, old))
        db.delete(gone.conversation_id)
        assert [r["digest"] for r in db._read("SELECT digest FROM attachments")] == [
            notes.digest
        ]  # rows gone too
        assert not Path(photo.path).exists()  # named by no message any more
        assert Path(notes.path).exists()  # the other conversation still names it
        assert db.get(kept.conversation_id).messages[0].attachments == (notes,)


def test_a_history_elsewhere_does_not_prune_the_shared_store(history, photo):
    chat = new_log(history)
    chat.add_user("look", (photo,))
    old = time.time() - 7200
    os.utime(photo.path, (old, old))
    history.delete(chat.conversation_id)
    assert Path(
        photo.path
    ).exists()  # this history does not know every digest the store's users name


@pytest.mark.model
def test_the_real_model_is_sent_a_reopened_conversations_file(backend, history, notes):
    """The starter model answers a prompt with a file, reopened from the history: the file's text
    is counted in what it is sent (its words are not judged)."""
    session = ChatSession(backend, new_log(history))
    session.load()
    session.check_prompt("what does it say?", (notes,))
    session.chat.add_user("what does it say?", (notes,))
    answer = session.answer(GREEDY)
    assert answer.done.stats.prompt_tokens > 0
    reopened = ChatSession(backend, ChatLog.open(history, session.chat.conversation_id))
    reopened.load()
    with_file = reopened.count_context(reopened.generation)
    bare = backend.count_tokens(
        [dataclasses.replace(m, attachments=()) for m in reopened.conversation.turns]
    )
    assert with_file is not None and with_file > bare
