"""Saved conversations in the TUI: saving as you chat, the sidebar, opening, search,
rename, delete, export. A real Textual app (Pilot) on a real SQLite file; the
recording backend, and the real starter model for the cache rebuild."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from textual.widgets import OptionList

from conftest import read_only_dir, worker_threads
from fakes import RecordingBackend, send, settle
from helpers import answer, notices, notifications, wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.conversation.earlier_messages import EarlierMessages
from vibechat.app.tui.screens.confirm import ConfirmScreen
from vibechat.app.tui.screens.history_screens import ExportScreen, RenameScreen, SearchScreen
from vibechat.app.tui.widgets.sidebar import ConversationSidebar
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.settings.config import config_path
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    Candidate,
    GenerationDone,
    TextDelta,
    TokenCandidates,
)

SIZE = (110, 36)


def seed_history(
    path: Path,
    chats: list[tuple[str, list[str]]],
    *,
    model: str = "Fake 1B",
    model_path: str = "/models/fake.gguf",
    **settings,
) -> list[int]:
    """Conversations written as the app writes them: (title prompt, [reply, prompt, reply…])."""
    ids = []
    with History(path) as history:
        for first, rest in chats:
            chat = ChatLog(Conversation(**settings), history, model=model, model_path=model_path)
            turns = [first, *rest]
            for i, text in enumerate(turns):
                if i % 2 == 0:
                    chat.add_user(text)
                else:
                    chat.finish_reply(chat.start_reply(), GenerationDone(text))
            ids.append(chat.conversation_id)
    return ids


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "history.db"


def make_app(db: Path, backend: RecordingBackend | None = None, **kwargs):
    return create_app(backend or RecordingBackend(), blink=False, history=History(db), **kwargs)


def lens_step(index: int, text: str) -> TokenCandidates:
    """A step of the token lens for a word of the reply: the word chosen, another one cut."""
    chosen = Candidate(index, text.encode(), text, -0.2, 0.8)
    other = Candidate(99, b" no", " no", -1.9, 0.0, cut="top-k")
    return TokenCandidates(index, chosen, (chosen, other))


class LensBackend(RecordingBackend):
    """The recording backend with the token lens on: each word's step before its text."""

    def stream_chat(self, messages, params, tools=(), tool_choice="auto"):
        index = 0
        for event in super().stream_chat(messages, params, tools, tool_choice):
            if isinstance(event, TextDelta):
                yield lens_step(index, event.text)
                index += 1
            yield event


async def test_a_chat_is_saved_as_it_happens_and_listed_in_the_sidebar(db):
    backend = RecordingBackend(reply="one two three four five six")
    backend.gate = threading.Event()
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("Tell me about SQLite")
        await pilot.press("enter")
        backend.started.wait(5)
        await pilot.pause()
        # Before the reply ends: the prompt is saved, the reply is a 'streaming' row.
        with History(db) as other:
            stored = other.get(other.latest().id)
            assert [(m.role, m.content, m.status) for m in stored.messages] == [
                ("user", "Tell me about SQLite", "complete"),
                ("assistant", "", "streaming"),
            ]
        backend.gate.set()
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        assert [s.title for s in sidebar.summaries] == ["Tell me about SQLite"]
        assert sidebar.current == app.chatlog.conversation_id
    with History(db) as other:
        stored = other.get(other.latest().id)
        assert [(m.role, m.content, m.status) for m in stored.messages] == [
            ("user", "Tell me about SQLite", "complete"),
            ("assistant", backend.reply, "complete"),
        ]
        assert stored.summary.model == "Fake 1B"


async def test_the_chat_keeps_a_replys_candidates_within_the_lens_history_bytes_setting(db):
    """Issue 43 point 4: the chat bounds the candidates it saves by the config's
    ``lens_history_bytes`` (as ``run`` does), the steps past it counted as ``truncated``."""
    backend = LensBackend(reply="one two three four five six")
    steps = [lens_step(i, w if i == 0 else " " + w) for i, w in enumerate(backend.reply.split())]
    items = [step.to_openai() for step in steps]
    # Room for the first two steps' JSON, not the third's.
    bound = len(json.dumps(items[0])) + len(json.dumps(items[1]))
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"lens_history_bytes = {bound}\n")
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Count to six")
    with History(db) as other:
        reply = other.get(other.latest().id).messages[-1]
    assert reply.content == backend.reply
    assert reply.logprobs == {"content": items[:2], "truncated": 4}


async def test_stopping_a_reply_saves_it_as_stopped(db):
    backend = RecordingBackend(reply="a b c d e f g")
    backend.gate = threading.Event()
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("go")
        await pilot.press("enter")
        backend.started.wait(5)
        await pilot.press("escape")
        backend.gate.set()
        await settle(pilot)
    with History(db) as other:
        assert other.get(other.latest().id).messages[-1].status == "stopped"


async def test_sidebar_lists_newest_first_and_opens_a_conversation_with_its_settings(db):
    ids = seed_history(
        db,
        [
            ("First chat", ["First answer", "Follow-up", "Second answer"]),
            ("Newest chat", ["Hello back"]),
        ],
        system="Talk like a pirate.",
        params=SamplingParams(temperature=1.3, top_k=11),
    )
    backend = RecordingBackend(reply="Arr")
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        assert not sidebar.display
        await pilot.press("ctrl+b")
        assert sidebar.display and sidebar.options.has_focus
        assert [s.id for s in sidebar.summaries] == [ids[1], ids[0]]
        await pilot.press("down", "enter")  # the older one
        await settle(pilot)
        assert [(w.role, w.text) for w in app.chat.messages()] == [
            ("user", "First chat"),
            ("assistant", "First answer"),
            ("user", "Follow-up"),
            ("assistant", "Second answer"),
        ]
        assert app.conversation.system == "Talk like a pirate."
        assert app.conversation.params.temperature == 1.3 and app.panel.params.top_k == 11
        # The KV cache is rebuilt from its messages (in a worker).
        assert backend.prefills[-1][0].content == "Talk like a pirate."
        assert [m.content for m in backend.prefills[-1][1:]] == [
            "First chat",
            "First answer",
            "Follow-up",
            "Second answer",
        ]
        assert sidebar.current == ids[0]
        # Continuing it adds to it, and only the new prompt is evaluated.
        app.prompt_input.focus()
        await send(pilot, "Third question")
        messages, params = backend.requests[-1]
        assert [m.content for m in messages][-2:] == ["Second answer", "Third question"]
        assert params.temperature == 1.3
        assert app.replies.last.stats.prompt_tokens_evaluated < app.replies.last.stats.prompt_tokens
        assert sidebar.summaries[0].id == ids[0]  # moved to the top
        # Ctrl+B toggles the list: from the prompt it hides the (still shown) list; again shows and
        # focuses it on the open conversation; again hides it, the input taking the focus back.
        await pilot.press("ctrl+b")
        assert not sidebar.display and app.prompt_input.has_focus
        await pilot.press("ctrl+b")
        assert sidebar.display and sidebar.options.has_focus
        assert sidebar.options.highlighted_option.id == str(ids[0])
        await pilot.press("ctrl+b")
        assert not sidebar.display and app.prompt_input.has_focus
    with History(db) as other:
        assert [m.content for m in other.get(ids[0]).messages][-2:] == ["Third question", "Arr"]


@pytest.mark.parametrize(
    ("name", "path", "expected"),
    [
        ("Fake 1B", "/models/fake.gguf", None),  # the loaded file
        ("Fake 1B", "/elsewhere/fake.gguf", None),  # the same file, moved
        ("Fake 1B", "/elsewhere/fake-1b-Q4_K_M.gguf", None),  # the same quantization, another name
        (
            "Fake 1B",
            "/elsewhere/fake-1b-Q8_0.gguf",
            "This conversation was with fake-1b-Q8_0.gguf; it continues with fake.gguf, "
            "another file of Fake 1B",
        ),
        (
            "Other 7B",
            "/models/other.gguf",
            "This conversation was with Other 7B; it continues with Fake 1B",
        ),
        (None, None, None),  # saved before a model loaded
    ],
)
def test_the_note_on_opening_a_conversation_had_with_another_model_file(name, path, expected):
    from fakes import INFO
    from vibechat.app.tui.controllers.model_change import model_change_note

    note = model_change_note(name, path, INFO)
    assert (note is None) if expected is None else (note is not None and note.startswith(expected))


async def test_opening_a_conversation_had_with_another_quantization_names_the_files(db):
    seed_history(db, [("Old chat", ["Old answer"])], model_path="/elsewhere/fake-1b-Q8_0.gguf")
    app = make_app(db)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "enter")
        await settle(pilot)
        assert app.chatlog.title == "Old chat"
        notes = notices(app)
        assert any("fake-1b-Q8_0.gguf" in n and "fake.gguf" in n for n in notes), notes
        assert not any("with Fake 1B; it continues with Fake 1B" in n for n in notes)


SERVER = "http://127.0.0.1:9/v1"


def on_server(name: str, root: str = SERVER):
    """The recording backend's model as a server's (its ModelInfo as the remote backend makes
    it)."""
    from fakes import INFO
    from vibechat.engine.remote.options import model_url

    return dataclasses.replace(
        INFO, name=name, path=model_url(root, name), server=root.removesuffix("/v1")
    )


@pytest.mark.parametrize(
    ("name", "path", "loaded", "expected"),
    [
        # issue 39, point 3: a server's conversation opened where another server (or the local
        # engine) answers
        (
            "stub-small",
            f"{SERVER}/models/stub-small",
            None,
            f"This conversation was with stub-small on {SERVER}; replies here come from "
            "Fake 1B (to go on with it, "
            f"start vibechat --base-url {SERVER} --model stub-small",
        ),
        (
            "stub-small",
            f"{SERVER}/models/stub-small",
            ("stub-small", "http://127.0.0.1:10/v1"),
            f"This conversation was with stub-small on {SERVER}; replies here come from "
            "stub-small on "
            "http://127.0.0.1:10/v1",
        ),  # the same model id on another server was silent
        (
            "stub-small",
            f"{SERVER}/models/stub-small",
            ("stub-large", SERVER),
            "F3 picks stub-small",
        ),
        ("Fake 1B", "/models/other.gguf", ("Fake 1B", SERVER), "start vibechat --backend llama"),
        ("stub-small", f"{SERVER}/models/stub-small", ("stub-small", SERVER), None),
    ],
)
def test_the_note_names_the_servers_when_a_conversation_was_had_elsewhere(
    name, path, loaded, expected
):
    from fakes import INFO
    from vibechat.app.tui.controllers.model_change import model_change_note

    info = INFO if loaded is None else on_server(*loaded)
    note = model_change_note(name, path, info)
    assert (note is None) if expected is None else (note is not None and expected in note), note


async def test_opening_a_servers_conversation_in_a_local_chat_says_whose_replies_follow(db):
    seed_history(
        db,
        [("Old chat", ["Old answer"])],
        model="stub-small",
        model_path=f"{SERVER}/models/stub-small",
    )
    app = make_app(db)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "enter")
        await settle(pilot)
        assert app.chatlog.title == "Old chat"
        warned = [n for n in notifications(app) if n.severity == "warning"]
        assert any(
            f"stub-small on {SERVER}" in n.message and "--base-url" in n.message for n in warned
        ), warned


async def test_parameters_changed_in_the_tui_are_saved_with_the_conversation(db):
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "hello")
        await pilot.press("f6", "f6")  # temperature up twice
        app.prompt_input.focus()
        await pilot.press("slash")
        app.prompt_input.load_text("/system Answer in French.")
        await pilot.press("enter")
        await settle(pilot)
        cid = app.chatlog.conversation_id
    with History(db) as other:
        stored = other.get(cid)
        assert stored.params.temperature == pytest.approx(0.9)
        assert stored.system == "Answer in French."


async def test_rename_from_the_sidebar(db):
    ids = seed_history(db, [("Old title", ["answer"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "ctrl+e")
        await pilot.pause()
        assert isinstance(app.screen, RenameScreen)
        app.screen.query_one("#rename-input").value = "A better title"
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one(ConversationSidebar).summaries[0].title == "A better title"
    with History(db) as other:
        assert other.get(ids[0]).title == "A better title"


async def test_delete_asks_first_and_no_keeps_it(db):
    ids = seed_history(db, [("Keep or not", ["answer"]), ("Other", ["x"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "down", "delete")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "Keep or not" in app.screen.question
        await answer(pilot, "escape")
        await pilot.pause()
        with History(db) as other:
            assert other.count() == 2
        await pilot.press("delete")
        await pilot.pause()
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        assert [s.id for s in app.query_one(ConversationSidebar).summaries] == [ids[1]]
    with History(db) as other:
        assert [c.id for c in other.conversations()] == [ids[1]]


async def test_deleting_the_open_conversation_starts_a_new_one(db):
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "short lived")
        await app.run_action("delete_conversation")
        await pilot.pause()
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        assert app.chat.messages() == [] and app.chatlog.conversation_id is None
    with History(db) as other:
        assert other.count() == 0


async def test_search_jumps_to_the_message(db):
    filler = [f"filler reply {i} " + "lorem ipsum " * 30 for i in range(12)]
    turns: list[str] = []
    for i, reply in enumerate(filler):
        turns += [reply, f"question {i + 1}"]
    turns += ["The answer mentions a capybara."]
    ids = seed_history(db, [("Animals", turns), ("Unrelated", ["nothing here"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+f")
        await pilot.pause()
        assert isinstance(app.screen, SearchScreen)
        await pilot.press(*"capyb")
        await settle(pilot)
        assert len(app.screen.hits) == 1 and "capybara" in app.screen.hits[0].snippet
        await pilot.press("enter")
        await settle(pilot)
        assert app.chatlog.conversation_id == ids[0]
        found = app.focused
        assert isinstance(found, AssistantMessage) and "capybara" in found.text
        assert app.chat.scroll_y > 0  # jumped down to it


async def test_search_results_are_told_apart_and_down_then_enter_opens_the_first(db):
    ids = seed_history(db, [("Same title", ["a capybara reply"]) for _ in range(6)])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+f")
        await pilot.pause()
        await pilot.press(*"capybara")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, SearchScreen) and len(screen.hits) == 6
        results = screen.query_one("#search-results", OptionList)
        labels = [str(results.get_option_at_index(i).prompt) for i in range(results.option_count)]
        assert len(set(labels)) == 6  # six identical titles, each hit names its conversation
        assert all(
            f"#{hit.conversation_id}" in label
            for hit, label in zip(screen.hits, labels, strict=False)
        )
        await pilot.press("down")
        await pilot.pause()
        assert results.has_focus and results.highlighted == 0  # Enter works at once
        await pilot.press("down")
        await pilot.pause()
        assert results.highlighted == 1
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, SearchScreen)
        assert app.chatlog.conversation_id == screen.hits[1].conversation_id
        assert app.chatlog.conversation_id in ids


async def test_export_the_open_conversation_to_markdown_and_json(db, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seed_history(db, [("Export me", ["Exported **reply**"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, ExportScreen)
        path_input = app.screen.query_one("#export-path")
        assert path_input.value.endswith("export-me.md") and path_input.value.startswith(
            str(tmp_path)
        )
        await pilot.press("enter")
        await pilot.pause()
        md = next(tmp_path.glob("vibechat-*-export-me.md")).read_text()
        assert md.startswith("# Export me") and "Exported **reply**" in md
        await pilot.press("ctrl+s")
        await pilot.pause()
        app.screen.query_one("#format-json").value = True
        await pilot.pause()
        assert app.screen.query_one("#export-path").value.endswith(".json")
        app.screen.query_one("#export-path").focus()
        await pilot.press("enter")
        await pilot.pause()
        data = json.loads(next(tmp_path.glob("vibechat-*-export-me.json")).read_text())
        assert [m["content"] for m in data["messages"]] == ["Export me", "Exported **reply**"]


async def test_export_asks_before_replacing_an_existing_file(db, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seed_history(db, [("Export me", ["Exported **reply**"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "ctrl+s")
        await pilot.pause()
        target = Path(app.screen.query_one("#export-path").value)
        target.write_text("precious")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and str(target) in app.screen.question
        await answer(pilot, "escape")
        await pilot.pause()
        assert target.read_text() == "precious"
        assert was_notified(app, "Not exported")
        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await answer(pilot, "ctrl+y")
        await pilot.pause()
        assert target.read_text().startswith("# Export me")


async def test_a_reply_left_streaming_by_a_crash_opens_as_interrupted(db):
    with History(db) as history:
        cid = history.create(title="crashed")
        history.add_message(cid, "user", "tell me")
        row = history.add_message(cid, "assistant", "half a rep", "streaming")
        history.conn.execute("UPDATE messages SET writer_pid = 999999999 WHERE id = ?", (row,))
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert was_notified(app, "marked interrupted")
        app.chats.open_conversation(cid)
        await settle(pilot)
        reply = app.chat.messages()[-1]
        assert reply.text == "half a rep"
        assert "interrupted" in reply.status_shown.plain


async def test_a_read_only_data_dir_is_shown_and_the_chat_still_works(tmp_path: Path):
    with read_only_dir(tmp_path / "ro") as ro:
        app = make_app(ro / "history.db")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            problems = [n.message for n in notifications(app) if "not saved" in n.message]
            assert problems and "writable" in problems[0]
            await send(pilot, "still answers")
            assert [w.role for w in app.chat.messages()] == ["user", "assistant"]


async def test_no_save_keeps_nothing(db, user_dirs):
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "private")
    assert not (user_dirs["data"] / "vibechat" / "history.db").exists()


@pytest.mark.model
async def test_an_opened_conversation_continues_on_the_real_model(db, starter_path):
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    seed_history(
        db,
        [
            ("The capital of France is", ["Paris.", "The capital of Italy is"]),
            ("Something else", ["ok"]),
        ],
        params=SamplingParams(temperature=0, max_tokens=6),
    )
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=starter_path, context_size=2048, repack="off"
        )
    )
    app = create_app(backend, blink=False, history=History(db))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("ctrl+b", "down", "enter")
            await settle(pilot)
            assert app.chat.messages()[0].text == "The capital of France is"
            assert app.status.context_used > 0  # the cache holds the opened conversation
            await pilot.press("ctrl+r")  # no reply yet to the last prompt: generate one
            await settle(pilot)
            stats = app.replies.last.stats
            assert stats is not None and stats.completion_tokens > 0
            assert stats.prompt_tokens_evaluated < stats.prompt_tokens / 2
    finally:
        backend.close()


async def test_a_long_conversation_opens_with_its_newest_messages_and_shows_older_ones_on_request(
    db,
):
    turns = [f"message {i}" for i in range(1, 60)]  # 60 messages with the first prompt
    ids = seed_history(db, [("message 0", turns), ("Other", ["x"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.chats.open_conversation(ids[0])
        await settle(pilot)
        shown = [w.text for w in app.chat.messages()]
        assert shown == [f"message {i}" for i in range(36, 60)]
        assert len(app.conversation.turns) == 60  # the model still sees the whole conversation
        stand_in = app.chat.query_one(EarlierMessages)
        assert "36 earlier messages" in str(stand_in.render())
        stand_in.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert [w.text for w in app.chat.messages()] == [f"message {i}" for i in range(60)]
        assert not app.chat.query(EarlierMessages)

        # A search hit among the older messages mounts from just before it.
        app.chats.open_conversation(ids[1])
        await settle(pilot)
        with History(db) as other:
            target = next(m.id for m in other.get(ids[0]).messages if m.content == "message 5")
        app.chats.open_conversation(ids[0], jump_to=target)
        await settle(pilot)
        assert app.chat.messages()[0].text == "message 3" and app.focused.text == "message 5"
        await pilot.press("ctrl+home")
        await settle(pilot)
        assert len(app.chat.messages()) == 60


# ------------------------------------------------ issue 30: history hygiene
def seed_sources(path: Path, sources: list[str]) -> list[int]:
    """One conversation per source, in order (the last is the newest), as each front end saves
    it."""
    ids = []
    with History(path) as history:
        for n, source in enumerate(sources):
            chat = ChatLog(Conversation(), history, model="Fake 1B", source=source)
            chat.add_user(f"{source} question {n}")
            chat.finish_reply(chat.start_reply(), GenerationDone(f"{source} answer {n}"))
            ids.append(chat.conversation_id)
    return ids


def listed(sidebar: ConversationSidebar) -> list[str]:
    return [option.id for option in sidebar.options._options]


async def test_the_sidebar_shows_the_chats_own_first_and_right_cycles_run_batch_all(db):
    chat1, run1, batch1, run2, chat2 = seed_sources(db, ["chat", "run", "batch", "run", "chat"])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        title = sidebar.query_one("#sidebar-title")
        await pilot.press("ctrl+b")
        assert listed(sidebar) == [str(chat2), str(chat1)]
        assert str(title.render()) == "Chats (2 of 5)"
        await pilot.press("right")
        assert listed(sidebar) == [str(run2), str(run1)] and str(title.render()) == "Runs (2 of 5)"
        await pilot.press("right")
        assert listed(sidebar) == [str(batch1)] and str(title.render()) == "Prompt files (1 of 5)"
        await pilot.press("left", "right", "right")
        assert listed(sidebar) == [str(i) for i in (chat2, run2, batch1, run1, chat1)]
        assert str(title.render()) == "All conversations (5)"
        assert sidebar.options.highlighted_option.id == str(
            batch1
        )  # the highlight stays where it was
        # Enter opens the highlighted one, whatever its source; a new chat is the chat's.
        await pilot.press("home", "down", "enter")
        await settle(pilot)
        assert app.chatlog.conversation_id == run2
        await pilot.press("ctrl+b", "ctrl+b", "right")  # hidden, then back in the list
        assert listed(sidebar) == [str(chat2), str(chat1)]
        app.prompt_input.focus()
        await app.run_action("new_conversation")
        await send(pilot, "a fresh chat about tide pools")
        new = app.chatlog.conversation_id
        assert listed(sidebar) == [str(new), str(chat2), str(chat1)]
        # From the palette's action too (the list shown, on the next filter).
        await app.run_action("filter_conversations")
        assert sidebar.display and str(title.render()) == "Runs (2 of 6)"
    with History(db) as other:
        assert other.get(new).summary.source == "chat"


async def test_renaming_keeps_the_conversation_in_its_place_in_the_sidebar_and_in_history_list(db):
    older, newer = seed_history(
        db, [("The older chat", ["answer"]), ("The newer chat", ["answer"])]
    )
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        await pilot.press("ctrl+b", "down", "ctrl+e")
        await pilot.pause()
        assert isinstance(app.screen, RenameScreen)
        app.screen.query_one("#rename-input").value = "Older, renamed"
        await pilot.press("enter")
        await pilot.pause()
        assert listed(sidebar) == [str(newer), str(older)]
        assert [s.title for s in sidebar.summaries] == ["The newer chat", "Older, renamed"]
    with History(db) as other:  # what `vibechat history list` shows: the same order
        assert [(c.id, c.title) for c in other.conversations()] == [
            (newer, "The newer chat"),
            (older, "Older, renamed"),
        ]
    app = make_app(db)  # and the sidebar of the next start agrees
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b")  # (a hidden list is filled when shown)
        assert listed(app.query_one(ConversationSidebar)) == [str(newer), str(older)]


async def test_the_export_dialogs_format_row_takes_right_left_and_enter(
    db, tmp_path: Path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    seed_history(db, [("Export me", ["Exported **reply**"])])
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "ctrl+s")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ExportScreen)
        path_input = screen.query_one("#export-path")
        await pilot.press("shift+tab")  # from the path to the format row
        assert screen.query_one("#export-format").has_focus
        await pilot.press("right")
        assert screen.format == "json" and path_input.value.endswith("export-me.json")
        await pilot.press("right")  # the last choice stays chosen
        assert screen.format == "json"
        await pilot.press("left")
        assert screen.format == "md" and path_input.value.endswith("export-me.md")
        await pilot.press("right", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen)
        data = json.loads(next(tmp_path.glob("vibechat-*-export-me.json")).read_text())
        assert [m["content"] for m in data["messages"]] == ["Export me", "Exported **reply**"]


async def test_a_reply_cut_by_the_limit_opens_as_cut(db):
    with History(db) as history:
        cid = history.create(title="cut")
        history.add_message(cid, "user", "count to a thousand")
        history.add_message(cid, "assistant", "one two three", "cut")
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.chats.open_conversation(cid)
        await settle(pilot)
        reply = app.chat.messages()[-1]
        assert reply.text == "one two three"
        assert "cut at the token limit" in reply.status_shown.plain


class CutByTheLimit(RecordingBackend):
    """Every reply ends as max_tokens or the context ends one (finish_reason 'length')."""

    def stream_chat(self, messages, params):
        for event in super().stream_chat(messages, params):
            if isinstance(event, GenerationDone):
                event = dataclasses.replace(
                    event, stats=dataclasses.replace(event.stats, finish_reason="length")
                )
            yield event


async def test_a_reply_cut_in_the_chat_is_saved_as_cut(db):
    backend = CutByTheLimit(reply="one two three four")
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "count please")
        cid = app.chatlog.conversation_id
    with History(db) as other:
        assert [m.status for m in other.get(cid).messages] == ["complete", "cut"]


# ------------------------------------------------ titles written by the model
async def test_an_instruct_model_writes_the_title_after_the_first_reply(db, monkeypatch):
    from vibechat.engine.chat.titles import TITLE_REQUEST

    monkeypatch.setenv("VIBECHAT_MODEL_TITLES", "1")
    backend = RecordingBackend(reply='"Tide pools and coral reefs."')
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "tell me about the sea please")
        assert len(backend.requests) == 2  # the reply, then the title
        messages, params = backend.requests[-1]
        assert [m.content for m in messages] == [
            "tell me about the sea please",
            '"Tide pools and coral reefs."',
            TITLE_REQUEST,
        ]
        assert (params.temperature, params.max_tokens) == (0.0, 16)
        await pilot.pause()
        sidebar = app.query_one(ConversationSidebar)
        assert [s.title for s in sidebar.summaries] == ["Tide pools and coral reefs"]
        assert app.chatlog.title == "Tide pools and coral reefs"
        await send(pilot, "and the deep sea?")  # once per conversation
        assert len(backend.requests) == 3
        assert [s.title for s in sidebar.summaries] == ["Tide pools and coral reefs"]
    with History(db) as other:
        assert other.conversations()[0].title == "Tide pools and coral reefs"


class TitleWaits(RecordingBackend):
    """A request for a title waits (at most 10 s) until the test lets it go."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.title_asked, self.title_go = threading.Event(), threading.Event()

    def stream_chat(self, messages, params):
        from vibechat.engine.chat.titles import TITLE_REQUEST

        if messages[-1].content == TITLE_REQUEST:
            self.title_asked.set()
            self.title_go.wait(10)
        yield from super().stream_chat(messages, params)


async def test_a_message_sent_while_the_title_is_written_stops_it(db, monkeypatch):
    monkeypatch.setenv("VIBECHAT_MODEL_TITLES", "1")
    backend = TitleWaits(reply="Tide pools and coral reefs")
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "tell me about the sea please", wait=False)
        # the reply done, the title asked for (and held)
        await wait_for(pilot, backend.title_asked.is_set, "the title to be asked for")
        await send(pilot, "and the deep sea?", wait=False)
        await wait_for(pilot, lambda: app.session.turn is not None, "the second message's turn")
        backend.title_go.set()
        await settle(pilot)
        assert [m.content for m in backend.requests[-1][0]][-1] == "and the deep sea?"
        assert app.chatlog.title == "tell me about the sea please"  # the first prompt's own words
    with History(db) as other:
        stored = other.get(other.conversations()[0].id)
        assert stored.title == "tell me about the sea please"
        assert [(m.content, m.status) for m in stored.messages] == [
            ("tell me about the sea please", "complete"),
            ("Tide pools and coral reefs", "complete"),
            ("and the deep sea?", "complete"),
            ("Tide pools and coral reefs", "complete"),
        ]


@pytest.mark.parametrize("why", ["base model", "model_titles off"])
async def test_a_base_model_or_model_titles_off_gets_the_title_from_the_first_prompt(
    db, monkeypatch, why
):
    """Issue 46 point 7: the reply's words are the model's, never the title ("Hello" answered
    "How can I help you?" stays "Hello"); only a chat model asked for a title writes one."""
    reply = "How can I help you? I can tell you about tide pools."
    if why == "base model":
        monkeypatch.setenv("VIBECHAT_MODEL_TITLES", "1")
        backend = RecordingBackend(
            reply=reply, info=dataclasses.replace(RecordingBackend().info, chat_format="completion")
        )
    else:
        backend = RecordingBackend(reply=reply)
    app = make_app(db, backend)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Hello")
        assert len(backend.requests) == 1  # no title asked for
        await pilot.pause()
        assert app.chatlog.title == "Hello"
        assert [s.title for s in app.query_one(ConversationSidebar).summaries] == ["Hello"]
    with History(db) as other:
        assert other.conversations()[0].title == "Hello"


async def test_a_hidden_sidebar_is_brought_up_to_date_when_shown_not_as_a_prompt_is_sent(
    db, monkeypatch
):
    """A new conversation moves to the top of the list as its first prompt is saved. While the
    list is hidden it is not rebuilt then (with a thousand conversations that was ~10 ms of the
    frame that shows the prompt): shown, it has the new conversation on top, marked open."""
    seed_history(db, [("An older chat", ["answer"]), ("A newer chat", ["answer"])])
    rebuilds: list[OptionList] = []
    clear = OptionList.clear_options

    def counting(self):
        rebuilds.append(self)
        return clear(self)

    monkeypatch.setattr(OptionList, "clear_options", counting)
    app = make_app(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        rebuilds.clear()
        await send(pilot, "a new question")
        new = app.chatlog.conversation_id
        assert new is not None and sidebar.summaries[0].id == new
        assert [r for r in rebuilds if r is sidebar.options] == []
        await pilot.press("ctrl+b")
        assert listed(sidebar)[0] == str(new) and len(listed(sidebar)) == 3
        assert sidebar.options.get_option_at_index(0).prompt.current  # the ● of the open one
        assert sidebar.options.highlighted_option.id == str(new)


async def test_opening_a_conversation_had_with_another_local_model_switches_to_it_and_keeps_it(
    db, tmp_path
):
    # issue 39, point 3: the chat answered an opened conversation with whatever model was loaded
    from fakes import INFO
    from ggufgen import write_gguf

    other = write_gguf(tmp_path / "other-7b-Q4_K_M.gguf")
    [cid] = seed_history(
        db, [("Old chat", ["Old answer"])], model="Other 7B", model_path=str(other)
    )
    made: list = []

    def factory(path, **changes):
        made.append(
            RecordingBackend(
                info=dataclasses.replace(INFO, name="Other 7B", path=str(path)), reply="Again."
            )
        )
        return made[-1]

    app = make_app(db, backend_factory=factory)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "enter")
        await wait_for(
            pilot,
            lambda: app.session.info is not None and app.session.info.name == "Other 7B",
            "the conversation's own model",
        )
        await settle(pilot)
        assert app.chatlog.conversation_id == cid and app.chat.messages()[-1].text == "Old answer"
        await send(pilot, "And then?")
        assert app.chat.messages()[-1].text == "Again." and len(made) == 1
        assert [m.content for m in made[0].requests[-1][0]][-3:] == [
            "Old chat",
            "Old answer",
            "And then?",
        ]
    with History(db) as history:
        assert history.get(cid).summary.model == "Other 7B"  # never relabelled


async def test_opening_a_conversation_had_with_another_model_of_the_same_server_switches_to_it(
    db, stub
):
    from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
    from vibechat.engine.remote.options import OpenAIOptions

    [cid] = seed_history(
        db,
        [("Old chat", ["Old answer"])],
        model="stub-small",
        model_path=f"{stub.url}/models/stub-small",
    )
    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model="stub-large"))
    app = make_app(db, backend=backend)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+b", "enter")
        await wait_for(
            pilot,
            lambda: app.session.info is not None and app.session.info.name == "stub-small",
            "the conversation's own model",
        )
        await settle(pilot)
        assert app.chatlog.conversation_id == cid
        await send(pilot, "And then?")
        assert stub.last_body["model"] == "stub-small"
        assert [m["content"] for m in stub.last_body["messages"]][-3:] == [
            "Old chat",
            "Old answer",
            "And then?",
        ]
