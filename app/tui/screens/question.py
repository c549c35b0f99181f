"""A question the chat asks (may this tool run? delete this conversation? open this link?)
that takes only the keys the user pressed after seeing it.

A question can appear while the user types: a reply that ends in a tool call asks mid-sentence,
a fast typist's next letters land after the key that opened it. Such keys were meant for where
the user was typing, never as an answer (a stray "y" and the "a" of "and" once ran a tool and
allowed it for good). So a ``QuestionScreen``:

* has no text field, and never answers to a key that types: a printable character or Backspace
  goes on where the user was typing, whenever it is pressed (``verdict`` says ``"pass"``; the
  app delivers it, see ``VibechatApp.on_event``). Its answers are keys ordinary typing does not
  produce (Ctrl+Y, Esc ...), and its key line says what each does;
* takes no key pressed before it was drawn, or within ``SETTLE`` seconds after: such a key that
  does not type is dropped (``"drop"``), whatever it is.

The time a key was pressed is the key event's own (``Event.time``: when the terminal's bytes
were read), so a key that waited in the queue while the question was drawn counts as pressed
before it.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from textual import events, on
from textual._time import get_time
from textual.screen import ModalScreen

Verdict = Literal["take", "pass", "drop"]
ResultType = TypeVar("ResultType")

# Keys that type (besides printable characters): they go on where the user was typing.
TYPING_KEYS = frozenset({"backspace"})


class QuestionScreen(ModalScreen[ResultType]):
    """A modal question: typing goes past it, and it takes only keys pressed once it was drawn
    and ``SETTLE`` seconds passed."""

    # Seconds after the first frame in which a key is still taken as meant for before.
    SETTLE = 0.5

    def __init__(self) -> None:
        super().__init__()
        # When keys become the question's (None: not drawn), on the clock of ``Event.time``
        # (``get_time``: monotonic; perf_counter on Windows).
        self._takes_keys_from: float | None = None

    @on(events.Mount)
    def _guard_until_drawn(self) -> None:
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self._takes_keys_from = get_time() + self.SETTLE

    @property
    def ready(self) -> bool:
        """Drawn, and the settle time is over: a key pressed now may answer."""
        return self._takes_keys_from is not None and get_time() >= self._takes_keys_from

    def verdict(self, event: events.Key) -> Verdict:
        """Whose key ``event`` is: where the user was typing (``pass``: it types), the
        question's (``take``), or nobody's (``drop``: pressed before the question could be seen)."""
        if (event.is_printable and event.character) or event.key in TYPING_KEYS:
            return "pass"
        seen = self._takes_keys_from is not None and event.time >= self._takes_keys_from
        return "take" if seen else "drop"
