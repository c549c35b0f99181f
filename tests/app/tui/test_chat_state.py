"""One chat state (app/tui/chat_state.py): what the chat is doing lives in ``ChatState``, which
the controllers write and the status bar follows; /stats and /show report it; the controllers
answer their own messages and the app keeps no method that only passes a call on to one.
Pilot runs of the real app: on a scripted backend (the transitions, step by step) and on the
real starter model."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import threading

import pytest
from textual.message import Message

from fakes import INFO, OnePieceAtATime, RecordingBackend, send, settle
from vibechat.app.report import format_stats
from vibechat.app.tui import create_app
from vibechat.app.tui.chat_state import ChatState
from vibechat.app.tui.controllers import events
from vibechat.app.tui.screens import show_info
from vibechat.app.tui.shell.app import VibechatApp
from vibechat.app.tui.widgets.status_bar import SHOWN
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import GenerationDone, GenerationStats

SIZE = (110, 36)
# ``comparisons`` is built after the first frame, or on first use (here): its messages, posted
# only by the comparisons it runs, are routed from then on.
CONTROLLERS = ("replies", "model_loads", "queued", "models", "chats", "branches", "comparisons")


class HeldLoad(RecordingBackend):
    """Loads only when the test says so: the test watches the state from the very start."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def load(self, on_progress=None):
        self.go.wait(timeout=60)
        return super().load(on_progress)


def watch(app) -> list[tuple[str, object]]:
    """Every change of the chat state, (field, new value), in order; at each, the status bar
    already shows the new value (it subscribed first, when it mounted)."""
    seen: list[tuple[str, object]] = []

    def changed(name: str) -> None:
        value = getattr(app.state, name)
        seen.append((name, value))
        if name in SHOWN:
            assert getattr(app.status, SHOWN[name]) == value, f"the status bar's {SHOWN[name]} lags"

    app.state.changed.subscribe(app, changed, immediate=True)
    return seen


def changes(seen: list[tuple[str, object]], name: str) -> list[object]:
    return [value for field, value in seen if field == name]


def last_note(app) -> str:
    notes = [m for m in app.chat.messages() if m.role == "note"]
    assert notes, "no note in the chat"
    return notes[-1].text


async def until(pilot, condition, what: str) -> None:
    for _ in range(3000):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_state_goes_from_loading_to_ready_to_generating_and_back_and_the_bar_follows():
    backend = HeldLoad()
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        seen = watch(app)
        assert (
            app.state.status == "loading…" and not app.state.model_ready and app.state.model is None
        )
        assert "loading…" in app.status.render().plain
        backend.go.set()
        await until(pilot, lambda: app.state.model_ready, "the model")
        await settle(pilot)
        assert changes(seen, "status") == ["loading 100%", "ready"]
        assert app.state.model == INFO and app.status.model == INFO
        assert app.generating is False

        await send(pilot, "Hi")
        assert changes(seen, "generating") == [True, False]
        during = changes(seen, "status")[
            2:
        ]  # (the engine's load, idempotent, says its progress again)
        assert during[0] == "generating…" and during[-1] == "ready" and "ready" not in during[:-1]
        lives = changes(seen, "live")
        assert lives[0] is not None and lives[-1] is None  # cleared as it starts, gone once it ends
        done = app.state.last
        assert done is not None and done.text == backend.reply and app.replies.last is done
        assert app.state.stats == done.stats and app.status.stats == done.stats
        stats = done.stats
        assert app.state.context_used == stats.prompt_tokens + stats.completion_tokens > 0
        assert f"{stats.completion_tokens} tok" in app.status.render().plain

        await pilot.press("ctrl+n")  # a new conversation: the figures go
        await settle(pilot)
        assert app.state.stats is None and app.state.context_used == 0 and app.status.stats is None

        # Whatever writes the state, the bar shows it; the bar itself is written by nobody else.
        app.state.status = "a state of its own"
        app.state.download = "⬇ 42%"
        await pilot.pause()
        assert app.status.state == "a state of its own" and "⬇ 42%" in app.status.render().plain


@pytest.fixture
def fake_backend() -> OnePieceAtATime:
    """Each piece of a reply waits for the test's ``fake_backend.step.release()``."""
    return OnePieceAtATime("one two three")


async def test_the_input_is_busy_exactly_while_the_state_says_generating(fake_backend):
    """The prompt input queues what Enter sends while a reply is on its way: its ``busy`` is the
    chat state's ``generating``, whoever writes it (the replies controller, or anything else),
    never a flag of its own that someone must remember to set."""
    app = create_app(fake_backend, blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        seen: list[tuple[bool, bool]] = []  # (generating, the input's busy) as generating changes

        def changed(name: str) -> None:
            if name == "generating":
                seen.append((app.state.generating, app.prompt_input.busy))

        app.state.changed.subscribe(app, changed, immediate=True)
        assert app.prompt_input.busy is False
        await send(pilot, "first", wait=False)
        await until(pilot, lambda: app.generating, "the reply to start")
        await send(
            pilot, "second", wait=False
        )  # Enter while the reply streams: queued by the input
        await until(pilot, lambda: app.prompt_input.queued == "second", "the message to be queued")
        assert [t.content for t in app.conversation.turns if t.role == "user"] == ["first"]
        fake_backend.step.release(
            100
        )  # the reply ends; the queued message goes next, and its reply
        await until(
            pilot, lambda: len(app.conversation.turns) == 4 and not app.generating, "both replies"
        )
        await settle(pilot)
        assert seen == [(True, True), (False, False), (True, True), (False, False)]

        # Written by another than the replies controller, the state is followed all the same;
        # other fields leave the input as it is.
        app.state.generating = True
        assert app.prompt_input.busy is True
        app.state.status = "a state of its own"
        assert app.prompt_input.busy is True
        app.state.generating = False
        assert app.prompt_input.busy is False
        assert seen[4:] == [(True, True), (False, False)]


async def test_an_equal_value_publishes_nothing_and_the_params_show_format_and_thinking_switch():
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        seen = watch(app)
        app.state.status = app.state.status
        app.state.stats = None
        assert seen == []
        app.set_params(app.conversation.params.replace(thinking="off"))
        assert seen == [("thinking", "off")] and "think off" in app.status.render().plain
        assert set(SHOWN) <= set(
            ChatState.fields()
        )  # the bar shows nothing the state does not hold


async def test_stats_and_show_report_the_state():
    """/stats and /show say what the state holds (the model it shows, the last reply that ended),
    not what a widget or the engine's session holds."""
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "/stats")
        assert last_note(app) == "No reply yet."
        other = dataclasses.replace(INFO, name="Another 7B", context_size=8192)
        stats = GenerationStats(
            prompt_tokens=11,
            prompt_tokens_evaluated=11,
            prompt_eval_ms=5.0,
            completion_tokens=7,
            ttft_ms=5.0,
            decode_ms=70.0,
            decode_tokens_per_s=100.0,
        )
        app.state.model = other
        app.state.last = GenerationDone(text="Seven words.", stats=stats)
        assert app.session.info == INFO  # the engine's session still says the fake
        await send(pilot, "/stats")
        assert last_note(app) == format_stats(stats, other)
        await send(pilot, "/show")
        params, system = app.conversation.params, app.conversation.system
        assert last_note(app) == show_info.info_text(other, params, system)
        assert "Another 7B" in last_note(app)


def test_every_worker_message_has_exactly_one_controller():
    """The app hands each message a worker posts (events.py) to the one controller that
    answers it; no two controllers claim one (the later would silently win)."""
    app = create_app(RecordingBackend(), blink=False, save=False)
    tables = [getattr(app, name).handlers() for name in CONTROLLERS]
    claimed = [cls for table in tables for cls in table]
    assert len(claimed) == len(set(claimed)), "a message claimed by two controllers"
    posted = {
        cls
        for _name, cls in inspect.getmembers(events, inspect.isclass)
        if issubclass(cls, Message) and cls.__module__ == events.__name__
    }
    assert posted and posted <= set(app.routes), sorted(
        c.__name__ for c in posted - set(app.routes)
    )


def forwards(cls: type) -> list[str]:
    """The methods of ``cls`` (its own source) whose whole body, after a docstring, is one call to
    a controller's method: ``self.replies.x(...)``, awaited or returned or not. Actions are left
    out: a binding's action must be a method of the app (Textual looks it up there)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith(
            "action_"
        ):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        if len(body) != 1 or not isinstance(body[0], (ast.Expr, ast.Return)):
            continue
        call = body[0].value
        if isinstance(call, ast.Await):
            call = call.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Attribute)
            and call.func.value.attr in CONTROLLERS
            and isinstance(call.func.value.value, ast.Name)
            and call.func.value.value.id == "self"
        ):
            found.append(node.name)
    return found


def test_the_app_keeps_no_method_that_only_passes_a_call_on_to_a_controller():
    # the app's own methods, and its mixins' (shell/actions.py, bound_keys.py, theme_choice.py)
    shell = [cls for cls in VibechatApp.__mro__ if cls.__module__.startswith("vibechat.app.tui.")]
    assert len(shell) > 1
    assert {cls.__name__: forwards(cls) for cls in shell} == {cls.__name__: [] for cls in shell}
    # messages go by the routes
    assert (
        len(
            [
                n
                for n, v in vars(VibechatApp).items()
                if inspect.isfunction(v)
                and n.startswith("on_")
                and n not in ("on_load", "on_mount", "on_unmount", "on_resize", "on_event")
            ]
        )
        == 0
    )

    class Switchboard(VibechatApp):  # the check finds one
        def on_reply_text(self, message):
            return self.replies.on_text(message)

        async def history_changed(self) -> None:
            """Docstring."""
            await self.chats.changed()

    assert forwards(Switchboard) == ["on_reply_text", "history_changed"]


@pytest.mark.model
async def test_the_state_on_the_real_model(llama_backend):
    """The starter model loads, answers, and the state, the status bar, /stats and /show agree."""
    llama_backend.reset()
    app = create_app(
        llama_backend, params=SamplingParams(temperature=0, max_tokens=8), blink=False, save=False
    )
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot, lambda: app.state.model_ready or app.state.status == "no model", "the model"
        )
        await settle(pilot)
        info = app.state.model
        assert info is not None and info.architecture == "gemma3" and app.state.status == "ready"
        assert app.status.model == info and "ready" in app.status.render().plain
        seen = watch(app)
        await send(pilot, "Name a colour.")
        assert changes(seen, "generating") == [True, False]
        during = changes(seen, "status")
        assert during[0] == "generating…" and during[-1] == "ready" and "ready" not in during[:-1]
        done = app.state.last
        assert done is not None and done.stats.completion_tokens > 0
        stats = done.stats
        assert app.state.stats == stats and app.status.stats == stats
        assert (
            app.state.context_used
            == stats.prompt_tokens + stats.completion_tokens - stats.thinking_tokens
        )
        assert f"{stats.completion_tokens:,} tok" in app.status.render().plain
        await send(pilot, "/stats")
        assert last_note(app) == format_stats(stats, info)
        await send(pilot, "/show")
        assert last_note(app) == show_info.info_text(
            info, app.conversation.params, app.conversation.system
        )
    llama_backend.reset()
