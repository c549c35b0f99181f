"""The app's saved conversations: the sidebar's list, opening one, search, delete.

A controller of ``VibechatApp`` (see ``host.py``): it opens conversations into the
engine's ``ChatSession``, which owns the conversation being chatted. Database reads
that can grow (the list, a conversation's messages) run in workers; the small
writes (delete) run where they are asked for.

Opening a conversation brings back its system prompt and parameters and rebuilds
the model's KV cache from its messages in a worker, so the next reply starts
without evaluating the whole conversation first. Its messages are shown as
conversation/saved_messages.py builds them, the newest first, older ones on request.

A conversation's title (the model's, a rename) is ``Titles``' (titles.py) and an export
``Exports``' (exports.py), both asked from here; its branches and forks are the ``Branches``
controller's (branches.py), and what is said when it opens on another model, model_change.py's.

Imports inside functions are deliberate: the search dialog loads when first opened, not before
the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.history import History
from vibechat.engine.chat.records import (
    ConversationSummary,
    SearchHit,
    StoredConversation,
    StoredMessage,
    now,
)
from vibechat.engine.errors import VibechatError
from vibechat.engine.sanitize import sanitize
from vibechat.engine.settings.params import SamplingParams

from ...appconfig import chat_settings
from ...conversation_backend import OwnBackend
from ..conversation import saved_messages
from ..conversation.earlier_messages import EarlierMessages
from ..conversation.messages import ChatMessageWidget
from ..outside import one_line
from ..screens.confirm import ConfirmScreen
from ..widgets.sidebar import ConversationSidebar
from ..widgets.welcome import key_shown, resume_line
from .events import (
    CacheRebuilt,
    ConversationLoaded,
    ConversationLoadFailed,
    HistoryListed,
    OwnModelWanted,
)
from .exports import Exports
from .host import ChatHost
from .model_change import model_change_note
from .titles import Titles

if TYPE_CHECKING:
    from .host import Handlers

# RunPlan.over_saved: a saved conversation's parameters with the command line's on top, and the
# system prompt it names (None: the conversation's own).
OverSaved = Callable[[SamplingParams], "tuple[SamplingParams, str | None]"]

# Messages mounted when a conversation opens; older ones on request.
OPEN_WINDOW = 24


class Conversations:
    """See the module docstring."""

    def __init__(
        self, host: ChatHost, open_first: int | None = None, over_first: OverSaved | None = None
    ) -> None:
        self.host = host
        # --continue / --conversation ID: opened once the model is ready, with the preset's and the
        # flags' parameters and system prompt over its own, as in `run --continue`.
        self._open_first = open_first
        self._over_first = (
            (open_first, over_first) if open_first is not None and over_first is not None else None
        )
        self._problem_shown: str | None = None
        # The conversation last opened (its branches).
        self.opened: StoredConversation | None = None
        # The model's titles, the user's renames.
        self.titles = Titles(host)
        self.exports = Exports(host)

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {
            HistoryListed: self.listed,
            ConversationLoaded: self.loaded,
            ConversationLoadFailed: self.load_failed,
            CacheRebuilt: self.cache_rebuilt,
            EarlierMessages.Requested: self.show_earlier,
            ConversationSidebar.Open: lambda message: self.open_conversation(
                message.conversation_id
            ),
            ConversationSidebar.Request: lambda message: self.act(
                message.what, message.summary.id, message.summary.title
            ),
        }

    @property
    def history(self) -> History | None:
        return self.host.history

    # ---------------------------------------------------------------- listing
    def list_history(self) -> None:
        self.host.run_worker(
            self._list, thread=True, exclusive=True, group="history", exit_on_error=False
        )

    def _list(self) -> None:
        """Open the database (repairing what a crash left) and list the conversations."""
        if self.history is None:
            return
        try:
            self.history.open()
            summaries = self.history.conversations()
        except VibechatError as exc:
            self.host.post_message(HistoryListed([], 0, str(exc)))
            return
        self.host.post_message(
            HistoryListed(summaries, self.history.repaired, self.history.read_only)
        )

    def listed(self, message: HistoryListed) -> None:
        self.host.sidebar.show(message.summaries)
        self.offer_last()
        if message.problem:
            self.host.notify(
                f"Chats are not saved: {message.problem}",
                title="History",
                severity="error",
                timeout=15,
            )
        elif message.repaired:
            count = message.repaired
            self.host.notify(
                f"{count} repl{'y was' if count == 1 else 'ies were'} cut off when vibechat last "
                "closed; kept and marked interrupted.",
                title="History",
                timeout=8,
            )

    def changed(self) -> None:
        """After a save: the open conversation moves to the top of the sidebar; a save that
        failed is reported once."""
        chatlog, sidebar = self.host.session.chat, self.host.sidebar
        # A conversation under way: the welcome offers no other.
        self.offer_last()
        if chatlog.problem and chatlog.problem != self._problem_shown:
            self._problem_shown = chatlog.problem
            self.host.notify(
                f"{chatlog.problem}; the conversation stays on screen",
                title="History",
                severity="error",
                timeout=15,
            )
        if chatlog.conversation_id is None:
            return

        stamp = now()
        old = next((s for s in sidebar.summaries if s.id == chatlog.conversation_id), None)
        sidebar.upsert(
            ConversationSummary(
                chatlog.conversation_id,
                chatlog.title or "",
                chatlog.model,
                old.created if old else stamp,
                stamp,
                old.source if old else chatlog.source,
            )
        )
        sidebar.current = chatlog.conversation_id
        self.titles.ask()

    # ----------------------------------------------------------------- actions
    def toggle_sidebar(self) -> None:
        """Show the list and focus it; hide it when it is shown, focused or not (the input
        takes the focus it had). Ctrl+B once shown focused a list left open after Enter, and a
        user who took it for closed typed into it."""
        sidebar = self.host.sidebar
        if sidebar.has_class("-visible"):
            had_focus = sidebar.has_focus_within
            sidebar.remove_class("-visible")
            if had_focus:
                self.host.prompt_input.focus()
        else:
            self.host.show_side_panel(sidebar)
            sidebar.focus_list()

    def cycle_filter(self) -> None:
        """The palette's "f": the list shows the next source (chat, run, batch, all), shown."""
        sidebar = self.host.sidebar
        sidebar.action_cycle_filter()
        self.host.show_side_panel(sidebar)
        sidebar.focus_list()

    def search(self) -> None:
        from ..screens.history_screens import SearchScreen

        if self.history is None:
            self.host.notify("Chat history is off.", severity="warning")
            return

        def chosen(hit: SearchHit | None) -> None:
            if hit is not None:
                self.open_conversation(hit.conversation_id, jump_to=hit.message_id)

        self.host.push_screen(SearchScreen(self.history), chosen)

    def act(self, what: str, conversation_id: int, title: str) -> None:
        """Rename, delete or export a conversation (the sidebar's keys)."""
        if what == "rename":
            self.titles.rename(conversation_id, title)
        elif what == "delete":
            self._delete(conversation_id, title)
        elif what == "export":
            self.exports.export(conversation_id, title)

    def act_on_open(self, what: str) -> None:
        """The palette's rename / delete / export of the conversation on screen."""
        chatlog = self.host.session.chat
        if chatlog.conversation_id is None or self.history is None:
            self.host.notify(
                "This conversation is not saved yet: send a message first.", severity="warning"
            )
            return
        self.act(what, chatlog.conversation_id, chatlog.title or "")

    # ---------------------------------------------------------------- delete
    def _delete(self, conversation_id: int, title: str) -> None:
        host = self.host

        async def answered(yes: bool | None) -> None:
            if not yes or self.history is None:
                return
            try:
                self.history.delete(conversation_id)
            except VibechatError as exc:
                host.notify(str(exc), severity="error")
                return
            host.sidebar.forget(conversation_id)
            self.offer_last()
            if conversation_id == host.session.chat.conversation_id:
                await host.replies.new_conversation()
                host.sidebar.current = None
            host.notify(f"Deleted “{title}”.", timeout=2)

        host.push_screen(
            ConfirmScreen(
                f"Delete the conversation “{one_line(title)}” and all its messages?\n\n"
                "This cannot be undone.",
                yes="delete it",
                no="keep it",
            ),
            answered,
        )

    # ------------------------------------------------------------------ open
    def model_settled(self) -> None:
        """The first model is ready (or could not load): the conversation the chat was started
        on (``--continue``, ``--conversation ID``, ``continue_last``) opens now, as the list opens
        one: its own model where it can, its KV cache rebuilt (from its snapshot when one is
        kept); with no model, its messages at least. Once."""
        conversation_id, self._open_first = self._open_first, None
        if conversation_id is not None:
            self.open_conversation(conversation_id)

    def offered(self) -> ConversationSummary | None:
        """The conversation an empty chat's welcome offers: the latest saved (as ``--continue``
        picks it), while no conversation is on screen nor waits to open at start."""
        chat, summaries = self.host.session.chat, self.host.sidebar.summaries
        if (
            chat.conversation_id is not None
            or chat.conversation.turns
            or not summaries
            or self._open_first
        ):
            return None
        return summaries[0]

    def offer_last(self) -> None:
        """The welcome's line offering :meth:`offered` on its key (``resume_last``), or none."""
        latest = self.offered()
        key = self.host.bound_key_of("resume_last")
        self.host.chat.set_offer(
            resume_line(key, latest.title) if latest is not None and key else None
        )

    def resume_last(self) -> None:
        """The welcome's key (and the palette's "Reopen last chat"): the offered conversation
        opens (as from the list); with none offered, one notice says why."""
        latest = self.offered()
        if latest is not None:
            self.open_conversation(latest.id)
            return
        self.host.notify(self.not_offered_why(), timeout=4)

    def not_offered_why(self) -> str:
        """Why :meth:`offered` is None, in one line: nothing saved yet, the conversation the
        chat started on still to open, or a chat on screen (reopening is an empty chat's)."""
        if self._open_first:
            return "The conversation the chat started on opens once the model is ready."
        if not self.host.sidebar.summaries:
            return "No saved conversation to reopen yet."
        new = key_shown(self.host.bound_key_of("new_conversation")) or "New chat"
        return f"The last chat is reopened from an empty chat: {new} starts one."

    def open_conversation(self, conversation_id: int, jump_to: int | None = None) -> None:
        if conversation_id == self.host.session.chat.conversation_id and jump_to is None:
            self.host.prompt_input.focus()
            return
        self.host.run_worker(
            lambda: self._read(conversation_id, jump_to),
            thread=True,
            exclusive=True,
            group="history-open",
            exit_on_error=False,
        )

    def reopen(self, conversation_id: int) -> None:
        """The conversation read again as it is saved, on its saved branch (Esc after Ctrl+L: the
        edit is dropped, the message and its reply come back)."""
        self.host.run_worker(
            lambda: self._read(conversation_id, None),
            thread=True,
            exclusive=True,
            group="history-open",
            exit_on_error=False,
        )

    def _read(self, conversation_id: int, jump_to: int | None) -> None:
        """In a worker: the conversation, on the branch through ``jump_to`` (a search hit, a
        sibling switched to) when given, which is then the branch it opens on next time too."""
        assert self.history is not None
        try:
            # The database is open already (the list opened it).
            stored = self.history.open().get(conversation_id, through=jump_to)
            if jump_to is not None and stored.leaf_id is not None and not self.history.read_only:
                self.history.set_leaf(conversation_id, stored.leaf_id)
        except VibechatError as exc:
            self.host.post_message(ConversationLoadFailed(str(exc)))
            return
        self.host.post_message(ConversationLoaded(stored, jump_to))

    def load_failed(self, message: ConversationLoadFailed) -> None:
        self.host.notify(message.error, severity="error")

    async def loaded(self, message: ConversationLoaded) -> None:
        host, stored = self.host, message.stored
        await host.replies.new_conversation(reset_cache=False)
        loaded = host.session.info
        if loaded is not None:
            note = model_change_note(stored.summary.model, stored.model_path, loaded)
            own = OwnBackend.of(stored.summary.model, stored.model_path)
            # The chat switches to it where it can (models_ui), else says so.
            if note and own is not None:
                host.post_message(OwnModelWanted(own.name, own.path, own.server, sanitize(note)))
        host.session.open(ChatLog.from_stored(stored, self.history))
        self.opened = stored
        self.offer_last()
        host.show_params(stored.params)
        self._apply_start_flags(stored)
        # The newest messages (from the search match, when jumping to one) are mounted now;
        # older ones wait behind a stand-in until asked for.
        messages = stored.messages
        start = max(0, len(messages) - OPEN_WINDOW)
        target_index = next((i for i, m in enumerate(messages) if m.id == message.jump_to), None)
        if target_index is not None:
            start = min(start, max(0, target_index - 2))
        widgets: list = [EarlierMessages(messages[:start])] if start else []
        widgets += self.message_widgets(messages[start:])
        target = (
            None
            if message.jump_to is None
            else next(
                (w for w in widgets if getattr(w, "message_id", None) == message.jump_to), None
            )
        )
        chat = host.chat
        await chat.add_all(widgets, follow=target is None)
        host.sidebar.current = stored.id
        if target is not None:
            chat.release_anchor()
            target.focus(scroll_visible=False)
            # Once laid out: the found message at the top of the view.
            host.call_after_refresh(chat.scroll_to_widget, target, top=True, animate=False)
        else:
            host.prompt_input.focus()
        host.refresh_bindings()
        self._rebuild_cache()

    def _apply_start_flags(self, stored: StoredConversation) -> None:
        """The conversation the chat started on, opened: the parameters and system prompt the
        command line named (a preset, flags) go over its own and are saved with it, as a slider
        moved or ``/system`` would (``RunPlan.over_saved``). Once, and only for that one."""
        if self._over_first is None or self._over_first[0] != stored.id:
            return
        over, self._over_first = self._over_first[1], None
        params, system = over(stored.params)
        if params != stored.params:
            self.host.set_params(params)
        if system is not None and (system or None) != stored.system:
            self.host.session.chat.set_system(system or None)

    def message_widgets(self, messages: list[StoredMessage]) -> list[ChatMessageWidget]:
        """Saved messages of the conversation last opened, as the chat shows them."""
        return saved_messages.message_widgets(
            messages,
            code_theme=self.host.code_theme(),
            thinking_expanded=chat_settings(self.host.config).thinking_expanded,
            opened=self.opened,
        )

    async def show_earlier(self, message: EarlierMessages.Requested) -> None:
        stand_in = message.stand_in
        widgets = self.message_widgets(stand_in.pending)
        if widgets:
            await self.host.chat.mount_all(widgets, before=stand_in)
        await stand_in.remove()
        if widgets:
            widgets[-1].focus()

    def _rebuild_cache(self) -> None:
        """The KV cache holds the opened conversation, so the next reply only evaluates
        the new prompt."""
        session = self.host.session
        generation = session.generation

        # Listed in the prompt as the next reply lists them.
        tools = self.host.tool_rounds.offer()[0]

        def rebuild() -> None:
            tokens = session.rebuild_cache(generation, tools)
            if tokens is not None:
                self.host.post_message(CacheRebuilt(tokens))

        self.host.run_worker(rebuild, thread=True, group="reset", exit_on_error=False)

    def cache_rebuilt(self, message: CacheRebuilt) -> None:
        self.host.state.context_used = message.tokens
