"""The bindings as the user has them: the key each answers to after the config's ``[keys]``
overrides, whether its action may run now, and the lists help (F1) and the command palette
show of them (``palette.py`` makes the lists; the bindings are declared in ``bindings.py``).

``BoundKeys`` is a mixin of ``VibechatApp`` (``app_face.py``): Textual asks the app itself
``check_action`` and ``get_system_commands``.

Imports inside functions are deliberate: the palette's and help's lists (``palette.py``, which
names the widgets its commands act on: the parameter panel, the lens, the tray...) load when the
palette or help first opens, not before the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from ...appconfig import chat_settings
from ..widgets.welcome import key_shown
from .app_face import AppFace


class BoundKeys(AppFace):
    """The app's bindings, their keys and their actions' availability, help and the palette."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # While the welcome offers the last chat; else the key goes on to regenerate.
        if action == "resume_last":
            return self.chats.offered() is not None
        # Stop and Cancel edit: False hides them from the footer too. Regenerate, edit and copy
        # always run: with nothing to act on, they say why (a disabled binding would swallow the
        # key without a word).
        return self.cannot(action) is None

    def cannot(self, action: str) -> str | None:
        """Why ``action`` cannot run now, in one line (None: it can). A key whose action
        cannot run gives way (Esc goes on to the input); the palette says this line."""
        if action == "stop" and not self.generating:
            return "Nothing to stop: no reply is being written."
        if action == "cancel_edit" and not self.replies.edit.can_cancel:
            edit = key_shown(self.bound_key_of("edit_last")) or "Edit message"
            return f"No edit to cancel: {edit} takes a message back to edit."
        return None

    def bound_key(self, binding: Binding) -> str:
        """The key(s) a binding answers to, after ``[keys]`` overrides (``ctrl+n``)."""
        return chat_settings(self.config).keys.get(binding.id or "", binding.key)

    def bound_key_of(self, binding_id: str) -> str:
        """``bound_key`` of the binding ``binding_id`` ("" when there is none)."""
        binding = next((b for b in self._bindings_list() if b.id == binding_id), None)
        return self.bound_key(binding) if binding is not None else ""

    def key_for(self, binding: Binding) -> str:
        """``bound_key`` as shown to people (``^n``)."""
        return self.get_key_display(binding.with_key(self.bound_key(binding)))

    def _bindings_list(self) -> list[Binding]:
        return [b for b in self.BINDINGS if isinstance(b, Binding)]

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        from . import palette

        return palette.help_sections(self._bindings_list(), self.key_for)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands (but its Theme: F4's is the same picker), then one per action."""
        from . import palette

        for command in super().get_system_commands(screen):
            if command.callback != self.action_change_theme:
                yield command
        yield from palette.action_commands(
            self._bindings_list(), self.bound_key, self.config.path, self._run_chosen
        )

    async def _run_chosen(self, action: str) -> None:
        """An action chosen in the palette. One that cannot run now says why in one line,
        never nothing; "Reopen last chat" runs even where its key gives way to Regenerate
        (``check_action``: nothing offered), and then says why it cannot."""
        if action == "resume_last":
            self.chats.resume_last()
            return
        why = self.cannot(action)
        if why is not None:
            self.notify(why, timeout=4)
            return
        await self.run_action(action)
