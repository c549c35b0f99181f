"""The message tree in the chat: Ctrl+R and Ctrl+L (on the last message or a focused earlier
one) add a sibling instead of deleting; ‹ 2/3 › shows on a message with siblings, and ← / →
on it switch versions, the conversation below following; a branch forks into a new
conversation. A real Textual app (Pilot) on a real SQLite file, with the recording backend."""

from __future__ import annotations

from pathlib import Path

from fakes import RecordingBackend, send, settle
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.engine.chat.history import History

SIZE = (110, 36)


def label(widget) -> str:
    return str(widget.label_shown)


def shown(app) -> list[str]:
    return [w.text for w in app.chat.messages()]


async def test_a_regenerated_reply_keeps_the_first_and_the_arrows_switch_between_them(
    tmp_path: Path,
):
    history = History(tmp_path / "history.db")
    backend = RecordingBackend(reply="the ocean answer")
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "question")
        backend.reply = "the desert answer"
        await pilot.press("ctrl+r")
        await settle(pilot)
        reply = app.chat.messages()[-1]
        assert (
            reply.text == "the desert answer"
            and reply.branch == (2, 2)
            and "‹ 2/2 ›" in label(reply)
        )
        assert [h.snippet for h in history.search("ocean")]  # the first reply is kept, and found

        reply.focus()
        await pilot.press("left")
        await wait_for(
            pilot, lambda: shown(app) == ["question", "the ocean answer"], "the first version"
        )
        await settle(pilot)
        first = app.chat.messages()[-1]
        assert first.branch == (1, 2) and "‹ 1/2 ›" in label(first)
        assert app.focused is first
        # The model is sent the branch on screen.
        backend.reply = "more"
        app.prompt_input.focus()
        await send(pilot, "and then?")
        assert [m.content for m in backend.requests[-1][0]] == [
            "question",
            "the ocean answer",
            "and then?",
        ]

        assert app.chat.messages()[1].branch == (1, 2)
        app.chat.messages()[1].focus()
        await pilot.press("right")
        await wait_for(
            pilot, lambda: shown(app) == ["question", "the desert answer"], "the second version"
        )
        await settle(pilot)
    # Reopened as it was left: on the branch switched to.
    assert [
        m.content for m in History(tmp_path / "history.db").open().get(history.latest().id).messages
    ] == ["question", "the desert answer"]


async def test_ctrl_l_on_an_earlier_prompt_starts_a_sibling_branch_and_the_old_one_stays(
    tmp_path: Path,
):
    history = History(tmp_path / "history.db")
    backend = RecordingBackend(reply="ok")
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for prompt in ("one", "two", "three"):
            await send(pilot, prompt)
        app.chat.messages()[2].focus()  # "two"
        await pilot.press("ctrl+l")
        await settle(pilot)
        assert app.prompt_input.text == "two" and shown(app) == ["one", "ok"]
        app.prompt_input.load_text("two, better")
        await pilot.press("enter")
        await settle(pilot)
        assert [m.content for m in backend.requests[-1][0]] == ["one", "ok", "two, better"]
        edited = app.chat.messages()[2]
        assert edited.branch == (2, 2) and "‹ 2/2 ›" in label(edited)
        edited.focus()
        await pilot.press("left")
        await wait_for(
            pilot, lambda: shown(app) == ["one", "ok", "two", "ok", "three", "ok"], "the old branch"
        )
        await settle(pilot)


async def test_ctrl_r_on_an_earlier_reply_regenerates_it_and_a_fork_copies_the_branch(
    tmp_path: Path,
):
    history = History(tmp_path / "history.db")
    backend = RecordingBackend(reply="first")
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "a")
        await send(pilot, "b")
        backend.reply = "again"
        app.chat.messages()[1].focus()
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert shown(app) == ["a", "again"] and app.chat.messages()[1].branch == (2, 2)
        assert [m.content for m in backend.requests[-1][0]] == ["a"]
        original = app.session.chat.conversation_id
        assert len(history.get(original).tree) == 5  # nothing deleted

        app.action_fork_conversation()
        await wait_for(
            pilot, lambda: app.session.chat.conversation_id not in (None, original), "the fork"
        )
        await settle(pilot)
        fork = history.get(app.session.chat.conversation_id)
        assert [m.content for m in fork.tree] == ["a", "again"] and shown(app) == ["a", "again"]
        assert len(history.get(original).tree) == 5


async def test_search_finds_a_reply_on_a_hidden_branch_and_opens_the_conversation_on_it(
    tmp_path: Path,
):
    from vibechat.app.tui.screens.history_screens import SearchScreen
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.turns.backend import GenerationDone

    path = tmp_path / "history.db"
    with History(path) as seeded:
        chat = ChatLog(Conversation(), seeded)
        chat.add_user("tell me something")
        chat.finish_reply(chat.start_reply(), GenerationDone("the ocean is wide"))
        chat.drop_last_reply()  # regenerated: the ocean reply is a hidden sibling now
        chat.finish_reply(chat.start_reply(), GenerationDone("mountains are tall"))
        chat.add_user("why?")
        chat.finish_reply(chat.start_reply(), GenerationDone("because"))
    app = create_app(RecordingBackend(), blink=False, history=History(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+f")
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen)
        await pilot.press(*"ocean")
        await settle(pilot)
        assert len(app.screen.hits) == 1
        await pilot.press("enter")
        await settle(pilot)
        assert shown(app) == ["tell me something", "the ocean is wide"]
        found = app.focused
        assert found is app.chat.messages()[1] and found.branch == (1, 2)
        assert [t.content for t in app.session.conversation.turns] == [
            "tell me something",
            "the ocean is wide",
        ]


async def test_a_sent_prompt_does_not_rebuild_the_footer_for_its_messages_place(
    tmp_path: Path, monkeypatch
):
    """A new message's place among its siblings (‹ 1/1 ›) is set as it is saved; its keys are
        the footer's only while it has the focus, so the frame that shows a sent prompt does not
        rebuild the footer's keys for it (that was ~10 ms of the reply's start, its worst event-loop
        gap: docs/PERFORMANCE.md). The footer still hears of a focused message's keys (and rebuilds
    only if what it shows changes: tests/app/tui/test_footer.py)."""
    import threading

    from textual.widgets import Footer

    import vibechat.app.tui.shell.app as app_module
    from vibechat.app.tui.widgets.footer import KeysFooter

    monkeypatch.setattr(
        app_module, "FOOTER_DELAY_S", 600.0
    )  # the Stop key's own refresh, out of the way
    rebuilt: list[object] = []
    recompose = Footer.recompose

    async def counting(self):
        rebuilt.append(self)
        return await recompose(self)

    monkeypatch.setattr(Footer, "recompose", counting)
    heard: list[object] = []
    bindings_changed = KeysFooter.bindings_changed

    def hearing(self, screen):
        heard.append(screen)
        return bindings_changed(self, screen)

    monkeypatch.setattr(KeysFooter, "bindings_changed", hearing)
    gate = threading.Event()
    backend = RecordingBackend(reply="the ocean answer")
    backend.gate = gate
    app = create_app(backend, blink=False, history=History(tmp_path / "history.db"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        rebuilt.clear()
        await send(pilot, "question", wait=False)
        backend.started.wait(5)
        await wait_for(
            pilot,
            lambda: len(app.chat.messages()) == 2 and app.chat.messages()[-1].message_id,
            "the reply saved, with its place",
        )
        await pilot.pause()
        assert app.chat.messages()[-1].branch == (1, 1)
        assert rebuilt == []
        gate.set()
        await settle(pilot)

        reply = app.chat.messages()[-1]
        reply.focus()
        await pilot.pause()
        heard.clear()
        reply.set_branch(1, 2)  # focused: its ← / → are live now, and the footer hears of it
        await wait_for(pilot, lambda: heard, "the footer told the keys may have changed")
