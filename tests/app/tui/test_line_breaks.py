"""A reply's line breaks on screen: a single newline is a new line (as chat UIs show a model's
output), while it streams and in a reopened conversation; Markdown's blocks (code, tables,
lists) render as before, and a reply cut into segments shows exactly what the whole shows."""

from __future__ import annotations

import random
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown as RichMarkdown
from textual.app import App, ComposeResult
from textual.geometry import Region

from fakes import OnePieceAtATime, RecordingBackend, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.conversation.chat_view import ChatView
from vibechat.app.tui.conversation.markdown_segment import CachedMarkdown, MarkdownSegment
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import GenerationDone

SIZE = (90, 40)
JSON = '{"name": "hello",\n "version": "1.0",\n "main": true}'
REPLY = f"line one\nline two\n\n{JSON}\n\nRoses are red,\nviolets are blue."
EXPECTED = [
    "line one",
    "line two",
    '{"name": "hello",',
    '"version": "1.0",',
    '"main": true}',
    "Roses are red,",
    "violets are blue.",
]


def rendered(text: str, width: int = 60) -> list[str]:
    console = Console(width=width)
    return [
        "".join(s.text for s in line).rstrip()
        for line in CachedMarkdown(text, "monokai").lines(
            console, console.options.update_width(width)
        )
    ]


def shown(reply: AssistantMessage) -> list[str]:
    """What the reply's text paints on screen, line by line (its segments, top to bottom)."""
    lines: list[str] = []
    for segment in reply.query(MarkdownSegment):
        strips = segment.render_lines(Region(0, 0, segment.size.width, segment.size.height))
        lines += ["".join(piece.text for piece in strip).rstrip() for strip in strips]
    return lines


def test_each_line_break_is_a_new_line_and_blocks_render_as_markdown():
    assert rendered("line one\nline two") == ["line one", "line two"]
    assert [line.strip() for line in rendered(JSON)] == EXPECTED[2:5]
    assert rendered("Steps:\n- first\n- second") == ["Steps:", "", " • first", " • second"]
    assert rendered("two spaces  \nstill a break") == ["two spaces", "still a break"]
    assert rendered("*emphasis\nacross* lines") == ["emphasis", "across lines"]
    assert (
        rendered("a long line " * 8, width=40)[0].count("a long line") == 3
    )  # a paragraph still wraps
    # Text without a line break inside a paragraph renders as Rich's Markdown renders it.
    console = Console(width=60)
    for text in (
        "```python\nx = 1\ny = 2\n```",
        "| a | b |\n|---|---|\n| 1 | 2 |",
        "- a\n- b\n\n1. c\n2. d",
        "# Title\n\n> quoted **bold** `code`\n\n---\n\n    indented\n    code",
    ):
        ours = CachedMarkdown(text, "monokai").lines(console, console.options)
        assert ours == console.render_lines(
            RichMarkdown(text, hyperlinks=False), console.options, pad=False
        ), text


BLOCKS = [
    "Paragraph {i} " + "word " * 12,
    "line one\nline two\nline three",
    '{{\n  "name": "x{i}",\n  "v": 1\n}}',
    "# Heading {i}",
    "## Sub {i}",
    "- a\n- b\n- c",
    "1. one\n2. two",
    "> quoted {i}\n> more",
    "| a | b |\n|---|---|\n| {i} | 2 |",
    "```python\nx = {i}\n\n\ny = 2\n```",
    "---",
    "    indented code {i}",
    "Setext\n===",
    "text then\n- list item\n- another",
    "- loose {i}\n\n- loose b\n\n  its second paragraph",
    "1) paren\n\n2) paren2",
    "Text with *emphasis\nacross* lines and `code`",
    "- lazy item\nlazy continuation",
    "- nested\n  - inner\n\n  - inner loose",
    "* * *",
]


def reply_texts(count: int) -> list[str]:
    texts = []
    for seed in range(count):
        rng = random.Random(seed)
        texts.append("\n\n".join(rng.choice(BLOCKS).format(i=i) for i in range(rng.randint(4, 14))))
    return texts


class Uncut(AssistantMessage):
    """A reply in one segment however long: the reference."""

    SEAL_AT = FORCE_AT = 1 << 30


def _view_app() -> App:
    class OneView(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    return OneView()


async def test_a_reply_cut_into_segments_shows_exactly_what_the_whole_reply_shows(monkeypatch):
    """Segments cut at blank lines (a finished reply, reopened) and cut while streaming (by
    force too, merged at the end) paint the lines that one segment holding the whole reply
    paints: the blank line between two blocks at each cut included, none inside a loose
    list or an indented code block."""
    monkeypatch.setattr(AssistantMessage, "SEAL_AT", 60)
    monkeypatch.setattr(AssistantMessage, "FORCE_AT", 150)
    app = _view_app()
    async with app.run_test(size=(70, 40)) as pilot:
        view = app.query_one(ChatView)
        cut = 0
        for n, text in enumerate(reply_texts(24)):
            opened = await view.add(AssistantMessage(text), follow=False)
            streamed = await view.add(AssistantMessage(live=True), follow=False)
            rng = random.Random(n)
            pos = 0
            while pos < len(text):
                step = rng.randint(1, 40)
                await streamed.append(text[pos : pos + step])
                pos += step
            await streamed.finish()
            whole = await view.add(Uncut(text), follow=False)
            await pilot.pause()
            expected = shown(whole)
            assert len(whole.body.markdowns) == 1
            for reply in (opened, streamed):
                segments = len(reply.body.markdowns)
                cut += segments > 1
                assert shown(reply) == expected, f"reply {n}: {segments} segments\n{text!r}"
            await opened.remove()
            await streamed.remove()
            await whole.remove()
        assert cut >= 30  # most replies were cut


def seed_conversation(db: Path, prompt: str, reply: str) -> int:
    with History(db) as history:
        chat = ChatLog(Conversation(), history, model="Fake 1B", model_path="/models/fake.gguf")
        chat.add_user(prompt)
        chat.finish_reply(chat.start_reply(), GenerationDone(reply))
        assert chat.conversation_id is not None
        return chat.conversation_id


async def test_a_streamed_reply_shows_its_line_breaks_while_it_streams_and_when_it_ends():
    backend = OnePieceAtATime(REPLY)
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("Write two lines, then JSON, then a poem.")
        await pilot.press("enter")
        for _ in range(3):  # "line", " one\nline", " two\n\n{…"
            backend.step.release()
        lines: list[str] = []
        for _ in range(500):  # until the third piece is on screen
            lines = shown(app.chat.query(AssistantMessage).last())
            if any("two" in line for line in lines):
                break
            await pilot.pause(0.01)
        streaming = app.generating
        for _ in range(len(REPLY.split(" "))):  # the rest of the reply
            backend.step.release()
        await settle(pilot)
        assert streaming and "line one" in lines and "line two" in lines
        assert lines.index("line one") + 1 == lines.index("line two")
        reply = app.chat.query(AssistantMessage).last()
        assert reply.text == REPLY
        assert [line.strip() for line in shown(reply) if line.strip()] == EXPECTED


async def test_a_reopened_conversation_shows_the_replys_line_breaks(tmp_path: Path):
    db = tmp_path / "history.db"
    cid = seed_conversation(db, "Two lines and JSON, please.", REPLY)
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")
        assert [s.id for s in app.sidebar.summaries] == [cid]
        await pilot.press("enter")
        await settle(pilot)
        reply = app.chat.query(AssistantMessage).last()
        assert reply.text == REPLY
        assert [line.strip() for line in shown(reply) if line.strip()] == EXPECTED
