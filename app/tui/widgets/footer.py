"""The key line at the bottom of the chat: Textual's ``Footer``, redrawn only when the keys it
shows change.

Textual's ``Footer`` removes and mounts all its keys again on every bindings refresh of the
screen, and the screen refreshes its bindings whenever the focus moves or an action's
availability may have changed (``check_action``): a reply starting, a key pressed in the
input. Most of those refreshes show the same keys. Each rebuild costs a reflow of the footer
in the frame that also shows the user's keypress or the reply's first words (issue 42), so
this footer compares what it would show with what it shows and rebuilds only on a change.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    """A ``Footer`` that recomposes only when the keys it would show differ from those shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # What the last compose showed (None: nothing yet).
        self._shown: Hashable | None = None
        # How many times the keys were built (what the tests count).
        self.rebuilds = 0

    def compose(self):  # type: ignore[no-untyped-def]  # Footer's own signature
        if self._bindings_ready:
            self._shown = self._keys()
            self.rebuilds += 1
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        """The screen's bindings were refreshed: rebuild only if the keys shown would change."""
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        if not self.is_attached:
            return
        if self._shown is None or self._keys() != self._shown:
            await self.recompose()

    def _keys(self) -> Hashable:
        """Everything ``Footer.compose`` reads to draw the keys, as one comparable value: each
        shown binding's key, how it is displayed, its description, action, group, whether it is
        enabled and its tooltip, in order; the command palette's key; the compact style."""
        app = self.app
        shown = tuple(
            (
                binding.key,
                app.get_key_display(binding),
                binding.description,
                binding.action,
                id(binding.group) if binding.group is not None else None,
                enabled,
                tooltip or "",
            )
            for (_node, binding, enabled, tooltip) in self.screen.active_bindings.values()
            if binding.show
        )
        palette = None
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE:
            entry = self.screen.active_bindings.get(app.COMMAND_PALETTE_BINDING)
            if entry is not None:
                _node, binding, enabled, tooltip = entry
                palette = (
                    binding.key,
                    app.get_key_display(binding),
                    binding.description,
                    enabled,
                    binding.tooltip or "",
                )
        return (shown, palette, self.compact)
