"""The app's side of the config file: the chat's own settings (the theme, the thinking folded or
not, the key bindings), declared as the engine declares its own (``AppConfig``, a ``Config`` whose
fields carry their rows of the settings table), and the loader that reads the file with them
(``load_app_config``). The engine's config machinery is generic: it takes this table
(``APP_SCHEMA``) and never names these settings.

``[keys]`` is a text table (binding id = key string) whose entries ``check_binding`` checks: the
binding ids below and what a key string may be (keynames.py). Light on purpose (no Textual):
``vibechat run`` and ``vibechat config`` load the config too, and a test keeps ``BINDING_IDS``
in step with every ``Binding`` in the TUI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vibechat.engine.settings.config import LoadedConfig, load_config
from vibechat.engine.settings.config_check import suggest
from vibechat.engine.settings.config_save import update_config
from vibechat.engine.settings.params import PARAM_SPECS
from vibechat.engine.settings.setting import doc, show
from vibechat.engine.settings.table import Config, EntryProblem, Schema, text_table

from .keynames import keys_problem, types

DEFAULT_THEME = "vibechat-dusk"


def nudge_ids(name: str) -> tuple[str, str]:
    """The binding ids of a parameter's nudge keys (``ParamSpec.nudge``): down, up."""
    return f"{name}_down", f"{name}_up"


def nudge_binding_ids() -> tuple[str, ...]:
    """The binding ids of every parameter's nudge keys, in the parameters' order."""
    return tuple(
        key
        for spec in PARAM_SPECS.values()
        if spec.nudge is not None
        for key in nudge_ids(spec.name)
    )


BINDING_IDS: tuple[str, ...] = (
    # the chat (VibechatApp)
    "help",
    "toggle_params",
    "new_conversation",
    "stop",
    "interrupt",
    "regenerate",
    "edit_last",
    "copy_last",
    "models",
    "change_theme",
    "toggle_lens",
    "open_lens",
    *nudge_binding_ids(),  # each parameter's keys (ParamSpec.nudge)
    "scroll_end",
    "scroll_home",
    "toggle_sidebar",
    "search_history",
    "quit_hint",
    "toggle_thinking",
    "quit_if_empty",
    "hide_config_problems",
    "cancel_edit",
    "resume_last",
    "compare_flip",
    # the prompt input
    "input.scroll_up",
    "input.scroll_down",
    "input.focus_chat",
    # a focused message
    "message.copy",
    "message.copy_code",
    "message.open_link",
    "message.previous_version",
    "message.next_version",
    "message.pin",
    "message.compact",
    "tool.toggle",
    "attachment.toggle",
    "attachment.remove",  # a file under a prompt; a line of the tray above the input
    # two replies compared (/compare), the comparison focused
    "compare.pick_1",
    "compare.pick_2",
    "compare.stop_1",
    "compare.stop_2",
    "compare.flip",
    # a tool call's question (nothing runs without a yes)
    "approval.once",
    "approval.conversation",
    "approval.always",
    "approval.deny",
    # /compact's summary (accept it, edited or not; cancel: nothing is replaced)
    "summary.accept",
    "summary.cancel",
    "chat.show_earlier",
    "thinking.toggle",
    # the token lens (F12), on a reply
    "lens.previous_token",
    "lens.next_token",
    "lens.up",
    "lens.down",
    "lens.first_token",
    "lens.last_token",
    "lens.candidates",
    "lens.take",
    "lens.type",
    "lens.back",
    # the parameter panel (F2), its sliders and its choices (the thinking switch)
    "params.reset_all",
    "params.save_default",
    "params.close",
    "slider.decrease",
    "slider.increase",
    "slider.decrease_more",
    "slider.increase_more",
    "slider.minimum",
    "slider.maximum",
    "slider.reset",
    "slider.previous",
    "slider.next",
    "choice.previous_value",
    "choice.next_value",
    "choice.reset",
    "choice.previous",
    "choice.next",
    # conversation history: the sidebar and its dialogs
    "sidebar.rename",
    "sidebar.delete",
    "sidebar.export",
    "sidebar.filter",
    "sidebar.filter_back",
    "search.close",
    "search.results",
    "rename.cancel",
    "export.cancel",
    "export.previous_format",
    "export.next_format",
    "export.submit",
    # dialogs
    "confirm.yes",
    "confirm.no",
    "help.close",
    "picker.close",
    "picker.download",
    "picker.open_file",
    "remote_picker.close",
    "preset_picker.close",
    "compare_setup.cancel",
    "download.hide",
    "download.cancel",
)


def check_binding(name: str, item: Any) -> str:
    """A ``[keys]`` entry checked (the engine's loader asks): its key string, or EntryProblem."""
    if isinstance(item, Mapping):
        raise EntryProblem(
            f'keys.{name} is a table: quote binding ids that contain a dot ("{name}.…" = "key")'
        )
    if name not in BINDING_IDS:
        raise EntryProblem(
            f"unknown binding id '{name}' in [keys]{suggest(name, BINDING_IDS)}",
            detail=f"known: {', '.join(sorted(BINDING_IDS))}",
        )
    if not isinstance(item, str) or not item.strip():
        raise EntryProblem(
            f'keys.{name} must be a key string such as "ctrl+t" or "f12,ctrl+t" (got {show(item)})'
        )

    problem = keys_problem(item)
    if problem:
        raise EntryProblem(f"keys.{name} = {show(item)} is not a valid key: {problem}")
    typed = [key for key in item.replace(" ", "").split(",") if types(key)]
    if name in GRANTING and typed:
        raise EntryProblem(
            f"keys.{name} = {show(item)}: {typed[0]!r} is a key that typing produces, and "
            f'this one runs, allows or deletes something; give a key such as "ctrl+y"'
        )
    return item.replace(" ", "")


# Bindings that grant (run a tool, allow it) or destroy (delete, replace): never on a key that
# typing produces (a stray word would answer them).
GRANTING = frozenset(
    {"approval.once", "approval.conversation", "approval.always", "confirm.yes", "sidebar.delete"}
)


@dataclass(frozen=True)
class AppConfig(Config):
    """Everything the config file can set: the engine's settings (``Config``) and the chat's
    own, which only the app reads. ``APP_SCHEMA`` lists these right after ``system_prompt``
    and ``[keys]`` last, where the file has always had them."""

    theme: str = field(
        default=DEFAULT_THEME,
        metadata=doc(
            "The colour theme (F4 in the chat chooses one and saves it here).",
            kind="text",
            example='"vibechat-paper"',
            env="VIBECHAT_THEME",
        ),
    )
    thinking_expanded: bool = field(
        default=False,
        metadata=doc(
            "Show a reasoning model's thinking expanded in the chat (else folded to one line, "
            '"Thought for 12 s", that Enter or a click opens).',
            kind="true or false",
            example="true",
            env="VIBECHAT_THINKING_EXPANDED",
        ),
    )
    continue_last: bool = field(
        default=False,
        metadata=doc(
            "Open the chat on the last saved conversation, as 'vibechat --continue' does "
            "('vibechat --new' starts a new chat once; with nothing saved yet, the chat starts "
            "new).",
            kind="true or false",
            example="true",
            env="VIBECHAT_CONTINUE_LAST",
        ),
    )
    keys: Mapping[str, str] = field(
        default_factory=dict,
        metadata=text_table(
            'Key binding overrides: binding id = "key" (several keys: "f12,ctrl+t"). Quote ids '
            "that contain a dot. A key is a character, f1-f35 or a name (enter, escape, tab, "
            "space, pageup, comma, question_mark ...), after modifiers joined by + in the order "
            "alt, ctrl, hyper, meta, shift, super.",
            example='"toggle_params" = "ctrl+f2"',
            check=check_binding,
            entry="id",
            entries="Binding ids: " + ", ".join(sorted(BINDING_IDS)) + ".",
        ),
    )


APP_SCHEMA = Schema.of(AppConfig, after="system_prompt")


def load_app_config(path: Path | None = None) -> LoadedConfig[AppConfig]:
    """The effective config (defaults, file, ``VIBECHAT_*``) with the app's settings, ``[keys]``
    checked against the app's binding ids. Never raises over a bad file: see
    ``LoadedConfig.problem``."""
    return load_config(path, schema=APP_SCHEMA)


def chat_settings(loaded: LoadedConfig[Any]) -> AppConfig:
    """The app's settings of ``loaded``: its config, or (a config read by the engine's table
    alone, as a test may give the chat) that config with the chat's own settings at their
    defaults."""
    config = loaded.config
    if isinstance(config, AppConfig):
        return config
    return AppConfig(**{f.name: getattr(config, f.name) for f in fields(Config)})


def save_theme(theme: str, path: Path | None = None) -> Path:
    """Save ``theme`` in the config file (F4), keeping the rest of it as the user wrote it."""
    return update_config({"theme": theme}, path, schema=APP_SCHEMA)
