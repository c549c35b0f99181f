"""The picks of comparisons (issue 44): two replies to one prompt (side A, side B) and the one
the user chose, kept in the history's ``picks`` table (schema.py ``compare_picks``), and their
tally: wins per model, per preset and per value of each setting that differed
(``vibechat history compare-stats``). ``History`` has these methods (``PickBook`` is its base);
the chat's ``/compare`` records a pick when the user chooses with 1 or 2."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .compared import PickMark
from .database import HistoryDatabase
from .records import json_object, now

Winner = Literal["A", "B"]
# A setting's value as the tally shows it, bounded (it came from a saved row).
MAX_VALUE_CHARS = 200


@dataclass(frozen=True)
class Tally:
    """One row of the tally: what it counts (``kind``: ``model``, ``preset`` or ``setting``),
    its name (a setting's ``name`` with its ``value``), the picks it was a side of where the
    other side differed in it (``picks``), and the ones it won (``wins``)."""

    kind: str
    name: str
    value: str | None
    wins: int
    picks: int

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.kind == "setting":
            data["value"] = self.value
        data.update(wins=self.wins, picks=self.picks)
        return data


def _shown(value: Any) -> str:
    """A setting's value as a key of the tally: JSON's spelling (``0.2``, ``null``, ``"x"``)."""
    return json.dumps(value, ensure_ascii=False)[:MAX_VALUE_CHARS]


class PickBook(HistoryDatabase):
    """The picks half of ``History`` (history.py): recording a pick and tallying them."""

    def record_pick(
        self,
        *,
        conversation_id: int | None,
        a_message_id: int | None,
        b_message_id: int | None,
        winner: Winner,
        differs: Mapping[str, Mapping[str, Any]],
        a_model: str | None = None,
        b_model: str | None = None,
        a_preset: str | None = None,
        b_preset: str | None = None,
        blind: bool = False,
    ) -> int:
        """Keep the user's pick of side ``winner`` between two replies (their message ids), with
        what differed between the sides (``{"temperature": {"a": 0.2, "b": 1.2}}``), each
        side's model and preset; ``blind``: the sides were hidden until the pick. Its id."""
        if winner not in ("A", "B"):
            raise ValueError(f"a pick's winner is side A or B, not {winner!r}")
        with self._write() as c:
            cur = c.execute(
                "INSERT INTO picks(conversation_id, a_message_id, b_message_id, winner, "
                "a_model, b_model, a_preset, b_preset, differs, blind, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    a_message_id,
                    b_message_id,
                    winner,
                    a_model,
                    b_model,
                    a_preset,
                    b_preset,
                    json.dumps({k: dict(v) for k, v in differs.items()}),
                    int(blind),
                    now(),
                ),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def picks_of(self, conversation_id: int) -> tuple[PickMark, ...]:
        """The picks kept of conversation ``conversation_id``'s comparisons, oldest first (its
        export marks them: compared.py)."""
        rows = self._read(
            "SELECT a_message_id, b_message_id, winner FROM picks WHERE conversation_id = ? "
            "ORDER BY id",
            (conversation_id,),
        )
        return tuple(PickMark(r["a_message_id"], r["b_message_id"], r["winner"]) for r in rows)

    def pick_count(self) -> int:
        """How many picks are kept."""
        return int(self._read("SELECT COUNT(*) AS n FROM picks")[0]["n"])

    def pick_tally(self) -> list[Tally]:
        """Wins per model, per preset (where the two sides differed in it) and per value of
        each setting that differed: most wins first, then by name."""
        counts: dict[tuple[str, str, str | None], list[int]] = {}

        def count(kind: str, name: str, value: str | None, won: bool) -> None:
            row = counts.setdefault((kind, name, value), [0, 0])
            row[0] += int(won)
            row[1] += 1

        for pick in self._read("SELECT * FROM picks ORDER BY id"):
            winner = pick["winner"]
            for kind in ("model", "preset"):
                a, b = pick[f"a_{kind}"], pick[f"b_{kind}"]
                if a != b:
                    count(kind, a or "(none)", None, winner == "A")
                    count(kind, b or "(none)", None, winner == "B")
            differs = json_object(pick["differs"]) or {}
            for name, sides in differs.items():
                if name in ("model", "preset") or not isinstance(sides, dict):
                    continue
                count("setting", str(name), _shown(sides.get("a")), winner == "A")
                count("setting", str(name), _shown(sides.get("b")), winner == "B")
        rows = [Tally(k, n, v, wins, picks) for (k, n, v), (wins, picks) in counts.items()]
        order = {"model": 0, "preset": 1, "setting": 2}
        return sorted(rows, key=lambda t: (order[t.kind], t.name, -t.wins, t.value or ""))
