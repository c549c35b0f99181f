"""Which model, and where, a saved conversation goes on with (issue 39, point 3).

A conversation was had with one model: a file on this machine, or a model of an
OpenAI-compatible server (its ``model_path`` is then the model's URL under the server's API
root, ``engine/remote/options.model_url``). ``vibechat run --continue`` / ``--conversation ID``
go on with that model on that server (:func:`own_engine`), whatever the config file or the
variables name as the standing default: a conversation is never answered, and then labelled,
by another model without a word. A model or server chosen on purpose that differs from the
conversation's (``--model``, ``--base-url``, ``--backend``, a preset's model) is refused in one
line naming both and the fix, unless ``--switch-model`` says the switch is meant. The chat
(``vibechat --continue`` / ``--conversation ID``) switches to a conversation's own model where it
can, so one named on purpose that it would switch away from is refused the same way
(:func:`chat_mix`): one model loads, and it is the one the conversation goes on with.

Headless: no Textual, no Rich, no llama.cpp.

Imports inside functions are deliberate: model resolution and the remote server's options load
only when a conversation's backend is built (start-up time).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from vibechat.engine.errors import VibechatError

if TYPE_CHECKING:
    from vibechat.engine.settings.knobs import EngineSettings

SWITCH_FLAG = "--switch-model"


@dataclass(frozen=True)
class OwnBackend:
    """A saved conversation's model: ``name`` (as shown), ``path`` (its file, or for a server
    model its URL) and ``server`` (the server's API root; None: a local model)."""

    name: str
    path: str
    server: str | None = None

    @classmethod
    def of(cls, name: str | None, path: str | None) -> OwnBackend | None:
        """The conversation's backend from its saved ``model`` and ``model_path`` (None: it
        names none, e.g. no model had loaded when it was saved)."""
        if not path:
            return None
        name = name or Path(path).name
        if "://" in path:
            from vibechat.engine.remote.options import model_url

            suffix = model_url("", name)
            if path.endswith(suffix):
                return cls(name, path, path[: -len(suffix)])
        return cls(name, path)

    def describe(self) -> str:
        """``stub-small on http://127.0.0.1:8080/v1``, or the local model's name."""
        return f"{self.name} on {self.server}" if self.server else self.name


def same_server(root: str, base_url: str | None) -> bool:
    """Whether ``base_url`` (as given: with or without ``/v1``, credentials, a query) is the
    server whose API root is ``root``."""
    if not base_url:
        return False
    from vibechat.engine.remote.options import display_url
    from vibechat.engine.settings.server_url import normalize_base_url

    try:
        return display_url(normalize_base_url(base_url), keep_v1=True) == root
    except VibechatError:
        return False


def same_file(path: str, ref: str | None) -> bool:
    """Whether the model ``ref`` names (as ``--model`` takes it) is the file at ``path``;
    a name that cannot be resolved here (not downloaded, unknown) is another model."""
    from vibechat.engine.models.resolve import resolve_model

    try:
        return Path(path).resolve() == resolve_model(ref).resolve()
    except (VibechatError, OSError):
        return False


def own_engine(
    own: OwnBackend, engine: EngineSettings, chosen: set[str], conversation_id: int, switch: bool
) -> EngineSettings:
    """``engine`` pointed at the conversation's own model and server. ``chosen``: what the
    user named on purpose (``model``, ``base_url``, ``backend``: flags, a preset's model).
    What was chosen that differs from the conversation raises one line, unless ``switch``
    (``--switch-model``): then what was chosen replaces the conversation's (``--model``
    alone: another model on the same server), the rest stays the conversation's."""
    differs = _difference(own, engine, chosen)
    if differs is not None and not switch:
        raise VibechatError(
            f"conversation {conversation_id} was with {own.describe()}, and {differs}: "
            f"add {SWITCH_FLAG} to go on with that instead, or leave it out to go on with "
            f"{own.name}."
        )
    if _other_place(own, engine, chosen):
        # Switched on purpose: to the local engine, or another server.
        return engine
    model = engine.model if "model" in chosen else None
    if own.server is not None:
        base_url = engine.base_url if same_server(own.server, engine.base_url) else own.server
        return replace(engine, backend="openai", base_url=base_url, model=model or own.name)
    if model is None and not Path(own.path).is_file():
        if switch:
            return replace(engine, backend="llama")
        raise VibechatError(
            f"conversation {conversation_id} was with {own.name}, whose file is no longer here "
            f"({own.path}): add {SWITCH_FLAG} to go on with another model (--model NAME), "
            "or put the file back."
        )
    return replace(engine, backend="llama", model=model or own.path)


def start_engine(
    own: OwnBackend | None, engine: EngineSettings, chosen: set[str]
) -> EngineSettings:
    """The engine the chat starts with to open a saved conversation at once (``vibechat
    --continue``): its own model where opening it would switch to that anyway (the local file
    is here and the chat runs local models; or another model of the server the chat uses: see
    the chat's ``models_ui.own_model``), so no other model loads first. Anything else (a model
    or server the user named on purpose, ``chosen``; a file gone; another server) starts as
    ``engine`` says, and opening the conversation does what reopening it from the list does."""
    if own is None or chosen:
        return engine
    if own.server is None and not engine.remote and Path(own.path).is_file():
        return replace(engine, model=own.path)
    if own.server is not None and engine.remote and same_server(own.server, engine.base_url):
        return replace(engine, model=own.name)
    return engine


def chat_mix(
    own: OwnBackend | None,
    engine: EngineSettings,
    chosen: set[str],
    conversation_id: int,
    flag: str,
) -> str | None:
    """Why the chat cannot start on saved conversation ``conversation_id`` (picked by ``flag``:
    ``--continue``, ``--conversation``) with what the user named on purpose (``chosen``), in
    one line naming both and the fix; None: it can. Only where the chat would otherwise start
    on the conversation's own model (:func:`start_engine`): it would load the one named, then
    switch away from it on opening the conversation. Where it cannot switch (a file gone,
    another server) it starts as named and says which model replies, as opening the
    conversation from the list does."""
    if own is None or not chosen or start_engine(own, engine, set()) == engine:
        return None
    differs = _difference(own, engine, chosen, who="the command line")
    if differs is None:
        return None
    return (
        f"conversation {conversation_id} was with {own.describe()}, and {differs}: a "
        f"conversation goes on with its own model, so leave that out to go on with {own.name}, "
        f"or leave out {flag} to start a new chat with that."
    )


def _other_place(own: OwnBackend, engine: EngineSettings, chosen: set[str]) -> bool:
    """Whether the user chose another place to run than the conversation's: the local engine
    for a server's conversation, a server for a local one, or another server."""
    if not chosen & {"backend", "base_url"}:
        return False
    if own.server is None:
        return engine.remote
    return not engine.remote or (
        "base_url" in chosen and not same_server(own.server, engine.base_url)
    )


def _difference(
    own: OwnBackend, engine: EngineSettings, chosen: set[str], who: str = "this run"
) -> str | None:
    """What the user chose that differs from the conversation's backend, in words (None:
    nothing); ``who`` names it (``this run``)."""
    if _other_place(own, engine, chosen):
        if not engine.remote:
            return f"{who} names the local engine (--backend llama)"
        return f"{who} names the server {_shown(engine.base_url)}"
    if "model" not in chosen:
        return None
    same = engine.model == own.name if own.server is not None else same_file(own.path, engine.model)
    return None if same else f"{who} names the model {engine.model}"


def _shown(base_url: str | None) -> str:
    """A server's URL as messages show it: no credentials, no query."""
    if not base_url:
        return "(no --base-url)"
    from vibechat.engine.remote.options import display_url

    return display_url(base_url, keep_v1=True)
