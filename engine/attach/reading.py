"""Reading a file the user attaches: an image for a vision model, or a text file to inline.

Everything here comes from outside: the path may name a FIFO that never ends, ``/dev/zero``,
a folder, a socket, a 50-megapixel PNG made to exhaust memory (a decompression bomb), a
truncated download, or a binary file given as text. Each is one line (``AttachmentError``:
the problem and the fix), never a hang and never a traceback:

- the path is checked with ``stat`` before it is opened (a FIFO is never opened, so no writer
  waiting on it is woken), then opened without blocking and checked again on the descriptor;
- an image's size is read from its header before any pixel is decoded: over
  ``MAX_IMAGE_PIXELS`` it is refused, except a JPEG, which libjpeg decodes at 1/2, 1/4 or 1/8
  scale (``Image.draft``) so that its full bitmap is never held; the image is then turned
  upright (EXIF), made RGB(A), scaled so that its longest side is at most ``max_side``, and
  kept as PNG (alpha, or a lossless source) or JPEG (a lossy source);
- a text file is read up to a bound of bytes (never to its end: /dev/zero has none), decoded
  as UTF-8 (a byte-order mark allowed), UTF-16 with its mark, or else Latin-1 when it is
  plainly text, refused when it looks binary (a NUL byte, or many control characters), cut at
  ``FILE_TEXT_LIMIT`` characters,
  and sanitised: terminal escapes are removed from the text the chat shows AND the model is
  given, one text for both (a model has no use for a raw ESC, and its reply may echo it).

What is kept (the scaled image's bytes, the file's text as UTF-8) goes to the
``AttachmentStore``, which names it by its digest.

Imports inside functions are deliberate: Pillow loads only when an image is read (start-up
time).
"""

from __future__ import annotations

import io
import os
import stat
import struct
import urllib.parse
import warnings
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from ..files import NotARegularFile, kind_of, open_regular
from ..sanitize import sanitize
from ..turns.attachments import FILE_TEXT_LIMIT, Attachment
from .store import AttachmentError, AttachmentStore

if TYPE_CHECKING:
    from PIL import Image as PILImage

__all__ = [
    "MAX_IMAGE_BYTES",
    "MAX_IMAGE_PIXELS",
    "MAX_IMAGE_SIDE",
    "looks_like_path",
    "read_attachment",
]

# An image's longest side as kept: what vision projectors take (Gemma 3: 896; Qwen2-VL tiles
# larger) with room to spare, and what a data: URI to a server can carry comfortably.
MAX_IMAGE_SIDE = 1536
# An image whose header claims more pixels than this is refused before it is decoded (a JPEG
# is decoded reduced instead): 40 megapixels is more than any phone camera, and its RGBA
# bitmap (160 MB) is the most reading will ever hold.
MAX_IMAGE_PIXELS = 40_000_000
# An image file larger than this is refused unread (a 40-megapixel PNG is rarely over 100 MB).
MAX_IMAGE_BYTES = 128 * 1024 * 1024
# A text file is read no further than this many bytes: enough for FILE_TEXT_LIMIT characters of
# UTF-8 (4 bytes at most each) and the start of the next, so a cut is known to be one.
TEXT_READ_BYTES = FILE_TEXT_LIMIT * 4 + 4
# The image formats taken (Pillow's names) and how the user is told them.
IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")
_FORMATS_WORDS = "PNG, JPEG, GIF, WebP, BMP"
# A text whose share of control characters (besides tab, newlines, form feed, backspace and
# ESC, which real text files and logs hold) is above this is binary.
_BINARY_SHARE = 0.05
_JPEG_QUALITY = 90
_EXIF_ORIENTATION_TAG = 0x0112
_LONGEST_PATH = 4096


def read_attachment(
    path: str | Path,
    store: AttachmentStore,
    kind: Literal["image", "file"] | None = None,
    *,
    max_side: int = MAX_IMAGE_SIDE,
) -> Attachment:
    """Read, check and keep the file at ``path`` as an attachment: an image (``kind="image"``),
    a text file (``"file"``), or whichever it is (``None``: an image if Pillow knows it as one).

    Raises ``AttachmentError`` with one line naming the problem and the fix."""
    path = Path(path).expanduser()
    name = display_name(path)
    fp = _open_regular(path, name)
    with fp:
        if kind == "file":
            return _read_text(fp, name, store)
        image = _identify(fp, name, must=kind == "image")
        if image is None:
            fp.seek(0)
            return _read_text(fp, name, store, guessed=True)
        with image:
            return _keep_image(image, fp, name, store, max_side)


def display_name(path: Path) -> str:
    """The file's own name, no folders, safe for a terminal and a prompt (bounded)."""
    raw = path.name or str(path)
    name = sanitize(raw).replace("\n", " ").replace("\t", " ").strip()
    return (name[:120] + "…" if len(name) > 120 else name) or "file"


def _open_regular(path: Path, name: str) -> IO[bytes]:
    """Open ``path`` for reading, or say in one line why not. A FIFO, a device, a folder or a
    socket is refused on ``stat`` before any open; the open itself does not block and is
    checked again on its descriptor (the path may have been swapped in between)."""
    shown = sanitize(str(path))[:300]
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise AttachmentError(f"{shown}: no such file: check the path") from None
    except PermissionError:
        raise AttachmentError(
            f"{shown} cannot be read (permission denied): check its permissions"
        ) from None
    except (OSError, ValueError) as exc:
        raise AttachmentError(f"{shown} cannot be read ({_reason(exc)}): check the path") from None
    _refuse_kind(kind_of(mode), name)
    try:
        return open_regular(path)
    except NotARegularFile as exc:
        # Swapped for one since the stat.
        _refuse_kind(exc.kind, name)
        raise
    except PermissionError:
        raise AttachmentError(
            f"{shown} cannot be read (permission denied): check its permissions"
        ) from None
    except OSError as exc:
        raise AttachmentError(f"{shown} cannot be read ({_reason(exc)}): check the path") from None


def _refuse_kind(kind: str | None, name: str) -> None:
    """An attachment that is not a regular file (``kind``, from ``kind_of``; None: it is one)
    refused in one line."""
    if kind is None:
        return
    if kind == "a directory":
        raise AttachmentError(f"{name} is a directory, not a file: attach a file inside it")
    raise AttachmentError(f"{name} is {kind}, not a file: attach a regular file")


def _reason(exc: BaseException) -> str:
    """What went wrong, in a few words from the exception (outside text: sanitised, one line,
    bounded)."""
    if isinstance(exc, OSError) and exc.strerror:
        words = exc.strerror
    else:
        words = str(exc) or type(exc).__name__
    return " ".join(sanitize(words).split())[:120]


# --- images -------------------------------------------------------------------------------


def _identify(fp: IO[bytes], name: str, *, must: bool) -> PILImage.Image | None:
    """The image in ``fp``, its header read and nothing decoded; None when it is no image and
    ``must`` is False. Pillow's own decompression-bomb guard is one line too."""
    from PIL import Image, UnidentifiedImageError

    size = os.fstat(fp.fileno()).st_size
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(fp, formats=IMAGE_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise AttachmentError(
            f"{name} claims too many pixels to decode safely (a decompression bomb?): "
            "scale it down first"
        ) from None
    except UnidentifiedImageError:
        if must:
            raise AttachmentError(
                f"{name} is not an image ({_FORMATS_WORDS}): attach text files with /file"
            ) from None
        return None
    except (OSError, SyntaxError, ValueError, EOFError, MemoryError) as exc:
        if must:
            raise AttachmentError(
                f"{name} is a damaged image ({_reason(exc)}): save it again or attach another"
            ) from None
        return None
    if size > MAX_IMAGE_BYTES:
        image.close()
        raise AttachmentError(
            f"{name} is {size / 1e6:,.0f} MB, over the {MAX_IMAGE_BYTES // 1_000_000} MB "
            "limit for an image: scale it down first"
        )
    return image


def _keep_image(
    image: PILImage.Image, fp: IO[bytes], name: str, store: AttachmentStore, max_side: int
) -> Attachment:
    from PIL import Image, ImageOps

    width, height = image.size
    source_format = image.format or ""
    # is_animated looks for a second frame only (n_frames would walk every frame of a GIF).
    animated = bool(getattr(image, "is_animated", False))
    if width < 1 or height < 1:
        raise AttachmentError(f"{name} has no pixels ({width}×{height}): attach another image")
    try:
        if source_format == "JPEG":
            # libjpeg decodes at 1/2, 1/4 or 1/8 scale: no larger than the kept size needs.
            scale = max(width, height) / max_side
            if scale > 1:
                image.draft(None, (max(1, int(width / scale)), max(1, int(height / scale))))
        if image.width * image.height > MAX_IMAGE_PIXELS:
            raise AttachmentError(
                f"{name} is {width * height / 1e6:.1f} megapixels, over the "
                f"{MAX_IMAGE_PIXELS // 1_000_000} limit: scale it down first"
            )
        if animated:
            image.seek(0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image.load()
        # EXIF orientations 5 to 8 turn the picture a quarter: its upright size is the other way.
        turned = image.getexif().get(_EXIF_ORIENTATION_TAG, 1) in (5, 6, 7, 8)
        full_w, full_h = (height, width) if turned else (width, height)
        upright = ImageOps.exif_transpose(image)
        converted = _rgb(upright)
        if max(converted.size) > max_side:
            factor = max_side / max(converted.size)
            target = (
                max(1, round(converted.width * factor)),
                max(1, round(converted.height * factor)),
            )
            converted = converted.resize(target, Image.Resampling.LANCZOS)
        lossless = converted.mode == "RGBA" or source_format not in ("JPEG", "WEBP")
        out = io.BytesIO()
        if lossless:
            converted.save(out, format="PNG", optimize=False)
            mime, ext = "image/png", "png"
        else:
            converted.save(out, format="JPEG", quality=_JPEG_QUALITY)
            mime, ext = "image/jpeg", "jpg"
    except AttachmentError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise AttachmentError(
            f"{name} claims too many pixels to decode safely (a decompression bomb?): "
            "scale it down first"
        ) from None
    except MemoryError:
        raise AttachmentError(
            f"{name} is too large to decode in the memory free: scale it down first"
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error) as exc:
        raise AttachmentError(
            f"{name} is truncated or damaged ({_reason(exc)}): save it again or attach another"
        ) from None
    notes = []
    if converted.size != (full_w, full_h):
        notes.append(f"scaled from {full_w:,}×{full_h:,}")
    if animated:
        notes.append("first frame of an animation")
    data = out.getvalue()
    digest, kept = store.put(data, ext)
    return Attachment(
        kind="image",
        name=name,
        digest=digest,
        mime=mime,
        size=len(data),
        path=str(kept),
        width=converted.width,
        height=converted.height,
        note="; ".join(notes),
    )


def _rgb(image: PILImage.Image) -> PILImage.Image:
    """The image as RGB, or RGBA when it has transparency (a palette's too)."""
    has_alpha = image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in image.info
    wanted = "RGBA" if has_alpha else "RGB"
    if image.mode == wanted:
        return image
    if image.mode == "P" and has_alpha:
        return image.convert("RGBA")
    return image.convert(wanted)


# --- text files ---------------------------------------------------------------------------


def _read_text(
    fp: IO[bytes], name: str, store: AttachmentStore, *, guessed: bool = False
) -> Attachment:
    """A text file as kept; ``guessed``: the caller did not say which kind (no image was found)."""
    try:
        data = fp.read(TEXT_READ_BYTES)
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read ({_reason(exc)}): check the file") from None
    more = len(data) >= TEXT_READ_BYTES
    text, latin = _decode(data, more, name, guessed)
    text = sanitize(text.replace("\r\n", "\n").replace("\r", "\n"))
    notes = []
    if latin:
        notes.append("read as Latin-1")
    if more or len(text) > FILE_TEXT_LIMIT:
        text = text[:FILE_TEXT_LIMIT]
        notes.append(f"cut at {FILE_TEXT_LIMIT:,} characters")
    kept = text.encode("utf-8")
    digest, path = store.put(kept, "txt")
    return Attachment(
        kind="file",
        name=name,
        digest=digest,
        mime="text/plain",
        size=len(kept),
        path=str(path),
        text=text,
        note="; ".join(notes),
    )


def _decode(data: bytes, cut: bool, name: str, guessed: bool) -> tuple[str, bool]:
    """The bytes as text, and whether they were read as Latin-1; ``AttachmentError`` when they
    look binary. ``cut``: the read stopped at its bound, so the last character may be split."""
    if guessed:
        binary = AttachmentError(
            f"{name} is neither text nor an image vibechat reads ({_FORMATS_WORDS}): "
            "attach a text file or one of those images"
        )
    else:
        binary = AttachmentError(
            f"{name} looks binary: only text files are attached as files; "
            "attach an image with /image"
        )
    # UTF-16 with its byte-order mark (Windows' "Unicode").
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        even = data[: len(data) // 2 * 2]
        text = even.decode("utf-16", errors="replace")
        if "\x00" in text:
            raise binary
        return text, False
    if b"\x00" in data:
        raise binary
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
        latin = False
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            text, latin = data[: exc.start].decode("utf-8"), False
        else:
            text, latin = data.decode("latin-1"), True
    controls = sum(
        1 for ch in text if (ch < " " and ch not in "\t\n\r\f\b\x1b") or "\x7f" <= ch <= "\x9f"
    )
    if text and controls / len(text) > _BINARY_SHARE:
        raise binary
    return text, latin


# --- a pasted path ------------------------------------------------------------------------


def looks_like_path(text: str) -> Path | None:
    """The file a pasted text names, when it is exactly one existing regular file's absolute path
    as terminals paste a dropped file: quoted ('…' or "…"), a ``file://`` URI, ``~/…``, or with
    backslash-escaped spaces and specials (``My\\ Photo.png``). None for anything else (a
    prompt that merely mentions a path, several lines, a folder, a missing file)."""
    candidate = text.strip()
    if not candidate or len(candidate) > _LONGEST_PATH or "\n" in candidate or "\x00" in candidate:
        return None
    if len(candidate) >= 2 and candidate[0] == candidate[-1] and candidate[0] in "'\"":
        candidate = candidate[1:-1]
    if candidate.startswith("file://"):
        parsed = urllib.parse.urlsplit(candidate)
        if parsed.netloc not in ("", "localhost"):
            return None
        candidate = urllib.parse.unquote(parsed.path)
    elif os.sep == "/" and "\\" in candidate:
        candidate = _unescape(candidate)
    if not candidate:
        return None
    path = Path(candidate).expanduser()
    if not path.is_absolute():
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except (OSError, ValueError):
        return None
    return path


def _unescape(text: str) -> str:
    """A shell-escaped path as terminals paste it: each ``\\x`` is ``x``."""
    out = []
    escaped = False
    for ch in text:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append(ch)
    return "".join(out)
