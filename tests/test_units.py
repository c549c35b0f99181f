"""Small pure pieces: thread choice, delta coalescing, slash parsing, conversation edits."""

from __future__ import annotations

import os

from vibechat.app import slash
from vibechat.app.tui.chat_view import code_blocks, http_links
from vibechat.app.tui.events import DeltaBuffer
from vibechat.engine import system
from vibechat.engine.conversation import Conversation


def test_default_threads_stays_within_affinity_and_physical_cores(monkeypatch):
    threads = system.default_threads()
    assert 1 <= threads <= len(os.sched_getaffinity(0))
    monkeypatch.setattr(system, "physical_cores", lambda: 8)
    monkeypatch.setattr(system, "_affinity_count", lambda: 3)
    assert system.default_threads() == 3
    monkeypatch.setattr(system, "_affinity_count", lambda: 16)
    assert system.default_threads() == 8


def test_code_blocks_and_links():
    md = "a\n```py\nx = 1\n```\nb [doc](https://a.example/x) and https://b.example/y.\n```\nopen"
    assert code_blocks(md) == ["x = 1\n", "open"]
    assert http_links(md) == ["https://a.example/x", "https://b.example/y"]


def test_delta_buffer_posts_once_per_batch_and_slices_bursts():
    buf = DeltaBuffer()
    assert buf.put("a") is True
    assert buf.put("b") is False  # a post is already pending
    assert buf.take() == ("ab", False)
    assert buf.put("c") is True
    buf.put("line one\n" * 10)
    text, more = buf.take(30)
    assert more and text.endswith("\n") and len(text) <= 30
    rest, more = buf.take()
    assert text + rest == "c" + "line one\n" * 10 and not more


def test_slash_parsing():
    assert slash.parse("hello") is None
    assert slash.parse("//not a command") is None
    assert slash.unescape("//x") == "/x"
    cmd = slash.parse("/SET temperature 0.5")
    assert cmd.name == "/set" and cmd.arg == "temperature 0.5" and cmd.known
    assert slash.parse("/quit").name == "/bye"
    assert not slash.parse("/nope").known
    assert "Did you mean /set" in slash.suggestion("/se")


def test_conversation_edits():
    conv = Conversation(system="Be brief.")
    conv.add_user("q1")
    conv.add_assistant("a1")
    assert [m.role for m in conv.messages()] == ["system", "user", "assistant"]
    assert conv.drop_last_reply().content == "a1"
    conv.add_assistant("a1b")
    assert conv.take_last_user() == "q1" and conv.turns == []

