"""Presets in the chat: ``/preset NAME`` applies one, ``/preset`` (or the command palette's
"Apply a preset") opens the picker (screens/preset_picker.py), ``/preset save NAME`` keeps the
current set-up as one.

A preset (engine/settings/presets.py, the config file's ``[presets.NAME]``) sets the system prompt,
the sampling parameters, the thinking switch and the reply format of the open conversation,
as ``/system``, ``/set``, ``/think`` and ``/format`` would; a model it names is loaded as
``/load`` loads one (``Models.load``: a new conversation starts, with the preset's
settings), and a context size reloads the model with it.

Imports inside functions are deliberate: the preset files and the config load only when a
preset is applied or saved (start-up time).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.params import PARAM_SPECS

from ..outside import one_line
from ..screens.preset_picker import PresetPicker
from .host import ChatHost

if TYPE_CHECKING:
    from vibechat.engine.settings.presets import Preset

    from .models import Models

USAGE = (
    "/preset NAME applies a preset; /preset alone lists them; "
    "/preset save NAME keeps this set-up as one."
)


class PresetHost(ChatHost, Protocol):
    """The app as presets see it: its public face and its model manager (a preset's model)."""

    models: Models


def open_picker(app: PresetHost) -> None:
    """The picker; the chosen preset is applied."""

    def picked(name: str | None) -> None:
        if name:
            app.run_worker(
                apply_named(app, name), group="preset", exclusive=True, exit_on_error=False
            )

    app.push_screen(PresetPicker(app.config.path), picked)


async def run(app: PresetHost, arg: str) -> None:
    """``/preset [NAME | save NAME]``."""
    head, _, rest = arg.strip().partition(" ")
    if not head:
        open_picker(app)
    elif head.lower() == "save" and rest.strip():
        await save_current(app, rest.strip())
    elif head.lower() == "save":
        app.notify(f"Save as which preset? {USAGE}", severity="warning", timeout=6)
    else:
        await apply_named(app, arg.strip())


async def apply_named(app: PresetHost, name: str) -> None:
    from vibechat.engine.settings.preset_file import load_presets

    # A file read: off the UI thread.
    book = await asyncio.to_thread(load_presets, app.config.path)
    try:
        preset = book.get(name)
    except VibechatError as exc:
        app.notify(one_line(str(exc), limit=400), title="Preset", severity="error", timeout=10)
        return
    apply(app, preset)


def apply(app: PresetHost, preset: Preset) -> None:
    """Apply ``preset`` to the open conversation (and load its model, if it names another)."""
    session = app.session
    info = session.info
    try:
        params = preset.over(session.conversation.params)
        fmt = params.output_format
        # Checked as /format checks it.
        if preset.format is not None and fmt is not None:
            fmt.check_remote() if info is not None and info.server else fmt.check()
    except VibechatError as exc:
        app.notify(one_line(str(exc), limit=400), title="Preset", severity="error", timeout=10)
        return
    app.set_params(params)
    if preset.system is not None:
        session.chat.set_system(preset.system or None)
    done = f"Preset {preset.name}" + (f": {preset.summary()}" if preset.summary() else "")
    app.notify(one_line(done, limit=200), title="Preset", timeout=4)
    _load_model(app, preset)


def _load_model(app: PresetHost, preset: Preset) -> None:
    """The preset's model (as ``/load``) and context size (a reload), where they differ
    from what is loaded."""
    from vibechat.engine.settings.limits import CONTEXT_STEP

    info = app.session.info
    remote = info is not None and info.server is not None
    if preset.context_size is not None and not remote:
        app.models.engine_changes["context_size"] = preset.context_size
    if preset.model is not None and (info is None or preset.model not in (info.name, info.path)):
        # The new context size comes with it.
        app.models.load(preset.model)
        return
    if preset.context_size is not None and info is not None and not remote:
        wanted = -(-preset.context_size // CONTEXT_STEP) * CONTEXT_STEP
        if wanted != info.context_size:
            app.models.reload_model(context_size=preset.context_size)


async def save_current(app: PresetHost, name: str) -> None:
    """``/preset save NAME``: the conversation's system prompt, parameters, thinking and reply
    format, and the model in use, as ``[presets.NAME]`` (replacing one of that name)."""
    from vibechat.engine.settings.preset_file import save_preset
    from vibechat.engine.settings.presets import NAME_RE

    from ...appconfig import APP_SCHEMA

    if not NAME_RE.fullmatch(name):
        app.notify(
            f"A preset name is letters, digits, - and _ (got {one_line(name, limit=40)!r}).",
            title="Preset",
            severity="error",
            timeout=8,
        )
        return
    table, left_out = current_table(app)
    try:
        path = await asyncio.to_thread(save_preset, name, table, app.config.path, schema=APP_SCHEMA)
    except VibechatError as exc:
        app.notify(one_line(str(exc), limit=400), title="Preset", severity="error", timeout=15)
        return
    app.notify(
        f"Saved preset {name} in {one_line(str(path))}{left_out}.", title="Preset", timeout=5
    )


def current_table(app: PresetHost) -> tuple[dict[str, Any], str]:
    """The set-up in use as a preset's table, and what it leaves out (a grammar file's text
    has no place in one), as the end of a sentence."""

    conversation, info = app.session.conversation, app.session.info
    params = conversation.params
    table: dict[str, Any] = {}
    if info is not None:
        table["model"] = info.name if info.server else info.path
    table["system"] = conversation.system or ""
    table["thinking"] = params.thinking
    left_out = ""
    fmt = params.output_format
    if fmt is None:
        table["format"] = "off"
    elif fmt.kind == "json":
        table["format"] = "json"
    elif fmt.kind == "schema":
        table["format"] = " ".join(fmt.text.split())  # inline JSON
    else:
        left_out = " (not its grammar: put the .gbnf file's path in format)"
    values: dict[str, Any] = {}
    for name, spec in PARAM_SPECS.items():
        value = getattr(params, name)
        if value is None:
            values[name] = "auto" if spec.auto else None
        else:
            values[name] = value
    values = {k: v for k, v in values.items() if v is not None}
    if params.stop:
        values["stop"] = list(params.stop)
    table["params"] = values
    return table, left_out
