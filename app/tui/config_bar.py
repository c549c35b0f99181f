"""The config's problems, at the top of the chat until they are fixed or hidden.

A mistake in the config file or a ``VIBECHAT_*`` variable leaves a setting out (or, for a
file that is not TOML, the whole file). The chat still starts, so the user must see, for
as long as it matters, what is not applied: a notice that fades after a few seconds is
missed (issue 30). So each problem is one line here (where, what, what runs meanwhile:
"config.toml line 6: unknown key 'temprature' in [params] (did you mean 'temperature'?):
not applied"), then how to fix it and the key that hides the bar.

The bar hides itself when there is nothing to say; the app sets ``problems`` and the
hint's key, and hides it on the user's word (its binding, or a click on the bar). The
lines quote the user's file (key names, values, paths): sanitised and never read as
markup (``outside``). At most ``MAX_LINES`` problems are shown whole; the rest are
counted, naming the settings they leave out.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.events import Click
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from . import outside

MAX_LINES = 4  # problems shown whole; more are counted on one line


class ConfigBar(Widget):
    """One line per config problem, docked at the top; hidden when there are none."""

    DEFAULT_CSS = """
    ConfigBar {
        dock: top;
        height: auto;
        padding: 0 1;
        background: $warning 25%;
        color: $foreground;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        display: none;
    }
    ConfigBar.-shown {
        display: block;
    }
    """

    problems: reactive[tuple[str, ...]] = reactive((), layout=True)
    hide_key: reactive[str] = reactive("")

    class HideRequested(Message):
        """The user clicked the bar: the app hides it (as its binding does)."""

    def watch_problems(self, problems: tuple[str, ...]) -> None:
        self.set_class(bool(problems), "-shown")

    def show(self, problems: Sequence[str], hide_key: str = "") -> None:
        self.hide_key = hide_key
        self.problems = tuple(problems)

    def hide(self) -> None:
        self.problems = ()

    @property
    def shown(self) -> bool:
        return bool(self.problems)

    def render(self) -> Content:
        lines = [Content.assemble(("⚠ ", "bold $warning"), outside.line(problem)) for problem in
                 self.problems[:MAX_LINES]]
        rest = self.problems[MAX_LINES:]
        if rest:
            lines.append(outside.line(f"… and {len(rest)} more: 'vibechat config show' lists them", "bold"))
        hint = "Fix: vibechat config edit (then start vibechat again)"
        if self.hide_key:
            hint += f" · {self.hide_key} hides this"
        lines.append(Content(hint).stylize("dim"))
        return Content("\n").join(lines)

    def on_click(self, event: Click) -> None:
        event.stop()
        self.post_message(self.HideRequested())
