"""What the chat is doing, in one object: ``ChatState``.

Whether a reply is being generated, whether the model is ready, the engine's state as the
status bar says it ("loading 42%", "generating…"), the model loaded, the context the
conversation fills, the last reply's stats (and the reply itself, for ``/stats``), the
figures of the reply streaming now, a download's progress, and what the status bar shows
of the parameters (the reply format, the thinking switch).

The controllers (``replies.py``, ``models_ui.py``, ``history_ui.py``) write it, on the UI
thread (workers post messages; the handlers write); nobody writes a widget's copy.
Widgets and the app watch it: each field that changes to another value publishes its
name on ``changed`` (Textual's ``Signal``, owned by the app), and the status bar copies
the fields it shows into its own reactives (as ``data_bind`` would), so a write repaints
the bar in the same order the controller wrote. A subscriber that was not mounted yet
reads the fields when it mounts: the state is the source of truth, the signal only says
when to look again. A widget that only needs a field at one moment reads it then: the prompt
input's ``busy`` is ``generating``, looked at as Enter is pressed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from textual.signal import Signal

from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import DraftProgress, GenerationDone, GenerationStats, ModelInfo

if TYPE_CHECKING:
    from textual.dom import DOMNode

T = TypeVar("T")


@dataclass(frozen=True)
class LiveReply:
    """The reply streaming now, as far as it has come (the status bar's live figures)."""

    # Generated so far, thinking included (0: none yet).
    tokens: int = 0
    # Since its first token (0: not measured yet).
    tokens_per_s: float = 0.0
    # Counted from the streamed pieces: the backend does not say.
    estimated: bool = False
    # Its last piece was thinking: it is thinking now (``tokens`` are then all thinking).
    thinking: bool = False


class _Field(Generic[T]):
    """One field of the state: reads give its value (``default`` until written); a write of
    another value publishes the field's name (an equal value publishes nothing, as a
    Textual reactive would not repaint)."""

    def __init__(self, default: T) -> None:
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, state: None, owner: type) -> _Field[T]: ...
    @overload
    def __get__(self, state: ChatState, owner: type) -> T: ...

    def __get__(self, state: ChatState | None, owner: type) -> T | _Field[T]:
        if state is None:
            return self
        return state._values.get(self.name, self.default)

    def __set__(self, state: ChatState, value: T) -> None:
        if state._values.get(self.name, self.default) != value:
            state._values[self.name] = value
            state.changed.publish(self.name)


def context_after(stats: GenerationStats) -> int:
    """The tokens the conversation holds after a reply with ``stats``, as the next prompt will
    be: its prompt and its reply, the reply's thinking left out (it is not sent back)."""
    return stats.prompt_tokens + stats.completion_tokens - stats.thinking_tokens


class ChatState:
    """See the module docstring. The fields keep the names the status bar shows them by
    (``status`` is the bar's ``state``: what the engine is doing)."""

    # A reply is on its way (Esc stops it).
    generating: _Field[bool] = _Field(False)
    # A model is loaded and answers.
    model_ready: _Field[bool] = _Field(False)
    # What the engine is doing: "loading 42%", "generating…", "ready".
    status: _Field[str] = _Field("starting")
    # The model loaded (the status bar, /show, /stats).
    model: _Field[ModelInfo | None] = _Field(None)
    # Tokens the conversation fills (while a reply streams: its prompt).
    context_used: _Field[int] = _Field(0)
    # Messages the last reply's prompt left out to fit the context (the meter says so).
    left_out: _Field[int] = _Field(0)
    # The last reply's, shown (None: cleared).
    stats: _Field[GenerationStats | None] = _Field(None)
    # The last reply had thinking (its tokens are in stats).
    thought: _Field[bool] = _Field(False)
    # How the last reply that ended ended (/stats).
    last: _Field[GenerationDone | None] = _Field(None)
    # The reply streaming now, as far as it has come.
    live: _Field[LiveReply | None] = _Field(None)
    # Live, while a drafted reply streams.
    drafting: _Field[DraftProgress | None] = _Field(None)
    # E.g. "⬇ 42%" while a model downloads.
    download: _Field[str] = _Field("")
    # /format: "json", "schema person.json" ("": free text).
    output_format: _Field[str] = _Field("")
    # /think: on, off, low, medium, high, auto.
    thinking: _Field[str] = _Field("auto")
    # The token lens: candidates per token its replies keep (0: off; the lens key turns it on).
    lens: _Field[int] = _Field(0)
    # /think budget: most tokens a reply may think (None: no budget).
    think_budget: _Field[int | None] = _Field(None)
    # /compare armed for the next prompt: "B temperature=1.2" ("": none armed).
    compare: _Field[str] = _Field("")

    def __init__(self, owner: DOMNode) -> None:
        self._values: dict[str, Any] = {}
        # Publishes a field's name, each time it changes.
        self.changed: Signal[str] = Signal(owner, "chat-state")

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """Every field's name, in the order they are declared."""
        return tuple(name for name, value in vars(cls).items() if isinstance(value, _Field))

    @property
    def at_rest(self) -> str:
        """The status once nothing runs any more (a reply ended, however it ended): "ready"
        with a model that answers, else "no model" (never a "generating…" left behind)."""
        return "ready" if self.model_ready else "no model"

    def show_params(self, params: SamplingParams) -> None:
        """What is shown of the parameters: the reply format, the thinking switch and budget,
        the token lens."""
        self.output_format = params.output_format.label if params.output_format else ""
        self.thinking = params.thinking
        self.think_budget = params.think_budget
        self.lens = params.logprobs
