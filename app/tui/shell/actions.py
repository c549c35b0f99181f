"""The bindings' actions, grouped by what they act on: each is a line into the controller (or
the widget) that does the work.

Textual looks a binding's or the palette's action up on the app, as ``action_<name>``: these
classes are mixins of ``VibechatApp`` (``app_face.py`` says what they use of it), so that every
action stays the app's method while each group lives together. Which actions may run at a given
moment is ``BoundKeys.check_action``'s (``bound_keys.py``).

Imports inside functions are deliberate: the help, preset and compare dialogs load when first
opened, not before the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

from textual.widget import Widget

from vibechat.engine.settings.params import SamplingParams

from ..conversation.messages import ChatMessageWidget
from ..widgets.config_bar import ConfigBar
from . import config_ui
from .app_face import AppFace


class ReplyActions(AppFace):
    """The open conversation's messages and the next prompt: stop a reply, cancel an edit,
    regenerate, edit, copy, the thinking blocks, a new conversation, attach a file."""

    def action_stop(self) -> None:
        self.replies.stop()

    async def action_cancel_edit(self) -> None:
        await self.replies.edit.cancel()

    async def action_new_conversation(self) -> None:
        await self.replies.new_conversation()
        self.notify("New conversation", timeout=2)

    async def action_regenerate(self) -> None:
        await self.regenerations.regenerate()

    async def action_edit_last(self) -> None:
        await self.replies.edit.edit_last()

    def action_copy_last(self) -> None:
        self.copies.copy_last()

    def action_toggle_thinking(self) -> None:
        self.thinking.toggle_last()

    def action_toggle_thinking_expanded(self) -> None:
        self.thinking.toggle_expanded()

    def action_compare_pick(self, column: int) -> None:
        """The palette's "Pick A" / "Pick B": the reply of that column of the comparison."""
        self.comparisons.pick_column(column)

    def action_compare_stop(self, column: int) -> None:
        """The palette's "Stop side A/B alone": that column's side stops, the other goes on."""
        self.comparisons.stop_column(column)

    def action_compare_flip(self) -> None:
        """Show the other compared reply (its key, the palette; f on the comparison itself)."""
        self.comparisons.flip()

    def action_compare_setup(self) -> None:
        """The palette's "Compare the next prompt…": a small dialog asks for ``/compare``'s words,
        starting from the last comparison's; Enter arms it as ``/compare SPEC`` does."""
        from ..screens.compare_setup import CompareSetupScreen

        last = self.comparisons.last
        self.push_screen(
            CompareSetupScreen(last.text if last is not None else ""), self._compare_spec
        )

    def _compare_spec(self, spec: str | None) -> None:
        if spec:
            self.run_worker(self.comparisons.command(spec), group="compare", exit_on_error=False)

    async def action_compare_again(self) -> None:
        """The palette's "Compare the last prompt again": as ``/compare again``."""
        await self.comparisons.command("again")

    def action_attach(self, kind: str) -> None:
        """The palette's "Attach an image/a file": ``/image `` or ``/file `` typed for the path."""
        if not self.prompt_input.text:
            self.prompt_input.load_text("/image " if kind == "image" else "/file ")
            self.prompt_input.move_cursor(self.prompt_input.document.end)
        self.prompt_input.focus()


class ConversationActions(AppFace):
    """The saved conversations (``Conversations``, ``Branches``): the list, reopening the last,
    search, the list's filter, and renaming, deleting, exporting or forking the open one."""

    def action_toggle_sidebar(self) -> None:
        self.chats.toggle_sidebar()

    def action_resume_last(self) -> None:
        self.chats.resume_last()

    def action_search_history(self) -> None:
        self.chats.search()

    def action_filter_conversations(self) -> None:
        self.chats.cycle_filter()

    def action_rename_conversation(self) -> None:
        self.chats.act_on_open("rename")

    def action_delete_conversation(self) -> None:
        self.chats.act_on_open("delete")

    def action_export_conversation(self) -> None:
        self.chats.act_on_open("export")

    def action_fork_conversation(self) -> None:
        self.branches.fork()

    def action_compact(self) -> None:
        self.compactions.command("")

    def action_pin_message(self) -> None:
        """The palette's "Pin or unpin a message": the focused one (Ctrl+U on it does the same)."""
        focused = self.focused
        if isinstance(focused, ChatMessageWidget) and focused.check_action("pin", ()):
            focused.action_pin()
        else:
            self.notify(
                "Focus a message first (Tab from the input goes to them), then pin it.",
                severity="warning",
                timeout=4,
            )


class ModelActions(AppFace):
    """The model and how it samples: the model picker, presets, downloads, the sampling
    parameters (set, shown, nudged by a key, saved as the config's defaults)."""

    def action_models(self) -> None:
        self.models.open_picker()

    def action_presets(self) -> None:
        from ..controllers import presets

        presets.open_picker(self)

    def action_download(self) -> None:
        self.models.open_downloads()

    def action_nudge(self, name: str, direction: int) -> None:
        """A parameter's nudge key (``ParamSpec.nudge``): one fine step down or up."""
        self.param_changes.nudge(name, direction)

    def set_params(self, params: SamplingParams) -> None:
        """The next generation uses exactly ``params`` (``param_changes.py``)."""
        self.param_changes.set(params)

    def show_params(self, params: SamplingParams) -> None:
        """An opened conversation's parameters (already saved with it)."""
        self.param_changes.show(params)

    def action_save_params_default(self) -> None:
        text, saved = config_ui.save_params_default(self.config, self.conversation.params)
        self.notify(
            text,
            title="Config",
            severity="information" if saved else "error",
            timeout=4 if saved else 15,
        )


class ViewActions(AppFace):
    """The screen around the conversation: where the focus goes, scrolling the chat, the side
    panels, the config's problems bar, help, and quitting from an empty input."""

    def action_focus_chat(self) -> None:
        """Tab from the input: the newest message, scrolled into view, when the chat is where the
        focus goes next (else, the parameter panel open after the input, on as ever). From there
        Shift+Tab goes up the conversation and Tab back down to the input."""
        chain = self.screen.focus_chain
        prompt = self.prompt_input
        after = chain[(chain.index(prompt) + 1) % len(chain)] if prompt in chain else None
        into_chat = after is not None and (after is self.chat or self.chat in after.ancestors)
        if not (into_chat and self.chat.focus_newest()):
            self.screen.focus_next()

    def action_toggle_lens(self) -> None:
        self.lens.toggle()

    def action_open_lens(self) -> None:
        self.lens.open()

    def action_scroll_chat(self, pages: int) -> None:
        self.chat.scroll_pages(pages)

    def action_scroll_chat_end(self) -> None:
        self.chat.anchor()

    def action_scroll_chat_home(self) -> None:
        self.chat.scroll_to_start()

    def action_toggle_params(self) -> None:
        panel = self.panel
        if panel.has_class("-visible"):
            panel.remove_class("-visible")
            # Back to the token lens when it is open (the sliders were moved under it).
            if not self.lens.refocus():
                self.prompt_input.focus()
        else:
            self.show_side_panel(panel)
            panel.focus_first()

    def show_side_panel(self, panel: Widget) -> None:
        """Show the conversation list or the parameter panel (``side_panels.py``)."""
        self.side_panels.show(panel, self.size.width)

    def action_hide_config_problems(self) -> None:
        self.query_one(ConfigBar).hide()

    def action_help(self) -> None:
        # On first use, as the other dialogs: not before the first frame.
        from ..screens.help_screen import HelpScreen

        self.push_screen(HelpScreen(self.help_sections()))

    def action_quit_if_empty(self) -> None:
        """Ctrl+D: quit, when the input is empty (from the input, it only comes here then)."""
        if self.prompt_input.text:
            self.notify(
                "Ctrl+D quits when the input is empty; Ctrl+Q quits at any time.", timeout=4
            )
            return
        self.exit()
