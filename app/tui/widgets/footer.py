"""The key line at the bottom of the chat: Textual's ``Footer``, redrawn only when the keys it
shows change.

Textual's ``Footer`` removes and mounts all its keys again on every bindings refresh of the
screen, and the screen refreshes its bindings whenever the focus moves or an action's
availability may have changed (``check_action``): a reply starting, a key pressed in the
input. Most of those refreshes show the same keys. Each rebuild costs a reflow of the footer
in the frame that also shows the user's keypress or the reply's first words (issue 42), so
this footer compares what it would show with what it shows and rebuilds only on a change.

When the keys do change (Stop appearing 0.25 s into a reply, gone when it ends), only the keys
that changed are mounted or removed, in place; the others stay the widgets they were, so the
frame lays out and paints just those (issue 42, round four).

Its first keys come a few refreshes after the screen's first frame (Textual's ``Footer`` builds
them on the screen's first bindings refresh); once they are drawn it posts ``KeysShown``: the
chat's first frame the user can type into is complete, and the app mounts then what it hid.
"""

from __future__ import annotations

from collections.abc import Hashable
from difflib import SequenceMatcher

from textual.compose import compose
from textual.message import Message
from textual.screen import Screen
from textual.widget import AwaitMount, Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel


class KeysFooter(Footer):
    """A ``Footer`` that recomposes only when the keys it would show differ from those shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # What the last compose showed (None: nothing yet).
        self._shown: Hashable | None = None
        # How many times the keys were built (what the tests count).
        self.rebuilds = 0
        # How many key widgets a change mounted and removed, in all (the bench reports them).
        self.mounted = 0
        self.removed = 0
        # ``KeysShown`` was posted.
        self._told_shown = False

    class KeysShown(Message):
        """The first keys are drawn (posted once, after the refresh that draws them)."""

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
            await self._apply_changed_keys()

    async def _apply_changed_keys(self) -> None:
        """Compose the keys anew and replace only those that differ from the ones shown: a key
        kept is the same widget, in the same place; a new one is mounted where it belongs."""
        if self._pruning:
            return
        async with self.batch():
            old = list(self.query_children("*").exclude(".-textual-system"))
            new = compose(self)
            steps = SequenceMatcher(
                None, [_signature(w) for w in old], [_signature(w) for w in new], autojunk=False
            ).get_opcodes()
            mounts: list[AwaitMount] = []
            gone: list[Widget] = []
            for tag, i1, i2, j1, j2 in steps:
                if tag == "equal":
                    continue
                if j2 > j1:
                    mounts.append(self._mount_at(new[j1:j2], old, i1))
                    self.mounted += j2 - j1
                gone.extend(old[i1:i2])
            self.removed += len(gone)
            for awaiting in mounts:
                await awaiting
            if gone:
                await self.remove_children(gone)
        if not self._told_shown and self.query_children(FooterKey):
            # Mounted: the next refresh draws them.
            self._told_shown = True
            self.call_after_refresh(self.post_message, self.KeysShown())

    def _mount_at(self, widgets: list[Widget], old: list[Widget], index: int) -> AwaitMount:
        """Mount ``widgets`` where ``old[index]`` is (before it), or after the last key."""
        if index < len(old):
            return self.mount(*widgets, before=old[index])
        return self.mount(*widgets)

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


def _signature(widget: Widget) -> Hashable:
    """What a footer child shows, as one comparable value: a key by everything it draws and
    does; a group's label by its text; anything else (a key group) by itself, never equal to
    a new one."""
    if isinstance(widget, FooterKey):
        return (
            "key",
            widget.key,
            widget.key_display,
            widget.description,
            widget.action,
            widget._disabled,
            str(widget.tooltip or ""),
            # "-compact" follows the footer's style once mounted, not what a key shows.
            tuple(sorted(widget.classes - {"-compact"})),
        )
    if isinstance(widget, FooterLabel):
        return ("label", str(widget.content))
    return ("other", id(widget))
