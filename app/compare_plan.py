"""The two sides of a comparison (``vibechat run --compare A B`` and the chat's ``/compare``):
what each names, and what differs. Shared by the command line and the chat (the TUI never imports
app/commands/).

A side is a preset's name (``precise``) or a comma-separated ``key=value`` list
(``temperature=1.2,top_k=20``): the keys are the sampling parameters as ``/set`` takes them
(their names in ``PARAM_SPECS``, Ollama's names, ``stop``, ``thinking``: app/slash.py's
``parse_set`` and ``SamplingParams.set_from_text``, the one parser), plus ``preset=NAME``,
``system=TEXT``, ``model=PATH-or-NAME`` and ``base-url=URL`` (also written ``preset:NAME``,
``model:PATH``...). A value may hold commas: a new pair starts only where a comma is followed by
``key=``. Each side starts from the run's own
plan (config, ``--preset``, flags) with its own on top. A side that does not parse is one line
for that side (``SidePlan.problem``); the other still runs.

Imports inside functions are deliberate: the presets' file and the memory check load only when
a side names a preset or another model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.config import LoadedConfig
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import Backend, Side

from .run_plan import RunFlags, RunPlan
from .slash import parse_set

# A new pair starts at a comma followed by "key=".
_PAIRS = re.compile(r",(?=\s*[A-Za-z][A-Za-z0-9_-]*\s*=)")
# The keys a side takes besides the sampling parameters.
_OWN_KEYS = ("preset", "system", "model", "base_url")
# ``preset:NAME``, ``model:PATH`` (the chat's spelling): the same as ``preset=NAME``.
_OWN_COLON = re.compile(r"(^|,)(\s*(?:preset|system|model|base[-_]url)\s*):", re.IGNORECASE)
# A side's text, bounded: it is a command-line word, not a file.
MAX_SIDE_CHARS = 4000


@dataclass(frozen=True)
class SideChoice:
    """What a side's text names: a preset, sampling settings (``(name, value)`` as typed, in
    order), a system prompt, a model and a server (None: the run's own)."""

    preset: str | None = None
    settings: tuple[tuple[str, str], ...] = ()
    system: str | None = None
    model: str | None = None
    base_url: str | None = None


@dataclass(frozen=True)
class SidePlan:
    """A side ready to run (``plan``), or why it cannot (``problem``: one line)."""

    side: Side
    text: str
    plan: RunPlan | None = None
    problem: str | None = None

    @property
    def label(self) -> str:
        """How the side is headed: ``A (temperature=1.2)``."""
        return f"{self.side} ({self.text})"


def parse_side(text: str) -> SideChoice:
    """A side's text as a ``SideChoice``; a bad one raises one line naming the fix."""
    text = text.strip()
    if not text:
        raise VibechatError("it is empty: give a preset's name or key=value pairs.")
    if len(text) > MAX_SIDE_CHARS:
        raise VibechatError(f"it is longer than {MAX_SIDE_CHARS} characters.")
    text = _OWN_COLON.sub(r"\1\2=", text)
    if "=" not in text:
        return SideChoice(preset=text)
    own: dict[str, str] = {}
    settings: list[tuple[str, str]] = []
    for pair in _PAIRS.split(text):
        key, eq, value = pair.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not eq or not key:
            raise VibechatError(f"{pair.strip()!r} is not key=value (e.g. temperature=1.2).")
        if key in _OWN_KEYS:
            own[key] = value.strip() if key != "system" else value
        else:
            settings.append((key, value.strip()))
    return SideChoice(
        preset=own.get("preset") or None,
        settings=tuple(settings),
        system=own.get("system"),
        model=own.get("model") or None,
        base_url=own.get("base_url") or None,
    )


def side_params(params: SamplingParams, settings: tuple[tuple[str, str], ...]) -> SamplingParams:
    """``params`` with a side's settings on top, each read as ``/set NAME VALUE`` reads it."""
    for name, value in settings:
        request = parse_set(f"{name} {value}")
        if request.kind == "info":
            raise VibechatError(f"{name}: {request.value}")
        if request.kind != "param":
            raise VibechatError(f"{name!r} is not a sampling setting.")
        params = params.set_from_text(request.name, request.value)
    return params


def side_plan(side: Side, text: str, loaded: LoadedConfig, wanted: RunFlags) -> SidePlan:
    """Side ``side`` as ``text`` names it, over the run's own config, preset and flags; a
    problem is kept as one line (the other side still runs)."""
    try:
        choice = parse_side(text)
        plan = RunPlan.of(loaded, RunFlags(wanted.settings, choice.preset or wanted.preset))
        plan.check()
        engine = plan.engine
        if choice.model is not None:
            engine = replace(engine, model=choice.model)
        if choice.base_url is not None:
            engine = replace(engine, base_url=choice.base_url)
        system = plan.system if choice.system is None else (choice.system or None)
        # format=json / format=FILE: the side's reply format, as /format sets it.
        params = side_params(plan.params, choice.settings)
        plan = replace(plan, engine=engine, params=params, system=system)
    except VibechatError as exc:
        return SidePlan(side, text, problem=str(exc))
    return SidePlan(side, text, plan=plan)


def what_differs(a: SidePlan, b: SidePlan) -> dict[str, dict[str, Any]]:
    """What the two sides of ``run --compare`` were run with that differs (``differs``)."""
    if a.plan is None or b.plan is None:
        return {}
    pa, pb = a.plan, b.plan
    return differs(
        (pa.params, pb.params),
        system=(pa.system, pb.system),
        model=(pa.engine.model, pb.engine.model),
        base_url=(pa.engine.base_url, pb.engine.base_url),
        preset=(_preset_name(pa), _preset_name(pb)),
    )


def differs(
    params: tuple[SamplingParams, SamplingParams], **others: tuple[Any, Any]
) -> dict[str, dict[str, Any]]:
    """What two sides were run with that differs (``{"temperature": {"a": 0.2, "b": 1.2}}``):
    each sampling parameter, then ``others`` (the system prompt, the model, the server, the
    preset: each as ``(a, b)``). A seed neither side set is left out (each draws its own)."""
    da, db = params[0].to_dict(), params[1].to_dict()
    values = {name: (da.get(name), db.get(name)) for name in dict.fromkeys([*da, *db])}
    values.update(others)
    return {name: {"a": va, "b": vb} for name, (va, vb) in values.items() if va != vb}


def _preset_name(plan: RunPlan) -> str | None:
    return plan.preset.name if plan.preset is not None else None


@dataclass(frozen=True)
class ChatSide:
    """A side of the chat's ``/compare``: the conversation's own settings with the side's text
    on top. ``model`` / ``base_url`` None: the chat's own model and server."""

    text: str
    params: SamplingParams
    system: str | None
    preset: str | None = None
    model: str | None = None
    base_url: str | None = None

    @property
    def own_engine(self) -> bool:
        """It runs on the chat's own model (the pair can share one context)."""
        return self.model is None and self.base_url is None


def chat_side(
    text: str, params: SamplingParams, system: str | None, config_path: Path | None
) -> ChatSide:
    """A side of the chat's ``/compare`` (``text`` "": the conversation's settings as they are):
    a preset from the config file at ``config_path``, then the side's settings, system prompt,
    model and server. Raises one line (``VibechatError``) when it does not parse."""
    if not text.strip():
        return ChatSide("", params, system)
    choice = parse_side(text)
    preset_name = None
    if choice.preset is not None:
        from vibechat.engine.settings.preset_file import load_presets

        preset = load_presets(config_path).get(choice.preset)
        preset_name = preset.name
        params = preset.over(params)
        if preset.system is not None:
            system = preset.system or None
        model = preset.model
    else:
        model = None
    # The conversation's output format (/format) applies to both sides, as to a plain reply.
    params = side_params(params, choice.settings)
    if choice.system is not None:
        system = choice.system or None
    return ChatSide(
        text.strip(),
        params,
        system,
        preset=preset_name,
        model=choice.model or model,
        base_url=choice.base_url,
    )


def chat_differs(a: ChatSide, b: ChatSide) -> dict[str, dict[str, Any]]:
    """What the chat's two sides differ in (as ``what_differs``)."""
    return differs(
        (a.params, b.params),
        system=(a.system, b.system),
        model=(a.model, b.model),
        base_url=(a.base_url, b.base_url),
        preset=(a.preset, b.preset),
    )


def does_not_fit(backend: Backend) -> str | None:
    """Why a second local model is not loaded beside the first (engine/models/fit.py, the check
    the model lists use; the load checks again), or None when it fits or is not a local model."""
    from vibechat.engine.models.fit import OVERHEAD, memory_fit, weights_to_load

    size = weights_to_load(backend)
    if size is None or memory_fit()(size) != "no":
        return None
    return (
        f"its model needs about {size * OVERHEAD / 1e9:.1f} GB of memory beside side A's, and "
        "that is not free: compare it with a smaller model or quantization, or close other "
        "programs."
    )
