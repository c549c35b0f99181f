"""Two compared replies to one prompt (issue 44) as a conversation's export shows them: which
saved replies are side A and side B of a comparison (``compared_replies``), and the settings
each side was run with where the two differed (``differing_settings``).

A comparison is known from its pick (picks.py: both replies' ids, the winner), or, for a
conversation ``vibechat run --compare`` saved (source ``run`` or ``batch``, where replies are
never regenerated), from a prompt with exactly two replies, each saved with its parameters: A
the one saved first. records.py's Markdown export heads each side with this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..settings.params import PARAM_SPECS

# Where a conversation without picks may hold run --compare's pairs (records.py SOURCES).
COMPARING_SOURCES = ("run", "batch")
# The settings a side's heading names that are not sampling parameters with a label.
_OTHER = {"seed": "seed", "stop": "stop strings", "thinking": "thinking", "output_format": "format"}
# A setting's value in a heading, bounded (it came from a saved row).
MAX_VALUE_CHARS = 80


class Reply(Protocol):
    """What is read of a saved message (records.py ``StoredMessage``)."""

    @property
    def id(self) -> int: ...

    @property
    def role(self) -> str: ...

    @property
    def parent_id(self) -> int | None: ...

    @property
    def params(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class PickMark:
    """A kept pick of one conversation, as its export reads it: the two replies' ids (None: a
    reply since deleted) and the side chosen."""

    a_message_id: int | None
    b_message_id: int | None
    winner: str


@dataclass(frozen=True)
class Compared:
    """A reply's place in a comparison: its side, the other side's reply, and the side picked
    (None: no pick kept)."""

    side: str
    other: int
    winner: str | None


def compared_replies(
    tree: Sequence[Reply], source: str, picks: Iterable[PickMark]
) -> dict[int, Compared]:
    """Each compared reply's place, by its message id: the picks' pairs (the newest pick of a
    pair wins), then, in a conversation ``run --compare`` saved, each prompt's two replies."""
    found: dict[int, Compared] = {}
    known = {m.id for m in tree}
    for pick in picks:
        a, b = pick.a_message_id, pick.b_message_id
        if a in known and b in known and a is not None and b is not None:
            found[a] = Compared("A", b, pick.winner)
            found[b] = Compared("B", a, pick.winner)
    if source not in COMPARING_SOURCES:
        return found
    children: dict[int | None, list[Reply]] = {}
    for message in tree:
        if message.role == "assistant":
            children.setdefault(message.parent_id, []).append(message)
    for replies in children.values():
        if len(replies) != 2 or any(not r.params for r in replies):
            continue
        a, b = sorted(r.id for r in replies)
        if a not in found and b not in found:
            found[a], found[b] = Compared("A", b, None), Compared("B", a, None)
    return found


def differing_settings(mine: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> str:
    """The settings a side was run with where the other side's differ, as the export's
    parameters line words them (``temperature 1.2, top-k 7``); "" when none differ."""
    mine, other = mine or {}, other or {}
    shown = []
    for name in dict.fromkeys([*mine, *other]):
        value = mine.get(name)
        if value == other.get(name):
            continue
        spec = PARAM_SPECS.get(name)
        if spec is not None and spec.label:
            label = spec.label.lower()
            text = spec.show(value) if isinstance(value, int | float) or value is None else value
        else:
            label, text = _OTHER.get(name, name), _plain(value)
        shown.append(f"{label} {str(text)[:MAX_VALUE_CHARS]}")
    return ", ".join(shown)


def _plain(value: Any) -> str:
    """A non-numeric setting's value in a heading: its text, or its label for a format."""
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return str(value.get("label") or value.get("kind") or "set")
    if isinstance(value, list | tuple):
        return " | ".join(str(v) for v in value) or "none"
    return str(value)
