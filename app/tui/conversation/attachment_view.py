"""A prompt's attachments in the chat: under the user's text, each image as a small thumbnail
with its label (``photo.png · 640×480 · 212 KB``), each text file as a block folded to its
label line (Enter on the focused block, or a click, shows its text; again folds it).

The thumbnail is textual-image's widget: Kitty's graphics protocol or Sixel where the terminal
has them, coloured half blocks otherwise. textual-image learns what the terminal can do by
asking it (escape sequences, answered on stdin) when it is first imported, which only works
before Textual starts reading stdin, and costs the import (~0.2 s) and the answers' wait before
the first frame. So the chat asks only a terminal whose environment says it draws graphics
(``graphics_terminal``: Kitty, WezTerm, Ghostty, iTerm2, foot, Konsole, ...), from ``run_tui``
before the screen opens (``probe_terminal``); elsewhere nothing is asked, nothing imported before
the first frame, and a thumbnail is drawn in half blocks. A headless app (the tests) always gets
the Unicode renderer, whatever the process's stdout is, so what a test sees never depends on
where it ran.

The picture is decoded from the kept copy (engine/attach/store.py) in a thread, scaled down to
the few rows it is shown in, then mounted: a long conversation reopened with many images never
decodes them on the event loop. An image that cannot be shown (its copy is missing, or does
not decode) is its label and why, as text. Names and a file's text come from outside: sanitised
and shown as ``Content`` (``outside``), never markup.

Imports inside functions are deliberate: Pillow and textual-image load only when an image is
shown (start-up time).
"""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static

from vibechat.engine.turns.attachments import Attachment

from .. import outside
from ..one_layout import SizedByLayout
from .foldable import FoldableBlock
from .messages import ChatMessageWidget, MessageText

if TYPE_CHECKING:
    from PIL import Image as PILImage

log = logging.getLogger("vibechat.tui")
# A thumbnail's height in rows: a glance, not the whole screen.
THUMB_ROWS = 8
# The decoded picture's longest side at most (more than any terminal shows in 8 rows).
THUMB_PIXELS = 320


# Terminals that draw pictures (Kitty's protocol or Sixel), as their environment names them.
_GRAPHICS_TERM_PROGRAMS = (
    "wezterm",
    "ghostty",
    "iterm.app",
    "mlterm",
    "contour",
    "rio",
    "warpterminal",
)
_GRAPHICS_TERMS = ("kitty", "foot", "mlterm", "contour", "wezterm", "ghostty", "yaft", "mintty")
_GRAPHICS_VARIABLES = (
    "KITTY_WINDOW_ID",
    "WEZTERM_EXECUTABLE",
    "GHOSTTY_RESOURCES_DIR",
    "KONSOLE_VERSION",
)
# textual-image asked the terminal (probe_terminal): its own choice of renderer stands.
_probed = False


def graphics_terminal(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment says the terminal draws pictures (then it is worth asking it)."""
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in _GRAPHICS_VARIABLES):
        return True
    term, program = env.get("TERM", "").lower(), env.get("TERM_PROGRAM", "").lower()
    return program in _GRAPHICS_TERM_PROGRAMS or any(word in term for word in _GRAPHICS_TERMS)


def probe_terminal(environ: Mapping[str, str] | None = None) -> bool:
    """Let textual-image ask a graphics terminal what it can draw (Sixel or Kitty's protocol):
    before the screen opens, once; True when it asked. Any other terminal is not asked (its
    thumbnails are half blocks) and the chat's first frame does not wait for the import. A
    terminal that does not answer costs textual-image's timeout; an error leaves half blocks."""
    global _probed
    if not graphics_terminal(environ):
        return False
    try:
        import textual_image.widget  # noqa: F401 - the import asks
    except Exception:
        # A terminal that answers oddly: thumbnails as half blocks.
        log.debug("textual-image could not probe the terminal", exc_info=True)
        return False
    _probed = True
    return True


def _quiet_import() -> Any:
    """textual-image's widgets, imported without asking the terminal anything: its import asks
    whenever stdout is a terminal, and once Textual reads stdin the answers would reach the chat
    as keys. stdout is shown as no terminal for the import's length (the chat draws on stderr)."""

    if "textual_image.widget" in sys.modules:
        import textual_image.widget as tiw

        return tiw
    real = sys.__stdout__
    try:
        sys.__stdout__ = io.StringIO()  # type: ignore[assignment,misc]
        import textual_image.widget as tiw
    finally:
        sys.__stdout__ = real  # type: ignore[misc]
    return tiw


def _image_widget_class(headless: bool) -> Any:
    """textual-image's widget for this terminal: the one it chose after asking (probe_terminal),
    else half blocks; the Unicode one for a headless app."""
    tiw = _quiet_import()
    if headless:
        return tiw.UnicodeImage
    return tiw.Image if _probed else tiw.HalfcellImage


def load_thumbnail(path: str) -> PILImage.Image:
    """The kept copy decoded and scaled to a thumbnail (blocking: run in a thread). Raises
    OSError or ValueError (Pillow's) when it is missing or does not decode."""
    from PIL import Image

    with Image.open(path) as image:
        image.draft("RGB", (THUMB_PIXELS, THUMB_PIXELS))  # a JPEG decodes reduced
        image.thumbnail((THUMB_PIXELS, THUMB_PIXELS))
        return image.convert("RGBA" if "A" in image.getbands() else "RGB")


class ImageAttachment(SizedByLayout, Vertical):
    """An image under a prompt: its label, then its thumbnail once decoded (or why not)."""

    DEFAULT_CSS = f"""
    ImageAttachment {{
        height: auto;
        margin: 1 0 0 0;
    }}
    ImageAttachment > .attachment--label {{
        height: auto;
        color: $text-muted;
    }}
    ImageAttachment > .attachment--thumb {{
        height: {THUMB_ROWS};
        width: auto;
        max-width: 100%;
    }}
    """

    class Decoded(Message):
        """The thumbnail's picture (from the decoding thread), or why there is none."""

        def __init__(self, picture: PILImage.Image | None, problem: str = "") -> None:
            super().__init__()
            self.picture = picture
            self.problem = problem

    def __init__(self, attachment: Attachment) -> None:
        super().__init__(classes="attachment")
        self.attachment = attachment
        # The thumbnail is on screen.
        self.shown = False
        # Why it cannot be shown, once known.
        self.problem = ""

    def compose(self) -> ComposeResult:
        a = self.attachment
        # A missing copy: its note says so.
        problem = a.note if not a.path else ""
        yield MessageText(self._label(problem), classes="attachment--label")

    def on_mount(self) -> None:
        if self.attachment.path:
            self.run_worker(self._decode, thread=True, group="thumbnail", exit_on_error=False)
        else:
            self.problem = self.attachment.note or "its kept copy is missing"

    def _label(self, problem: str = "") -> Any:
        text = "🖼 " + self.attachment.label()
        if problem:
            text += f" (not shown: {problem})"
        return outside.line(text, limit=None)

    def _decode(self) -> None:
        """In a thread: decode, then mount the thumbnail on the event loop."""
        try:
            picture = load_thumbnail(self.attachment.path)
        except FileNotFoundError:  # deleted since the conversation opened
            self.post_message(self.Decoded(None, "its kept copy is missing"))
            return
        except (OSError, ValueError, MemoryError) as exc:
            # Missing since, truncated, not an image.
            reason = outside.one_line(str(exc) or type(exc).__name__, limit=120)
            self.post_message(self.Decoded(None, reason))
            return
        except Exception as exc:  # noqa: BLE001 - Pillow raises more than it documents
            self.post_message(
                self.Decoded(None, outside.one_line(f"{type(exc).__name__}: {exc}", limit=120))
            )
            return
        self.post_message(self.Decoded(picture))

    async def on_image_attachment_decoded(self, message: Decoded) -> None:
        message.stop()
        if message.picture is None:
            self._failed(message.problem)
            return
        picture = message.picture
        try:
            widget = _image_widget_class(self.app.is_headless)(picture, classes="attachment--thumb")
        except Exception as exc:  # noqa: BLE001 - the terminal's renderer refused it
            self._failed(outside.one_line(f"{type(exc).__name__}: {exc}", limit=120))
            return
        await self.mount(widget)
        self.shown = True

    def _failed(self, reason: str) -> None:
        self.problem = reason
        if self.is_attached:
            self.query_one(".attachment--label", Static).update(self._label(reason))


class FileAttachment(FoldableBlock):
    """A text file under a prompt, folded to its label line; Enter or a click shows its text
    (plain, never markup) and folds it again."""

    DEFAULT_CSS = """
    FileAttachment {
        margin: 1 0 0 0;
    }
    """
    BINDINGS = [
        Binding("enter", "toggle_text", "Show or fold the file", id="attachment.toggle", show=False)
    ]

    def __init__(self, attachment: Attachment) -> None:
        super().__init__(classes="attachment")
        self.attachment = attachment

    def compose(self) -> ComposeResult:
        yield MessageText(self._header(), classes="attachment--label fold--header")
        yield MessageText(outside.block("", limit=None), classes="attachment--text fold--body")

    def _header(self) -> Any:
        a = self.attachment
        lines = a.text.count("\n") + 1 if a.text else 0
        mark = "▾" if self.expanded else "▸"
        more = "" if self.expanded else f"  ({lines:,} lines · Enter shows it)" if lines else ""
        note = f" · {a.note}" if a.note else ""
        return outside.line(f"{mark} 📄 {a.label()}{note}{more}", limit=None)

    def action_toggle_text(self) -> None:
        self.toggle()

    def folded_or_opened(self) -> None:
        # The text is drawn when first shown: a folded 100,000-character file costs nothing.
        body = self.query_one(".attachment--text", Static)
        body.update(outside.block(self.attachment.text if self.expanded else "", limit=None))
        self.query_one(".attachment--label", Static).update(self._header())

    def on_click(self, event: Any) -> None:
        event.stop()
        self.action_toggle_text()


def attachment_widgets(attachments: tuple[Attachment, ...]) -> list[Vertical]:
    return [ImageAttachment(a) if a.is_image else FileAttachment(a) for a in attachments]


class UserMessage(ChatMessageWidget):
    """A prompt and what it carries: its text (none for a prompt that is only attachments),
    then each attachment."""

    def __init__(
        self, text: str = "", attachments: tuple[Attachment, ...] = (), **kwargs: Any
    ) -> None:
        super().__init__("user", text, **kwargs)
        self.attachments = tuple(attachments)

    def has_blocks(self) -> bool:
        """With attachments, a column of widgets; without, drawn by itself (``flat``)."""
        return bool(self.attachments) or super().has_blocks()

    def compose_body(self) -> ComposeResult:
        if self.text or not self.attachments:
            yield from super().compose_body()
        yield from attachment_widgets(self.attachments)


def thumbnails_loaded(widget: Any) -> bool:
    """Whether every image under ``widget`` is shown or known not to be (for waits)."""
    return all(i.shown or i.problem for i in widget.query(ImageAttachment))


__all__ = [
    "FileAttachment",
    "ImageAttachment",
    "UserMessage",
    "attachment_widgets",
    "probe_terminal",
    "thumbnails_loaded",
]
