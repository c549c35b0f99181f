"""The parts of a sampling parameter's declaration (``ParamSpec``, engine/settings/params.py) that
say how each consumer receives it: llama.cpp's sampler chain (``LlamaStage``), a server's request
(``RemoteField``) and the chat's nudge keys (``Nudge``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LlamaStage:
    """How llama.cpp's sampler chain (engine/llama/decoding.py ``sampler_chain``) receives a
    parameter: ``make(ll, vocab, value)`` gives the stage's sampler (``ll`` is the ``llama_cpp``
    module, passed in so that this file never loads it), or None to leave it out; the chain
    adds the stages by ``order``. ``sampling``: the stage only matters when tokens are drawn,
    so it is left out at temperature 0, where the chain ends in the greedy pick."""

    order: int
    make: Callable[[Any, Any, Any], Any]
    sampling: bool = True


@dataclass(frozen=True)
class RemoteField:
    """How a server's chat request (engine/remote/request.py ``chat_body``) receives a
    parameter: the body's ``keys`` carry its value, unless the value is one of ``unsent`` (the
    server's own default then); ``optional``: an extra field a strict server may refuse (sent
    only while the backend has not seen it refused)."""

    keys: tuple[str, ...]
    optional: bool = False
    unsent: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Nudge:
    """The chat's keys that step a parameter down and up by its fine step without opening the
    parameter panel (app/tui/shell/bindings.py makes the bindings), and what each does."""

    down: str
    up: str
    lower: str  # the tooltip of ``down``
    higher: str  # the tooltip of ``up``
