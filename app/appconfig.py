"""The app's side of the config: the binding ids ``[keys]`` may name and what a key string may
be (keynames.py), and the loader that checks them. The engine's config reads ``[keys]``
generically (binding id = key string) and asks ``BINDING_IDS`` about both. Light on purpose
(no Textual): ``vibechat run`` and ``vibechat config`` load the config too, and a test keeps
``BINDING_IDS`` in step with every ``Binding`` in the TUI."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from vibechat.engine.settings.config import LoadedConfig

class BindingIds(tuple[str, ...]):
    """The binding ids ``[keys]`` may name (a tuple, as the engine's config takes them), and
    the check of a key string the engine's config asks them for (``key_problem``)."""

    __slots__ = ()

    def key_problem(self, keys: str) -> str | None:
        """Why ``keys`` ("f12,ctrl+t") is no key Textual reports, in words, or None."""
        from .keynames import keys_problem

        return keys_problem(keys)


BINDING_IDS = BindingIds((
    # the chat (VibechatApp)
    "help", "toggle_params", "new_conversation", "stop", "interrupt", "regenerate", "edit_last", "copy_last",
    "models", "change_theme", "temperature_down", "temperature_up", "top_k_down", "top_k_up",
    "top_p_down", "top_p_up", "scroll_end", "scroll_home", "toggle_sidebar", "search_history", "quit_hint",
    "toggle_thinking", "quit_if_empty", "hide_config_problems",
    # the prompt input
    "input.scroll_up", "input.scroll_down",
    # a focused message
    "message.copy", "message.copy_code", "message.open_link", "chat.show_earlier", "thinking.toggle",
    # the parameter panel (F2), its sliders and its choices (the thinking switch)
    "params.reset_all", "params.save_default",
    "slider.decrease", "slider.increase", "slider.decrease_more", "slider.increase_more",
    "slider.minimum", "slider.maximum", "slider.reset", "slider.previous", "slider.next",
    "choice.previous_value", "choice.next_value", "choice.reset", "choice.previous", "choice.next",
    # conversation history: the sidebar and its dialogs
    "sidebar.rename", "sidebar.delete", "sidebar.export", "sidebar.search", "sidebar.filter",
    "search.close", "search.results", "rename.cancel", "export.cancel",
    "export.previous_format", "export.next_format", "export.submit",
    # dialogs
    "confirm.yes", "confirm.no", "help.close", "picker.close", "picker.download", "picker.open_file",
    "remote_picker.close", "preset_picker.close",
    "download.hide", "download.cancel",
))


def load_app_config(path: "Path | None" = None) -> "LoadedConfig":
    """The effective config (defaults, file, ``VIBECHAT_*``), ``[keys]`` checked against
    the app's binding ids. Never raises over a bad file: see ``LoadedConfig.problem``."""
    from vibechat.engine.settings.config import load_config

    return load_config(path, key_ids=BINDING_IDS)
