"""The config's problems, at the top of the chat until they are fixed or hidden.

A mistake in the config file or a ``VIBECHAT_*`` variable leaves a setting out (or, for a
file that is not TOML, the whole file). The chat still starts, so the user must see, for
as long as it matters, what is not applied: a notice that fades after a few seconds is
missed (issue 30). So each problem is one line here (where, what, what runs meanwhile:
"config.toml line 6: unknown key 'temprature' in [params] (did you mean 'temperature'?):
not applied"), then how to fix it and the key that hides the bar.

The bar hides itself when there is nothing to say; the app sets ``problems`` and the
hint's key, and hides it on the user's word (its binding, or a click on the bar). While
it shows the file's problems it watches the file (a stat every ``POLL_S`` seconds; the
check itself runs in a thread): edited, the file's lines are checked again, and a fixed
file says so ("config.toml loads cleanly now: start vibechat again to apply it": the chat
keeps what it started with until then). The
lines quote the user's file (key names, values, paths): sanitised and never read as
markup (``outside``). At most ``MAX_LINES`` problems are shown whole; the rest are
counted, naming the settings they leave out.

Imports inside functions are deliberate: the config file's modules load only when a setting is
saved (start-up time).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from textual.content import Content
from textual.events import Click
from textual.message import Message
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget

from .. import outside

# Problems shown whole; more are counted on one line.
MAX_LINES = 4
# How often the file is looked at (a stat) while its problems are shown.
POLL_S = 2.0


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


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

    def show(
        self,
        problems: Sequence[str],
        hide_key: str = "",
        *,
        file: Path | None = None,
        from_file: int = 0,
    ) -> None:
        """Show ``problems``; the first ``from_file`` are the config ``file``'s, which is then
        watched: when it changes, they are checked again (and said fixed when they are)."""
        self.hide_key = hide_key
        self.problems = tuple(problems)
        self._file, self._from_file = (
            (file, from_file) if file is not None and from_file else (None, 0)
        )
        self._signature = _signature(self._file) if self._file is not None else None
        if self._file is not None and self.problems:
            self._timer = self.set_interval(POLL_S, self._poll)

    def hide(self) -> None:
        self.problems = ()
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    # ----------------------------------------------------------- the file, fixed
    _file: Path | None = None
    _from_file = 0
    _signature: tuple[int, int, int] | None = None
    _timer: Timer | None = None
    # The file was fixed and nothing else is wrong: no "Fix:" hint.
    _clean = False

    def _poll(self) -> None:
        if self._file is None:
            return
        signature = _signature(self._file)
        if signature != self._signature:
            self._signature = signature
            self.run_worker(
                lambda: self._recheck(self._file), thread=True, exclusive=True, group="config-bar"
            )

    def _recheck(self, path: Path | None) -> None:
        """In a thread: the file's problems now, as the bar's lines."""
        from vibechat.engine.settings.config import config_file_problems

        from ...appconfig import APP_SCHEMA

        if path is None:
            return
        problems = config_file_problems(path, APP_SCHEMA)
        lines = [p.short for p in problems] or [
            f"{path.name} loads cleanly now: start vibechat again to apply it"
        ]
        self.app.call_from_thread(self._rechecked, lines, not problems)

    def _rechecked(self, lines: list[str], clean: bool) -> None:
        if not self.problems:  # hidden meanwhile
            return
        # Nothing else to fix.
        self._clean = clean and len(self.problems) == self._from_file
        self.problems = (*lines, *self.problems[self._from_file :])
        self._from_file = len(lines)

    @property
    def shown(self) -> bool:
        return bool(self.problems)

    def render(self) -> Content:
        lines = [
            Content.assemble(("⚠ ", "bold $warning"), outside.line(problem))
            for problem in self.problems[:MAX_LINES]
        ]
        rest = self.problems[MAX_LINES:]
        if rest:
            lines.append(
                outside.line(f"… and {len(rest)} more: 'vibechat config show' lists them", "bold")
            )
        hints = [] if self._clean else ["Fix: vibechat config edit (then start vibechat again)"]
        if self.hide_key:
            hints.append(f"{self.hide_key} hides this")
        if hints:
            lines.append(Content(" · ".join(hints)).stylize("dim"))
        return Content("\n").join(lines)

    def on_click(self, event: Click) -> None:
        event.stop()
        self.post_message(self.HideRequested())
