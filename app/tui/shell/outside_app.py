"""The app's base: outside text reaches no widget unsanitised and is never read as markup.

Pasted text comes from the clipboard, notifications nearly always quote outside
text (a model name, a server's error, a title, a path): ``OutsideTextApp``
sanitises the one and shows the other as plain text (see ``outside``), for every
screen and widget of the app.

A paste's line breaks are kept whatever the terminal sends for them: xterm-style terminals
and tmux send a bracketed paste's line breaks as CR, Windows text brings CRLF. Both become
``\n`` before sanitising (which drops a lone CR: on its own it lets text overwrite a line).

Imports inside functions are deliberate: Rich's traceback module loads only when a crash is
reported.
"""

from __future__ import annotations

import rich
from rich.segment import Segments
from textual import events, on
from textual.app import App
from textual.markup import escape
from textual.notifications import SeverityLevel

from vibechat.engine.sanitize import sanitize

from .. import outside


def pasted_text(text: str) -> str:
    """A paste as a widget may get it: its line breaks as ``\n`` (CRLF from Windows text and a
    lone CR, what xterm-style terminals and tmux send for a line break in a bracketed paste,
    alike), then sanitised."""
    return sanitize(text.replace("\r\n", "\n").replace("\r", "\n"))


class OutsideTextApp(App[None]):
    async def on_event(self, event: events.Event) -> None:
        """Pasted text comes from outside (the clipboard): sanitised before any widget gets
        it (an ``Input`` or a ``TextArea`` would show its control characters raw)."""
        if isinstance(event, events.Paste) and not event.is_forwarded:
            event.text = pasted_text(event.text)
        await super().on_event(event)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Textual's ``notify`` (``Widget.notify`` calls it too), but the message is plain
        text unless ``markup=True`` (for vibechat's own words only: notifications nearly
        always quote outside text, a model name, a server's error, a title, a path, and
        Textual reads markup by default), and message and title are sanitised and
        bounded (``outside``)."""
        super().notify(
            outside.plain(message),
            title=outside.one_line(title),
            severity=severity,
            timeout=timeout,
            markup=markup,
        )

    def _fatal_error(self) -> None:
        """Textual's crash screen, without the values of local variables: Textual shows
        them (``show_locals=True``), and in vibechat they hold the conversation, a reply, a
        path, an API key. The traceback itself is kept (a bug report needs it)."""
        from rich.traceback import Traceback

        self.bell()
        traceback = Traceback(show_locals=False, width=None, suppress=[rich])
        self._exit_renderables.append(
            Segments(self.console.render(traceback, self.console.options))
        )
        self._close_messages_no_wait()

    def action_help_quit(self) -> None:
        """Textual's hint on how to quit (its markup, the key escaped)."""
        for key, active_binding in self.active_bindings.items():
            if active_binding.binding.action in ("quit", "app.quit"):
                self.notify(
                    f"Press [b]{escape(key)}[/b] to quit the app",
                    title="Do you want to quit?",
                    markup=True,
                )
                return

    @on(events.DeliveryComplete)
    def _screenshot_saved(self, event: events.DeliveryComplete) -> None:
        """The palette's Screenshot: said without markup (Textual's own notification puts
        the path, the current directory's outside name, into markup)."""
        if event.name == "screenshot":
            event.prevent_default()
            self.notify(
                f"Saved screenshot to {event.path}" if event.path else "Saved screenshot",
                title="Screenshot",
            )
