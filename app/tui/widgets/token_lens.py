"""The token lens on a reply (``TokenLens``): the reply's tokens, each tinted by the probability
the model gave it (a legend line says how), a cursor on one token, and a panel of that step's
candidates as bars (their probability before the sampler chain, and after it at the sliders as
they are now) with the lines where the chain's stages cut them.

It is not a dialog: it takes the chat's place on the main screen, so the parameter panel (F2)
and the nudge keys still move the sliders while it is open; the app sets the conversation's
parameters on it (``params``) and the cut lines move at once. The app mounts it after its
first frame (hidden at start); a reply shown before that is drawn once it is. Keys, all of them
on the keyboard: ← → a token, ↑ ↓ a line (in the candidates: a candidate), Home / End, Tab
between the text and the candidates, Enter on a candidate other than the chosen one takes that
path (``PathChosen``), ``e`` types a replacement, Esc goes back (from the candidates to the text,
from the text out: ``Closed``).

Every token's text is escaped by the engine (``Candidate.text``) and shown as text through
``outside``, never as markup. Colours come from the theme (component classes), never fixed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Static

from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import TokenCandidates

from .. import outside
from .lens_layout import (
    BANDS,
    Laid,
    Row,
    StepRows,
    band,
    bar,
    lay_out,
    percent,
    step_rows,
    token_cells,
)

# The stages' names on their cut lines.
STAGE_WORDS = {
    "top-k": "top-k",
    "top-p": "top-p",
    "min-p": "min-p",
    "temperature": "temperature 0 (greedy)",
    "repeat-penalty": "repeat penalty",
}


class TokenLens(Vertical, can_focus=True):
    """A reply's tokens and the candidates of the one under the cursor (see the module
    docstring). ``show`` gives it a reply's steps; ``params`` the sliders as they are now."""

    DEFAULT_CSS = """
    TokenLens {
        height: 1fr;
        display: none;
        padding: 0 1;
    }
    TokenLens.-open {
        display: block;
    }
    TokenLens > .lens--title, TokenLens > .lens--legend, TokenLens > .lens--panel {
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    TokenLens > .lens--title {
        height: 1;
        color: $text-muted;
        text-style: bold;
    }
    TokenLens:focus > .lens--title {
        color: $text-primary;
    }
    TokenLens > .lens--text {
        height: 1fr;
        min-height: 2;
    }
    TokenLens > .lens--legend {
        height: 1;
        color: $text-muted;
    }
    TokenLens > .lens--panel {
        height: auto;
        border-top: solid $primary 50%;
    }
    TokenLens > Input {
        display: none;
    }
    TokenLens > Input.-typing {
        display: block;
    }
    TokenLens .lens--sure {
        color: $foreground;
    }
    TokenLens .lens--likely {
        color: $text-success;
    }
    TokenLens .lens--unsure {
        color: $text-warning;
    }
    TokenLens .lens--unlikely {
        color: $text-error;
        text-style: bold;
    }
    TokenLens .lens--cursor {
        text-style: reverse;
    }
    TokenLens .lens--thinking {
        text-style: italic;
    }
    TokenLens .lens--bar {
        color: $primary;
    }
    TokenLens .lens--after {
        color: $success;
    }
    TokenLens .lens--cut {
        color: $text-muted;
    }
    TokenLens .lens--line {
        color: $warning;
    }
    TokenLens .lens--pick {
        background: $accent 40%;
    }
    TokenLens .lens--forced {
        color: $text-accent;
        text-style: underline;
    }
    TokenLens .lens--after-stop {
        color: $text-muted;
        text-style: strike;
    }
    """
    COMPONENT_CLASSES = {
        *(name for _, name, _ in BANDS),
        "lens--cursor",
        "lens--thinking",
        "lens--bar",
        "lens--after",
        "lens--cut",
        "lens--line",
        "lens--pick",
        "lens--forced",
        "lens--after-stop",
    }
    BINDINGS = [
        Binding("left", "token(-1)", "Previous token", id="lens.previous_token", show=False),
        Binding("right", "token(1)", "Next token", id="lens.next_token", show=False),
        Binding("up", "line(-1)", "Line up (candidate up)", id="lens.up", show=False),
        Binding("down", "line(1)", "Line down (candidate down)", id="lens.down", show=False),
        Binding("home", "edge(-1)", "First token", id="lens.first_token", show=False),
        Binding("end", "edge(1)", "Last token", id="lens.last_token", show=False),
        Binding("tab", "candidates", "Text or candidates", id="lens.candidates", show=False),
        Binding("enter", "take", "Take this candidate", id="lens.take", show=False),
        Binding("e", "type", "Type a replacement", id="lens.type", show=False),
        Binding("escape", "back", "Back", id="lens.back", show=False),
    ]

    class Closed(Message):
        """Esc on the text: leave the lens, back to where the user was."""

    class PathChosen(Message):
        """Take another path from this step: continue the reply (history message
        ``message_id``) from its token ``index`` with this token instead (``token_id``, -1 when
        typed; ``data``: its raw bytes, typed text as UTF-8)."""

        def __init__(self, message_id: int, index: int, token_id: int, data: bytes) -> None:
            super().__init__()
            self.message_id = message_id
            self.index = index
            self.token_id = token_id
            self.data = data

    def __init__(self, params: SamplingParams, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._params = params
        self.steps: tuple[TokenCandidates, ...] = ()
        self.cursor = 0
        # The candidate picked in the panel (None: the cursor is in the text).
        self.pick: int | None = None
        self.message_id: int | None = None
        self._note = ""
        self._footnote = ""
        self._laid: Laid | None = None
        self._laid_width = 0
        self._top = 0
        self.rows: StepRows | None = None

    def compose(self) -> ComposeResult:
        yield Static("", classes="lens--title")
        yield Static("", classes="lens--text")
        yield Static("", classes="lens--legend")
        yield Static("", classes="lens--panel")

    # ------------------------------------------------------------ attributes down
    @property
    def params(self) -> SamplingParams:
        """The sliders as they are now: the panel's cut lines are where they would cut."""
        return self._params

    @params.setter
    def params(self, params: SamplingParams) -> None:
        self._params = params
        if self.has_class("-open") and self.is_mounted:
            self._draw_panel()

    def show(
        self,
        steps: Sequence[TokenCandidates],
        *,
        message_id: int | None,
        footnote: str = "",
        at: int = 0,
    ) -> None:
        """A reply's ``steps`` (its history ``message_id``, None: not saved), the cursor on
        token ``at``; ``footnote``: what the lens leaves out of it, in one line."""
        self.steps = tuple(steps)
        self.message_id = message_id
        self.cursor = min(max(at, 0), max(len(self.steps) - 1, 0))
        self.pick = None
        self._note = ""
        self._footnote = footnote
        self._laid = None
        self._top = 0
        self.add_class("-open")
        # Else drawn once mounted (``on_mount``: the app mounts the lens after its first frame).
        if self.is_mounted:
            self._end_typing(focus=False)
            self._draw()

    def on_mount(self) -> None:
        """A reply shown before the lens was mounted, drawn now (unless it composed nothing:
        mounted as the app closes)."""
        if self.has_class("-open") and self.children:
            self._draw()
            self.focus()

    def close(self) -> None:
        """Hidden (the steps go: a reply's own are kept with it)."""
        self.remove_class("-open")
        self.steps = ()
        self.rows = None
        self._laid = None

    # ------------------------------------------------------------ drawing
    def on_resize(self, _event: events.Resize) -> None:
        if self.has_class("-open"):
            self.call_after_refresh(self._draw)

    def _draw(self) -> None:
        self._draw_title()
        self._draw_text()
        self._draw_legend()
        self._draw_panel()

    def _draw_title(self) -> None:
        total = len(self.steps)
        where = f"Token lens · token {self.cursor + 1}/{total}" if total else "Token lens"
        if total and self._footnote:
            where += f" ({self._footnote})"
        hints = "←→ token ↑↓ line Tab candidates Esc back"
        if self.pick is not None:
            hints = "↑↓ candidate Enter take it e type one Esc text"
        line = self._note or hints
        title = Text(f"{where} · {line}", no_wrap=True, overflow="ellipsis")
        self.query_one(".lens--title", Static).update(title)

    def _draw_legend(self) -> None:
        legend = Text("tint: the chosen token's probability ", no_wrap=True, overflow="ellipsis")
        for _, name, words in BANDS:
            legend.append(f" ■ {words}", self.get_component_rich_style(name))
        if any(step.forced for step in self.steps):
            legend.append(" yours", self.get_component_rich_style("lens--forced"))
        if any(step.after_stop for step in self.steps):
            # Held back for a stop string that matched: the model wrote them, the reply ends
            # before them.
            legend.append(
                " cut by a stop string", self.get_component_rich_style("lens--after-stop")
            )
        self.query_one(".lens--legend", Static).update(legend)

    def _text_width(self) -> int:
        return self.query_one(".lens--text", Static).size.width or max(self.size.width - 2, 20)

    def _layout(self) -> Laid:
        width = self._text_width()
        if self._laid is None or self._laid_width != width:
            self._laid = lay_out(self.steps, width)
            self._laid_width = width
        return self._laid

    def _draw_text(self) -> None:
        box = self.query_one(".lens--text", Static)
        if not self.steps:
            box.update(Text(self._footnote or "This reply has no token lens."))
            return
        laid = self._layout()
        height = max(box.size.height, 2)
        line = laid.line_of[self.cursor]
        if line < self._top:
            self._top = line
        elif line >= self._top + height:
            self._top = line - height + 1
        out = Text()
        for row in laid.lines[self._top : self._top + height]:
            if out:
                out.append("\n")
            for piece in row:
                out.append(outside.plain(piece.text, limit=None), self._piece_style(piece.index))
        box.update(out)

    def _piece_style(self, index: int) -> Style:
        step = self.steps[index]
        # A token the user put there (another path taken) is no draw of the model's: not tinted
        # by a probability it never had.
        tint = "lens--forced" if step.forced else band(math.exp(step.chosen.logprob))
        if step.after_stop:
            # Not part of the reply: dimmed and struck through, whatever its probability.
            tint = "lens--after-stop"
        style = self.get_component_rich_style(tint)
        if step.thinking:
            style += self.get_component_rich_style("lens--thinking")
        if index == self.cursor:
            style += self.get_component_rich_style("lens--cursor")
        return style

    def _draw_panel(self) -> None:
        panel = self.query_one(".lens--panel", Static)
        if not self.steps:
            self.rows = None
            panel.update("")
            return
        step = self.steps[self.cursor]
        self.rows = rows = step_rows(step, self._params)
        width = max(panel.size.width or self._text_width(), 30)
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(self._panel_header(len(rows.rows)), "bold")
        lines = dict((above, stage) for stage, above in rows.lines)
        token_width = 14 if width >= 70 else 8
        bars = max((width - token_width - 21) // 2, 3)
        for n, row in enumerate(rows.rows):
            if n in lines:
                out.append("\n")
                out.append(
                    self._cut_line(lines[n], n, width), self.get_component_rich_style("lens--line")
                )
            out.append("\n")
            out.append_text(self._row_text(row, n, token_width, bars))
        if not any(row.chosen for row in rows.rows):
            out.append("\n")
            chosen = outside.plain(step.chosen.text, limit=40)
            out.append(f"  chosen: {chosen} (not in the top {len(rows.rows)})")
        panel.update(out)

    def _panel_header(self, shown: int) -> str:
        p = self._params
        return (
            f"before: the step's · after: now T {p.temperature:.2f} k {p.top_k} "
            f"p {p.top_p:.2f} min-p {p.min_p:.2f} · of the top {shown}"
        )

    def _cut_line(self, stage: str, above: int, width: int) -> str:
        p = self._params
        value = {"top-k": f" {p.top_k}", "top-p": f" {p.top_p:.2f}", "min-p": f" {p.min_p:.2f}"}
        label = f" {STAGE_WORDS.get(stage, stage)}{value.get(stage, '')} cuts below rank {above} "
        return "╌╌" + label + "╌" * max(width - cell_len(label) - 2, 0)

    def _row_text(self, row: Row, n: int, token_width: int, bars: int) -> Text:
        cut = row.cut is not None
        plain = self.get_component_rich_style("lens--cut") if cut else None
        line = Text()
        line.append("▸" if self.pick == n else " ")
        line.append("●" if row.chosen else " ")
        line.append(f"{row.rank:>2} ")
        line.append(token_cells(outside.plain(row.candidate.text, limit=None), token_width), plain)
        line.append(" ")
        line.append(bar(row.before, bars), plain or self.get_component_rich_style("lens--bar"))
        line.append(percent(row.before))
        line.append(" ")
        line.append(bar(row.after, bars), plain or self.get_component_rich_style("lens--after"))
        line.append(percent(row.after) if not cut else "  cut")
        if self.pick == n:
            line.stylize(self.get_component_rich_style("lens--pick"))
        return line

    # ------------------------------------------------------------ keys
    def _moved(self) -> None:
        self._note = ""
        if self.pick is not None:
            self.pick = self._chosen_row()
        self._draw()

    def _chosen_row(self) -> int:
        rows = step_rows(self.steps[self.cursor], self._params).rows
        return next((n for n, row in enumerate(rows) if row.chosen), 0)

    def action_token(self, step: int) -> None:
        if self.steps:
            self.cursor = min(max(self.cursor + step, 0), len(self.steps) - 1)
            self._moved()

    def action_edge(self, direction: int) -> None:
        if self.steps:
            self.cursor = len(self.steps) - 1 if direction > 0 else 0
            self._moved()

    def action_line(self, step: int) -> None:
        """↑ ↓: a line of the text, or, in the candidates, a candidate."""
        if not self.steps:
            return
        if self.pick is not None:
            count = len(self.steps[self.cursor].top)
            self.pick = min(max(self.pick + step, 0), max(count - 1, 0))
            self._note = ""
            self._draw_title()
            self._draw_panel()
            return
        laid = self._layout()
        line = laid.line_of[self.cursor] + step
        if 0 <= line < len(laid.lines) and laid.lines[line]:
            self.cursor = laid.on_line(line, laid.column_of[self.cursor])
        else:
            self.cursor = 0 if step < 0 else len(self.steps) - 1
        self._moved()

    def action_candidates(self) -> None:
        """Tab: between the text and the candidates (the chosen one picked first)."""
        if self.steps:
            self.pick = None if self.pick is not None else self._chosen_row()
            self._note = ""
            self._draw()

    def action_take(self) -> None:
        """Enter: in the text, to the candidates; on a candidate other than the chosen one, its
        path (``PathChosen``); on the chosen one, nothing but a line saying so."""
        if not self.steps:
            return
        if self.pick is None:
            self.action_candidates()
            return
        rows = self.rows.rows if self.rows is not None else ()
        if not rows:
            return
        row = rows[min(self.pick, len(rows) - 1)]
        if row.chosen:
            self._say("this is the token the reply took: pick another one")
            return
        self._post_path(row.candidate.token_id, row.candidate.data)

    async def action_type(self) -> None:
        """``e``: a small input for a replacement token's text (made when first used)."""
        if not self.steps:
            return
        typed = self._typed_input()
        if typed is None:
            typed = Input(placeholder="a replacement for this token (Enter takes it, Esc cancels)")
            await self.mount(typed)
        typed.value = ""
        typed.add_class("-typing")
        typed.focus()

    def _typed_input(self) -> Input | None:
        found = self.query(Input)
        return found.first() if found else None

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value
        self._end_typing()
        if text:
            self._post_path(-1, text.encode("utf-8"))

    def _end_typing(self, focus: bool = True) -> None:
        typed = self._typed_input()
        if typed is not None:
            typed.remove_class("-typing")
        if focus:
            self.focus()

    def _post_path(self, token_id: int, data: bytes) -> None:
        if self.message_id is None:
            self._say("this reply is not saved (no history): it has no other path")
            return
        step = self.steps[self.cursor]
        self.post_message(self.PathChosen(self.message_id, step.index, token_id, data))

    def action_back(self) -> None:
        """Esc: the typed replacement cancelled, else from the candidates to the text, else out
        of the lens (``Closed``)."""
        typed = self._typed_input()
        if typed is not None and typed.has_class("-typing"):
            self._end_typing()
        elif self.pick is not None:
            self.pick = None
            self._note = ""
            self._draw()
        else:
            self.post_message(self.Closed())

    def _say(self, note: str) -> None:
        self._note = note
        self._draw_title()
