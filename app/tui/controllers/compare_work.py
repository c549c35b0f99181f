"""The work of a ``/compare`` off the UI thread (comparisons.py puts it on screen): what a
comparison runs (``Armed``), what one on screen holds (``Running``), and ``PairWork``, whose
methods run in thread workers: both sides at once on the chat's own engine (``pair``), or side A
as the session's reply (``side_a``) and side B on a backend of its own (``side_b``: another
model through the app's backend factory, refused in one line when it would not fit beside the
chat's: app/compare_plan.py's ``does_not_fit``; or a server, the chat's own one included, on a
connection of its own). Each side's text goes into its
``ReplyStream`` (one message while one is pending); its end, or its failure in one line, is
posted (``CompareEvent``, ``CompareFailed``).

Imports inside functions are deliberate: a server's backend, the engine settings and the model
resolution load only when a side needs them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from vibechat.engine.chat import pairs
from vibechat.engine.chat.turn import Turn
from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.think_switch import check_budget
from vibechat.engine.turns.backend import (
    SIDES,
    Backend,
    ChatEvent,
    GenerationDone,
    PromptProgress,
    Side,
    SideEvent,
    SideRequest,
    TextDelta,
    ThinkingDelta,
)

from ...compare_plan import ChatSide, chat_differs, does_not_fit
from ...slash import shown
from ..conversation.compare_view import CompareView
from ..conversation.reply_stream import ReplyStream
from .events import CompareEvent, CompareFailed, CompareText
from .host import ChatHost

if TYPE_CHECKING:
    from .models import Models

log = logging.getLogger("vibechat.tui")


class CompareHost(ChatHost, Protocol):
    """The app as ``/compare`` sees it: its public face, and the model manager's backend
    factory (side B's own model)."""

    models: Models


@dataclass(frozen=True)
class Armed:
    """What the next comparison runs: its two sides, and whether it is blind."""

    a: ChatSide
    b: ChatSide
    blind: bool = False
    # As typed (``B`` or ``A vs B``): read again over the settings of the moment it runs.
    text: str = ""

    @property
    def differs(self) -> dict[str, dict[str, object]]:
        return chat_differs(self.a, self.b)

    def describe(self) -> str:
        """``A (temperature=0.8) vs B (temperature=1.2)``, or the blind mode's words."""
        if self.blind:
            return "two replies, blind (the settings are shown after the pick)"
        return f"{self.head('A')} vs {self.head('B')}"

    def status(self) -> str:
        """The status bar's words while it is armed: ``B temperature=1.2`` (both sides when A
        has settings of its own: ``A top_k=20 vs B top_k=80``; blind mode hides them)."""
        if self.blind:
            return "two replies, blind"
        sides: tuple[Side, ...] = ("A", "B") if self.a.text else ("B",)
        return " vs ".join(self.head(side).replace(" · ", " ", 1) for side in sides)

    def head(self, side: Side) -> str:
        """Side ``side`` and what it was run with that differs: ``B · temperature=1.2``."""
        differs = self.differs
        if not differs:
            return f"{side} · same settings"
        key = side.lower()
        values = ", ".join(f"{n}={_value(n, v.get(key))}" for n, v in differs.items())
        return f"{side} · {values}"


def _value(name: str, value: object) -> str:
    """A setting's value in a header: the chat's own model or system prompt when unset."""
    if value is None and name in ("model", "base_url", "system", "preset"):
        return "(the chat's)" if name in ("model", "base_url") else "(none)"
    return shown(name, value)


@dataclass
class Running:
    """A comparison on screen: its generation, A's turn, the view, each side's stream, which
    side each column shows (``order``), and what came of each side."""

    generation: int
    armed: Armed
    turn: Turn
    b_request: SideRequest
    view: CompareView
    streams: dict[Side, ReplyStream]
    order: tuple[Side, Side]
    prompt_row: int | None
    paired: bool
    dones: dict[Side, GenerationDone] = field(default_factory=dict)
    errors: dict[Side, str] = field(default_factory=dict)
    rows: dict[Side, int] = field(default_factory=dict)
    # Side B's backend when it has its own (stopped with it).
    b_backend: Backend | None = None
    # Side B's text so far (saved as stopped if the chat leaves it).
    b_parts: list[str] = field(default_factory=list)
    # The sides whose tool rounds are still to run (A first), the side continuing after its
    # round (``turn`` is then its continuation), and whether Esc stopped the comparison.
    rounds: list[Side] = field(default_factory=list)
    continuing: Side | None = None
    stopped: bool = False

    @property
    def ended(self) -> bool:
        return all(s in self.dones or s in self.errors for s in SIDES)


class PairWork:
    """A comparison's thread work (see the module docstring)."""

    def __init__(self, host: CompareHost) -> None:
        self.host = host

    def feed(self, run: Running, side: Side, event: ChatEvent) -> None:
        """From a worker: side ``side``'s event into its stream (text and thinking buffered: one
        message while one is pending), the rest posted."""
        post, stream = self.host.post_message, run.streams[side]
        if isinstance(event, TextDelta):
            if event.tokens:
                stream.count_tokens(event.tokens)
            if side == "B" and run.continuing is None:
                run.b_parts.append(event.text)
            if stream.put(event.text):
                post(CompareText(run.generation, side))
        elif isinstance(event, ThinkingDelta):
            if stream.put_thinking(event.text, event.tokens):
                post(CompareText(run.generation, side))
        elif isinstance(event, (GenerationDone, PromptProgress)):
            post(CompareEvent(run.generation, side, event))

    def pair(self, run: Running) -> None:
        """In a worker: both sides at once on the chat's own engine."""

        def on_event(item: SideEvent) -> None:
            self.feed(run, item.side, item.event)

        refused = self._refused(run.b_request)
        if refused is not None:
            # The engine would refuse the pair whole: side B's line, and side A answers alone.
            self.host.post_message(CompareFailed(run.generation, "B", refused))
            self.side_a(run)
            return
        try:
            dones = pairs.stream_pair(self.host.session, run.turn, run.b_request, on_event)
        except VibechatError as exc:
            for side in SIDES:
                self.host.post_message(CompareFailed(run.generation, side, str(exc)))
            return
        except Exception as exc:
            log.exception("comparison failed")
            for side in SIDES:
                self.host.post_message(CompareFailed(run.generation, side, f"unexpected: {exc}"))
            return
        for side in SIDES:
            if side not in dones:
                done = (
                    run.turn.stopped()
                    if side == "A"
                    else pairs.stopped_side("".join(run.b_parts), run.b_request)
                )
                self.host.post_message(CompareEvent(run.generation, side, done))

    def _refused(self, request: SideRequest) -> str | None:
        """Why the chat's model cannot take a side's ``request`` before it is asked (a thinking
        budget beyond its context), or None; as ``run --compare`` checks each side."""
        info = self.host.session.info
        try:
            check_budget(request.params.think_budget, info.context_size if info else 0)
        except VibechatError as exc:
            return str(exc)
        return None

    def side_a(self, run: Running, side: Side = "A") -> None:
        """In a worker: side A as a plain reply of the session (or side ``side``'s
        continuation after its tool round: ``run.turn``, on its branch)."""
        session, post = self.host.session, self.host.post_message
        try:
            done = session.stream(
                run.turn,
                lambda text: self.feed(run, side, TextDelta(text)),
                on_event=lambda ev: self.feed(run, side, ev),
                on_tokens=run.streams[side].count_tokens,
            )
        except VibechatError as exc:
            post(CompareFailed(run.generation, side, str(exc)))
            return
        except Exception as exc:
            log.exception("side %s of a comparison failed", side)
            post(CompareFailed(run.generation, side, f"unexpected error while generating: {exc}"))
            return
        post(CompareEvent(run.generation, side, done))

    def side_b(self, run: Running) -> None:
        """In a worker: side B on a backend of its own (loaded here), closed when it ends."""
        post = self.host.post_message
        try:
            backend = self._b_backend(run.armed.b)
        except VibechatError as exc:
            post(CompareFailed(run.generation, "B", str(exc)))
            return
        run.b_backend = backend
        done: GenerationDone | None = None
        try:
            backend.load()
            request = run.b_request
            events = backend.stream_chat(
                list(request.messages), request.params, request.tools, request.tool_choice
            )
            try:
                for event in events:
                    if isinstance(event, GenerationDone):
                        done = event
                    else:
                        self.feed(run, "B", event)
            finally:
                events.close()
        except VibechatError as exc:
            post(CompareFailed(run.generation, "B", str(exc)))
            return
        except Exception as exc:
            log.exception("side B of a comparison failed")
            post(CompareFailed(run.generation, "B", f"unexpected error while generating: {exc}"))
            return
        finally:
            backend.close()
        if done is None:
            done = pairs.stopped_side("".join(run.b_parts), run.b_request)
        post(CompareEvent(run.generation, "B", done))

    def _b_backend(self, side: ChatSide) -> Backend:
        """Side B's own backend, not loaded: a server (``base_url``), or another local model
        through the chat's backend factory, refused in one line when it would not fit beside
        the chat's model."""
        factory = self.host.models.backend_factory
        if side.base_url is not None:
            from dataclasses import replace

            from vibechat.engine.settings.knobs import EngineSettings

            from ...backends import make_backend

            engine = EngineSettings.from_config(self.host.config.config)
            return make_backend(
                replace(engine, base_url=side.base_url, model=side.model), worker=True
            )
        if side.model is None:
            return self._same_server()
        if self._on_server() and not _local_file(side.model):
            # A server chat's model:NAME is the server's model NAME, as /model lists them there.
            return self._same_server(side.model)
        if factory is None:
            raise VibechatError("this chat cannot load a second model.")
        from vibechat.engine.models.resolve import resolve_model

        backend = factory(resolve_model(side.model))
        too_big = does_not_fit(backend)
        if too_big is not None:
            backend.close()
            raise VibechatError(too_big)
        return backend

    def _on_server(self) -> bool:
        """The chat talks to a server (its model is a server's)."""
        info = self.host.session.info
        return info is not None and bool(info.server)

    def _same_server(self, model: str | None = None) -> Backend:
        """Side B on the chat's own server, its own connection (the two requests in parallel):
        the chat's model, or the server's ``model``; refused in one line on a local engine that
        answers one reply at a time."""
        from vibechat.engine.settings.knobs import EngineSettings

        from ...backends import same_server

        info = self.host.session.info
        backend = None
        if info is not None:
            engine = EngineSettings.from_config(self.host.config.config)
            backend = same_server(engine, info, model)
        if backend is None:
            raise VibechatError(
                "this engine answers one reply at a time: compare against another model "
                "(model:NAME) or a server (base-url=URL)."
            )
        return backend


def _local_file(model: str) -> bool:
    """``model`` names a GGUF file on this machine (a path, or a file name), not a server's
    model: a server chat's ``model:NAME`` asks the server, ``model:./x.gguf`` loads it here."""
    from pathlib import Path

    return model.lower().endswith(".gguf") or Path(model).expanduser().is_file()


def stats_line(done: GenerationDone) -> str:
    """A side's end in its column: tokens, speed, time to first token, and how it ended."""
    stats = done.stats
    end = {"cancelled": " · ⏹ stopped", "length": " · cut at the token limit"}.get(
        stats.finish_reason, ""
    )
    return (
        f"{stats.completion_tokens} tokens · {stats.decode_tokens_per_s:.1f} tok/s · "
        f"TTFT {stats.ttft_ms / 1000:.2f} s{end}"
    )
