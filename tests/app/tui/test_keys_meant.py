"""A key means what the user saw when they pressed it. Whole sentences typed at a person's pace
into every place the focus can be, while a reply streams and ends in a tool call, while the
conversation list is open, while a question is up: nothing runs, nothing is deleted, no config
is written, and every typed character lands in the input. A real Textual app (Pilot) on a real
SQLite history and a real config file; a recording backend scripts the tool call (the model's
choice does not matter here) and a small in-test tool box records what ran."""

from __future__ import annotations

import threading
from pathlib import Path

from fakes import RecordingBackend, send, settle
from helpers import answer, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.confirm import ConfirmScreen
from vibechat.app.tui.screens.question import QuestionScreen
from vibechat.app.tui.screens.tool_approval import ToolApprovalScreen
from vibechat.app.tui.widgets.sidebar import ConversationSidebar
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.tool_turns import DENIED
from vibechat.engine.tools.approval import ToolApproval
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.backend import GenerationDone
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

SIZE = (110, 36)
PACE = 0.04  # seconds between keys: a quick typist (the keys' order is what matters)
ENVDUMP = ToolSpec("envdump", "Prints the environment", server="evil", tool="envdump")


class Box:
    """The tools on offer; records every call that ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def specs(self):
        return [ENVDUMP]

    def run(self, call, spec, cancel):
        self.ran.append(call.id)
        return ToolResult("HOME=/root")


class ToolsAfterAWhile(RecordingBackend):
    """A reply that streams for as long as the test holds ``hold``, then asks for a tool call."""

    def __init__(self) -> None:
        super().__init__(reply="Done.")
        self.hold = threading.Event()

    def stream_chat(self, messages, params, tools=(), tool_choice="auto"):
        self.started.set()
        self.hold.wait(10)
        yield from super().stream_chat(messages, params, tools, tool_choice)


async def type_like_a_person(pilot, text: str, then=None, at: int = -1) -> None:
    """Type ``text`` one key at a time at ``PACE``; ``then()`` runs after key ``at`` (the tool
    call arrives, a question appears: whatever happens mid-sentence)."""
    for index, character in enumerate(text):
        await pilot.press("space" if character == " " else character)
        await pilot.pause(PACE)
        if index == at and then is not None:
            then()


def seed(db: Path, *titles: str) -> None:
    with History(db) as history:
        for title in titles:
            chat = ChatLog(Conversation(), history, model="Fake 1B")
            chat.add_user(title)
            chat.finish_reply(chat.start_reply(), GenerationDone("ok"))


async def test_typing_on_as_a_reply_ends_in_a_tool_call_runs_nothing_and_every_key_is_in_the_input(
    tmp_path: Path,
):
    """The reported case: "tell me and also" typed on while the reply ended in a tool call ran
    the tool (y) and allowed it for good (the "a" of "and", written into config.toml)."""
    backend, box, policy = ToolsAfterAWhile(), Box(), ToolApproval()
    backend.tool_script = [[ToolCall("c1", "envdump", "{}")]]
    app = create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=box,
        tool_policy=policy,
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "what is in my environment?", wait=False)
        await wait_for(
            pilot, lambda: app.generating and backend.started.is_set(), "the reply to stream"
        )
        sentence = "yes tell me and also what you can do, yes, always allow it"
        await type_like_a_person(
            pilot, sentence, then=backend.hold.set, at=4
        )  # the call arrives at "tell"
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        assert box.ran == [] and policy.always == () and policy.allowed(ENVDUMP) is False
        assert not app.config.path.exists() or "allowed_tools" not in app.config.path.read_text()
        assert app.prompt_input.text == sentence  # every key went on in the input
        # Once seen, letters (and Backspace) still type: the question answers only to its own keys.
        await answer(pilot, "backspace")
        await type_like_a_person(pilot, "t, and y")
        assert isinstance(app.screen, ToolApprovalScreen) and box.ran == []
        assert app.prompt_input.text == sentence + ", and y"
        await answer(pilot, "escape")  # deny: the model is told, and the chat goes on
        await wait_for(
            pilot,
            lambda: not app.generating and not app.tool_rounds.active,
            "the reply after the denial",
        )
        await settle(pilot)
        assert box.ran == [] and backend.requests[-1][0][-1].content == DENIED
        assert not app.config.path.exists() or "allowed_tools" not in app.config.path.read_text()
        assert app.prompt_input.text == sentence + ", and y"


async def test_a_tool_question_takes_no_key_pressed_before_it_was_seen(tmp_path: Path):
    """Enter, or even a grant key, pressed as the question comes up is not an answer: it could
    not have been meant for a question the user had not seen."""
    backend, box, policy = RecordingBackend(reply="ok"), Box(), ToolApproval()
    backend.tool_script = [[ToolCall("c1", "envdump", "{}")]]
    app = create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=box,
        tool_policy=policy,
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        app.prompt_input.load_text("go")
        await pilot.press(
            "enter", "enter", "ctrl+y", "ctrl+e", "ctrl+a"
        )  # the call comes at the first Enter
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        await pilot.press("ctrl+y", "ctrl+a")
        await pilot.pause()
        screen = app.screen
        assert (
            isinstance(screen, ToolApprovalScreen) and not screen.ready
        )  # still within its settle time
        assert box.ran == [] and policy.always == () and not policy.allowed(ENVDUMP)
        shown = " ".join(str(w.render()) for w in screen.query("Static"))
        assert (
            "Ctrl+Y run it once" in shown
            and "Ctrl+A always run it" in shown
            and "Esc deny" in shown
        )
        await answer(pilot, "ctrl+y")  # once seen, the deliberate key runs it
        await wait_for(pilot, lambda: box.ran == ["c1"], "the call to run")
        assert policy.always == ()


async def test_a_paste_while_a_question_is_up_goes_to_the_input(tmp_path: Path):
    from textual import events

    backend, box = RecordingBackend(reply="ok"), Box()
    backend.tool_script = [[ToolCall("c1", "envdump", "{}")]]
    app = create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=box,
        tool_policy=ToolApproval(),
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "go", wait=False)
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        app.post_message(events.Paste("y\ra"))
        await pilot.pause()
        assert (
            app.prompt_input.text == "y\na"
            and box.ran == []
            and isinstance(app.screen, ToolApprovalScreen)
        )
        await answer(pilot, "ctrl+y")  # the deliberate key, once seen, runs it
        await wait_for(pilot, lambda: box.ran == ["c1"], "the call to run")


async def test_typing_into_the_open_conversation_list_deletes_nothing_and_lands_in_the_input(
    tmp_path: Path,
):
    """The reported case: Ctrl+B → Enter left the list open with the focus in the input; Ctrl+B
    again focused the list (not closed it), and "good day" typed there deleted a conversation
    (d opened the question, y answered it); a longer sentence stacked export and rename dialogs."""
    db = tmp_path / "history.db"
    seed(db, "hello?", "about tides")
    app = create_app(RecordingBackend(reply="ok"), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        await pilot.press("ctrl+b", "down", "enter")
        await settle(pilot)
        assert sidebar.display and app.prompt_input.has_focus
        await pilot.press("ctrl+b")  # Ctrl+B toggles: the open list closes
        assert not sidebar.display and app.prompt_input.has_focus
        await pilot.press("ctrl+b")  # and opens again, focused
        assert sidebar.display and sidebar.options.has_focus
        typed = (
            "good day. Good morning! Do you remember my name? yes, delete, rename, export, filter"
        )
        await type_like_a_person(pilot, typed)
        await settle(pilot)
        assert app.screen is app.default_screen  # no question, no dialog
        assert app.prompt_input.text == typed and app.prompt_input.has_focus
        with History(db) as other:
            assert sorted(c.title for c in other.conversations()) == ["about tides", "hello?"]
        assert sidebar.source_filter == "chat"


async def test_a_delete_question_takes_no_letter_and_no_key_pressed_before_it_was_seen(
    tmp_path: Path,
):
    db = tmp_path / "history.db"
    seed(db, "keep me")
    app = create_app(RecordingBackend(reply="ok"), blink=False, history=History(db))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # the question comes up: the keys after it are not answers
        await pilot.press("ctrl+b", "delete", "ctrl+y", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        shown = " ".join(str(w.render()) for w in app.screen.query("Static"))
        assert "Ctrl+Y delete it" in shown and "Esc keep it" in shown  # it says what each key does
        await answer(pilot, "y")
        await type_like_a_person(pilot, "es, yes")
        assert isinstance(app.screen, ConfirmScreen) and app.prompt_input.text == "yes, yes"
        with History(db) as other:
            assert other.count() == 1
        await answer(pilot, "ctrl+y")
        await wait_for(pilot, lambda: not isinstance(app.screen, QuestionScreen), "the answer")
        await settle(pilot)
        with History(db) as other:
            assert other.count() == 0
