"""The colour theme: vibechat's themes registered beside Textual's, the theme a code block is
highlighted with, and the user's pick (F4) remembered in the config file (``config_ui.py``).

``ThemeChoice`` is a mixin of ``VibechatApp`` (``app_face.py``); the app registers the themes
before it chooses the starting one, and follows ``theme_changed_signal`` with
``_remember_theme``.
"""

from __future__ import annotations

from textual.theme import Theme

from vibechat.themes import THEMES

from . import config_ui
from .app_face import AppFace


class ThemeChoice(AppFace):
    """The app's themes: registered, followed by code blocks, remembered."""

    def _register_themes(self) -> None:
        for theme in THEMES:
            self.register_theme(theme)

    def code_theme(self) -> str:
        return "monokai" if self.current_theme.dark else "friendly"

    def _remember_theme(self, theme: Theme) -> None:
        self.config, problem = config_ui.remember_theme(self.config, theme.name)
        if problem:
            self.notify(problem, title="Config", severity="warning", timeout=10)
