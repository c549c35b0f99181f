"""Reading attachments (engine/attach/reading.py) from real files made here: images Pillow
writes, text files, and the files that must be refused in one line without a hang (a FIFO,
/dev/zero, a folder, a decompression bomb, a truncated image, a binary file)."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from vibechat.engine.attach.reading import (
    MAX_IMAGE_SIDE,
    TEXT_READ_BYTES,
    looks_like_path,
    read_attachment,
)
from vibechat.engine.attach.store import AttachmentError, AttachmentStore
from vibechat.engine.turns.attachments import FILE_TEXT_LIMIT


@pytest.fixture
def store(tmp_path: Path) -> AttachmentStore:
    return AttachmentStore(tmp_path / "kept")


def one_line(exc: pytest.ExceptionInfo[AttachmentError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.strip() == text and ": " in text
    return text


def kept(attachment) -> Image.Image:
    with Image.open(attachment.path) as im:
        im.load()
        return im


def test_png_is_kept_as_png_with_its_size(tmp_path, store):
    path = tmp_path / "photo.png"
    Image.new("RGB", (640, 480), (10, 120, 200)).save(path)
    a = read_attachment(path, store, "image")
    assert (a.kind, a.name, a.mime, a.width, a.height, a.note) == (
        "image",
        "photo.png",
        "image/png",
        640,
        480,
        "",
    )
    assert a.size == os.path.getsize(a.path) and Path(a.path).parent == store.root
    im = kept(a)
    assert (im.format, im.size, im.mode) == ("PNG", (640, 480), "RGB")
    assert im.getpixel((5, 5)) == (10, 120, 200)


def test_a_large_image_is_scaled_to_max_side_with_a_note(tmp_path, store):
    path = tmp_path / "wide.png"
    Image.new("RGB", (3000, 1000), "white").save(path)
    a = read_attachment(path, store)
    assert (a.width, a.height) == (MAX_IMAGE_SIDE, 512)
    assert a.note == "scaled from 3,000×1,000"
    small = read_attachment(path, store, max_side=300)
    assert (small.width, small.height) == (300, 100)


def test_jpeg_exif_rotation_is_applied_and_kept_as_jpeg(tmp_path, store):
    path = tmp_path / "phone.jpg"
    im = Image.new("RGB", (400, 200), (250, 0, 0))
    im.paste((0, 0, 250), (0, 0, 200, 200))  # left half blue, right half red
    exif = im.getexif()
    exif[0x0112] = 6  # turned 90° clockwise to be upright
    im.save(path, exif=exif, quality=95)
    a = read_attachment(path, store, "image")
    assert (a.mime, a.width, a.height, a.note) == ("image/jpeg", 200, 400, "")
    upright = kept(a)
    assert upright.format == "JPEG" and upright.size == (200, 400)
    top, bottom = upright.getpixel((100, 50)), upright.getpixel((100, 350))
    assert top[2] > 200 and top[0] < 50  # the blue half is on top once turned
    assert bottom[0] > 200 and bottom[2] < 50


def test_a_palette_image_with_transparency_becomes_rgba_png(tmp_path, store):
    path = tmp_path / "icon.png"
    im = Image.new("P", (32, 32), 1)
    im.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    im.info["transparency"] = 0
    im.paste(0, (0, 0, 16, 32))
    im.save(path, transparency=0)
    a = read_attachment(path, store)
    out = kept(a)
    assert a.mime == "image/png" and out.mode == "RGBA"
    assert out.getpixel((2, 2))[3] == 0 and out.getpixel((30, 2)) == (255, 255, 255, 255)


def test_an_animated_gif_keeps_its_first_frame(tmp_path, store):
    path = tmp_path / "anim.gif"
    frames = [
        Image.new("RGB", (40, 30), colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255))
    ]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50)
    a = read_attachment(path, store, "image")
    assert (a.mime, a.width, a.height) == ("image/png", 40, 30)
    assert a.note == "first frame of an animation"
    assert kept(a).getpixel((5, 5)) == (255, 0, 0)


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width``×``height`` and holds one row: cheap to write, a bomb to
    decode."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * (width * 3 + 1)))
    )


def test_a_50_megapixel_png_is_refused_before_it_is_decoded(tmp_path, store):
    path = tmp_path / "photo.png"
    path.write_bytes(png_header(8000, 6250))
    with pytest.raises(AttachmentError) as exc:
        read_attachment(path, store, "image")
    assert one_line(exc) == "photo.png is 50.0 megapixels, over the 40 limit: scale it down first"
    assert not store.root.exists() or not any(store.root.iterdir())


def test_pillows_own_bomb_guard_is_one_line_too(tmp_path, store):
    path = tmp_path / "bomb.png"
    path.write_bytes(png_header(20000, 20000))  # 400 MP: over Pillow's own limit, raised in open()
    with pytest.raises(AttachmentError) as exc:
        read_attachment(path, store)
    assert one_line(exc).startswith("bomb.png claims too many pixels")


def test_a_50_megapixel_jpeg_is_decoded_reduced(tmp_path, store, monkeypatch):
    path = tmp_path / "huge.jpg"
    Image.new("L", (8000, 6250), 128).save(path, quality=50)
    decoded: list[tuple[int, int]] = []
    load = Image.Image.load

    def spy(self):  # the size the decoder actually produces
        decoded.append(self.size)
        return load(self)

    monkeypatch.setattr(Image.Image, "load", spy)
    a = read_attachment(path, store, "image")
    assert (a.width, a.height, a.mime) == (MAX_IMAGE_SIDE, 1200, "image/jpeg")
    assert a.note == "scaled from 8,000×6,250"
    # libjpeg's draft mode decoded it at 1/4 scale: the 50-megapixel bitmap was never held.
    assert decoded and max(w * h for w, h in decoded) <= 2000 * 1563


def test_a_truncated_image_is_one_line(tmp_path, store):
    whole = tmp_path / "whole.png"
    Image.effect_noise((300, 300), 64).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(AttachmentError) as exc:
        read_attachment(cut, store, "image")
    assert one_line(exc).startswith("cut.png is truncated or damaged")


def test_not_an_image_given_as_one(tmp_path, store):
    path = tmp_path / "notes.txt"
    path.write_text("just words\n")
    with pytest.raises(AttachmentError) as exc:
        read_attachment(path, store, "image")
    assert one_line(exc).startswith("notes.txt is not an image (PNG, JPEG, GIF, WebP, BMP)")


def test_kind_none_takes_an_image_as_image_and_text_as_file(tmp_path, store):
    image, text = tmp_path / "a.bmp", tmp_path / "a.md"
    Image.new("RGB", (8, 8)).save(image)
    text.write_text("# title\n")
    assert read_attachment(image, store).kind == "image"
    f = read_attachment(text, store)
    assert (f.kind, f.text, f.mime, f.width) == ("file", "# title\n", "text/plain", 0)


def test_a_fifo_is_refused_at_once_without_opening_it(tmp_path, store):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for kind in ("image", "file", None):
        with pytest.raises(AttachmentError) as exc:
            read_attachment(fifo, store, kind)
        assert one_line(exc) == "pipe is a named pipe (FIFO), not a file: attach a regular file"
    # Nobody opened it for reading: a writer that does not block finds no reader.
    with pytest.raises(OSError):
        os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_and_a_link_to_it_are_refused(tmp_path, store):
    link = tmp_path / "zeros.txt"
    link.symlink_to("/dev/zero")
    for path in ("/dev/zero", link):
        with pytest.raises(AttachmentError) as exc:
            read_attachment(path, store, "file")
        assert "is a character device, not a file" in one_line(exc)


def test_a_folder_a_missing_file_and_an_unreadable_one(tmp_path, store):
    with pytest.raises(AttachmentError) as exc:
        read_attachment(tmp_path, store)
    assert one_line(exc).endswith("is a directory, not a file: attach a file inside it")
    with pytest.raises(AttachmentError) as exc:
        read_attachment(tmp_path / "gone.png", store)
    assert one_line(exc).endswith("gone.png: no such file: check the path")
    if os.geteuid() != 0:
        locked = tmp_path / "locked.txt"
        locked.write_text("secret")
        locked.chmod(0)
        with pytest.raises(AttachmentError) as exc:
            read_attachment(locked, store, "file")
        assert "permission denied" in one_line(exc)


def test_a_binary_file_given_as_a_file_is_refused(tmp_path, store):
    path = tmp_path / "notes.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(AttachmentError) as exc:
        read_attachment(path, store, "file")
    assert one_line(exc).startswith("notes.bin looks binary:")
    image = tmp_path / "pic.png"
    Image.new("RGB", (4, 4)).save(image)
    with pytest.raises(AttachmentError):
        read_attachment(image, store, "file")  # a PNG as a text file: binary too
    assert not store.root.exists() or not any(store.root.iterdir())


def test_a_text_file_over_the_limit_is_cut_with_a_note_and_read_bounded(
    tmp_path, store, monkeypatch
):
    path = tmp_path / "long.txt"
    path.write_text("é" * (FILE_TEXT_LIMIT + 10) + "x" * TEXT_READ_BYTES * 2)
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd, n):
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting_read)
    a = read_attachment(path, store, "file")
    assert len(a.text) == FILE_TEXT_LIMIT and a.text == "é" * FILE_TEXT_LIMIT
    assert a.note == f"cut at {FILE_TEXT_LIMIT:,} characters"
    assert sum(reads) <= TEXT_READ_BYTES + 8192  # never the whole file
    assert Path(a.path).read_text(encoding="utf-8") == a.text


def test_a_text_file_with_escapes_is_sanitised_for_screen_and_model(tmp_path, store):
    path = tmp_path / "log.txt"
    path.write_bytes("\ufeffok \x1b[31mred\x1b[0m \x1b]52;c;aGk=\x07done\r\nnext line é\n".encode())
    a = read_attachment(path, store, "file")
    assert a.text == "ok red done\nnext line é\n"
    assert "\x1b" not in Path(a.path).read_text(encoding="utf-8")


def test_latin1_text_is_read_with_a_note(tmp_path, store):
    path = tmp_path / "old.txt"
    path.write_bytes("café crème\n".encode("latin-1"))
    a = read_attachment(path, store, "file")
    assert (a.text, a.note) == ("café crème\n", "read as Latin-1")


def test_the_name_is_the_sanitised_basename(tmp_path, store):
    path = tmp_path / "bad\x1b]0;title\x07name.txt"
    path.write_text("x")
    a = read_attachment(path, store)
    assert a.name == "badname.txt"


def test_looks_like_path_takes_what_terminals_paste(tmp_path, monkeypatch):
    spaced = tmp_path / "My Photo (1).png"
    spaced.write_bytes(b"x")
    plain = tmp_path / "a.txt"
    plain.write_text("x")
    assert looks_like_path(str(plain)) == plain
    assert looks_like_path(f"  '{spaced}'\n") == spaced
    assert looks_like_path(f'"{spaced}"') == spaced
    assert (
        looks_like_path(str(spaced).replace(" ", "\\ ").replace("(", "\\(").replace(")", "\\)"))
        == spaced
    )
    assert looks_like_path("file://" + str(spaced).replace(" ", "%20")) == spaced
    monkeypatch.setenv("HOME", str(tmp_path))
    assert looks_like_path("~/a.txt") == plain
    for not_one in (
        "a.txt",
        "hello there",
        f"{plain}\n{plain}",
        str(tmp_path),
        str(tmp_path / "gone.png"),
        "file://elsewhere/etc/passwd",
        "",
        "x" * 5000,
    ):
        assert looks_like_path(not_one) is None, not_one
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert looks_like_path(str(fifo)) is None


def test_a_file_that_is_neither_text_nor_a_known_image(tmp_path, store):
    path = tmp_path / "scan.tif"
    Image.new("F", (20, 20), 0.5).save(path)
    with pytest.raises(AttachmentError) as exc:
        read_attachment(path, store)
    assert one_line(exc).startswith(
        "scan.tif is neither text nor an image vibechat reads (PNG, JPEG, GIF, WebP, BMP)"
    )


def test_utf16_with_its_mark_is_text(tmp_path, store):
    path = tmp_path / "windows.txt"
    path.write_bytes("\ufeffhello wörld\r\n".encode("utf-16-le"))
    assert read_attachment(path, store, "file").text == "hello wörld\n"
