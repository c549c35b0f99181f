"""What the token lens (``token_lens.py``) draws, computed apart from the widget: a reply's
tokens laid out in lines at a width (``lay_out``), the tint band of a token's probability
(``band``), and a step's candidates under the sliders as they are now (``step_rows``: each
candidate's probability before and after the chain, the stage that cuts it, and where the
cut lines fall).

A token's text is already escaped (``Candidate.text``: never raw); a token whose bytes hold a
line break ends its line (its ``\\n`` stays shown).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len

from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import Candidate, CutStage, TokenCandidates
from vibechat.engine.turns.lens_steps import chain_cuts

# The tint bands of the chosen token's probability (before the chain), from the most likely:
# (lowest probability of the band, its component class, its legend).
BANDS: tuple[tuple[float, str, str], ...] = (
    (0.9, "lens--sure", "≥90%"),
    (0.5, "lens--likely", "50–90%"),
    (0.1, "lens--unsure", "10–50%"),
    (0.0, "lens--unlikely", "<10%"),
)
# The longest a token's text is shown in the candidates' list (cells).
TOKEN_CELLS = 14


def band(probability: float) -> str:
    """The component class of the tint for a chosen token of this probability."""
    return next(name for low, name, _ in BANDS if probability >= low)


def token_cells(text: str, width: int = TOKEN_CELLS) -> str:
    """``text`` cut to ``width`` cells (the last one "…"), padded to ``width``."""
    if cell_len(text) > width:
        out = ""
        for char in text:
            if cell_len(out + char) > width - 1:
                break
            out += char
        text = out + "…"
    return text + " " * (width - cell_len(text))


@dataclass(frozen=True)
class Piece:
    """A part of a token on a line: the step's ``index`` among the reply's steps, its ``text``."""

    index: int
    text: str


@dataclass(frozen=True)
class Laid:
    """A reply's tokens in lines: ``lines`` of pieces, and each token's first line (``line_of``)
    and its column there (``column_of``)."""

    lines: tuple[tuple[Piece, ...], ...]
    line_of: tuple[int, ...]
    column_of: tuple[int, ...]

    def on_line(self, line: int, column: int) -> int:
        """The token on ``line`` nearest ``column`` (its start at or before it, else the line's
        first)."""
        pieces = self.lines[line]
        best = pieces[0].index
        at = 0
        for piece in pieces:
            if at > column:
                break
            if self.line_of[piece.index] == line:
                best = piece.index
            at += cell_len(piece.text)
        return best


def lay_out(steps: Sequence[TokenCandidates], width: int) -> Laid:
    """The steps' chosen tokens in lines of ``width`` cells: a token that does not fit where the
    line is goes to the next one (one wider than a line is cut into pieces), a token whose bytes
    hold a line break ends its line."""
    width = max(width, 4)
    lines: list[list[Piece]] = [[]]
    used = 0
    line_of: list[int] = []
    column_of: list[int] = []
    for index, step in enumerate(steps):
        text = step.chosen.text or "∅"
        size = cell_len(text)
        if used and used + size > width:
            lines.append([])
            used = 0
        line_of.append(len(lines) - 1)
        column_of.append(used)
        while cell_len(text) > width - used:
            head = _head(text, width - used)
            lines[-1].append(Piece(index, head))
            text = text[len(head) :]
            lines.append([])
            used = 0
        if text:
            lines[-1].append(Piece(index, text))
            used += cell_len(text)
        if b"\n" in step.chosen.data:
            lines.append([])
            used = 0
    if len(lines) > 1 and not lines[-1]:
        lines.pop()
    return Laid(tuple(tuple(line) for line in lines), tuple(line_of), tuple(column_of))


def _head(text: str, cells: int) -> str:
    """The longest start of ``text`` that fits ``cells`` (at least one character)."""
    out = ""
    for char in text:
        if out and cell_len(out + char) > cells:
            break
        out += char
    return out


@dataclass(frozen=True)
class Row:
    """A candidate of a step as the panel shows it: its ``rank`` (1 = the likeliest), the
    ``candidate``, its probability ``before`` the chain (the step's own) and ``after`` it at the
    sliders as they are now, the stage that ``cut`` it (None: kept), whether it is the token
    ``chosen``."""

    rank: int
    candidate: Candidate
    before: float
    after: float
    cut: CutStage | None
    chosen: bool


@dataclass(frozen=True)
class StepRows:
    """A step's candidates under the sliders now: ``rows`` best first, and ``lines``, where each
    cut line falls (the stage, and how many ranks are above it)."""

    rows: tuple[Row, ...]
    lines: tuple[tuple[CutStage, int], ...]

    def line_at(self, stage: str) -> int | None:
        """How many ranks lie above ``stage``'s cut line (None: it cuts none of them)."""
        return next((above for name, above in self.lines if name == stage), None)


def same(a: Candidate, b: Candidate) -> bool:
    """The same token (by id where both have one, else by bytes)."""
    if a.token_id >= 0 and b.token_id >= 0:
        return a.token_id == b.token_id
    return a.data == b.data


def model_logprobs(step: TokenCandidates) -> list[float]:
    """The step's candidates' log-probabilities at temperature 1, over the candidates shown
    (renormalised): the local engine's ``logprob`` is after the step's temperature, so it is
    multiplied back by it (at temperature 0 it is already the model's own); a server's is its
    own."""
    temperature = step.slider("temperature")
    scale = (
        float(temperature)
        if step.chosen.token_id >= 0 and isinstance(temperature, (int, float)) and temperature > 0
        else 1.0
    )
    raw = [c.logprob * scale for c in step.top]
    if not raw:
        return []
    best = max(raw)
    total = best + math.log(sum(math.exp(lp - best) for lp in raw))
    return [lp - total for lp in raw]


def step_rows(step: TokenCandidates, params: SamplingParams) -> StepRows:
    """``step``'s candidates as the chain at ``params`` (the sliders now) would treat them
    (``chain_cuts`` over the candidates shown), and its cut lines."""
    cuts, after = chain_cuts(model_logprobs(step), params)
    rows = tuple(
        Row(
            rank=rank + 1,
            candidate=c,
            before=math.exp(c.logprob),
            after=after[rank],
            cut=cuts[rank],
            chosen=same(c, step.chosen),
        )
        for rank, c in enumerate(step.top)
    )
    lines: list[tuple[CutStage, int]] = []
    for rank in range(1, len(cuts)):
        stage = cuts[rank]
        if stage is not None and stage != cuts[rank - 1]:
            lines.append((stage, rank))
    return StepRows(rows, tuple(lines))


def bar(fraction: float, width: int) -> str:
    """A bar of ``width`` cells, ``fraction`` of it filled (in eighths of a cell)."""
    eighths = round(max(0.0, min(fraction, 1.0)) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    return text + " " * (width - cell_len(text))


def percent(probability: float) -> str:
    """A probability in five cells: ``61.2%``, ``100%``, ``<0.1%``."""
    if probability >= 0.9995:
        return " 100%"
    if 0 < probability < 0.001:
        return "<0.1%"
    return f"{probability * 100:4.1f}%"
