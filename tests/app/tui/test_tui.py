"""Pilot tests of the chat TUI with a recording backend (the real model: test_tui_model.py)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from textual.content import Content

from fakes import INFO, OnePieceAtATime, RecordingBackend, send, settle
from helpers import answer, notices, notifications, wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.conversation.markdown_segment import MarkdownSegment
from vibechat.app.tui.screens.confirm import ConfirmScreen
from vibechat.app.tui.screens.help_screen import HelpScreen
from vibechat.app.tui.widgets.slider import Slider
from vibechat.engine.settings.params import SamplingParams

SIZE = (110, 36)


def replies(app) -> list[AssistantMessage]:
    return list(app.chat.query(AssistantMessage))


@pytest.fixture
def fake_backend() -> RecordingBackend:
    return RecordingBackend()


async def test_send_shows_user_message_and_streamed_markdown_reply(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.status.model is not None and app.status.state == "ready"
        await send(pilot, "Hi there")
        roles = [(w.role, w.text) for w in app.chat.messages()]
        assert roles == [("user", "Hi there"), ("assistant", fake_backend.reply)]
        body = "\n".join(str(seg.render()) for seg in replies(app)[0].query(".reply--body"))
        assert "there" in replies(app)[0].text and body
        assert fake_backend.requests[0][0][-1].content == "Hi there"
        assert app.status.stats.decode_tokens_per_s == 42.0
        assert "42.0 tok/s" in str(app.status.render())
        assert app.status.context_used > 0


async def test_model_output_is_sanitised_in_the_view(fake_backend):
    fake_backend.reply = "evil \x1b]52;c;aGk=\x07 \x1b[2J text"
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "go")
        shown = replies(app)[0].text
        assert "\x1b" not in shown and "\x07" not in shown and "text" in shown
        # The raw text stays in the history the model sees next turn.
        assert "\x1b" in app.conversation.turns[-1].content


@pytest.mark.parametrize(
    ("keys", "name", "expected"),
    [
        (["right"], "temperature", 0.85),
        (["left"], "temperature", 0.75),
        (["shift+right"], "temperature", 1.05),
        (["pagedown"], "temperature", 0.55),
        (["home"], "temperature", 0.0),
        (["end"], "temperature", 5.0),
        (["right", "right", "delete"], "temperature", 0.8),
        (["down", "right"], "top_k", 41),
        (["down", "shift+left"], "top_k", 30),
        (["down", "down", "left"], "top_p", 0.94),
        (["down", "down", "down", "right"], "min_p", 0.06),
        # repeat penalty and max tokens start at "auto" (the model's default), one step below their
        # minimum
        (["down", "down", "down", "down", "right"], "repeat_penalty", 0.1),
        (["down", "down", "down", "down", "end", "backspace"], "repeat_penalty", None),
        (["down", "down", "down", "down", "down", "right"], "max_tokens", 0),  # no limit
        (["down", "down", "down", "down", "down", "right", "pageup"], "max_tokens", 256),
    ],
)
async def test_slider_keys_change_the_value_and_the_next_request_uses_it(
    fake_backend, keys, name, expected
):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        assert app.panel.has_class("-visible")
        assert isinstance(app.focused, Slider)
        await pilot.press(*keys)
        slider = app.query_one(f"#slider-{name}", Slider)
        assert slider.param_value == (None if expected is None else pytest.approx(expected))
        assert str(slider.spec.show(slider.param_value)) in str(slider.render())
        await pilot.press("f2")  # close the panel, back to the input
        await send(pilot, "hello")
        used = fake_backend.requests[-1][1]
        assert getattr(used, name) == (None if expected is None else pytest.approx(expected))
        for other, value in SamplingParams().to_dict().items():
            if other not in (name, "stop", "seed"):
                assert getattr(used, other) == value


async def test_reset_all_restores_defaults(fake_backend):
    app = create_app(fake_backend, params=SamplingParams(temperature=1.5, top_k=3), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "shift+delete")
        assert app.conversation.params.temperature == 0.8 and app.conversation.params.top_k == 40


async def test_typing_into_the_parameter_panel_changes_nothing_and_goes_to_the_input(fake_backend):
    """The panel acts on no letter (a stray "R" once reset every parameter): what is typed
    there goes on to the input."""
    app = create_app(fake_backend, params=SamplingParams(temperature=1.5, top_k=3), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f2", "down")
        typed = "Remember: reset R r all, yes"
        await pilot.press(*["space" if c == " " else c for c in typed])
        await pilot.pause()
        assert app.conversation.params.temperature == 1.5 and app.conversation.params.top_k == 3
        assert app.prompt_input.text == typed and app.prompt_input.has_focus


async def test_global_shortcuts_nudge_without_the_panel(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("f6", "f6", "f7", "f9")
        params = app.conversation.params
        assert params.temperature == pytest.approx(0.9)
        assert params.top_k == 39 and params.top_p == pytest.approx(0.94)
        assert was_notified(app, "Top-p 0.94")
        assert not app.panel.has_class("-visible")
        assert app.query_one("#slider-temperature", Slider).param_value == pytest.approx(0.9)
        await send(pilot, "x")
        assert fake_backend.requests[-1][1].temperature == pytest.approx(0.9)


async def test_repeated_nudges_show_one_notice_with_the_latest_value(fake_backend):
    """Ten presses of F6 and a press of F7 show one notice (the latest value), not a stack
    of toasts over the conversation."""
    from textual.widgets._toast import Toast

    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        for _ in range(4):
            await pilot.press("f6")
        await pilot.press("f7")
        await settle(pilot)
        shown = [str(toast.render()) for toast in app.screen.query(Toast)]
        assert len(shown) == 1 and "Top-k 39" in shown[0]


async def test_ctrl_n_clears_the_view_and_resets_the_cache(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "first")
        await send(pilot, "second")
        assert app.status.stats.prompt_tokens_evaluated < app.status.stats.prompt_tokens
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert fake_backend.resets == 1
        assert app.chat.messages() == [] and app.conversation.turns == []
        await send(pilot, "fresh")
        assert fake_backend.requests[-1][0] == [app.conversation.turns[0]]
        assert app.status.stats.prompt_tokens_evaluated == app.status.stats.prompt_tokens


async def test_a_sent_message_is_drawn_with_the_first_words_of_its_reply(fake_backend, monkeypatch):
    """While the model reads the prompt the screen is not redrawn (a layout would take CPU
    from the model's threads); the sent message appears with the reply's first words, or
    when pacing.HOLD_S is up (made long here, so only the words end the hold)."""
    from textual.app import App

    from vibechat.app.tui.conversation import pacing

    monkeypatch.setattr(pacing, "HOLD_S", 60.0)
    fake_backend.gate = threading.Event()
    app = create_app(fake_backend, blink=False)
    frames: list[str] = []  # what each frame written to the terminal shows
    original = App._display

    def display(self, screen, renderable):
        if renderable is not None and not self._batch_count:
            frames.append("\n".join(strip.text for strip in screen._compositor.render_strips()))
        return original(self, screen, renderable)

    monkeypatch.setattr(App, "_display", display)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("lighthouse")
        await pilot.pause()
        frames.clear()  # the prompt in the input
        await pilot.press("enter")
        for _ in range(3):
            await pilot.pause()
        assert app.prompt_input.text == ""  # taken at once (the input cleared before the hold)
        fake_backend.gate.set()  # the first words
        await settle(pilot)
        assert replies(app)[0].text == fake_backend.reply
        showing = [frame for frame in frames if "lighthouse" in frame]
        assert showing, "the sent message was never drawn"
        assert "Hello" in showing[0]  # first drawn with the reply's first words


async def test_escape_stops_a_reply_and_keeps_the_partial_text(fake_backend):
    fake_backend.reply = " ".join(f"word{i}" for i in range(200))
    fake_backend.gate = threading.Event()
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("talk")
        await pilot.press("enter")
        for _ in range(3):  # let three words through
            fake_backend.gate.set()
            fake_backend.gate.clear()
            await pilot.pause(0.05)
        await pilot.press("escape")
        fake_backend.gate.set()
        await settle(pilot)
        reply = replies(app)[0]
        assert reply.text.startswith("word0")
        assert 0 < len(reply.text.split()) < 200
        assert reply.has_class("-stopped")
        assert "stopped" in reply.status_shown.plain
        assert app.conversation.turns[-1].content == reply.text
        assert not app.generating


async def test_ctrl_c_stops_a_streaming_reply_and_otherwise_copies_or_hints(fake_backend):
    fake_backend.reply = " ".join(f"word{i}" for i in range(200))
    fake_backend.gate = threading.Event()
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("talk")
        await pilot.press("enter")
        fake_backend.gate.set()
        fake_backend.gate.clear()
        await wait_for(
            pilot, lambda: replies(app) and replies(app)[0].text.strip(), "the reply's first words"
        )
        assert app.generating
        await pilot.press("ctrl+c")
        fake_backend.gate.set()
        await settle(pilot)
        reply = replies(app)[0]
        assert reply.has_class("-stopped") and 0 < len(reply.text.split()) < 200
        assert not any("quit" in n.lower() for n in notices(app))
        assert app.is_running
        # Not generating: Ctrl+C copies the input's selection ...
        app.prompt_input.load_text("copy me")
        app.prompt_input.select_all()
        await pilot.press("ctrl+c")
        assert app.clipboard == "copy me"
        # ... and with nothing selected, Textual says how to quit.
        app.prompt_input.load_text("")
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert any("quit" in n.lower() for n in notices(app))
        assert app.is_running


async def test_the_context_meter_counts_the_prompt_when_sent_and_drops_a_taken_back_turn(
    fake_backend,
):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "one two three")
        after_first = app.status.context_used
        assert after_first > 0
        fake_backend.gate = threading.Event()
        app.prompt_input.load_text("four five")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.generating, "the reply to start")
        assert app.chat.messages()[-1].text == ""  # nothing streamed yet
        prompt = fake_backend.count_tokens(app.conversation.messages())
        assert prompt > after_first
        assert app.status.context_used == prompt  # counted when sent, not when the reply ends
        assert f"{prompt:,}/4,096" in str(app.status.render())
        fake_backend.gate.set()
        await settle(pilot)
        fake_backend.gate = None
        assert app.status.context_used > prompt  # the reply counts too
        await pilot.press("ctrl+l")  # take the second turn back
        await settle(pilot)
        assert app.status.context_used == fake_backend.count_tokens(app.conversation.messages())
        assert app.status.context_used < prompt
        await pilot.press("ctrl+l")  # and the first: nothing left
        await settle(pilot)
        assert app.conversation.turns == [] and app.status.context_used == 0


async def test_regenerate_replaces_the_last_reply(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "question")
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert len(fake_backend.requests) == 2
        assert fake_backend.requests[1][0] == fake_backend.requests[0][0]
        assert len(replies(app)) == 1
        assert [t.role for t in app.conversation.turns] == ["user", "assistant"]


async def test_edit_last_message_puts_it_back_in_the_input(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "one")
        await send(pilot, "two with a typo")
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert app.prompt_input.text == "two with a typo"
        assert [t.content for t in app.conversation.turns if t.role == "user"] == ["one"]
        assert len(app.chat.messages()) == 2
        app.prompt_input.load_text("two fixed")
        await pilot.press("enter")
        await settle(pilot)
        assert fake_backend.requests[-1][0][-1].content == "two fixed"


async def test_copy_last_reply_and_code_block(fake_backend):
    fake_backend.reply = "Here:\n```python\nprint('hi')\n```\ndone"
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "code please")
        await pilot.press("ctrl+o")
        assert app.clipboard == fake_backend.reply
        replies(app)[0].focus()
        await pilot.press("ctrl+k")
        assert app.clipboard == "print('hi')\n"
        app.chat.messages()[0].focus()
        await pilot.press("ctrl+c")
        assert app.clipboard == "code please"


async def test_prompt_history_recall_with_up(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "alpha")
        await send(pilot, "beta")
        await pilot.press("up")
        assert app.prompt_input.text == "beta"
        await pilot.press("up")
        assert app.prompt_input.text == "alpha"
        await pilot.press("down")
        assert app.prompt_input.text == "beta"


async def test_ctrl_j_inserts_a_newline(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a", "ctrl+j", "b", "enter")
        await settle(pilot)
        assert fake_backend.requests[0][0][-1].content == "a\nb"


async def test_scrolling_up_is_not_yanked_back_by_the_stream(fake_backend):
    fake_backend.reply = "\n\n".join(f"Paragraph {i} " + "text " * 30 for i in range(60))
    fake_backend.gate = threading.Event()
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("long")
        await pilot.press("enter")
        fake_backend.gate.set()  # stream everything
        await settle(pilot)
        chat = app.chat
        assert chat.max_scroll_y > 0 and chat.scroll_y == chat.max_scroll_y
        # Second long reply: scroll up while it streams.
        fake_backend.gate.clear()
        app.prompt_input.load_text("again")
        await pilot.press("enter")
        for _ in range(5):
            fake_backend.gate.set()
            fake_backend.gate.clear()
            await pilot.pause(0.02)
        await pilot.press("pageup", "pageup")
        await pilot.pause()
        held = chat.scroll_y
        assert held < chat.max_scroll_y
        fake_backend.gate.set()
        await settle(pilot)
        assert chat.scroll_y == held  # not yanked back
        await pilot.press("ctrl+end")
        await pilot.pause()
        assert chat.scroll_y == chat.max_scroll_y


async def test_slash_commands(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/set temperature 0.3")
        await send(pilot, "/set top-k 12")
        await send(pilot, "/set max_tokens 99")
        await send(pilot, "/system You are a pirate.")
        assert fake_backend.requests == []  # none of it went to the model
        assert app.query_one("#slider-temperature", Slider).param_value == pytest.approx(0.3)
        await send(pilot, "ahoy")
        messages, params = fake_backend.requests[-1]
        assert (params.temperature, params.top_k, params.max_tokens) == (0.3, 12, 99)
        assert messages[0].role == "system" and messages[0].content == "You are a pirate."

        await send(pilot, "/set temperature 9")
        assert app.conversation.params.temperature == 0.3
        assert was_notified(app, "temperature must be between 0 and 5")

        await send(pilot, "/frobnicate now")
        assert was_notified(app, "Unknown command /frobnicate")
        assert len(fake_backend.requests) == 1

        await send(pilot, "/stats")
        assert "tokens/s" in app.chat.messages()[-1].text

        await send(pilot, "//etc/hosts is a path")
        assert fake_backend.requests[-1][0][-1].content == "/etc/hosts is a path"

        await send(pilot, "/help")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")

        await send(pilot, "/new")
        assert app.conversation.turns == [] and fake_backend.resets == 1


async def test_typing_on_a_focused_message_goes_to_the_input(fake_backend):
    fake_backend.reply = "See https://example.com/a for more."
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "hi")
        reply = replies(app)[0]
        await pilot.click(reply)  # how a message usually gets focus
        await pilot.pause()
        assert app.focused is reply
        # Its keys show beside its label while it has focus.
        label = reply.label_shown.plain
        assert "^c copy message" in label and "^k copy code" in label and "⏎ open link" in label
        await pilot.press(*"are you there")  # 'o' used to offer the reply's link
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert app.prompt_input.has_focus and app.prompt_input.text == "are you there"
        assert reply.label_shown.plain == "Assistant"
        # The same from the chat view itself, and with text already in the input.
        app.chat.focus()
        await pilot.press("?")
        assert app.prompt_input.has_focus and app.prompt_input.text == "are you there?"
        # Keys that are not text still act on the message: Enter offers its link.
        reply.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await answer(pilot, "escape")


async def test_help_screen_lists_every_binding(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        text = "\n".join(str(s.render()) for s in app.screen.query("Static"))
        for binding in app.BINDINGS:
            assert binding.system or binding.description in text
        assert "esc / ^c" in text  # one row for both keys that stop a reply
        for needle in ("/set", "/system", "Copy code", "Reset all", "New line"):
            assert needle in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_every_action_is_in_the_command_palette(fake_backend):
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE):
        commands = list(app.get_system_commands(app.screen))
        titles = [c.title for c in commands]
        for binding in app.BINDINGS:
            assert binding.system or binding.description in titles
        assert len(titles) == len(set(titles)), "one entry per action (one Theme: F4's)"
        shown = {
            c.title: Content.from_markup(c.help).plain for c in commands
        }  # the palette reads markup
        for title, help_text in shown.items():
            assert help_text.split(" (")[0] != title, f"{title!r}: the help line repeats the name"
        assert f"[params] table of {app.config.path}" in shown["Save parameters as default"]
        assert shown["Theme"].endswith("(f4)") and shown["Stop"].endswith("(escape / ctrl+c)")


async def test_links_open_only_after_confirmation_and_only_http(fake_backend):
    app = create_app(fake_backend, blink=False)
    opened: list[str] = []
    app.open_url = lambda url, **_: opened.append(url)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await send(pilot, "hi")
        reply = replies(app)[0]
        reply.post_message(AssistantMessage.LinkRequested("javascript:alert(1)"))
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert was_notified(app, "only http and https")
        reply.post_message(AssistantMessage.LinkRequested("https://example.com/x"))
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await answer(pilot, "escape")
        assert opened == []
        reply.post_message(AssistantMessage.LinkRequested("https://example.com/x"))
        await pilot.pause()
        await answer(pilot, "y")  # a letter is typing, never a yes: it goes to the input
        assert (
            opened == [] and isinstance(app.screen, ConfirmScreen) and app.prompt_input.text == "y"
        )
        await pilot.press("ctrl+y")
        assert opened == ["https://example.com/x"]


async def test_ui_stays_responsive_while_generating(fake_backend):
    fake_backend.reply = " ".join(["word"] * 50)
    fake_backend.gate = threading.Event()
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("go")
        await pilot.press("enter")
        await pilot.pause()
        assert app.generating
        await pilot.press(*"typing while it works")
        assert app.prompt_input.text == "typing while it works"
        await pilot.press("f2")
        assert app.panel.has_class("-visible")
        fake_backend.gate.set()
        await settle(pilot)
        assert not app.generating


async def test_load_failure_is_shown_not_raised():
    class Broken(RecordingBackend):
        def load(self, on_progress=None):
            from vibechat.engine.errors import ModelFileError

            raise ModelFileError(
                "/x.gguf is a Git LFS pointer, not the model itself: run 'git lfs pull'."
            )

    app = create_app(Broken(), blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert app.status.state == "no model"
        assert was_notified(app, "Git LFS pointer")


async def test_a_long_code_block_renders_in_bounded_pieces_and_ends_as_one_block(
    fake_backend, monkeypatch
):
    code = (
        "```python\n"
        + "".join(f"value_{i} = compute({i})  # step {i}\n" for i in range(300))
        + "```"
    )
    fake_backend.reply = "Here it is:\n\n" + code
    rendered: list[int] = []  # the length of each text rendered while streaming
    original, original_seal = MarkdownSegment.set_text, MarkdownSegment.seal

    def spy(self, text):
        rendered.append(len(text))
        original(self, text)

    def spy_seal(self, settled, tail):
        rendered.extend(len(markdown.text) for markdown in [*settled, tail])
        original_seal(self, settled, tail)

    monkeypatch.setattr(MarkdownSegment, "set_text", spy)
    monkeypatch.setattr(MarkdownSegment, "seal", spy_seal)
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "code please")
        reply = replies(app)[0]
        assert reply.text == fake_backend.reply
        # Every render while streaming touched a bounded piece, never the whole block...
        assert len(code) > 9000 and rendered and max(rendered) < 3000
        # ...and the finished reply shows the block whole, in one segment.
        assert [m.text for m in reply.body.markdowns] == ["Here it is:\n\n", code]


async def test_a_sequence_split_across_pieces_never_shows_while_streaming(monkeypatch):
    from vibechat.engine.sanitize import sanitize

    # One word per piece: the OSC and CSI sequences arrive in several pieces.
    backend = OnePieceAtATime("evil \x1b]0;a b c\x07 and \x1b[2 q red \x1b]0;t")
    appended: list[str] = []
    original = AssistantMessage.append

    async def record(self, text):
        appended.append(text)
        await original(self, text)

    monkeypatch.setattr(AssistantMessage, "append", record)
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("go")
        await pilot.press("enter")
        pieces = backend.reply.split(" ")
        for n in range(1, len(pieces) + 1):
            backend.step.release()
            for _ in range(200):  # until the app has taken the piece
                if app.replies.last_stream is not None and app.replies.last_stream.renders >= n:
                    break
                await pilot.pause(0.01)
            assert "]0;a" not in "".join(appended) and "[2" not in "".join(appended)
        await settle(pilot)
        assert app.replies.last_stream.renders == len(pieces)  # the pieces arrived one by one
        assert "".join(appended) == sanitize(backend.reply) == "evil  and  red ]0;t"
        assert replies(app)[0].text == sanitize(backend.reply)


async def test_a_prompt_too_large_for_the_context_is_refused_and_kept_in_the_input():
    # A 512-token context holds at most 128 KiB of text (256 bytes a token): the same limit as a
    # 4,096-token context's 1 MiB, at an eighth of the text the input wraps on every redraw.
    backend = RecordingBackend(info=replace(INFO, context_size=512))
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        big = "word " * 27_000  # 135 KB
        await send(pilot, big[: 512 * 256 + 10])
        assert (
            backend.requests == [] and app.chat.messages() == []
        )  # not sent, not shown, not saved
        assert app.chatlog.conversation_id is None
        notes = notices(app)
        assert any("more than a 512-token context can hold" in n for n in notes)
        assert app.prompt_input.text == big[: 512 * 256 + 10]  # nothing typed is lost
        await send(pilot, "Hi")
        assert len(backend.requests) == 1


async def test_worker_messages_that_land_while_the_app_closes_are_ignored(fake_backend):
    """The history list and the model load come from workers: their message can arrive after
    the app began closing (its widgets gone); handling it must not raise."""
    from fakes import INFO
    from vibechat.app.tui.controllers.events import (
        HistoryListed,
        ModelFailed,
        ModelProgress,
        ModelReady,
    )

    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
    assert app.closing
    for message in (
        HistoryListed([], 0, None),
        ModelProgress(0.5),
        ModelReady(INFO),
        ModelFailed("gone"),
    ):
        await app.route(message)  # as the app hands a worker's message to its controller


async def test_format_sets_the_next_replies_format_and_the_status_bar_shows_it(
    fake_backend, tmp_path
):
    import json as _json

    schema = tmp_path / "person.json"
    schema.write_text(
        _json.dumps(
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        )
    )
    app = create_app(fake_backend, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "/format json")
        assert "format json" in app.status.render().plain
        await send(pilot, "hi")
        assert fake_backend.requests[-1][1].output_format.kind == "json"
        await send(pilot, f"/format {schema}")
        assert "person.json" in app.status.render().plain
        await send(pilot, "again")
        fmt = fake_backend.requests[-1][1].output_format
        assert fmt.kind == "schema" and _json.loads(fmt.text)["required"] == ["name"]
        await send(pilot, "/format off")
        await send(pilot, "free")
        assert fake_backend.requests[-1][1].output_format is None
        assert "format" not in app.status.render().plain
        await send(pilot, "/format {not json")
        assert any(n.severity == "error" for n in notifications(app))  # one line, nothing changed
        assert app.conversation.params.output_format is None
