"""The chat's /compare (issue 44): two replies side by side, stopped together or one alone, the
pick with 1 / 2 only on the focused view, blind mode, one column at a time at 80 columns. A real
Textual app (Pilot) on a real SQLite file, with a recording double that answers two at once
(``PairedFake``); the real starter's run is in test_compare_tui_model.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual import events

from fakes import PairedFake, RecordingBackend, send, settle
from helpers import notices, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.compare_view import CompareView
from vibechat.engine.chat.history import History
from vibechat.engine.errors import VibechatError

SIZE = (120, 36)


def view_of(app) -> CompareView | None:
    views = list(app.chat.query(CompareView))
    return views[-1] if views else None


def column_texts(view: CompareView) -> list[str]:
    return [reply.text for reply in view.replies]


async def compared(pilot, spec: str = "temperature=1.2", prompt: str = "question") -> CompareView:
    await send(pilot, f"/compare {spec}")
    await send(pilot, prompt)
    view = view_of(pilot.app)
    assert view is not None
    return view


async def gated_comparison(pilot) -> None:
    """A comparison armed and its prompt sent to a gated backend: the view is up, its replies
    held at the gate."""
    await settle(pilot)
    await send(pilot, "/compare temperature=1.2")
    await send(pilot, "question", wait=False)
    await wait_for(pilot, lambda: view_of(pilot.app) is not None, "the view")


def replies_of_prompt(history: History) -> list:
    stored = history.get(history.latest().id)
    prompt = next(m for m in stored.messages if m.role == "user")
    siblings = history.siblings(stored.messages[-1].id)
    return [prompt, siblings, stored]


async def test_compare_answers_the_next_prompt_twice_side_by_side_and_saves_both(tmp_path: Path):
    history = History(tmp_path / "history.db")
    backend = PairedFake()
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = await compared(pilot)
        await settle(pilot)
        assert any("Compare armed" in n for n in notices(app))
        assert column_texts(view) == ["alpha words here", "beta words there"]
        ((a, b),) = backend.pairs
        assert (
            b.params.temperature == 1.2
            and a.params.temperature == app.conversation.params.temperature
        )
        assert not backend.requests  # one pair, no plain reply
        heads = [str(c.head.render()) for c in view.columns]
        assert heads[0].startswith("A") and "temperature=1.2" in heads[1]
        assert "tok/s" in str(view.replies[1].status_shown)
        # The context meter counts A's reply, which the conversation goes on from.
        assert app.state.context_used == len("alpha words here".split()) > 0
        # The next prompt is answered once again, and goes on from A (said).
        await send(pilot, "and then?")
        assert len(backend.requests) == 1
        assert [m.content for m in backend.requests[0][0]][-2:] == ["alpha words here", "and then?"]
        assert any("goes on from A" in n for n in notices(app))
    stored = history.get(history.latest().id)
    texts = {m.content for m in history.get(history.latest().id, through=None).messages}
    assert "alpha words here" in texts
    first_reply = next(m for m in stored.messages if m.role == "assistant")
    siblings = history.siblings(first_reply.id)
    assert len(siblings) == 2
    assert history.pick_count() == 0


async def test_a_spec_that_does_not_parse_is_one_line_and_nothing_is_armed(tmp_path: Path):
    backend = PairedFake()
    app = create_app(backend, blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "/compare temperature=warm")
        assert any(n.startswith("/compare: side B:") and "\n" not in n for n in notices(app))
        await send(pilot, "question")
        assert view_of(app) is None and not backend.pairs and len(backend.requests) == 1


async def test_pick_b_with_2_on_the_focused_view_makes_it_the_branch_and_counts(tmp_path: Path):
    history = History(tmp_path / "history.db")
    app = create_app(PairedFake(), blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = await compared(pilot)
        await settle(pilot)
        # Typed in the input, a "2" is a "2".
        app.prompt_input.focus()
        await pilot.press("2")
        assert app.prompt_input.text == "2" and history.pick_count() == 0
        app.prompt_input.clear()
        # Tab from the input reaches the comparison, as the hint under it says.
        await pilot.press("tab")
        assert app.focused is view
        await pilot.press("2")
        await wait_for(
            pilot,
            lambda: [w.text for w in app.chat.messages()] == ["question", "beta words there"],
            "the conversation on B's reply",
        )
        await settle(pilot)
        reply = app.chat.messages()[-1]
        assert reply.branch == (2, 2) and "‹ 2/2 ›" in str(reply.label_shown)
        assert view_of(app) is None
        assert history.get(history.latest().id).messages[-1].content == "beta words there"
        # Marked with what it was run with, and so is the other version.
        assert "run with temperature=1.2" in str(reply.status_shown)
        reply.focus()
        await pilot.press("left")
        await wait_for(
            pilot, lambda: app.chat.messages()[-1].text == "alpha words here", "version A"
        )
        assert "run with temperature=0.8" in str(app.chat.messages()[-1].status_shown)
    assert history.pick_count() == 1
    tally = {(t.kind, t.name, t.value): (t.wins, t.picks) for t in history.pick_tally()}
    assert tally[("setting", "temperature", "1.2")] == (1, 1)


async def test_a_pick_key_pressed_before_the_view_was_drawn_picks_nothing(tmp_path: Path):
    history = History(tmp_path / "history.db")
    app = create_app(PairedFake(), blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = await compared(pilot)
        await settle(pilot)
        view.focus()
        await pilot.pause()
        assert view.drawn_at is not None
        early = events.Key("2", "2")
        early.time = view.drawn_at - 1.0
        app.post_message(early)
        await pilot.pause()
        await settle(pilot)
        assert history.pick_count() == 0 and view_of(app) is view
        # The same key pressed once the view is on screen picks.
        app.post_message(events.Key("2", "2"))
        await wait_for(pilot, lambda: history.pick_count() == 1, "the pick")
        await wait_for(pilot, lambda: view_of(app) is None, "the chosen reply on screen")
        await settle(pilot)


async def test_esc_stops_both_sides_and_a_key_stops_one_alone(tmp_path: Path):
    history = History(tmp_path / "history.db")
    backend = PairedFake(reply="a " * 40, reply_b="b " * 40)
    backend.gate = threading.Event()
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await gated_comparison(pilot)
        view = view_of(app)
        view.focus()
        await pilot.pause()
        await pilot.press("right_square_bracket")
        assert backend.side_stops == {"B"}
        backend.gate.set()
        await settle(pilot)
        assert "stopped" in str(view.replies[1].status_shown)
        assert "stopped" not in str(view.replies[0].status_shown)

        backend.gate.clear()
        app.prompt_input.focus()
        await send(pilot, "/compare again", wait=False)
        await wait_for(pilot, lambda: app.generating, "the second comparison")
        second = view_of(app)
        assert second is not view
        await pilot.press("escape")
        backend.gate.set()
        await settle(pilot)
        assert all("stopped" in str(r.status_shown) for r in second.replies)


async def test_a_side_that_fails_says_so_in_its_column_and_the_other_answers(tmp_path: Path):
    def factory(path, **_changes):
        raise VibechatError(f"model file {path} not found: check the path.")

    history = History(tmp_path / "history.db")
    backend = RecordingBackend(reply="the answer")
    app = create_app(backend, blink=False, history=history, backend_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = await compared(pilot, "model:/nowhere/none.gguf")
        await settle(pilot)
        a, b = view.replies
        assert a.text == "the answer"
        assert "not found" in str(b.status_shown) or "not found" in b.text
        assert not app.generating


@pytest.mark.parametrize("first", [0.1, 0.9])
async def test_blind_mode_labels_the_columns_1_and_2_and_reveals_at_the_pick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: float
):
    monkeypatch.setattr("vibechat.app.tui.controllers.comparisons.random.random", lambda: first)
    history = History(tmp_path / "history.db")
    app = create_app(PairedFake(), blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = await compared(pilot, "blind temperature=1.2")
        await settle(pilot)
        heads = [str(c.head.render()) for c in view.columns]
        assert heads[0].startswith("1") and heads[1].startswith("2")
        assert not any("temperature" in h for h in heads)
        texts = column_texts(view)
        assert texts == (
            ["alpha words here", "beta words there"]
            if first >= 0.5
            else ["beta words there", "alpha words here"]
        )
        view.focus()
        await pilot.pause()
        await pilot.press("1")
        await settle(pilot)
        assert any("1 was" in n and "2 was" in n for n in notices(app))
        assert app.chat.messages()[-1].text == texts[0]
    assert history.pick_count() == 1


async def test_at_80_columns_one_reply_shows_at_a_time_and_f_flips(tmp_path: Path):
    app = create_app(PairedFake(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        view = await compared(pilot)
        await settle(pilot)
        first, second = view.columns
        assert view.narrow and first.display and not second.display
        assert "(1/2)" in str(first.head.render())
        view.focus()
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        assert second.display and not first.display and "(2/2)" in str(second.head.render())


async def test_side_b_on_another_model_runs_beside_the_chats_own(tmp_path: Path):
    made: list[Path] = []

    def factory(path, **_changes):
        made.append(path)
        return RecordingBackend(reply="the other model speaks")

    history = History(tmp_path / "history.db")
    backend = RecordingBackend(reply="the chat's model speaks")
    app = create_app(backend, blink=False, history=history, backend_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        view = await compared(pilot, f"model:{tmp_path / 'other.gguf'}")
        await settle(pilot)
        assert column_texts(view) == ["the chat's model speaks", "the other model speaks"]
        assert made == [tmp_path / "other.gguf"]
        assert "model=" in str(view.columns[1].head.render())
        view.focus()
        await pilot.pause()
        await pilot.press("1")
        await settle(pilot)
        assert app.chat.messages()[-1].text == "the chat's model speaks"
    assert history.pick_count() == 1


async def test_a_vs_b_sets_both_sides_off_disarms_and_a_moved_slider_counts(tmp_path: Path):
    backend = PairedFake()
    app = create_app(backend, blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "/compare temperature=1.5")
        await send(pilot, "/compare off")
        await send(pilot, "question")
        assert view_of(app) is None and not backend.pairs
        await send(pilot, "/compare top_k=5 vs top_k=50")
        # Armed, then the parameters change: each side is read over them when the prompt comes.
        app.set_params(app.conversation.params.replace(temperature=0.3))
        await send(pilot, "another")
        ((a, b),) = backend.pairs
        assert (a.params.top_k, b.params.top_k) == (5, 50)
        assert a.params.temperature == b.params.temperature == 0.3
        await send(pilot, "/compare again")
        assert len(backend.pairs) == 2 and backend.pairs[1][1].params.top_k == 50


async def test_the_palettes_pick_b_and_stop_entries_act_on_the_comparison(tmp_path: Path):
    history = History(tmp_path / "history.db")
    backend = PairedFake(reply="a " * 30, reply_b="b " * 30)
    backend.gate = threading.Event()
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await gated_comparison(pilot)
        await app.run_action("compare_stop(0)")
        assert backend.side_stops == {"A"}
        backend.gate.set()
        await settle(pilot)
        await app.run_action("compare_pick(1)")
        await wait_for(pilot, lambda: view_of(app) is None, "the chosen reply on screen")
        await settle(pilot)
        assert app.chat.messages()[-1].branch == (2, 2)
    assert history.pick_count() == 1


async def test_the_flip_key_works_from_the_input_and_the_status_bar_says_what_is_armed(
    tmp_path: Path,
):
    app = create_app(PairedFake(), blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await send(pilot, "/compare temperature=1.2")
        assert "compare: B temperature=1.2" in app.status.render().plain
        await send(pilot, "/compare off")
        assert "compare:" not in app.status.render().plain
        await send(pilot, "/compare top_k=20 vs top_k=80")
        assert "compare: A top_k=20 vs B top_k=80" in app.status.render().plain
        await send(pilot, "question")
        # The armed comparison ran: the next prompt is answered once.
        assert "compare:" not in app.status.render().plain
        view = view_of(app)
        assert view is not None and view.narrow
        first, second = view.columns
        assert first.display and not second.display
        # The input keeps the focus: Ctrl+\ (the bindings table's compare_flip) flips anyway.
        assert app.focused is app.prompt_input
        await pilot.press("ctrl+backslash")
        await pilot.pause()
        assert second.display and not first.display
        binding = next(b for b in app.BINDINGS if getattr(b, "id", None) == "compare_flip")
        assert binding.key == "ctrl+backslash"


async def test_an_image_attached_to_the_prompt_goes_to_both_sides_of_the_pair(tmp_path: Path):
    """With the chat's own vision model, both sides of the pair get the prompt's image (the
    engine encodes it once for both)."""
    from dataclasses import replace

    from PIL import Image

    from fakes import INFO

    photo = tmp_path / "photo.png"
    Image.new("RGB", (32, 24), (200, 30, 30)).save(photo)
    backend = PairedFake()
    backend.info = replace(INFO, projector="/models/mmproj-fake.gguf")
    app = create_app(backend, blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, f"/image {photo}")
        await compared(pilot, prompt="What is in this picture?")
        await settle(pilot)
        ((a, b),) = backend.pairs
        for side in (a, b):
            assert [i.name for i in side.messages[-1].images] == ["photo.png"]


async def test_the_palettes_compare_dialog_arms_the_next_prompt(tmp_path: Path):
    """Ctrl+P "Compare the next prompt…": a small dialog takes side B's settings, Enter arms them
    as /compare does, and the next prompt is answered twice; Esc arms nothing."""
    from test_tui_config import run_from_palette
    from vibechat.app.tui.screens.compare_setup import CompareSetupScreen

    backend = PairedFake()
    app = create_app(backend, blink=False, history=History(tmp_path / "h.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)

        async def open_dialog() -> None:
            await run_from_palette(pilot, "Compare the next prompt")
            await wait_for(
                pilot,
                lambda: (
                    isinstance(app.screen, CompareSetupScreen) and app.screen.focused is not None
                ),
                "the dialog, its input focused",
            )

        await open_dialog()
        await pilot.press(*"top_k=80")
        await pilot.press("escape")
        await settle(pilot)
        assert app.comparisons.armed is None
        await open_dialog()
        await pilot.press(*"temperature=1.2")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.comparisons.armed is not None, "the comparison armed")
        assert app.focused is app.prompt_input
        await send(pilot, "question")
        await settle(pilot)
        ((a, b),) = backend.pairs
        assert b.params.temperature == 1.2 and view_of(app) is not None
