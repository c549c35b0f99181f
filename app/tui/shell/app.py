"""The vibechat Textual app: the layout, the controllers and the wiring between them.

The chat's work is done by controllers that own their state (see ``host.py``):
``Replies`` (a reply from prompt to settled, on top of the engine's
``ChatSession``), ``Models`` (picker, switching, GPU-layer reloads,
downloads) and ``Conversations`` (saved conversations). Blocking work runs in
thread workers that post messages (``events.py``); each controller says which
messages it answers (its ``handlers()``), and one handler here hands each message
to its controller. What the chat is doing (generating, the model, the status, the
last stats, the context) is one ``ChatState`` (chat_state.py): the controllers
write it, the status bar and the app watch it. The app keeps the layout and this wiring.
Its bindings' actions (each a line into the controller that does it) are its mixins', by what
they act on (``actions.py``), with the keys as bound, help and the palette (``bound_keys.py``)
and the theme (``theme_choice.py``); the shell's other parts do the rest: where a key or a
paste goes (``key_routing.py``), the side panels (``side_panels.py``), the sampling
parameters' changes and nudge keys (``param_changes.py``), the config file
(``config_ui.py``), the palette's and help's lists (``palette.py``) and the notices
(``notices.py``).

Outside text (model names, server errors, titles, paths) is never read as markup:
widgets get it as ``Content``/``Text`` built by ``outside``; pastes and
notifications are handled by the base, ``OutsideTextApp``.

What the first frame does not draw waits for it (tests/app/test_startup.py), so that the first
frame lays out, styles and imports only what it shows. The history and the tool servers start
once it is drawn (``_after_first_frame``); the rest once it is complete, its footer's keys drawn
(``_mount_hidden``, on the footer's ``KeysShown``): the widgets hidden at start (the
conversation list, the token lens, the parameter panel), made with the app, are mounted then
(the controllers set them as ever before that, and each shows what it was given once mounted;
the keys and pastes that come before wait for them, handled in their order then), and
``/compare``'s controller (``Comparisons``, with its workers, side tools and the pair engine) is
built then, or on first use if a key or a prompt asks for it before (``comparisons``). The slash
commands' table (``slash_commands.py``) is imported by the first slash command; the palette's
lists and the dialogs, when first opened (``bound_keys.py``, ``actions.py``).

Imports inside functions are deliberate: ``/compare``'s controller and the slash commands' table
load after the first frame or on first use (above), not before the first frame.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message

from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.chat.tool_turns import ToolBox
from vibechat.engine.settings.config import LoadedConfig
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import Backend

from ... import slash
from ...appconfig import chat_settings, load_app_config
from ...terminal import SignalExit
from ..chat_state import ChatState
from ..controllers.attachments import Attachments
from ..controllers.branches import Branches
from ..controllers.compactions import Compactions
from ..controllers.conversations import Conversations, OverSaved
from ..controllers.copies import Copies
from ..controllers.lens import Lens
from ..controllers.links import Links
from ..controllers.model_loads import ModelLoads
from ..controllers.models import BackendFactory, Models
from ..controllers.paths import Paths
from ..controllers.queued_prompts import QueuedPrompts
from ..controllers.regenerations import Regenerations
from ..controllers.replies import Replies
from ..controllers.thinking_blocks import ThinkingBlocks
from ..controllers.tool_rounds import ToolPolicy, ToolRounds
from ..conversation.chat_view import ChatView
from ..gc_policy import freeze_startup_objects
from ..widgets.attachment_tray import AttachmentTray
from ..widgets.config_bar import ConfigBar
from ..widgets.footer import KeysFooter
from ..widgets.param_panel import ParamPanel
from ..widgets.prompt_input import PromptInput
from ..widgets.sidebar import ConversationSidebar
from ..widgets.status_bar import StatusBar
from ..widgets.token_lens import TokenLens
from . import config_ui, notices
from .actions import ConversationActions, ModelActions, ReplyActions, ViewActions
from .bindings import APP_BINDINGS
from .bound_keys import BoundKeys
from .key_routing import KeyRouter
from .outside_app import OutsideTextApp
from .param_changes import ParamChanges
from .side_panels import SidePanels
from .theme_choice import ThemeChoice

if TYPE_CHECKING:
    from ..controllers.comparisons import Comparisons

# Seconds: the footer shows the Stop key this long after a reply starts (``_state_changed``).
FOOTER_DELAY_S = 0.25
# Seconds: what the first frame does not draw is mounted once the footer's keys are drawn, or
# this long after the first frame's first refresh at the latest (``_after_first_frame``).
HIDDEN_WAIT_S = 0.5


class VibechatApp(
    ReplyActions,
    ConversationActions,
    ModelActions,
    ViewActions,
    BoundKeys,
    ThemeChoice,
    OutsideTextApp,
):
    """The chat: its layout, its controllers and the wiring between them. Its bindings' actions
    are its mixins' (``actions.py``, by what they act on), with the keys' lookup, help and the
    palette (``bound_keys.py``) and the theme (``theme_choice.py``)."""

    TITLE = "vibechat"
    # The notices sit at the top right, never over the input or the status bar.
    CSS = (
        """
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
        + notices.CSS
    )
    # Each with an id (for [keys]), a description and a tooltip: bindings.py.
    BINDINGS = APP_BINDINGS

    def __init__(
        self,
        backend: Backend,
        *,
        params: SamplingParams | None = None,
        system: str | None = None,
        config: LoadedConfig | None = None,
        blink: bool = True,
        backend_factory: BackendFactory | None = None,
        history: History | None = None,
        freeze_gc: bool = False,
        tools: ToolBox | None = None,
        tool_policy: ToolPolicy | None = None,
        tool_rounds: int = 8,
        exit_on_signals: bool = False,
        open_conversation: int | None = None,
        open_over: OverSaved | None = None,
    ) -> None:
        super().__init__()
        config = config or load_app_config()
        self.config = config
        self.history = history  # None: chats are not saved
        if history is not None:
            # A reply's lens candidates kept with it, bounded as the config says.
            history.lens_bytes = config.config.lens_history_bytes
        self.session = ChatSession(
            backend,
            ChatLog(Conversation(system=system, params=params or config.config.params), history),
        )
        # What a prompt that would overflow the context does (/set context_policy changes it).
        self.session.context_policy = config.config.context_policy
        self.blink = blink
        # The start-up objects are frozen once, when the model is first ready (gc_policy).
        self._freeze_gc = freeze_gc
        # The real chat's signal handling (terminal.py).
        self._signal_exit = SignalExit(self) if exit_on_signals else None
        self.state = ChatState(self)
        # Hidden at start, mounted after the first frame (``_mount_hidden``): the conversation
        # list, the token lens and the sampling parameters' panel. Set as ever before that (they
        # show what they were given once mounted).
        self._sidebar = ConversationSidebar(id="sidebar")
        self._lens_view = TokenLens(self.conversation.params, id="lens")
        self._panel = ParamPanel(self.conversation.params, id="params")
        # Keys and pastes that come until then wait for them (None: mounted). A list that only
        # grows for as long as the first frame takes to draw.
        self._early_input: list[events.Event] | None = []
        self._hidden_mounting = False
        self.replies = Replies(self)
        self.model_loads = ModelLoads(self)
        self.queued = QueuedPrompts(self)
        self.regenerations = Regenerations(self)
        # Another path from a token (the lens's PathChosen).
        self.paths = Paths(self)
        self.thinking = ThinkingBlocks(self)
        self.models = Models(self, backend_factory)
        self.chats = Conversations(self, open_first=open_conversation, over_first=open_over)
        self.branches = Branches(self)
        self.compactions = Compactions(self)
        self.tool_rounds = ToolRounds(self, tools, tool_policy, tool_rounds)
        self.attachments = Attachments(self, lambda: self.query_one(AttachmentTray))
        self.links = Links(self)
        self.copies = Copies(self)
        self.lens = Lens(self, lambda: self._lens_view)
        # /compare: two replies side by side (built after the first frame: ``comparisons``).
        self._comparisons: Comparisons | None = None
        self.param_changes = ParamChanges(
            self, self.session, lambda: self.panel, self.state, self.lens.show_params
        )
        self.side_panels = SidePanels(lambda: self.sidebar, lambda: self.panel)
        self.key_router = KeyRouter(self, lambda: self.prompt_input)
        self.routes: dict[type[Message], Callable[[Any], object]] = {
            **self.replies.handlers(),
            **self.model_loads.handlers(),
            **self.queued.handlers(),
            **self.models.handlers(),
            **self.chats.handlers(),
            **self.branches.handlers(),
            **self.compactions.handlers(),
            **self.tool_rounds.handlers(),
            **self.attachments.handlers(),
            **self.links.handlers(),
            **self.copies.handlers(),
            **self.param_changes.handlers(),
            **self.key_router.handlers(),
            **self.lens.handlers(),
            **self.paths.handlers(),
        }
        self._register_themes()
        self.theme, self._config_notes = config_ui.starting_theme(config, self.available_themes)
        keys = chat_settings(config).keys
        if keys:
            self.set_keymap(dict(keys))

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        # The config's problems, until fixed or hidden.
        yield ConfigBar(id="config-bar")
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield ChatView(id="chat")
                # The token lens on a reply goes here, in the chat's place while it is open
                # (F12; mounted after the first frame).
                # What the next prompt carries (hidden while nothing).
                yield AttachmentTray(id="tray")
                yield PromptInput(self.state, id="input", blink=self.blink)
        # A child of the screen itself: ``closing`` looks there.
        yield StatusBar(self.state, id="status")
        yield KeysFooter()

    @property
    def comparisons(self) -> Comparisons:
        """``/compare``'s controller (built after the first frame, or on first use)."""
        return self._build_comparisons()

    def _build_comparisons(self) -> Comparisons:
        """``/compare``'s controller, built once: by ``_mount_hidden``, or by whatever asks
        for it first (a key, a prompt, a slash command), and its messages routed from then on.
        None of them comes before: each is sent by a comparison it started, or by its view."""
        if self._comparisons is None:
            from ..controllers.comparisons import Comparisons

            self._comparisons = Comparisons(self)
            self.routes.update(self._comparisons.handlers())
        return self._comparisons

    @property
    def backend(self) -> Backend:
        return self.session.backend

    @property
    def chatlog(self) -> ChatLog:
        return self.session.chat

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def generating(self) -> bool:
        """A reply is on its way (the chat state's; read by the bindings and the tests)."""
        return self.state.generating

    @property
    def model_ready(self) -> bool:
        return self.state.model_ready

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
        """The parameter panel: set (``params``, ``show_model``) as ever, also before it is
        mounted after the first frame; it shows what it was given once it is."""
        return self._panel

    @property
    def sidebar(self) -> ConversationSidebar:
        """The conversation list (set as ever before it is mounted after the first frame)."""
        return self._sidebar

    def on_load(self) -> None:
        """Before the terminal is changed: SIGTERM, SIGHUP and SIGINT end the chat as Ctrl+Q
        does."""
        if self._signal_exit is not None:
            self._signal_exit.install()

    def on_mount(self) -> None:
        self.prompt_input.focus()
        self.chat.set_welcome("Loading the model…")
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self.state.changed.subscribe(self, self._state_changed, immediate=True)
        hide = next((b for b in self._bindings_list() if b.id == "hide_config_problems"), None)
        self.query_one(ConfigBar).show(
            self._config_notes,
            self.key_for(hide) if hide else "",
            file=self.config.path,
            from_file=config_ui.file_problems(self.config),
        )
        self.model_loads.load()
        # What the first frame does not draw waits for it: the history's database (opened,
        # repaired, listed for the hidden sidebar) and the tool servers (started, listed), each
        # in a thread that would share the interpreter with the first frame's layout and render;
        # /compare's controller; the widgets hidden at start.
        self.call_after_refresh(self._after_first_frame)

    def _after_first_frame(self) -> None:
        # The chat's start paused the collector until now (run_tui); else, already on.
        gc.enable()
        self.chats.list_history()
        self.tool_rounds.list_tools()
        # The footer's keys come a few refreshes later: the rest waits for them (``KeysShown``),
        # or, where they do not come (a terminal without the focus), for this long.
        self.set_timer(HIDDEN_WAIT_S, self._mount_hidden)

    @on(KeysFooter.KeysShown)
    async def _mount_hidden(self) -> None:
        """Once the first frame is complete (its footer's keys drawn): /compare's controller
        built, unless something asked for it already, and the widgets hidden until their keys
        (Ctrl+B, F12, F2) mounted in their places: the list left of the chat, the lens under
        it, the panel on the right. Then the keys and pastes that came before are handled, in
        their order, as if they came now: F2 typed ahead opens the panel (it is there)."""
        # Once; not while the app closes (the timer's, after the footer's keys).
        if self._hidden_mounting or not self.is_running or self.closing:
            return
        self._hidden_mounting = True
        self._build_comparisons()
        screen = self.default_screen
        body, main = screen.query_one("#body"), screen.query_one("#main")
        mounts = (
            body.mount(self._sidebar, before="#main"),
            main.mount(self._lens_view, after="#chat"),
            body.mount(self._panel),
        )
        for mounted in mounts:
            await mounted
        early, self._early_input = self._early_input, None
        for event in early or ():
            await self.on_event(event)

    def on_unmount(self) -> None:
        """Quitting: the reply in progress stops (saved as stopped) and a running tool call is
        cancelled, so that the exit, which waits for the worker threads, never waits on the
        engine or a tool (up to ``tool_timeout``): an engine process that has not
        ended its request a second later is ended (``WorkerBackend.quit``; a stop's longer grace
        for a model with slow steps is not waited for)."""
        # A comparison's side B keeps what it wrote (side A is the session's reply).
        if self._comparisons is not None:
            self._comparisons.abandon()
        self.session.abandon()
        self.tool_rounds.abandon()
        quit_engine = getattr(self.session.backend, "quit", None)
        if callable(quit_engine):
            quit_engine()

    # ------------------------------------------------------------ messages
    @on(Message)
    async def route(self, message: Message) -> None:
        """A message a controller (or a part of the shell) answers goes to it (``routes``, from
        their ``handlers()``).
        One that lands while the app closes is dropped: the widgets it would update are gone
        (the reply in progress was saved as stopped at unmount)."""
        handler = self.routes.get(type(message))
        if handler is not None and not self.closing:
            result = handler(message)
            if inspect.isawaitable(result):
                await result

    @property
    def closing(self) -> bool:
        """The app is closing: its widgets are gone (a worker's message may still land). Asked
        for every routed message (a model's load sends ~240 progress messages at once, ahead of
        its ModelReady; a reply, one a slice), so it looks among the default screen's children,
        where ``compose`` puts the status bar, not through the whole layout (a long
        conversation's every widget): 0.02-0.03 ms instead of 0.17 ms here, with 31 widgets."""
        return not self.query_children(StatusBar)

    @on(PromptInput.Submitted)
    async def _on_submit(self, message: PromptInput.Submitted) -> None:
        command = slash.parse(message.text)
        if command is not None:
            from ..controllers import slash_commands

            await slash_commands.run(self, command)
        else:
            await self.replies.send(slash.unescape(message.text))

    # ------------------------------------------------------------ the chat state
    def _state_changed(self, name: str) -> None:
        """What the app itself follows of the chat state: the footer's Stop key, and the
        model's first load (the startup objects are frozen then, once: gc_policy)."""
        if name == "generating":
            # A bindings refresh rebuilds the footer's keys (a layout, ~7 ms): as a reply starts
            # it would run during the prompt's evaluation, on the model's cores. Esc stops at once
            # either way; the footer shows it a moment later (docs/PERFORMANCE.md).
            if self.generating:
                self.set_timer(FOOTER_DELAY_S, self._show_stop_key)
            else:
                self.refresh_bindings()
        elif name == "model_ready" and self.model_ready:
            # --continue: the conversation opens now (its cache needs the model).
            self.chats.model_settled()
            if self._freeze_gc:
                self._freeze_gc = False
                self.call_after_refresh(freeze_startup_objects)

    def _show_stop_key(self) -> None:
        # Else the bindings were already refreshed (the reply ended), or the screens are gone.
        if self.generating and not self.closing:
            self.refresh_bindings()

    async def on_event(self, event: events.Event) -> None:
        """A key or a paste the terminal sent goes where the user was typing first
        (``key_routing.py``: typing on the list, the chat or the panel goes to the input;
        under a question, it types where they were typing); one sent before the hidden widgets
        are mounted, once they are."""
        if isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded:
            if self._early_input is not None:
                # Before the hidden widgets are mounted (``_mount_hidden``): handled then.
                self._early_input.append(event)
                return
            if not self.key_router.hand_on(event):
                return
        await super().on_event(event)

    # ------------------------------------------------------------ notices
    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        if not self.closing:
            notices.fit_above(self.screen, self.chat)

    def on_resize(self, event: events.Resize) -> None:
        """The notices fit above the chat again, and the side panels the new width (narrowed
        with both open: the one in use stays, ``side_panels.py``)."""
        if not self.closing:
            self.call_after_refresh(notices.fit_above, self.screen, self.chat)
        self.side_panels.fit(event.size.width)

    # ------------------------------------------------------------ the config bar
    @on(ConfigBar.HideRequested)
    def _on_config_bar_click(self) -> None:
        self.action_hide_config_problems()
