"""The app's use of the config file: theme and key overrides at start, the problem
notification, remembering the theme, "save parameters as default".

A mixin of ``VibechatApp``, kept apart so the app module stays about chatting.
Writes go through the engine (tomlkit: the user's comments and formatting stay),
which refuses to touch a file that does not load cleanly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vibechat.engine.config import DEFAULT_THEME, LoadedConfig, save_params, save_theme
from vibechat.engine.errors import VibechatError

from ..appconfig import BINDING_IDS

log = logging.getLogger("vibechat.tui")

if TYPE_CHECKING:  # what the mixin needs of the app it is mixed into
    from textual.app import App

    from vibechat.engine.conversation import Conversation

    class _Host(App[None]):
        @property
        def conversation(self) -> Conversation: ...
else:
    _Host = object


class ConfigActions(_Host):
    """Mixed into ``VibechatApp``; see the module docstring."""

    config: LoadedConfig
    _config_notes: list[str]

    def apply_config(self, config: LoadedConfig) -> None:
        """In ``__init__``: the theme and key overrides (the themes are registered)."""
        self.config = config
        self._config_notes = [config.problem] if config.problem else []
        wanted = config.config.theme
        if wanted in self.available_themes:
            self.theme = wanted
        else:
            self.theme = DEFAULT_THEME
            where = config.origin("theme")
            self._config_notes.append(f"Theme {wanted!r} ({where}) is not installed: using {DEFAULT_THEME}. "
                                      f"F4 lists the themes.")
        if config.config.keys:
            self.set_keymap(dict(config.config.keys))

    def show_config_notes(self) -> None:
        """On mount: the config's problem (the chat runs on defaults meanwhile)."""
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        for note in self._config_notes:
            self.notify(note, title="Config", severity="warning", timeout=15)

    def bound_key(self, binding) -> str:
        """The key(s) a binding answers to, after ``[keys]`` overrides (``ctrl+n``)."""
        return self.config.config.keys.get(binding.id or "", binding.key)

    def key_for(self, binding) -> str:
        """``bound_key`` as shown to people (``^n``)."""
        return self.get_key_display(binding.with_key(self.bound_key(binding)))

    def _remember_theme(self, theme) -> None:
        if theme.name == self.config.config.theme:
            return
        try:
            save_theme(theme.name, self.config.path, key_ids=BINDING_IDS)
        except VibechatError as exc:
            self.notify(f"The theme was not saved: {exc}", title="Config", severity="warning", timeout=10)
            return
        from dataclasses import replace

        self.config = replace(self.config, config=replace(self.config.config, theme=theme.name))

    def action_save_params_default(self) -> None:
        params = self.conversation.params
        try:
            path = save_params(params, self.config.path, key_ids=BINDING_IDS)
        except VibechatError as exc:
            self.notify(f"Not saved: {exc}", title="Config", severity="error", timeout=15)
            return
        self.notify(f"Saved these parameters as the defaults in {path}.", title="Config", timeout=4)
