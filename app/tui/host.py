"""What the chat's controllers (``replies``, ``models_ui``, ``history_ui``,
``config_ui``) may use of the app: its public face, nothing private.

Each controller owns its own state and gets the app as a ``ChatHost``; it says which
messages it answers (``handlers()``, a ``Handlers`` table) and the app hands them over.
What the chat is doing is the ``ChatState`` (``state``), which the controllers write and
the widgets watch. Controllers reach each other through the host (``replies``,
``chats``), never through a method of the app that only passes a call on. Changing how
the engine is driven means reading ``engine/chat/session.py`` and ``replies.py``, not the app.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from textual.message import Message
    from textual.widget import Widget

    from vibechat.engine.settings.config import LoadedConfig
    from vibechat.engine.chat.history import History
    from vibechat.engine.chat.records import StoredMessage
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.chat.session import ChatSession

    from .chat_state import ChatState
    from .chat_view import ChatMessageWidget, ChatView
    from .param_panel import ParamPanel
    from .prompt_input import PromptInput
    from vibechat.engine.turns.backend import GenerationDone
    from vibechat.engine.turns.tool_calls import ToolSpec
    from .sidebar import ConversationSidebar

    # A controller's messages: each class it answers, and the method (sync or async) that does.
    Handlers = dict[type[Message], Callable[[Any], object]]


class ReplyControl(Protocol):
    """What the other controllers use of ``Replies`` (replies.py)."""

    async def new_conversation(self, reset_cache: bool = True) -> None: ...
    async def start(self) -> None: ...


class ToolControl(Protocol):
    """What the replies controller uses of ``ToolRounds`` (tool_rounds.py)."""

    active: bool

    def new_prompt(self) -> None: ...
    def offer(self) -> tuple[tuple[ToolSpec, ...], str]: ...
    def take_over(self, done: GenerationDone) -> bool: ...
    def stop(self) -> None: ...
    def abandon(self) -> None: ...


class ConversationList(Protocol):
    """What the other controllers use of ``HistoryManager`` (history_ui.py)."""

    def changed(self) -> None: ...
    def message_widgets(self, messages: list[StoredMessage]) -> list[ChatMessageWidget]: ...


class ChatHost(Protocol):
    session: ChatSession
    history: History | None
    config: LoadedConfig
    state: ChatState

    @property
    def replies(self) -> ReplyControl: ...
    @property
    def chats(self) -> ConversationList: ...
    @property
    def tool_rounds(self) -> ToolControl: ...

    @property
    def console(self) -> Console: ...
    @property
    def chat(self) -> ChatView: ...
    @property
    def prompt_input(self) -> PromptInput: ...
    @property
    def panel(self) -> ParamPanel: ...
    @property
    def sidebar(self) -> ConversationSidebar: ...
    @property
    def focused(self) -> Widget | None: ...  # the focused widget (a message Ctrl+R / Ctrl+L acts on)

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = False) -> None: ...
    def post_message(self, message: Message) -> bool: ...
    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Any: ...
    def set_timer(self, delay: float, callback: Any = None, *, name: str | None = None,
                  pause: bool = False) -> Any: ...
    def call_after_refresh(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...
    def call_later(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...
    def batch_update(self) -> AbstractContextManager[None]: ...
    def push_screen(self, screen: Any, callback: Any = None, wait_for_dismiss: bool = False) -> Any: ...
    def refresh_bindings(self) -> None: ...
    def show_side_panel(self, panel: Widget) -> None: ...
    def code_theme(self) -> str: ...
    def show_params(self, params: SamplingParams) -> None: ...
    def set_params(self, params: SamplingParams) -> None: ...
    def action_help(self) -> None: ...
    def exit(self, *args: Any, **kwargs: Any) -> None: ...
    async def action_new_conversation(self) -> None: ...
