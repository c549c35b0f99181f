"""Coming back to the chat (issue 46, point 2): ``vibechat --continue`` / ``-c`` and
``--conversation ID`` open the chat on a saved conversation, picked as ``run`` picks it;
``continue_last`` in the config makes that the default and ``--new`` starts a new chat once; the
welcome of an empty chat offers the last conversation on one key. A real SQLite history under
the test's data dir, the real command line (typer's runner; a real process for the errors) up to
the screen's start, and a real Textual app (Pilot) with the recording backend from there."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import VIBECHAT_BIN
from fakes import RecordingBackend, settle
from helpers import notices, wait_for
from vibechat.app.commands import cli as cli_module
from vibechat.app.tui import create_app
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.database import default_path
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import GenerationDone

SIZE = (100, 30)


def seed(chats: list[tuple[str, list[str]]], **settings: Any) -> list[int]:
    """Conversations saved as the chat saves them, in the data dir's history (oldest first)."""
    ids = []
    with History(default_path()) as history:
        for first, rest in chats:
            chat = ChatLog(
                Conversation(**settings), history, model="Fake 1B", model_path="/models/fake.gguf"
            )
            for i, text in enumerate([first, *rest]):
                if i % 2 == 0:
                    chat.add_user(text)
                else:
                    chat.finish_reply(chat.start_reply(), GenerationDone(text))
            ids.append(chat.conversation_id)
    return ids


@pytest.fixture
def two_chats() -> list[int]:
    return seed(
        [
            ("Older chat", ["Older answer"]),
            ("Newest chat", ["Newest answer", "And then?", "Then this."]),
        ],
        system="Be brief.",
        params=SamplingParams(temperature=1.25),
    )


@pytest.fixture
def started(monkeypatch) -> dict[str, Any]:
    """What the command line hands the chat when it starts (the screen itself is not opened:
    the test opens it with the same history and conversation, and the recording backend)."""
    seen: dict[str, Any] = {}

    def run_tui(**kwargs: Any) -> int:
        seen.update(kwargs)
        return 0

    monkeypatch.setattr("vibechat.app.tui.run_tui", run_tui)
    return seen


def start(*args: str, env: dict[str, str] | None = None) -> Any:
    result = CliRunner().invoke(cli_module.cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result


async def messages_on_screen(started: dict[str, Any], backend: RecordingBackend | None = None):
    """The chat as the command line started it: the app, its messages as (role, text), the
    backend."""
    backend = backend or RecordingBackend()
    history = started["history"] or History(default_path())
    app = create_app(
        backend,
        blink=False,
        history=history,
        open_conversation=started["open_conversation"],
        open_over=started.get("open_over"),
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        if started["open_conversation"] is not None:
            await wait_for(
                pilot,
                lambda: (
                    app.chatlog.conversation_id == started["open_conversation"]
                    and app.chat.messages()
                ),
            )
            await settle(pilot)
        shown = [(w.role, w.text) for w in app.chat.messages()]
        return app, shown, backend


@pytest.mark.parametrize("flag", ["--continue", "-c"])
async def test_continue_opens_the_chat_on_the_last_conversation_with_its_messages_and_kv_cache(
    two_chats, started, flag
):
    start(flag)
    assert started["open_conversation"] == two_chats[1]
    app, shown, backend = await messages_on_screen(started)
    assert shown == [
        ("user", "Newest chat"),
        ("assistant", "Newest answer"),
        ("user", "And then?"),
        ("assistant", "Then this."),
    ]
    assert app.conversation.system == "Be brief." and app.conversation.params.temperature == 1.25
    # Its KV cache is rebuilt the way Ctrl+B → Enter rebuilds it (a snapshot is restored there).
    assert [m.content for m in backend.prefills[-1][1:]] == [
        "Newest chat",
        "Newest answer",
        "And then?",
        "Then this.",
    ]


async def test_flags_given_with_continue_go_over_the_conversations_own_as_in_run(
    two_chats, started
):
    start("-c", "--temperature", "0.3", "--system", "Be verbose.")
    app, shown, backend = await messages_on_screen(started)
    assert shown[0] == ("user", "Newest chat")
    assert app.conversation.params.temperature == 0.3
    assert app.conversation.system == "Be verbose."
    with History(default_path()) as history:  # saved with it, as a slider moved or /system would
        stored = history.get(two_chats[1])
    assert stored.params.temperature == 0.3 and stored.system == "Be verbose."
    started.clear()
    start("-c")  # nothing named: the conversation's own, as saved
    app, _shown, _backend = await messages_on_screen(started)
    assert app.conversation.params.temperature == 0.3 and app.conversation.system == "Be verbose."


async def test_conversation_id_opens_the_chat_on_that_conversation(two_chats, started):
    start("--conversation", str(two_chats[0]))
    assert started["open_conversation"] == two_chats[0]
    _app, shown, _backend = await messages_on_screen(started)
    assert shown == [("user", "Older chat"), ("assistant", "Older answer")]


def chat_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def test_an_unknown_id_an_empty_history_or_a_conflict_is_one_line_and_no_traceback(user_dirs):
    empty = chat_process("--continue")
    assert empty.returncode == 1, empty.stderr
    assert empty.stderr.count("\n") == 1 and "no saved conversation to continue yet" in empty.stderr
    assert "leave out --continue" in empty.stderr and "Traceback" not in empty.stderr
    seed([("Only chat", ["Only answer"])])
    unknown = chat_process("--conversation", "99")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert "no conversation 99" in unknown.stderr and "vibechat history list" in unknown.stderr
    both = chat_process("--continue", "--new")
    assert (
        both.returncode == 1 and both.stderr.count("\n") == 1 and "use one of them" in both.stderr
    )
    unsaved = chat_process("-c", "--no-save")
    assert (
        unsaved.returncode == 1
        and unsaved.stderr.count("\n") == 1
        and "--no-save" in unsaved.stderr
    )
    misplaced = chat_process("-c", "history", "list")  # a usage error (README's exit statuses: 2)
    assert misplaced.returncode == 2 and misplaced.stderr.count("\n") == 1, misplaced.stderr
    assert (
        "--continue before 'history' opens the chat" in misplaced.stderr and misplaced.stdout == ""
    )


async def test_continue_last_in_the_config_opens_the_last_conversation_and_new_overrides_it(
    two_chats, started, user_dirs
):
    config = user_dirs["config"] / "vibechat" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("continue_last = true\n")
    start()
    assert started["open_conversation"] == two_chats[1]
    _app, shown, _backend = await messages_on_screen(started)
    assert shown[0] == ("user", "Newest chat")
    started.clear()
    start("--new")
    assert started["open_conversation"] is None
    config.unlink()
    started.clear()
    start(env={"VIBECHAT_CONTINUE_LAST": "true"})  # the variable as well
    assert started["open_conversation"] == two_chats[1]


def test_continue_last_with_nothing_saved_starts_a_new_chat_without_a_word(started):
    result = start(env={"VIBECHAT_CONTINUE_LAST": "true"})
    assert started["open_conversation"] is None and result.output == ""


async def test_the_welcome_offers_the_last_conversation_on_ctrl_r_and_opens_it(two_chats):
    app = create_app(RecordingBackend(), blink=False, history=History(default_path()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        offer = app.chat.query_one(".chat--offer")
        await wait_for(pilot, lambda: offer.display)
        assert str(offer.render()) == "Ctrl+R reopens your last chat: “Newest chat”"
        await pilot.press("ctrl+r")
        await wait_for(
            pilot, lambda: app.chatlog.conversation_id == two_chats[1] and app.chat.messages()
        )
        await settle(pilot)
        assert [w.text for w in app.chat.messages()][:2] == ["Newest chat", "Newest answer"]
        assert not offer.display  # a conversation on screen: Ctrl+R regenerates again
        assert "resume_last" in {b.id for b in app._bindings_list()}
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert offer.display and "Newest chat" in str(offer.render())


async def test_the_offered_title_is_one_sanitised_line(user_dirs):
    with History(default_path()) as history:
        cid = history.create(title="Red \x1b[31malert\x1b]0;pwned\x07\nsecond line")
        history.add_message(cid, "user", "hi")
    app = create_app(RecordingBackend(), blink=False, history=History(default_path()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        offer = app.chat.query_one(".chat--offer")
        await wait_for(pilot, lambda: offer.display)
        text = str(offer.render())
        assert "\x1b" not in text and "\x07" not in text and "\n" not in text
        assert text.startswith("Ctrl+R reopens your last chat: “Red") and "second line" in text


STORY = (
    "Here are my notes on the history of Rome, from its founding by Romulus to the fall "
    "of the western "
    "empire, with the kings, the republic, the Punic wars against Carthage, Caesar, "
    "Augustus and the "
    "emperors after him. "
) * 6


@pytest.mark.model
async def test_a_chat_started_on_a_conversation_restores_its_kv_snapshot(
    starter_path, caplog, monkeypatch
):
    """The real starter: a chat, closed (its KV snapshot written), then a new chat started on that
    conversation (``--continue``'s) restores the snapshot as the list's Enter does, and the next
    reply evaluates only the new prompt."""
    from conftest import worker_threads
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    def engine() -> LlamaCppBackend:
        return LlamaCppBackend(
            LlamaCppOptions(
                threads=worker_threads(), model_path=starter_path, context_size=2048, repack="off"
            )
        )

    params = SamplingParams(temperature=0, max_tokens=6)
    first = engine()
    try:
        app = create_app(first, blink=False, history=History(default_path()), params=params)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.prompt_input.load_text(STORY + "Who founded Rome?")
            await pilot.press("enter")
            await settle(pilot)
            assert app.replies.last.stats is not None
    finally:
        first.close()  # its snapshot is on disk by now
    with History(default_path()) as history:
        latest = history.latest()
    assert latest is not None
    monkeypatch.setattr(
        logging.getLogger("vibechat"), "propagate", True
    )  # (a CLI test may have turned it off)
    again = engine()
    try:
        app = create_app(
            again, blink=False, history=History(default_path()), open_conversation=latest.id
        )
        with caplog.at_level(logging.INFO, logger="vibechat"):
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(
                    pilot,
                    lambda: app.chatlog.conversation_id == latest.id and app.state.context_used > 0,
                    "the conversation opened and its cache rebuilt",
                    bound=120,
                )
                assert app.chat.messages()[0].text.endswith("Who founded Rome?")
                restored = [
                    r.getMessage()
                    for r in caplog.records
                    if r.getMessage().startswith("prefill: restored")
                ]
                assert restored, caplog.text
                app.prompt_input.load_text("And who defeated Hannibal?")
                await pilot.press("enter")
                await settle(pilot)
                stats = app.replies.last.stats
                assert stats is not None and stats.prompt_tokens_evaluated < stats.prompt_tokens / 4
    finally:
        again.close()


def test_the_chat_starts_on_the_conversations_own_model_where_opening_it_would_load_it(
    started, tmp_path
):
    """No model is loaded twice: a conversation had with another local file that is here starts
    the chat on that file (the list's Enter would switch to it), also where ``--model`` names
    that file; a conversation of a server the local chat does not use starts as configured
    (opening it then says which model replies: the list's way)."""
    own = tmp_path / "own-model.gguf"
    own.write_bytes(b"GGUF")
    with History(default_path()) as history:
        local = ChatLog(Conversation(), history, model="Own 1B", model_path=str(own))
        local.add_user("hello")
    start("--conversation", str(local.conversation_id))
    assert started["engine"].model == str(own) and not started["engine"].remote
    started.clear()
    start("--conversation", str(local.conversation_id), "--model", str(own))  # the same file
    assert started["engine"].model == str(own)
    with History(default_path()) as history:
        remote = ChatLog(
            Conversation(),
            history,
            model="stub-small",
            model_path="http://127.0.0.1:9/v1/models/stub-small",
        )
        remote.add_user("hello")
    started.clear()
    start("-c")
    assert started["open_conversation"] == remote.conversation_id
    assert not started["engine"].remote and started["engine"].model != "stub-small"


def test_continue_with_another_model_named_is_one_line_and_loads_nothing(started, tmp_path):
    """``vibechat --continue --model X`` on a conversation had with A (its file here) used to
    load X and then switch to A on opening it: two loads, and not the model the user typed. A
    conversation goes on with its own model, so the mix is one line naming both and the fix,
    as ``run --continue --model X`` is without ``--switch-model``; nothing opens."""
    own, other = tmp_path / "own-model.gguf", tmp_path / "other-model.gguf"
    own.write_bytes(b"GGUF")
    other.write_bytes(b"GGUF")
    with History(default_path()) as history:
        chat = ChatLog(Conversation(), history, model="Own 1B", model_path=str(own))
        chat.add_user("hello")
    with History(default_path()) as history:  # a model of a server: another id of that server
        served = ChatLog(
            Conversation(),
            history,
            model="stub-small",
            model_path="http://127.0.0.1:9/v1/models/stub-small",
        )
        served.add_user("hello")
    cid, sid = str(chat.conversation_id), str(served.conversation_id)
    server = ["--base-url", "http://127.0.0.1:9/v1", "--model", "stub-large"]
    on_server, large = "stub-small on http://127.0.0.1:9/v1", "the model stub-large"
    for args, flag, was, named in [
        (["--conversation", cid, "--model", str(other)], "--conversation", "Own 1B", str(other)),
        (["--conversation", sid, *server], "--conversation", on_server, large),
        (["--continue", *server], "--continue", on_server, large),
        (["-c", *server], "--continue", on_server, large),
    ]:
        result = chat_process(*args)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, (args, result.stderr)
        line, local = result.stderr, was == "Own 1B"
        own_id, own_name = (cid, "Own 1B") if local else (sid, "stub-small")
        assert f"conversation {own_id} was with {was}, and the command line names" in line
        assert named in line and "Traceback" not in line and result.stdout == ""
        assert f"leave that out to go on with {own_name}, or leave out {flag}" in line
    result = CliRunner().invoke(cli_module.cli, ["--conversation", cid, "--model", str(other)])
    assert result.exit_code == 1 and started == {}  # the chat never started


async def test_continue_last_with_another_model_named_starts_a_new_chat_on_it(
    two_chats, started, user_dirs, tmp_path
):
    """``continue_last`` is a standing default and never stops a start: with a model named on
    purpose that the last conversation was not had with, the chat starts new on that model (one
    load, no switch), and its welcome offers the last conversation on Ctrl+R."""
    own = tmp_path / "own-model.gguf"
    own.write_bytes(b"GGUF")
    with History(default_path()) as history:
        chat = ChatLog(Conversation(), history, model="Own 1B", model_path=str(own))
        chat.add_user("Own chat")
    other = tmp_path / "other-model.gguf"
    other.write_bytes(b"GGUF")
    start("--model", str(other), env={"VIBECHAT_CONTINUE_LAST": "true"})
    assert started["open_conversation"] is None and started["engine"].model == str(other)
    app = create_app(RecordingBackend(), blink=False, history=started["history"])
    async with app.run_test(size=SIZE) as pilot:
        offer = app.chat.query_one(".chat--offer")
        await wait_for(pilot, lambda: offer.display)
        await settle(pilot)
        assert app.chatlog.conversation_id is None and not app.chat.messages()
        assert "Own chat" in str(offer.render())
    started.clear()
    start("--model", str(own), env={"VIBECHAT_CONTINUE_LAST": "true"})  # its own: it opens
    assert started["open_conversation"] == chat.conversation_id
    assert started["engine"].model == str(own)


class HeldLoad(RecordingBackend):
    """A model whose load waits for ``release`` and then fails or succeeds (``fails``)."""

    def __init__(self, fails: bool) -> None:
        super().__init__()
        self.release = threading.Event()
        self.fails = fails

    def load(self, on_progress=None):
        self.release.wait(10)
        if self.fails:
            from vibechat.engine.errors import VibechatError

            raise VibechatError("the model file is damaged: pick another with --model.")
        return super().load(on_progress)


@pytest.mark.parametrize("fails", [False, True])
async def test_the_start_conversation_opens_once_the_model_settles_and_none_is_offered_meanwhile(
    two_chats, fails
):
    """While the model loads, the welcome offers nothing (the conversation the chat was started on
    is about to open: Ctrl+R there would open it early, without its cache); once the model is
    ready it opens, and a model that cannot load leaves its messages on screen all the same."""
    backend = HeldLoad(fails)
    app = create_app(
        backend, blink=False, history=History(default_path()), open_conversation=two_chats[0]
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.sidebar.summaries, "the list")
        await pilot.pause()
        assert not app.chat.query_one(".chat--offer").display and app.chats.offered() is None
        backend.release.set()
        await wait_for(
            pilot, lambda: app.chatlog.conversation_id == two_chats[0] and app.chat.messages()
        )
        await settle(pilot)
        assert [w.text for w in app.chat.messages()] == ["Older chat", "Older answer"]
        assert bool(backend.prefills) is not fails  # a cache to rebuild only with a model


async def run_from_palette(app, pilot, title: str) -> None:
    """``title`` chosen in the command palette (Ctrl+P, typed, Enter), as the user does."""
    await pilot.press("ctrl+p")
    await pilot.press(*title.lower())

    def highlighted() -> bool:
        commands = app.screen.query_one("CommandList")
        index = commands.highlighted
        return index is not None and title in str(commands.get_option_at_index(index).prompt)

    await wait_for(pilot, highlighted, "the palette to find the command")  # searched in a worker
    await pilot.press("enter")
    await settle(pilot)


async def test_reopen_last_chat_with_nothing_to_reopen_says_so_in_one_line(user_dirs):
    """Ctrl+R in an empty chat and the palette's "Reopen last chat" with no saved conversation
    said nothing about reopening: now one notice says why, as every action that cannot act."""
    app = create_app(RecordingBackend(), blink=False, history=History(default_path()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.clear_notifications()
        await pilot.press("ctrl+r")  # no offer on the welcome: the key regenerates, and says both
        await settle(pilot)
        assert notices(app) == [
            "Nothing to regenerate yet (and no saved conversation to reopen): send a message first."
        ]
        app.clear_notifications()
        await run_from_palette(app, pilot, "Reopen last chat")
        assert notices(app) == ["No saved conversation to reopen yet."]
        assert app.chatlog.conversation_id is None and not app.chat.messages()


async def test_reopen_last_chat_from_the_palette_in_a_chat_with_messages_says_why_not(two_chats):
    """In a chat with messages (where Ctrl+R regenerates), the palette's "Reopen last chat"
    says in one line that it reopens from an empty chat, and leaves the conversation open."""
    app = create_app(
        RecordingBackend(),
        blink=False,
        history=History(default_path()),
        open_conversation=two_chats[0],
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.chatlog.conversation_id == two_chats[0])
        await settle(pilot)
        app.clear_notifications()
        await run_from_palette(app, pilot, "Reopen last chat")
        [line] = notices(app)
        assert "empty chat" in line and "Ctrl+N" in line and "\n" not in line
        assert app.chatlog.conversation_id == two_chats[0]


@pytest.mark.parametrize(
    ("title", "line"),
    [
        ("Stop", "Nothing to stop: no reply is being written."),
        ("Cancel edit", "No edit to cancel: Ctrl+L takes a message back to edit."),
    ],
)
async def test_an_action_that_cannot_run_says_why_from_the_palette(user_dirs, title, line):
    """Stop with no reply on its way and Cancel edit with no edit: chosen in the palette, each
    did nothing and said nothing; now one line says why, and nothing changes."""
    app = create_app(RecordingBackend(), blink=False, history=History(default_path()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.clear_notifications()
        await run_from_palette(app, pilot, title)
        assert notices(app) == [line]
        assert not app.chat.messages() and app.focused is app.prompt_input
