"""One reply's token lens as the chat keeps it (``ReplyLens``): its steps, from the
``TokenCandidates`` events while it streams, or read back from its saved ``logprobs`` when a
saved conversation's reply is first looked at (``engine/turns/lens_steps.py``'s
``saved_steps``), and the one line a reply without them says (``LensNotice``).

A streaming reply's steps arrive on the generation's worker thread (``add``) and are read on the
UI thread (``steps``): a lock guards the list. A saved reply's are read back in a worker too
(``read`` says whether that is still to do: thousands of steps take a noticeable while). They
are bounded as the history bounds them (``lens_history_bytes``, counted approximately here:
each candidate's text and figures): the steps past the bound are counted, not kept.
"""

from __future__ import annotations

import threading
from typing import Any

from vibechat.engine.settings.params import LENS_HISTORY_BYTES, PARAM_SPECS
from vibechat.engine.turns.backend import TokenCandidates
from vibechat.engine.turns.lens_steps import saved_steps

# Bytes a candidate costs beyond its text, as the history's JSON counts them (its figures,
# its keys): an estimate, enough for a bound.
CANDIDATE_BYTES = 80


def step_size(step: TokenCandidates) -> int:
    """About how many bytes of JSON ``step`` takes in the history (its ``to_openai``)."""
    return sum(len(c.text) + CANDIDATE_BYTES for c in (step.chosen, *step.top))


def saved_sliders(params: Any) -> tuple[tuple[str, float | int | None], ...]:
    """A saved reply's sampling values (its ``StoredMessage.params``) as a step's ``sliders``:
    the sampler chain's parameters, in ``PARAM_SPECS``' order (the ones it does not name left
    out)."""
    if not isinstance(params, dict):
        return ()
    out: list[tuple[str, float | int | None]] = []
    for name, spec in PARAM_SPECS.items():
        value = params.get(name)
        if (
            spec.llama is not None
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            out.append((name, value))
    return tuple(out)


class ReplyLens:
    """A reply's lens steps, kept while they fit in ``limit`` bytes (approximately: see
    ``step_size``). ``saved``/``params``: a saved reply's lens object and sampling values, read
    only when first asked for (``steps``)."""

    def __init__(
        self, limit: int = LENS_HISTORY_BYTES, *, saved: Any = None, params: Any = None
    ) -> None:
        self.limit = limit
        # The line the reply's ``LensNotice`` said ("" when none).
        self.notice = ""
        self._steps: list[TokenCandidates] = []
        self._size = 0
        self._dropped = 0
        self._lock = threading.Lock()
        self._saved = saved
        self._params = params
        self._read = saved is None

    def add(self, step: TokenCandidates) -> None:
        """A step of the streaming reply (any thread): kept while the steps fit, else counted."""
        size = step_size(step)
        with self._lock:
            if not self._dropped and self._size + size <= self.limit:
                self._steps.append(step)
                self._size += size
            else:
                self._dropped += 1

    @property
    def read(self) -> bool:
        """Its steps are at hand: a streaming reply's, or a saved one's already read back (a
        flag set once the reading is done: asking never waits for it)."""
        return self._read

    @property
    def dropped(self) -> int:
        """Steps left out past the bound (a saved lens's ``truncated`` count included)."""
        self._read_saved()
        with self._lock:
            return self._dropped

    def steps(self) -> tuple[TokenCandidates, ...]:
        """The steps kept, in order (a saved reply's read back the first time)."""
        self._read_saved()
        with self._lock:
            return tuple(self._steps)

    def _read_saved(self) -> None:
        """A saved reply's lens, read back once (checked and bounded: ``saved_steps``)."""
        with self._lock:
            if self._read:
                return
            saved, self._saved = self._saved, None
            steps = saved_steps(saved, saved_sliders(self._params))
            truncated = saved.get("truncated") if isinstance(saved, dict) else None
            self._read = True
            for n, step in enumerate(steps):
                size = step_size(step)
                if self._size + size > self.limit:
                    self._dropped += len(steps) - n
                    break
                self._steps.append(step)
                self._size += size
            if isinstance(truncated, int) and not isinstance(truncated, bool) and truncated > 0:
                self._dropped += truncated
