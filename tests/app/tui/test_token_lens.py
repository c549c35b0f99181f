"""The token lens in the chat (issue 43 point 2, and point 6's chat side), with a recording backend
whose replies carry fixed candidates (``fakes.LensBackend``); the real starter drives it in
test_token_lens_model.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fakes import LensBackend, lens_step, send, settle
from helpers import notices, wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.controllers.paths import Paths
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.reply_lens import ReplyLens, step_size
from vibechat.app.tui.widgets.lens_layout import BANDS, lay_out, model_logprobs, step_rows
from vibechat.app.tui.widgets.token_lens import TokenLens
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import LENS_DEFAULT, SamplingParams
from vibechat.engine.turns.backend import Candidate, TokenCandidates

SIZE = (80, 24)


def screen_text(app) -> str:
    """What the screen shows, as text (each line's characters)."""
    return "\n".join(
        "".join(segment.text for segment in strip)
        for strip in app.screen._compositor.render_strips()
    )


def lens(app) -> TokenLens:
    return app.query_one(TokenLens)


def shown_candidates(view: TokenLens) -> list[bytes]:
    assert view.rows is not None
    return [row.candidate.data for row in view.rows.rows]


async def lens_reply(pilot, text: str = "Tell me") -> None:
    """The lens turned on (F11), a prompt sent, the lens opened on its reply (F12)."""
    await pilot.press("f11")
    await send(pilot, text)
    await pilot.press("f12")
    await pilot.pause()


async def test_the_lens_key_turns_it_on_for_the_conversation_and_replies_ask_for_candidates():
    backend = LensBackend()
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f11")
        await pilot.pause()
        assert app.conversation.params.logprobs == LENS_DEFAULT
        assert "lens on (10)" in screen_text(app)
        await send(pilot, "Hi")
        assert backend.requests[-1][1].logprobs == LENS_DEFAULT
        reply = app.chat.query(AssistantMessage).last()
        assert reply.lens is not None and reply.lens.steps() == tuple(backend.steps)
        await pilot.press("f11")
        await pilot.pause()
        assert app.conversation.params.logprobs == 0
        assert "lens on" not in screen_text(app)
        await send(pilot, "Again")
        assert backend.requests[-1][1].logprobs == 0
        assert app.chat.query(AssistantMessage).last().lens is None


async def test_the_lens_moves_by_token_and_line_and_shows_each_steps_candidates():
    backend = LensBackend("Hello there\nfriend of mine")
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        view = lens(app)
        assert view.has_class("-open") and view.has_focus
        assert not app.chat.display  # the lens takes the chat's place
        steps = backend.steps
        assert view.cursor == 0
        assert shown_candidates(view) == [c.data for c in steps[0].top]
        await pilot.press("right", "right")
        assert view.cursor == 2
        assert shown_candidates(view) == [c.data for c in steps[2].top]
        # "there\n" ends the first line: ↑ goes to it, ↓ to the last line.
        await pilot.press("up")
        assert view.cursor == 0
        await pilot.press("down")
        assert view.cursor == 2
        await pilot.press("end")
        assert view.cursor == len(steps) - 1
        assert shown_candidates(view) == [c.data for c in steps[-1].top]
        await pilot.press("home")
        assert view.cursor == 0


async def test_unprintable_and_partial_utf8_tokens_are_shown_escaped():
    """A candidate holding half a UTF-8 character and one holding an escape sequence (and the
    reply's own escape sequence) are shown as ``\\xNN``, never raw."""
    backend = LensBackend("Hi \x1b[2J there")
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        text = screen_text(app)
        assert "\\xe2\\x80" in text and "\\x1b[2J" in text
        assert "\x1b" not in text and "\ufffd" not in text


async def test_a_reply_without_candidates_says_why_in_one_line():
    """A server that returns no logprobs: the reply says it under itself, the lens says it when
    asked to open on it."""
    reason = "the server sent no logprobs for this reply"
    app = create_app(LensBackend(notice=reason), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        assert not lens(app).has_class("-open")
        assert reason in screen_text(app)
        assert was_notified(app, reason)
        assert len([n for n in notices(app) if reason in n]) == 1


async def test_the_lens_key_turns_it_on_when_it_is_off_and_no_reply_has_candidates():
    """F12 with the lens off and nothing to look at turns it on, in one line (a terminal may
    keep F11 for its full screen); with it on and still nothing, one line says why."""
    app = create_app(LensBackend(), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hi")
        await pilot.press("f12")
        await pilot.pause()
        assert not lens(app).has_class("-open")
        assert app.session.conversation.params.logprobs == 10
        assert was_notified(app, "Token lens on for this conversation")
        await pilot.press("f12")
        await pilot.pause()
        assert not lens(app).has_class("-open")
        assert was_notified(app, "No reply has token candidates yet")


async def test_moving_a_slider_moves_the_cut_lines_while_the_lens_is_open():
    app = create_app(LensBackend(), params=SamplingParams(top_k=3, min_p=0, top_p=1), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        view = lens(app)
        assert view.rows is not None and view.rows.line_at("top-k") == 3
        await pilot.press("f8")  # top-k up, while the lens has the focus
        await pilot.pause()
        assert view.rows.line_at("top-k") == 4
        assert "top-k 4 cuts below rank 4" in screen_text(app)
        # The panel's slider: F2, then down to top-k and ← twice.
        await pilot.press("f2")
        assert lens(app).has_class("-open")
        await pilot.press("down", "left", "left")
        await pilot.pause()
        assert app.conversation.params.top_k == 2
        assert view.rows.line_at("top-k") == 2
        before = [row.after for row in view.rows.rows]
        await pilot.press("up", "right", "right")  # a hotter temperature flattens the draw
        await pilot.pause()
        after = [row.after for row in view.rows.rows]
        assert after[0] < before[0] and after[1] > before[1]
        await pilot.press("f2")  # the panel closes: the lens has the focus again
        assert view.has_focus


async def test_esc_leaves_the_lens_to_where_the_user_was():
    app = create_app(LensBackend(), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f11")
        await send(pilot, "Hi")
        await pilot.press("tab")  # the reply has the focus
        reply = app.chat.query(AssistantMessage).last()
        assert reply.has_focus
        await pilot.press("f12", "tab")  # into the candidates
        await pilot.press("escape")  # back to the text
        assert lens(app).has_class("-open") and lens(app).pick is None
        await pilot.press("escape")
        assert not lens(app).has_class("-open")
        assert app.chat.display and app.prompt_input.display
        assert reply.has_focus


async def test_another_candidate_or_a_typed_token_asks_to_take_that_path(tmp_path, monkeypatch):
    taken: list[TokenLens.PathChosen] = []
    monkeypatch.setattr(Paths, "chosen", lambda self, message: taken.append(message))
    backend = LensBackend("Hello there")
    app = create_app(backend, blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        reply = app.chat.query(AssistantMessage).last()
        await pilot.press("right", "enter")  # the candidates, on the chosen token
        await pilot.press("enter")  # the chosen token itself: nothing
        await pilot.pause()
        assert taken == []
        await pilot.press("down", "enter")
        await pilot.pause()
        step = backend.steps[1]
        assert [(m.message_id, m.index, m.token_id, m.data) for m in taken] == [
            (reply.message_id, step.index, -1, step.top[1].data)
        ]
        await pilot.press("e", *"xyz", "enter")
        await pilot.pause()
        assert taken[-1].data == b"xyz" and taken[-1].token_id == -1
        assert lens(app).has_focus


async def test_another_candidate_takes_that_path_and_the_lens_shows_the_new_version(tmp_path):
    """Enter on another candidate in the lens: the reply goes on from that token as its new
    version (its sibling, ‹2/2›), asked of the backend as the reply's tokens before the step
    and the picked one; the lens closes on the chat, where the new version streams."""
    backend = LensBackend("Hello there friend", ids=True)
    history = History(tmp_path / "h.db")
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        original = app.chat.query(AssistantMessage).last()
        await pilot.press("right", "tab", "down", "enter")  # step 1's second candidate
        await wait_for(pilot, lambda: not lens(app).has_class("-open"))
        await settle(pilot)
        step = backend.steps[1]
        prefix = backend.prefixes[-1]
        assert prefix is not None
        assert prefix.token_ids == (backend.steps[0].chosen.token_id, step.top[1].token_id)
        assert app.chat.display and app.chat.messages()[-1].branch == (2, 2)
        assert (
            history.siblings(original.message_id) == sorted(history.siblings(original.message_id))
            and len(history.siblings(original.message_id)) == 2
        )


async def test_a_servers_candidates_cannot_be_taken_and_the_lens_stays(tmp_path):
    """A server's candidates have no token ids: picking one is refused in one line, nothing
    changes, and the lens stays open where the user was."""
    app = create_app(LensBackend(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        app.clear_notifications()
        await pilot.press("tab", "down", "enter")
        await settle(pilot)
        [line] = notices(app)
        assert "server" in line.lower() and "\n" not in line
        assert lens(app).has_class("-open") and len(app.chat.messages()) == 2


async def test_a_reopened_conversation_reads_its_saved_lens_back(tmp_path):
    db = tmp_path / "h.db"
    backend = LensBackend("Saved words here")
    app = create_app(backend, blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f11")
        await send(pilot, "Keep this")
        conversation = app.chatlog.conversation_id
    app = create_app(LensBackend(), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.chats.open_conversation(conversation)
        await settle(pilot)
        reply = app.chat.query(AssistantMessage).last()
        assert reply.lens is not None and not reply.lens.read  # read when first looked at
        await pilot.press("f12")  # read back in a worker, then shown
        view = lens(app)
        await wait_for(pilot, lambda: view.has_class("-open"), "the lens on the saved reply")
        assert reply.lens.read
        assert [s.chosen.data for s in view.steps] == [s.chosen.data for s in backend.steps]
        assert shown_candidates(view) == [c.data for c in backend.steps[0].top]
        # The reply's own sliders came back with it (its saved parameters).
        assert view.steps[0].slider("temperature") == SamplingParams().temperature


async def test_the_lens_draws_in_every_theme_with_the_themes_own_tints():
    """Each tint band, the cursor and the cut lines take their colours from the theme: in every
    theme the four bands differ from one another, and the lens draws."""
    app = create_app(LensBackend(), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        view = lens(app)
        for theme in sorted(app.available_themes):
            app.theme = theme
            await pilot.pause()
            colours = {str(view.get_component_rich_style(name).color) for _, name, _ in BANDS}
            assert len(colours) == 4, (theme, colours)
            assert "Token lens" in screen_text(app) and "cuts below rank" in screen_text(app)


# ---------------------------------------------------------------- what the lens computes


def local_step(temperature: float) -> TokenCandidates:
    """A local engine's step: logprobs after ``temperature`` of the logits 3, 2, 1, 0."""
    logits = [3.0, 2.0, 1.0, 0.0]
    scaled = [z / temperature for z in logits]
    total = math.log(sum(math.exp(s) for s in scaled))
    top = tuple(
        Candidate(i, bytes([65 + i]), chr(65 + i), s - total, 0.0) for i, s in enumerate(scaled)
    )
    return TokenCandidates(0, top[0], top, sliders=(("temperature", temperature),))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.5])
def test_a_local_steps_model_probabilities_are_recovered_from_its_temperature(temperature):
    recovered = model_logprobs(local_step(temperature))
    expected = model_logprobs(local_step(1.0))
    assert recovered == pytest.approx(expected)


def test_the_cut_lines_follow_the_sliders():
    step = local_step(1.0)
    rows = step_rows(step, SamplingParams(temperature=1, top_k=2, top_p=1, min_p=0))
    assert rows.lines == (("top-k", 2),)
    assert [r.cut for r in rows.rows] == [None, None, "top-k", "top-k"]
    greedy = step_rows(step, SamplingParams(temperature=0, top_k=2))
    assert greedy.lines == (("temperature", 1),)
    assert [r.after for r in greedy.rows] == [1.0, 0.0, 0.0, 0.0]


def test_tokens_are_laid_out_in_lines_and_a_line_break_ends_one():
    steps = [lens_step(i, data) for i, data in enumerate([b"ab", b"cd\n", b"ef", b"gh"])]
    laid = lay_out(steps, 6)
    assert laid.line_of == (0, 0, 1, 1)
    assert [[p.text for p in line] for line in laid.lines] == [["ab", "cd\\n"], ["ef", "gh"]]
    narrow = lay_out(steps, 4)
    assert narrow.line_of == (0, 1, 2, 2)


def test_a_replys_steps_are_bounded_and_a_saved_lens_says_what_it_left_out():
    steps = [lens_step(i, b" word") for i in range(10)]
    kept = ReplyLens(limit=step_size(steps[0]) * 3)
    for step in steps:
        kept.add(step)
    assert kept.steps() == tuple(steps[:3]) and kept.dropped == 7
    saved = {"content": [s.to_openai() for s in steps[:4]], "truncated": 6}
    reopened = ReplyLens(saved=saved, params={"temperature": 0.5, "top_k": 7, "logprobs": 10})
    assert not reopened.read
    assert [s.chosen.data for s in reopened.steps()] == [b" word"] * 4
    assert reopened.read and reopened.dropped == 6
    assert dict(reopened.steps()[0].sliders) == {"temperature": 0.5, "top_k": 7}
    assert ReplyLens(saved={"not": "a lens"}).steps() == ()


async def test_a_token_the_user_put_there_is_marked_as_theirs_not_tinted():
    """A step forced by another path (a picked candidate or typed text) had no probability of
    the model's: it is drawn in the "yours" style the legend names, not as a sure token."""
    app = create_app(LensBackend(), blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = lens(app)
        typed = Candidate(-1, b" typed", " typed", 0.0, 0.0)
        steps = [lens_step(0, b"Hello"), TokenCandidates(1, typed, (), forced=True)]
        view.show(steps, message_id=1, footnote="")
        await pilot.pause()
        legend = str(view.query_one(".lens--legend").render())
        assert legend.endswith(" yours")
        assert view._piece_style(1) != view._piece_style(0)
        assert view._piece_style(1) == view.get_component_rich_style("lens--forced")
        # Its panel: no candidates to draw, and nothing breaks.
        view.focus()
        await pilot.press("right")
        await pilot.pause()
        assert view.cursor == 1 and view.has_class("-open")


class StopLensBackend(LensBackend):
    """A reply that ended on a stop string: after its text, the steps of the tokens held back
    for it (as the local engine marks them), which the reply's text never shows."""

    def stream_chat(self, messages, params, tools=(), tool_choice="auto", prefix=None):
        events = list(super().stream_chat(messages, params, tools, tool_choice, prefix))
        held = [
            replace(lens_step(len(self.steps) + i, data), after_stop=True)
            for i, data in enumerate((b"\n", b"User", b":"))
        ]
        self.steps += held
        yield from events[:-1]
        yield from held
        yield events[-1]


async def test_tokens_cut_by_a_stop_string_are_struck_and_named_in_the_legend():
    backend = StopLensBackend("Paris is")
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await lens_reply(pilot)
        view = lens(app)
        reply = app.chat.query(AssistantMessage).last()
        assert reply.text == "Paris is" and len(view.steps) == 5
        legend = str(view.query_one(".lens--legend").render())
        assert legend.endswith(" cut by a stop string")
        cut = view.get_component_rich_style("lens--after-stop")
        assert cut.strike
        # The reply's own tokens tinted by their probability; the held ones struck, dimmed.
        assert [bool(view._piece_style(i).strike) for i in range(5)] == [
            False,
            False,
            True,
            True,
            True,
        ]
        assert "User" in screen_text(app)
