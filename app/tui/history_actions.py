"""The app's saved conversations: the sidebar, opening, search, rename, delete, export.

A mixin of ``VibechatApp`` (it uses the app's chat log, chat view, backend and
engine lock), kept apart so the app module stays about chatting. Database reads
that can grow (the list, a conversation's messages) run in workers; the small
writes (rename, delete) run where they are asked for.

Opening a conversation brings back its system prompt and parameters and rebuilds
the model's KV cache from its messages in a worker, so the next reply starts
without evaluating the whole conversation first.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.message import Message

from vibechat.engine.backend import ModelInfo
from vibechat.engine.chatlog import ChatLog
from vibechat.engine.errors import VibechatError
from vibechat.engine.gguf import quant_from_filename
from vibechat.engine.history import ConversationSummary, History, SearchHit, StoredConversation, StoredMessage
from vibechat.engine.sanitize import sanitize

from .chat_view import AssistantMessage, ChatMessageWidget, EarlierMessages
from .confirm import ConfirmScreen
from .history_screens import ExportChoice, ExportScreen, RenameScreen, SearchScreen
from .outside import one_line
from .sidebar import ConversationSidebar

log = logging.getLogger("vibechat.tui")

OPEN_WINDOW = 24  # messages mounted when a conversation opens; older ones on request
STATUS_NOTES = {
    "stopped": ("⏹ stopped", "stopped"),
    "interrupted": ("⚠ interrupted: vibechat closed while this reply streamed", "stopped"),
}


class HistoryListed(Message):
    def __init__(self, summaries: list[ConversationSummary], repaired: int, problem: str | None) -> None:
        super().__init__()
        self.summaries = summaries
        self.repaired = repaired
        self.problem = problem


class ConversationLoaded(Message):
    def __init__(self, stored: StoredConversation, jump_to: int | None) -> None:
        super().__init__()
        self.stored = stored
        self.jump_to = jump_to


class ConversationLoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class CacheRebuilt(Message):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.tokens = tokens


if TYPE_CHECKING:  # what the mixin needs of the app it is mixed into
    from textual.app import App
    from textual.widget import Widget

    from vibechat.engine.backend import Backend
    from vibechat.engine.params import SamplingParams

    from .chat_view import ChatView
    from .prompt_input import PromptInput
    from .status_bar import StatusBar

    class _Host(App[None]):
        backend: Backend
        history: History | None
        chatlog: ChatLog
        generating: bool
        model_ready: bool
        _engine_lock: threading.Lock
        _generation: int
        _reset_pending: bool

        @property
        def chat(self) -> ChatView: ...
        @property
        def status(self) -> StatusBar: ...
        @property
        def prompt_input(self) -> PromptInput: ...
        def _end_generation(self) -> None: ...
        def _code_theme(self) -> str: ...
        def show_params(self, params: SamplingParams) -> None: ...
        def show_side_panel(self, panel: Widget) -> None: ...
        async def start_new_conversation(self, reset_cache: bool = True) -> None: ...
else:
    _Host = object


class HistoryActions(_Host):
    """Mixed into ``VibechatApp``; see the module docstring."""

    _problem_shown: str | None = None

    @property
    def sidebar(self) -> ConversationSidebar:
        return self.query_one(ConversationSidebar)

    # ---------------------------------------------------------------- listing
    @work(thread=True, exclusive=True, group="history", exit_on_error=False)
    def list_history(self) -> None:
        """Open the database (repairing what a crash left) and list the conversations."""
        if self.history is None:
            return
        try:
            self.history.open()
            summaries = self.history.conversations()
        except VibechatError as exc:
            self.post_message(HistoryListed([], 0, str(exc)))
            return
        self.post_message(HistoryListed(summaries, self.history.repaired, None))

    def on_history_listed(self, message: HistoryListed) -> None:
        self.sidebar.show(message.summaries)
        if message.problem:
            self.notify(f"Chats are not saved: {message.problem}", title="History", severity="error", timeout=15)
        elif message.repaired:
            count = message.repaired
            self.notify(f"{count} repl{'y was' if count == 1 else 'ies were'} cut off when vibechat last "
                        "closed; kept and marked interrupted.", title="History", timeout=8)

    def history_changed(self) -> None:
        """After a save: the open conversation moves to the top of the sidebar; a save that
        failed is reported once."""
        chatlog = self.chatlog
        if chatlog.problem and chatlog.problem != self._problem_shown:
            self._problem_shown = chatlog.problem
            self.notify(chatlog.problem, title="History", severity="error", timeout=15)
        if chatlog.conversation_id is None:
            return
        from vibechat.engine.history import now

        stamp = now()
        old = next((s for s in self.sidebar.summaries if s.id == chatlog.conversation_id), None)
        self.sidebar.upsert(ConversationSummary(chatlog.conversation_id, chatlog.title or "", chatlog.model,
                                                old.created if old else stamp, stamp))
        self.sidebar.current = chatlog.conversation_id

    # ----------------------------------------------------------------- actions
    def action_toggle_sidebar(self) -> None:
        """Show the list and focus it; from the list, hide it (shown but not focused: focus it)."""
        sidebar = self.sidebar
        if sidebar.has_class("-visible") and sidebar.has_focus_within:
            sidebar.remove_class("-visible")
            self.prompt_input.focus()
        else:
            self.show_side_panel(sidebar)
            sidebar.focus_list()

    def action_search_history(self) -> None:
        if self.history is None:
            self.notify("Chat history is off.", severity="warning")
            return

        def chosen(hit: SearchHit | None) -> None:
            if hit is not None:
                self.open_conversation(hit.conversation_id, jump_to=hit.message_id)

        self.push_screen(SearchScreen(self.history), chosen)

    def on_conversation_sidebar_open(self, message: ConversationSidebar.Open) -> None:
        self.open_conversation(message.conversation_id)

    def on_conversation_sidebar_search(self, _message: ConversationSidebar.Search) -> None:
        self.action_search_history()

    def on_conversation_sidebar_request(self, message: ConversationSidebar.Request) -> None:
        summary = message.summary
        if message.what == "rename":
            self._rename(summary.id, summary.title)
        elif message.what == "delete":
            self._delete(summary.id, summary.title)
        elif message.what == "export":
            self._export(summary.id, summary.title)

    def _open_summary(self) -> ConversationSummary | None:
        """The conversation on screen, if it has been saved."""
        chatlog = self.chatlog
        if chatlog.conversation_id is None or self.history is None:
            self.notify("This conversation is not saved yet: send a message first.", severity="warning")
            return None
        return ConversationSummary(chatlog.conversation_id, chatlog.title or "", chatlog.model, "", "")

    def action_rename_conversation(self) -> None:
        summary = self._open_summary()
        if summary is not None:
            self._rename(summary.id, summary.title)

    def action_delete_conversation(self) -> None:
        summary = self._open_summary()
        if summary is not None:
            self._delete(summary.id, summary.title)

    def action_export_conversation(self) -> None:
        summary = self._open_summary()
        if summary is not None:
            self._export(summary.id, summary.title)

    # ------------------------------------------------------- rename / delete
    def _rename(self, conversation_id: int, title: str) -> None:
        def renamed(new_title: str | None) -> None:
            if not new_title or self.history is None:
                return
            try:
                self.history.rename(conversation_id, new_title)
            except VibechatError as exc:
                self.notify(str(exc), severity="error")
                return
            if conversation_id == self.chatlog.conversation_id:
                self.chatlog.title = new_title
            old = next((s for s in self.sidebar.summaries if s.id == conversation_id), None)
            if old is not None:
                self.sidebar.summaries = [s if s.id != conversation_id else
                                          ConversationSummary(s.id, new_title, s.model, s.created, s.updated)
                                          for s in self.sidebar.summaries]
                self.sidebar.show(self.sidebar.summaries)
            self.notify(f"Renamed to “{new_title}”.", timeout=2)

        self.push_screen(RenameScreen(title), renamed)

    def _delete(self, conversation_id: int, title: str) -> None:
        async def answered(yes: bool | None) -> None:
            if not yes or self.history is None:
                return
            try:
                self.history.delete(conversation_id)
            except VibechatError as exc:
                self.notify(str(exc), severity="error")
                return
            self.sidebar.forget(conversation_id)
            if conversation_id == self.chatlog.conversation_id:
                await self.start_new_conversation()
                self.sidebar.current = None
            self.notify(f"Deleted “{title}”.", timeout=2)

        self.push_screen(ConfirmScreen(f"Delete the conversation “{one_line(title)}” and all its messages?\n\n"
                                       "This cannot be undone."), answered)

    # ---------------------------------------------------------------- export
    def _export(self, conversation_id: int, title: str) -> None:
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "conversation"
        stem = Path.cwd() / f"vibechat-{conversation_id}-{slug}"

        def write(choice: ExportChoice) -> None:
            if self.history is None:
                return
            try:
                stored = self.history.get(conversation_id)
                text = stored.to_markdown() if choice.format == "md" else _json(stored)
                choice.path.parent.mkdir(parents=True, exist_ok=True)
                choice.path.write_text(text, encoding="utf-8")
            except VibechatError as exc:
                self.notify(str(exc), severity="error")
            except OSError as exc:
                self.notify(f"Could not write {choice.path}: {exc.strerror or exc}.", severity="error")
            else:
                self.notify(f"Exported to {choice.path}", timeout=5)

        def chosen(choice: ExportChoice | None) -> None:
            if choice is None or self.history is None:
                return
            if not choice.path.is_file():
                write(choice)
                return

            def answered(replace: bool | None) -> None:  # an existing file is replaced only when asked to
                if replace:
                    write(choice)
                else:
                    self.notify(f"Not exported: {choice.path} is left as it was.", timeout=5)

            self.push_screen(ConfirmScreen(f"{choice.path} already exists.\n\nReplace it?"), answered)

        self.push_screen(ExportScreen(stem), chosen)

    # ------------------------------------------------------------------ open
    def open_conversation(self, conversation_id: int, jump_to: int | None = None) -> None:
        if conversation_id == self.chatlog.conversation_id and jump_to is None:
            self.prompt_input.focus()
            return
        self._load_conversation(conversation_id, jump_to)

    @work(thread=True, exclusive=True, group="history-open", exit_on_error=False)
    def _load_conversation(self, conversation_id: int, jump_to: int | None) -> None:
        assert self.history is not None
        try:
            stored = self.history.get(conversation_id)
        except VibechatError as exc:
            self.post_message(ConversationLoadFailed(str(exc)))
            return
        self.post_message(ConversationLoaded(stored, jump_to))

    def on_conversation_load_failed(self, message: ConversationLoadFailed) -> None:
        self.notify(message.error, severity="error")

    async def on_conversation_loaded(self, message: ConversationLoaded) -> None:
        stored = message.stored
        await self.start_new_conversation(reset_cache=False)
        chatlog = ChatLog.from_stored(stored, self.history)
        loaded = self.status.model
        if loaded is not None:
            note = model_change_note(stored.summary.model, stored.model_path, loaded)
            if note:
                self.notify(note, timeout=6)
            chatlog.set_model(loaded.name, loaded.path)
        self.chatlog = chatlog
        self.show_params(stored.params)
        # The newest messages (from the search match, when jumping to one) are mounted now;
        # older ones wait behind a stand-in until asked for.
        messages = stored.messages
        start = max(0, len(messages) - OPEN_WINDOW)
        target_index = next((i for i, m in enumerate(messages) if m.id == message.jump_to), None)
        if target_index is not None:
            start = min(start, max(0, target_index - 2))
        widgets: list = [EarlierMessages(messages[:start])] if start else []
        widgets += self._message_widgets(messages[start:])
        target = None if message.jump_to is None else next(
            (w for w in widgets if getattr(w, "message_id", None) == message.jump_to), None)
        await self.chat.add_all(widgets, follow=target is None)
        self.sidebar.current = stored.id
        if target is not None:
            self.chat.release_anchor()
            target.focus(scroll_visible=False)
            # Once laid out: the found message at the top of the view.
            self.call_after_refresh(self.chat.scroll_to_widget, target, top=True, animate=False)
        else:
            self.prompt_input.focus()
        self.refresh_bindings()
        self._rebuild_cache(self._generation, chatlog.conversation.messages())

    def _message_widgets(self, messages: list[StoredMessage]) -> list[ChatMessageWidget]:
        theme = self._code_theme()
        widgets: list[ChatMessageWidget] = []
        for m in messages:
            status, kind = "", None
            if m.status == "error" or (m.status == "interrupted" and m.error):  # a cut stream says why
                status, kind = f"⚠ {m.error or 'failed'}", "error"
            elif m.status in STATUS_NOTES:
                status, kind = STATUS_NOTES[m.status]
            elif m.stats and m.stats.get("finish_reason") == "length":
                status = "… cut at the token limit"
            widget: ChatMessageWidget
            if m.role == "user":
                widget = ChatMessageWidget("user", sanitize(m.content), status=status, status_kind=kind)
            else:
                widget = AssistantMessage(sanitize(m.content), code_theme=theme, status=status, status_kind=kind)
            widget.message_id = m.id
            widgets.append(widget)
        return widgets

    async def on_earlier_messages_requested(self, message: EarlierMessages.Requested) -> None:
        stand_in = message.stand_in
        widgets = self._message_widgets(stand_in.pending)
        if widgets:
            await self.chat.mount_all(widgets, before=stand_in)
        await stand_in.remove()
        if widgets:
            widgets[-1].focus()

    @work(thread=True, group="reset", exit_on_error=False)
    def _rebuild_cache(self, generation: int, messages: list) -> None:
        """The KV cache holds the opened conversation, so the next reply only evaluates
        the new prompt."""
        with self._engine_lock:
            if generation != self._generation or not self.model_ready:
                return
            self._reset_pending = False
            try:
                tokens = self.backend.prefill(messages)
            except VibechatError as exc:  # too long for the context: the next reply trims it
                log.info("cache not rebuilt: %s", exc)
                self.backend.reset()
                tokens = 0
            except Exception:  # noqa: BLE001 - a cache rebuild is an optimisation
                log.exception("cache rebuild failed")
                self.backend.reset()
                tokens = 0
        self.post_message(CacheRebuilt(tokens))

    def on_cache_rebuilt(self, message: CacheRebuilt) -> None:
        self.status.context_used = message.tokens


def model_change_note(name: str | None, path: str | None, loaded: ModelInfo) -> str | None:
    """What to say when an opened conversation was had with another model file than the one
    loaded: nothing when it is the same model (same name, and the same file name or
    quantization: the file moved or was downloaded again); the file names when only the
    file differs (another quantization); else both models' names."""
    if not path or path == loaded.path:
        return None
    old_file, new_file = Path(path).name, Path(loaded.path).name
    if name and name != loaded.name:
        return f"This conversation was with {name}; it continues with {loaded.name} (F3 switches models)."
    old_quant = quant_from_filename(old_file)
    if old_file == new_file or (old_quant and old_quant == loaded.quantization.upper()):
        return None
    return (f"This conversation was with {old_file}; it continues with {new_file}, another file of "
            f"{loaded.name} (F3 switches models).")


def _json(stored: StoredConversation) -> str:
    import json

    return json.dumps(stored.to_dict(), ensure_ascii=False, indent=2) + "\n"
