"""The vibechat Textual app: wires the widgets, the conversation and the backend.

All backend work (load, generate, reset) runs in thread workers that hold one
lock, since a llama.cpp context is not thread-safe; workers post messages and
the UI thread renders. Only ``backend.cancel()`` is called from the UI thread.

Outside text (model names, server errors, titles, paths: see ``outside``) is never read
as markup: widgets get it as ``Content``/``Text`` built by ``outside``, and this app's
``notify`` (which every widget's ``notify`` goes through) shows plain, sanitised text
unless markup is asked for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from urllib.parse import urlparse

from textual import events, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from vibechat.engine.backend import Backend, ContextTrimmed, GenerationDone, GenerationStats, TextDelta
from vibechat.engine.config import LoadedConfig
from vibechat.engine.chatlog import ChatLog, Reply
from vibechat.engine.conversation import Conversation
from vibechat.engine.errors import VibechatError
from vibechat.engine.history import History
from vibechat.engine.knobs import prompt_too_large
from vibechat.engine.params import SamplingParams
from vibechat.engine.sanitize import Sanitizer, sanitize
from vibechat.engine.system import available_cores
from vibechat.themes import THEMES

from .. import slash
from ..appconfig import load_app_config
from ..report import format_stats
from . import outside
from .chat_view import AssistantMessage, ChatMessageWidget, ChatView, EarlierMessages
from .config_actions import ConfigActions
from .confirm import ConfirmScreen
from .events import (
    CacheReset,
    ContextCounted,
    DeltaBuffer,
    ModelFailed,
    ModelProgress,
    ModelReady,
    ReplyEvent,
    ReplyFailed,
    ReplyText,
)
from .help_screen import HelpScreen
from .history_actions import HistoryActions
from .markdown_segment import warm_up as warm_up_markdown
from .model_actions import BackendFactory, ModelActions
from .pacing import RenderPacer, ui_budget
from .param_panel import SLIDER_SPECS, ParamPanel
from .prompt_input import PromptInput
from .sidebar import ConversationSidebar
from .slider import Slider
from .status_bar import StatusBar, model_line

log = logging.getLogger("vibechat.tui")

APPEND_LIMIT = 1200  # characters appended to the Markdown per event-loop turn, at most
FIRST_LIMIT = 300  # ... and in the first render of a reply, which also lays the reply out
MIN_CHAT_WIDTH = 40  # columns the chat keeps when both side panels are open
NUDGED = {"temperature": "Temperature", "top_k": "Top-k", "top_p": "Top-p"}
# Actions without a key of their own: (title, help, action); {config} is the config file.
PALETTE_ONLY = [
    ("Download a model", "Search the Hugging Face Hub and download a GGUF model", "download"),
    ("Save parameters as default", "Write the current sampling parameters to the [params] table of {config}",
     "save_params_default"),
    ("Rename this conversation", "Give the open conversation another title", "rename_conversation"),
    ("Delete this conversation", "Delete the open conversation from the history (asks first)",
     "delete_conversation"),
    ("Export this conversation", "Write the open conversation to a Markdown or JSON file", "export_conversation"),
]


class VibechatApp(ModelActions, ConfigActions, HistoryActions, App[None]):
    TITLE = "vibechat"
    CSS = """
    Screen {
        layout: vertical;
    }
    #body {
        height: 1fr;
    }
    #main {
        width: 1fr;
    }
    """
    # The description names an action in the footer, help and the command palette; the
    # tooltip says what it does (the palette's help line, and the footer's on hover). The
    # footer shows only what fits in 80 columns (Stop only while a reply streams); the rest
    # is in help (F1) and the palette.
    BINDINGS = [
        Binding("f1", "help", "Help", id="help", tooltip="Every key binding, by where it works"),
        Binding("f2", "toggle_params", "Params", id="toggle_params",
                tooltip="Show or hide the sampling parameters and the GPU layers slider"),
        Binding("ctrl+n", "new_conversation", "New chat", id="new_conversation", priority=True,
                tooltip="Start a new conversation (clears the view and the model's KV cache)"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="regenerate", show=False, priority=True,
                tooltip="Replace the last reply with a new one"),
        Binding("ctrl+l", "edit_last", "Edit last", id="edit_last", show=False, priority=True,
                tooltip="Take your last message back into the input, to change and resend it"),
        Binding("ctrl+o", "copy_last", "Copy reply", id="copy_last", show=False, priority=True,
                tooltip="Copy the last reply to the clipboard (OSC 52: works over SSH)"),
        Binding("ctrl+b", "toggle_sidebar", "Chats", id="toggle_sidebar", priority=True,
                tooltip="Show or hide the saved conversations, newest first"),
        Binding("ctrl+f", "search_history", "Search chats", id="search_history", show=False, priority=True,
                tooltip="Search every saved message and jump to the match"),
        Binding("f3", "models", "Models", id="models", tooltip="Load another model, or download one"),
        Binding("f4", "change_theme", "Theme", id="change_theme", show=False,
                tooltip="Pick the colour theme (remembered in the config file)"),
        Binding("escape", "stop", "Stop", id="stop", tooltip="Stop the reply; the text so far stays"),
        # Ctrl+C stops a streaming reply, as in ollama and llama-cli; otherwise it falls through
        # to the input's (or a mouse selection's) copy, then to Textual's hint on how to quit.
        # Binding ctrl+c here replaces Textual's own ctrl+c binding (a class's bindings for a
        # key replace its base classes'), so that hint is bound again.
        Binding("ctrl+c", "stop", "Stop", id="interrupt", show=False, priority=True,
                tooltip="Stop the reply; the text so far stays"),
        Binding("ctrl+c", "help_quit", "How to quit", id="quit_hint", show=False, system=True),
        Binding("f5", "nudge('temperature', -1)", "Temperature down", id="temperature_down", show=False,
                priority=True, tooltip="Lower the temperature by one step: more predictable replies"),
        Binding("f6", "nudge('temperature', 1)", "Temperature up", id="temperature_up", show=False,
                priority=True, tooltip="Raise the temperature by one step: more varied replies"),
        Binding("f7", "nudge('top_k', -1)", "Top-k down", id="top_k_down", show=False, priority=True,
                tooltip="Sample from fewer of the likeliest tokens"),
        Binding("f8", "nudge('top_k', 1)", "Top-k up", id="top_k_up", show=False, priority=True,
                tooltip="Sample from more of the likeliest tokens"),
        Binding("f9", "nudge('top_p', -1)", "Top-p down", id="top_p_down", show=False, priority=True,
                tooltip="Sample from a smaller share of the probability mass"),
        Binding("f10", "nudge('top_p', 1)", "Top-p up", id="top_p_up", show=False, priority=True,
                tooltip="Sample from a larger share of the probability mass"),
        Binding("ctrl+end", "scroll_chat_end", "Scroll to end", id="scroll_end", show=False,
                tooltip="Scroll the conversation to the newest message and follow the reply"),
        Binding("ctrl+home", "scroll_chat_home", "Scroll to start", id="scroll_home", show=False,
                tooltip="Scroll the conversation to its first message"),
    ]

    generating: var[bool] = var(False)
    model_ready: var[bool] = var(False)

    def __init__(self, backend: Backend, *, params: SamplingParams | None = None, system: str | None = None,
                 config: LoadedConfig | None = None, blink: bool = True,
                 backend_factory: BackendFactory | None = None, history: History | None = None) -> None:
        super().__init__()
        self.backend = backend
        self.backend_factory = backend_factory  # makes a backend for another model file (the picker)
        self.engine_changes = {}  # engine settings changed in the chat (the GPU layers slider)
        config = config or load_app_config()
        self.history = history  # None: chats are not saved
        self.chatlog = ChatLog(Conversation(system=system, params=params or config.config.params), history)
        self.blink = blink
        self.last_stats: GenerationStats | None = None
        self.last_params: SamplingParams | None = None  # what the backend says it used
        self._engine_lock = threading.Lock()
        self._reset_pending = False
        self._generation = 0  # events of older generations are ignored
        self._reply: AssistantMessage | None = None
        self._reply_raw: list[str] = []
        self._sanitizer = Sanitizer()  # the streaming reply's: holds back a split escape sequence
        self._deltas = DeltaBuffer()
        self._done_waiting: GenerationDone | None = None
        self._pacer = RenderPacer()
        self._backlog = False  # the last render left text behind: the stream outruns the UI
        self._record: Reply | None = None  # the reply being saved while it streams
        self._side_panel_last: Widget | None = None  # the side panel opened last
        for theme in THEMES:
            self.register_theme(theme)
        self.apply_config(config)  # the theme, [keys]

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield ConversationSidebar(id="sidebar")
            with Vertical(id="main"):
                yield ChatView(id="chat")
                yield PromptInput(id="input", blink=self.blink)
            yield ParamPanel(self.conversation.params, id="params")
        yield StatusBar(id="status")
        yield Footer()

    @property
    def conversation(self) -> Conversation:
        return self.chatlog.conversation

    @property
    def chat(self) -> ChatView:
        return self.query_one(ChatView)

    @property
    def prompt_input(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def panel(self) -> ParamPanel:
        return self.query_one(ParamPanel)

    def on_mount(self) -> None:
        self.prompt_input.focus()
        self.chat.set_welcome("Loading the model…")
        self.show_config_notes()
        self.status.state = "loading…"
        self._load_model()
        self.list_history()

    # ----------------------------------------------------------------- workers
    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def _load_model(self) -> None:
        try:
            with self._engine_lock:
                info = self.backend.load(on_progress=lambda f: self.post_message(ModelProgress(f)))
        except VibechatError as exc:
            self.post_message(ModelFailed(str(exc)))
        except Exception as exc:  # noqa: BLE001 - never crash the UI over a load
            log.exception("model load failed")
            self.post_message(ModelFailed(f"unexpected error while loading the model: {exc}"))
        else:
            self.post_message(ModelReady(info))
            warm_up_markdown(self.console, self._code_theme())  # while the user types the first prompt

    @work(thread=True, exclusive=True, group="generate", exit_on_error=False)
    def _generate(self, generation: int, messages: list, params: SamplingParams, deltas: DeltaBuffer,
                  record: Reply) -> None:
        try:
            with self._engine_lock:
                self._apply_pending_reset()
                self._post_context(generation, messages)  # the meter counts the prompt at once
                for event in self.backend.stream_chat(messages, params):
                    if isinstance(event, TextDelta):
                        record.append(event.text)  # saved while it streams (debounced)
                        if deltas.put(event.text):
                            self.post_message(ReplyText(generation))
                    else:
                        self.post_message(ReplyEvent(generation, event))
        except VibechatError as exc:  # StreamInterrupted carries the partial reply
            self.post_message(ReplyFailed(generation, str(exc), getattr(exc, "partial", None)))
        except Exception as exc:  # noqa: BLE001
            log.exception("generation failed")
            self.post_message(ReplyFailed(generation, f"unexpected error while generating: {exc}"))

    @work(thread=True, exclusive=True, group="count", exit_on_error=False)
    def _count_context(self, generation: int, messages: list) -> None:
        """The context meter after a turn was taken back (Ctrl+L)."""
        with self._engine_lock:
            self._post_context(generation, messages)

    def _post_context(self, generation: int, messages: list) -> None:
        """Called with the engine lock held, in a worker thread. A tokenization, no
        evaluation (a few milliseconds for a full context); the meter is only a meter, so
        a failure here is left to the generation to report."""
        try:
            tokens = self.backend.count_tokens(messages)
        except Exception:  # noqa: BLE001
            log.debug("could not count the context", exc_info=True)
            return
        self.post_message(ContextCounted(generation, tokens))

    @work(thread=True, group="reset", exit_on_error=False)
    def _reset_cache(self) -> None:
        with self._engine_lock:
            self._apply_pending_reset()

    def _apply_pending_reset(self) -> None:
        """Called with the engine lock held, in a worker thread."""
        if self._reset_pending:
            self._reset_pending = False
            self.backend.reset()
            self.post_message(CacheReset())

    # --------------------------------------------------------- model messages
    def on_model_progress(self, message: ModelProgress) -> None:
        self.status.state = f"loading {message.fraction:.0%}"

    def on_model_ready(self, message: ModelReady) -> None:
        self._show_model(message.info)

    def _show_model(self, info) -> None:
        self.model_ready = True
        self.chatlog.set_model(info.name, info.path)
        self.status.model = info
        self.status.state = "ready"
        self.panel.show_model(info)
        note = ""
        if info.chat_format not in ("gguf", "server"):
            note = f"\nThis GGUF has no chat template: using the built-in {info.chat_format!r} format."
        engine = ""
        if info.kv_cache_bytes:
            engine = f" · {info.kv_cache}"
            if info.flash_attn_forced:
                engine += f" (flash attention on: the {info.kv_cache_type} V cache needs it)"
        if info.speculative != "off":
            engine += f" · {info.speculative} drafting ({info.draft_tokens} tokens)"
        self.chat.set_welcome(
            f"{model_line(info)}{engine}{note}\n"
            "Enter sends · Ctrl+J newline · F1 help · F2 parameters · Ctrl+N new chat · / commands"
        )
        for notice in info.notices:  # e.g. GPU layers asked of a build that cannot offload
            self.notify(notice, title="Model", severity="warning", timeout=20)

    def on_model_failed(self, message: ModelFailed) -> None:
        self.status.state = "no model"
        self.chat.set_welcome(f"The model could not be loaded: {message.error}")
        self.notify(message.error, title="Model", severity="error", timeout=15)

    def on_cache_reset(self, _message: CacheReset) -> None:
        self.status.context_used = 0

    def on_context_counted(self, message: ContextCounted) -> None:
        if message.generation == self._generation:
            self.status.context_used = message.tokens

    # ------------------------------------------------------------- sending
    @on(PromptInput.Submitted)
    async def _on_submit(self, message: PromptInput.Submitted) -> None:
        command = slash.parse(message.text)
        if command is not None:
            await self.run_slash(command)
            return
        if self.generating:
            self.notify("Still answering: press Esc to stop first.", severity="warning")
            self.prompt_input.load_text(message.text)
            return
        text = slash.unescape(message.text)
        model = self.status.model
        too_large = prompt_too_large(len(text.encode("utf-8", "replace")), model.context_size if model else None)
        if too_large:  # refused before it is saved or tokenized; kept in the input when it can be edited there
            self.notify(too_large, severity="error")
            if len(text) <= 4 << 20:
                self.prompt_input.load_text(text)
            return
        self.chatlog.add_user(text)  # saved before generation starts
        self.history_changed()
        await self.chat.add(ChatMessageWidget("user", text))
        await self._start_reply()

    async def _start_reply(self) -> None:
        self._generation += 1
        self._reply = await self.chat.add(AssistantMessage(code_theme=self._code_theme()))
        self._reply_raw = []
        self._sanitizer = Sanitizer()
        if not self.model_ready:
            self._reply.set_status("waiting for the model to load…")
        self.generating = True
        self.status.state = "generating…"
        self._deltas = DeltaBuffer()
        self._backlog = False
        self._done_waiting = None
        model = self.status.model
        self._pacer = RenderPacer(ui_budget(model.n_threads if model else None, available_cores()))
        self._record = self.chatlog.start_reply()
        self._generate(self._generation, self.conversation.messages(), self.conversation.params, self._deltas,
                       self._record)

    async def on_reply_text(self, message: ReplyText) -> None:
        if message.generation != self._generation or self._reply is None:
            return
        # Renders are paced (see pacing.py): each one takes CPU that the model's threads
        # may need; text arriving meanwhile waits in the buffer.
        wait = self._pacer.wait(backlog=self._backlog)
        if wait > 0:
            self.set_timer(wait, lambda: self.post_message(ReplyText(message.generation)))
            return
        self._pacer.rendering()
        text, more = self._deltas.take(APPEND_LIMIT if self._reply_raw else FIRST_LIMIT)
        self._backlog = more
        if more:  # a burst: render it in slices, with a screen refresh between them
            self.call_after_refresh(self.post_message, ReplyText(message.generation))
        if text:
            if not self._reply_raw:
                self._reply.set_status("")
            self._reply_raw.append(text)
            shown = self._sanitizer.feed(text)
            if shown:
                await self._reply.append(shown)
        if not more and self._done_waiting is not None:
            done, self._done_waiting = self._done_waiting, None
            await self._finish_reply(done)

    async def on_reply_event(self, message: ReplyEvent) -> None:
        if message.generation != self._generation or self._reply is None:
            return
        event = message.event
        if isinstance(event, ContextTrimmed):
            self.status.context_used = event.prompt_tokens  # what is left of the conversation
            self.notify(f"Left out the {event.dropped_messages} oldest messages to fit the "
                        f"{event.context_size:,}-token context.", severity="warning")
        elif isinstance(event, GenerationDone):
            if self._deltas.pending:  # slices of a burst still queued: finish after them
                self._done_waiting = event
                return
            await self._finish_reply(event)

    async def _finish_reply(self, done: GenerationDone) -> None:
        reply, stats = self._reply, done.stats
        assert reply is not None
        tail = self._sanitizer.flush()  # an unfinished escape sequence at the end: its text
        if tail:
            await reply.append(tail)
        await reply.finish(sanitize(done.text))  # the same text, unless the stream was cut
        if self._record is not None:
            self.chatlog.finish_reply(self._record, done)
            self._record = None
            self.history_changed()
        self.last_stats = stats
        self.last_params = done.params
        self.status.stats = stats
        self.status.context_used = stats.prompt_tokens + stats.completion_tokens
        if stats.finish_reason == "cancelled":
            reply.set_status("⏹ stopped", "stopped")
        elif stats.finish_reason == "length":
            reply.set_status("… cut at the token limit")
        self._end_generation()

    def _code_theme(self) -> str:
        return "monokai" if self.current_theme.dark else "friendly"

    async def on_reply_failed(self, message: ReplyFailed) -> None:
        if message.generation != self._generation:
            return
        if self._reply is not None:
            if message.partial:  # a cut stream: what arrived stays, marked interrupted
                await self._reply.finish(sanitize(message.partial))
            # The user message stays in the conversation, so Ctrl+R retries it.
            self._reply.set_status(f"⚠ {message.error}", "error")
        if self._record is not None:
            self.chatlog.fail_reply(self._record, message.error, message.partial)
            self._record = None
            self.history_changed()
        self.notify(message.error, severity="error", timeout=10)
        self._end_generation()

    def _end_generation(self) -> None:
        if self._record is not None:  # abandoned (new chat, edit, quit): saved as stopped
            record, self._record = self._record, None
            text = record.writer.text if record.writer is not None else ""
            self.chatlog.finish_reply(record, GenerationDone(text, GenerationStats(finish_reason="cancelled")))
        self.generating = False
        self._reply = None
        self.status.state = "ready" if self.model_ready else self.status.state

    # ------------------------------------------- outside text: pastes, notifications
    async def on_event(self, event: events.Event) -> None:
        """Pasted text comes from outside (the clipboard): sanitised before any widget gets
        it (an ``Input`` or a ``TextArea`` would show its control characters raw)."""
        if isinstance(event, events.Paste) and not event.is_forwarded:
            event.text = sanitize(event.text)
        await super().on_event(event)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Textual's ``notify`` (``Widget.notify`` calls it too), but the message is plain
        text unless ``markup=True`` (for vibechat's own words only: notifications nearly
        always quote outside text, a model name, a server's error, a title, a path, and
        Textual reads markup by default), and message and title are sanitised and
        bounded (``outside``)."""
        super().notify(outside.plain(message), title=outside.one_line(title), severity=severity, timeout=timeout,
                       markup=markup)

    def action_help_quit(self) -> None:
        """Textual's hint on how to quit (its markup, the key escaped)."""
        for key, active_binding in self.active_bindings.items():
            if active_binding.binding.action in ("quit", "app.quit"):
                self.notify(f"Press [b]{escape(key)}[/b] to quit the app", title="Do you want to quit?", markup=True)
                return

    @on(events.DeliveryComplete)
    def _screenshot_saved(self, event: events.DeliveryComplete) -> None:
        """The palette's Screenshot: said without markup (Textual's own notification puts
        the path, the current directory's outside name, into markup)."""
        if event.name == "screenshot":
            event.prevent_default()
            self.notify(f"Saved screenshot to {event.path}" if event.path else "Saved screenshot",
                        title="Screenshot")

    # ------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.generating  # False: not in the footer either
        if action in ("regenerate", "copy_last"):
            return None if self.generating or not self.conversation.turns else True
        if action == "edit_last":
            return True if any(t.role == "user" for t in self.conversation.turns) else None
        return True

    def watch_generating(self) -> None:
        self.refresh_bindings()

    def action_stop(self) -> None:
        if self.generating:
            self.backend.cancel()

    async def action_new_conversation(self) -> None:
        await self.start_new_conversation()
        self.notify("New conversation", timeout=2)

    async def start_new_conversation(self, reset_cache: bool = True) -> None:
        """Clear the view and the conversation; ``reset_cache``: empty the model's KV cache
        too (a freshly loaded model has nothing to forget)."""
        if self.generating:
            self.backend.cancel()
        self._generation += 1
        self._end_generation()
        self.chatlog.clear()
        self.sidebar.current = None
        await self.chat.clear()
        self.last_stats = None
        self.status.stats = None
        self.status.context_used = 0
        if reset_cache:
            self._reset_pending = True
            self._reset_cache()
        self.prompt_input.focus()
        self.refresh_bindings()

    async def action_regenerate(self) -> None:
        if self.generating or not self.conversation.turns:
            return
        self.chatlog.drop_last_reply()  # a failed reply after the prompt goes too
        widgets = self.chat.messages()
        if widgets and widgets[-1].role == "assistant":
            await widgets[-1].remove()
        if self.conversation.last_role == "user":
            await self._start_reply()

    async def action_edit_last(self) -> None:
        if self.generating:
            self.backend.cancel()
            self._generation += 1
            self._end_generation()
        text = self.chatlog.take_last_user()
        if text is None:
            return
        widgets = self.chat.messages()
        while widgets:
            last = widgets.pop()
            await last.remove()
            if last.role == "user":
                break
        self.prompt_input.load_text(text)
        self.prompt_input.move_cursor(self.prompt_input.document.end)
        self.prompt_input.focus()
        self.refresh_bindings()
        # The meter leaves the turn taken back out.
        if not self.conversation.turns:
            self.status.context_used = 0
        elif self.model_ready:
            self._count_context(self._generation, self.conversation.messages())

    def action_copy_last(self) -> None:
        for turn in reversed(self.conversation.turns):
            if turn.role == "assistant":
                self._copy(sanitize(turn.content), "reply")
                return

    def _copy(self, text: str, what: str) -> None:
        self.copy_to_clipboard(text)
        self.notify(f"Copied the {what} ({len(text):,} characters) to the clipboard.", timeout=2)

    @on(ChatView.Typed)
    def _on_typed(self, message: ChatView.Typed) -> None:
        """Typing while a message (or the chat) has focus: the text goes where it belongs."""
        self.prompt_input.focus()
        self.prompt_input.insert(message.character, maintain_selection_offset=False)

    @on(ChatMessageWidget.CopyRequested)
    def _on_copy_requested(self, message: ChatMessageWidget.CopyRequested) -> None:
        if message.what == "no-code":
            self.notify("This message has no code block.", severity="warning", timeout=2)
        elif message.what == "no-link":
            self.notify("This reply has no links.", severity="warning", timeout=2)
        else:
            self._copy(message.text, message.what)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_sections()))

    def action_toggle_params(self) -> None:
        panel = self.panel
        if panel.has_class("-visible"):
            panel.remove_class("-visible")
            self.prompt_input.focus()
        else:
            self.show_side_panel(panel)
            panel.focus_first()

    # ---------------------------------------------------------- side panels
    @staticmethod
    def room_for_both_panels(width: int) -> bool:
        return width >= ConversationSidebar.WIDTH + ParamPanel.WIDTH + MIN_CHAT_WIDTH

    def show_side_panel(self, panel: Widget) -> None:
        """Show the conversation list or the parameter panel. Where the terminal cannot hold
        both beside a usable chat, the other one closes."""
        other = self.panel if panel is self.sidebar else self.sidebar
        if other.has_class("-visible") and not self.room_for_both_panels(self.size.width):
            other.remove_class("-visible")
        panel.add_class("-visible")
        self._side_panel_last = panel

    def on_resize(self, event: events.Resize) -> None:
        """Narrowed with both side panels open: the one in use (focused, else opened last) stays."""
        if self.room_for_both_panels(event.size.width):
            return
        shown = [p for p in (self.sidebar, self.panel) if p.has_class("-visible")]
        if len(shown) < 2:
            return
        keep = next((p for p in shown if p.has_focus_within), self._side_panel_last or shown[-1])
        for panel in shown:
            if panel is not keep:
                panel.remove_class("-visible")

    def action_scroll_chat(self, pages: int) -> None:
        if pages < 0:
            self.chat.action_page_up()
        else:
            self.chat.action_page_down()

    def action_scroll_chat_end(self) -> None:
        self.chat.anchor()

    def action_scroll_chat_home(self) -> None:
        for stand_in in self.chat.query(EarlierMessages):  # the start really is the start
            stand_in.action_show()
        self.chat.release_anchor()
        self.chat.scroll_home(animate=False)

    def action_nudge(self, name: str, direction: int) -> None:
        spec = SLIDER_SPECS[name]
        current = getattr(self.conversation.params, name)
        value = spec.clamp(current + spec.fine * direction)
        self.set_params(self.conversation.params.replace(**{name: value}))
        self.notify(f"{NUDGED[name]} {spec.show(value)}", timeout=1.5)

    def set_params(self, params: SamplingParams) -> None:
        """The one place parameters change: the next generation uses exactly these, and the
        conversation remembers them."""
        self.chatlog.set_params(params)
        self.panel.params = params

    def show_params(self, params: SamplingParams) -> None:
        """An opened conversation's parameters (already saved with it)."""
        self.conversation.params = params
        self.panel.params = params

    @on(ParamPanel.Changed)
    def _on_params_changed(self, message: ParamPanel.Changed) -> None:
        if message.params != self.conversation.params:
            self.chatlog.set_params(message.params)

    @on(ParamPanel.GpuLayersChanged)
    def _on_gpu_layers_changed(self, message: ParamPanel.GpuLayersChanged) -> None:
        self.request_gpu_layers(message.layers)

    @on(AssistantMessage.LinkRequested)
    def _on_link(self, message: AssistantMessage.LinkRequested) -> None:
        href = message.href.strip()
        scheme = urlparse(href).scheme.lower()
        if scheme not in ("http", "https"):
            self.notify(f"Not opening a {scheme or 'relative'} link: only http and https links open.",
                        severity="warning")
            return

        def opened(yes: bool | None) -> None:
            if yes:
                self.open_url(href)

        self.push_screen(ConfirmScreen(f"The model's reply links to:\n\n{href}\n\nOpen it in your browser?"),
                         opened)

    # ------------------------------------------------------- slash commands
    async def run_slash(self, command: slash.SlashCommand) -> None:
        name, arg = command.name, command.arg
        if not command.known:
            self.notify(slash.suggestion(name), severity="warning", timeout=6)
        elif name == "/set":
            await self._slash_set(arg)
        elif name == "/system":
            await self._slash_system(arg)
        elif name in ("/new", "/clear"):
            await self.action_new_conversation()
        elif name == "/stats":
            text = format_stats(self.last_stats, self.status.model) if self.last_stats else "No reply yet."
            await self.note(text)
        elif name == "/help":
            self.action_help()
        elif name == "/bye":
            self.exit()

    def exit(self, *args, **kwargs) -> None:
        self.stop_downloads()
        if self.generating:
            self.backend.cancel()
            self._end_generation()
        super().exit(*args, **kwargs)

    async def _slash_set(self, arg: str) -> None:
        if not arg:
            p = self.conversation.params
            await self.note("  ".join(f"{k}={v}" for k, v in p.to_dict().items()))
            return
        key, _, value = arg.partition(" ")
        try:
            params = self.conversation.params.set_from_text(key, value)
        except VibechatError as exc:
            self.notify(str(exc), severity="error", timeout=6)
            return
        self.set_params(params)
        shown = key.replace("-", "_").lower()
        self.notify(f"{shown} = {getattr(params, shown)}", timeout=2)

    async def _slash_system(self, arg: str) -> None:
        if not arg:
            await self.note(f"System prompt: {self.conversation.system or '(none)'}")
            return
        self.chatlog.set_system(None if arg.lower() in ("clear", "none", "off") else arg)
        self.notify("System prompt cleared." if self.conversation.system is None else "System prompt set.",
                    timeout=2)

    async def note(self, text: str) -> None:
        await self.chat.add(ChatMessageWidget("note", text))

    # --------------------------------------------------------------- help
    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        def rows(bindings) -> list[tuple[str, str]]:
            return [(" / ".join(self.key_for(b) for b in same), same[0].description)
                    for same in by_action(bindings)]

        app_bindings = [b for b in self.BINDINGS if isinstance(b, Binding)]
        return [
            ("Chat", rows(app_bindings) + [
                ("ctrl+p", "Command palette: every action by name"),
                ("ctrl+q", "Quit"),
                ("pgup / pgdn", "Scroll the conversation"),
                ("tab / shift+tab", "Move focus (input, messages, parameter sliders)"),
            ]),
            ("Input", [("enter", "Send"), ("ctrl+j (shift+enter, alt+enter)", "New line"),
                       ("up / down", "Earlier / later prompts (in an empty input)")]),
            ("A focused message (Tab or click it; typing goes back to the input)",
             rows(ChatMessageWidget.BINDINGS) + rows(AssistantMessage.BINDINGS)),
            ("Parameter panel (F2)", rows(Slider.BINDINGS) + rows(ParamPanel.BINDINGS)),
            ("Conversation list (Ctrl+B)", [("enter", "Open the conversation")]
             + rows(ConversationSidebar.BINDINGS)),
            ("Slash commands", [(name, text.split(": ", 1)[1]) for name, text in slash.COMMANDS.items()]
             + [("//text", "Send a message that starts with /")]),
        ]

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands (but its Theme: F4's is the same picker), then one per action.
        The palette reads help lines as markup: they are escaped."""
        for command in super().get_system_commands(screen):
            if command.callback != self.action_change_theme:
                yield command
        for same in by_action(b for b in self.BINDINGS if isinstance(b, Binding)):
            first, action = same[0], same[0].action
            keys = " / ".join(self.bound_key(b) for b in same)
            yield SystemCommand(first.description, escape(f"{first.tooltip or first.description} ({keys})"),
                                lambda action=action: self.run_action(action))
        for title, help_text, action in PALETTE_ONLY:
            yield SystemCommand(title, escape(outside.one_line(help_text.format(config=self.config.path))),
                                lambda action=action: self.run_action(action))


def by_action(bindings: Iterable[Binding]) -> list[list[Binding]]:
    """The bindings people see (a description, not Textual's own ``system`` ones), grouped
    by action: Esc and Ctrl+C both stop a reply, and are shown as one entry."""
    groups: dict[str, list[Binding]] = {}
    for binding in bindings:
        if binding.description and not binding.system:
            groups.setdefault(binding.action, []).append(binding)
    return list(groups.values())
