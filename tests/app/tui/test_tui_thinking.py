"""A reasoning model's thinking in the chat (thinking_block.py), against the real stub
server (reasoning_content and inline <think> tags): the live line while the model thinks,
the fold when the answer starts, Enter / a click / Ctrl+T toggling it, the expanded
setting, a reopened conversation, Esc during thinking, escape sequences in the thinking,
the status bar's token figures and the context meter."""

from __future__ import annotations

from pathlib import Path

from fakes import RecordingBackend, send, settle
from helpers import wait_for
from vibechat.app.appconfig import load_app_config
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.conversation.thinking_block import ThinkingBlock, seconds_text
from vibechat.engine.chat.history import History
from vibechat.engine.settings.config import config_path

SIZE = (110, 36)


def block_of(app) -> ThinkingBlock:
    reply = app.chat.messages()[-1]
    assert isinstance(reply, AssistantMessage) and reply.thinking is not None
    return reply.thinking


def header(block: ThinkingBlock) -> str:
    return str(block.query_one(".thinking--header").render())


def body(block: ThinkingBlock) -> str:
    return str(block.query_one(".thinking--body").render())


async def test_reasoning_content_folds_when_the_answer_starts_and_toggles(stub, tmp_path: Path):
    stub.reasoning = ["The user greets me.\n", "I should greet ", "back politely."]
    stub.final_fields = {
        "usage": {
            "prompt_tokens": 21,
            "completion_tokens": 9,
            "completion_tokens_details": {"reasoning_tokens": 3},
        }
    }
    app = create_app(stub.backend(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hi")
        reply = app.chat.messages()[-1]
        assert reply.text == stub.reply  # the answer only
        block = block_of(app)
        assert not block.live and not block.expanded
        assert block.text == "The user greets me.\nI should greet back politely."
        assert header(block).startswith("▸ Thought for ") and header(block).endswith(
            " s · 3 tokens"
        )
        assert body(block) == ""  # folded: the thinking is not drawn
        # The status bar counts the thinking's tokens in the reply's (the server reported them).
        assert "9 tok (3 thinking)" in app.status.render().plain

        # Ctrl+T (also in the palette as "Toggle thinking") opens the last reply's thinking.
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert block.expanded and header(block).startswith("▾ Thought for ")
        assert body(block) == block.text
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert not block.expanded

        # A click opens and closes it; so does Enter on the focused block.
        await pilot.click(ThinkingBlock)
        await pilot.pause()
        assert block.expanded and app.focused is block
        await pilot.press("enter")
        await pilot.pause()
        assert not block.expanded
        await pilot.press("enter")
        await pilot.pause()
        assert block.expanded and body(block) == block.text


async def test_inline_think_tags_split_across_chunks_show_a_block_not_tags(stub, tmp_path: Path):
    stub.pieces = ["<thi", "nk>Step one", ".\nStep two", " done.</th", "ink>\n\nHello", " world."]
    app = create_app(stub.backend(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hi")
        reply = app.chat.messages()[-1]
        assert reply.text == "Hello world."
        block = block_of(app)
        assert block.text == "Step one.\nStep two done."
        # No usage details from this server: the count says it counts streamed pieces.
        assert header(block).endswith(" · 3 pieces")
        assert "(thinking included)" in app.status.render().plain


async def test_the_live_line_while_thinking_then_esc_keeps_it_stopped(stub, tmp_path: Path):
    stub.reasoning = [
        "First I consider the question.\n",
        "Then \x1b[31mred\x1b[0m ",
        "[bold]ideas[/bold]\n\n",
    ]
    stub.mode, stub.cut_after = "stall", 0  # thinks, then waits before the answer's first word
    history = History(tmp_path / "h.db")
    app = create_app(stub.backend(), blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Think hard", wait=False)
        await wait_for(
            pilot,
            lambda: (
                app.chat.messages()[-1].role == "assistant"
                and app.chat.messages()[-1].thinking is not None
                and "ideas" in header(app.chat.messages()[-1].thinking)
            ),
        )
        block = block_of(app)
        assert block.live and app.generating
        line = header(block)
        # The latest line with words in it, sanitised, markup shown as text, on one line.
        assert line.startswith("▸ Thinking… ") and " · 3 pieces" in line
        assert line.endswith("Then red [bold]ideas[/bold]")
        assert "\x1b" not in line and "\n" not in line
        before = block.seconds
        await wait_for(pilot, lambda: block.seconds > before, "the thinking clock to run")
        assert header(block).startswith("▸ Thinking… ")  # the clock runs

        await pilot.press("escape")
        await settle(pilot)
        assert not block.live and not app.generating
        assert header(block).startswith("▸ Thought for ") and header(block).endswith("(stopped)")
        assert "\x1b" not in block.text and block.text.startswith("First I consider")
        stored = history.get(app.chatlog.conversation_id).messages[-1]
        assert stored.status == "stopped" and stored.content == ""
        assert stored.thinking == "".join(stub.reasoning)  # saved as the model wrote it

        # Reopened, the stored thinking is folded ("Thought": its time is not stored) and opens.
        cid = app.chatlog.conversation_id
        await pilot.press("ctrl+n")
        await settle(pilot)
        app.chats.open_conversation(cid)
        await settle(pilot)
        block = block_of(app)
        assert header(block) == "▸ Thought (stopped)"  # no token count: the server sent none
        assert not block.expanded
        await pilot.click(ThinkingBlock)
        await pilot.pause()
        assert (
            block.expanded
            and "Then red [bold]ideas[/bold]" in body(block)
            and "\x1b" not in body(block)
        )


async def test_the_expanded_setting_opens_new_and_reopened_thinking(stub, tmp_path: Path):
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("thinking_expanded = true\n")
    config = load_app_config()
    assert config.config.thinking_expanded is True
    stub.reasoning = ["Short thought."]
    history = History(tmp_path / "h.db")
    app = create_app(stub.backend(), blink=False, history=history, config=config)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hi")
        block = block_of(app)
        assert block.expanded and body(block) == "Short thought."
        assert header(block).startswith("▾ Thought for ")
        cid = app.chatlog.conversation_id
        await pilot.press("ctrl+n")
        await settle(pilot)
        app.chats.open_conversation(cid)
        await settle(pilot)
        assert block_of(app).expanded and body(block_of(app)) == "Short thought."

        # Toggled in the chat (palette: "Thinking expanded or folded"): the next reply folds.
        app.action_toggle_thinking_expanded()
        await send(pilot, "Again")
        assert not block_of(app).expanded


async def test_the_context_meter_leaves_the_thinking_out(tmp_path: Path):
    backend = RecordingBackend("Forty two.")
    backend.thinking = " ".join(["pondering"] * 40)
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "What is it?")
        await settle(pilot)
        counted = backend.count_tokens(app.conversation.messages())
        assert app.status.context_used == counted  # what the next prompt sends: no thinking
        assert all("pondering" not in m.content for m in app.conversation.messages())


def test_seconds_are_shown_as_people_read_them():
    assert [seconds_text(s) for s in (0.42, 9.96, 12.4, 60, 125)] == [
        "0.4 s",
        "10.0 s",
        "12 s",
        "1 min",
        "2 min 5 s",
    ]


async def test_the_block_folds_as_soon_as_the_answer_starts(stub, tmp_path: Path):
    stub.reasoning = ["Weighing it up."]
    stub.mode, stub.cut_after = "stall", 2  # thinks, writes two words of the answer, then waits
    app = create_app(stub.backend(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hi", wait=False)
        await wait_for(pilot, lambda: app.chat.messages()[-1].text == "Hello there,")
        block = block_of(app)
        assert app.generating and not block.live  # still answering, the thinking folded
        assert header(block).startswith("▸ Thought for ") and "(stopped)" not in header(block)
        await pilot.press("escape")
        await settle(pilot)
        assert "(stopped)" not in header(block)  # stopped while answering: the thinking had ended


async def test_a_reply_that_fails_while_thinking_folds_its_block(stub, tmp_path: Path):
    stub.reasoning = ["Almost there"]
    stub.mode, stub.cut_after = "cut", 0  # the connection drops before the answer's first word
    app = create_app(stub.backend(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hi")
        block = block_of(app)
        assert not block.live and header(block).startswith("▸ Thought for ")
        assert block.text == "Almost there"
        assert "⚠" in app.chat.messages()[-1].status_shown.plain
