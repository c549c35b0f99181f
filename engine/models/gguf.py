"""Check a model file before llama.cpp sees it, and read its GGUF metadata.

Malformed GGUF files have crashed llama.cpp many times, and an ``abort()`` inside
it cannot be caught from Python. So before loading we parse the header, every
metadata entry and every tensor description ourselves, with every count and
length bounded by the file size, and check the tensor data really is there.
Common impostors (empty file, Git LFS pointer, HTML page, safetensors, zip,
legacy GGML) get a one-line message saying what the file is and what to do.

The header is untrusted too: what is not kept is skipped without being built (long
arrays, arrays of arrays, strings over ``MAX_STRING`` bytes, keys over ``MAX_KEY``),
every count is checked against the bytes left in the file before anything loops over
it, and the strings meant for people (``name``, ``architecture``) come out sanitised,
on one line and bounded (``MAX_DISPLAY`` characters).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from ..files import kind_of
from ..sanitize import sanitize
from ..settings.refs import quant_from_filename

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_KV = 1_000_000
MAX_TENSORS = 1_000_000
MAX_DIMS = 8
# Metadata arrays longer than this are not kept in memory (vocabularies, merges):
# only their length is recorded.
KEEP_ARRAY_MAX = 64
# Bytes of a metadata string kept (chat templates are tens of KB); a longer one is skipped.
MAX_STRING = 1 << 20
# Bytes of a metadata key; an entry with a longer one is skipped.
MAX_KEY = 1 << 16
MAX_DISPLAY = 200  # characters of a name shown to people
# Metadata llama.cpp trusts and asserts on (a GGML_ASSERT aborts the process): refused here.
MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS
# 134M tokens: ten times the longest context a model claims today.
MAX_CONTEXT_LENGTH = 1 << 27

# GGUF metadata value types: (struct format, size)
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
_ITEM_SIZES = {vtype: n for vtype, (_fmt, n) in _SCALARS.items()}
# The length before each string.
_U64 = struct.Struct("<Q")

# ggml tensor types: (elements per block, bytes per block)
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 36),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
}

# llama_ftype values stored in general.file_type
FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}


@dataclass
class GGUFInfo:
    """What the header of a valid GGUF file says."""

    path: Path
    version: int
    file_size: int
    tensor_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    # Key: byte length, of the strings over MAX_STRING.
    skipped_strings: dict[str, int] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return _display(self.metadata.get("general.architecture"), 64) or "unknown"

    @property
    def name(self) -> str:
        return _display(self.metadata.get("general.name")) or _display(self.path.stem) or "model"

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def block_count(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.block_count")
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) and value.strip() else None

    @property
    def quantization(self) -> str:
        file_type = self.metadata.get("general.file_type")
        if isinstance(file_type, int) and file_type in FILE_TYPES:
            return FILE_TYPES[file_type]
        return quant_from_filename(self.path.name) or "unknown"


def _display(value: Any, limit: int = MAX_DISPLAY) -> str:
    """A metadata string as people may see it: sanitised, printable, one line, at most
    ``limit`` characters ('' for anything but a string)."""
    if not isinstance(value, str):
        return ""
    text = " ".join(sanitize(value[: limit * 4]).split())
    # Format characters too (bidi overrides, zero-width): not in a name.
    if not text.isprintable():
        text = "".join(ch for ch in text if ch.isprintable())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def header_quant(path: Path) -> str:
    """The quantization a file's header states ("?" when it cannot be read)."""
    try:
        return inspect_gguf(path).quantization
    except ModelFileError:
        return "?"


def _sniff_impostor(path: Path, head: bytes, size: int) -> str:
    """Describe a non-GGUF file in words a user can act on."""
    where = str(path)
    text = head.lstrip().lower()
    if text.startswith(b"version https://git-lfs"):
        return (
            f"{where} is a Git LFS pointer, not the model itself: run 'git lfs pull' in its "
            "repository, or download the .gguf file directly."
        )
    if text.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml")):
        return (
            f"{where} is an HTML page, not a model (a web page was saved instead of the file): "
            "download the file itself, e.g. with 'vibechat models pull'."
        )
    if head[:4] == b"PK\x03\x04":
        return (
            f"{where} is a zip archive (a PyTorch checkpoint?), not a GGUF model: "
            "use a GGUF build of the model."
        )
    if head[:4] in (b"lmgg", b"fmgg", b"tjgg", b"ggml", b"ggjt", b"ggmf"):
        return (
            f"{where} is a legacy GGML file: convert it to GGUF with llama.cpp's "
            "convert scripts, or download a GGUF build."
        )
    if len(head) >= 9:
        (header_len,) = struct.unpack_from("<Q", head, 0)
        if 2 <= header_len <= size - 8 and head[8:9] == b"{":
            return (
                f"{where} is a safetensors file, not GGUF: vibechat runs GGUF models; download a "
                "GGUF build of the model or convert it with llama.cpp's convert_hf_to_gguf.py."
            )
    if text.startswith((b"{", b"[")):
        return f"{where} is a JSON file, not a GGUF model: pass the .gguf file instead."
    return (
        f"{where} is not a GGUF model (it does not start with the GGUF signature): "
        "pass a .gguf file."
    )


class _Reader:
    """Bounded little-endian reader over a memory map."""

    def __init__(self, buf: mmap.mmap | bytes, path: Path) -> None:
        self.buf = buf
        self.pos = 0
        self.size = len(buf)
        self.path = path

    def truncated(self) -> ModelFileError:
        return ModelFileError(
            f"{self.path} is a truncated or corrupt GGUF file (its header runs past the end of the "
            f"{self.size:,}-byte file): download it again."
        )

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > self.size:
            raise self.truncated()
        start = self.pos
        self.pos += n
        return start

    def scalar(self, fmt: str, n: int) -> Any:
        start = self.take(n)
        return struct.unpack_from(fmt, self.buf, start)[0]

    def u32(self) -> int:
        return self.scalar("<I", 4)

    def u64(self) -> int:
        return self.scalar("<Q", 8)

    def string(self, keep: bool = True, limit: int = MAX_STRING) -> str | None:
        """A string; None when not kept (``keep`` false, or longer than ``limit`` bytes)."""
        length = self.u64()
        start = self.take(length)
        if not keep or length > limit:
            return None
        return bytes(self.buf[start : start + length]).decode("utf-8", errors="replace")

    def _count(self, count: int, item_size: int) -> int:
        """``count`` items of at least ``item_size`` bytes each: it must fit in the bytes left."""
        if count * item_size > self.size - self.pos:
            raise self.truncated()
        return count

    def value(self, vtype: int, depth: int = 0) -> tuple[Any, int | None]:
        """Read one metadata value; returns (value, array length or None). Long arrays
        (over ``KEEP_ARRAY_MAX`` items), the arrays inside them and strings over
        ``MAX_STRING`` bytes are skipped, not built: the value is None."""
        if vtype in _SCALARS:
            fmt, n = _SCALARS[vtype]
            return self.scalar(fmt, n), None
        if vtype == _STRING:
            return self.string(), None
        if vtype == _ARRAY and depth < 2:
            item_type = self.u32()
            count = self.u64()
            keep = count <= KEEP_ARRAY_MAX
            if item_type in _SCALARS:
                item_size = _SCALARS[item_type][1]
                start = self.take(self._count(count, item_size) * item_size)
                if keep:
                    fmt = "<" + _SCALARS[item_type][0][1] * count
                    return list(struct.unpack_from(fmt, self.buf, start)), count
                return None, count
            if item_type == _STRING:
                self._count(count, 8)
                if keep:
                    return [self.string() for _ in range(count)], count
                self._skip_strings(count)
                return None, count
            # An array of arrays, one level deep at most (llama.cpp reads none).
            if item_type == _ARRAY and depth == 0:
                self._count(count, 12)
                if keep:
                    return [self.value(item_type, depth + 1)[0] for _ in range(count)], count
                self._skip_arrays(count)
                return None, count
            vtype = item_type
        raise ModelFileError(
            f"{self.path} is a corrupt GGUF file (unknown metadata type {vtype}): "
            "download it again."
        )

    def _skip_strings(self, count: int) -> None:
        """Skip ``count`` strings (a tokenizer's vocabulary: 262,144 of them in Gemma 3's).
        Each length says where the next begins, so they are read one by one, in the tightest
        loop Python has for it: a precompiled unpack, no check per string. A length that runs
        past the end makes the next unpack fail (``struct.error``, or ``OverflowError`` past
        what an offset can hold), and the end is checked once after the last; the loop is
        bounded by ``count``, which callers bound by the bytes left (``_count``)."""
        unpack, buf, pos = _U64.unpack_from, self.buf, self.pos
        try:
            for _ in range(count):
                pos += unpack(buf, pos)[0] + 8
        except (struct.error, OverflowError):
            raise self.truncated() from None
        if pos > self.size:
            raise self.truncated()
        self.pos = pos

    def _skip_arrays(self, count: int) -> None:
        """Skip ``count`` arrays (each: item type, length, items) without building them."""
        unpack, buf, size, pos = struct.unpack_from, self.buf, self.size, self.pos
        for _ in range(count):
            if pos + 12 > size:
                raise self.truncated()
            item_type, n = unpack("<IQ", buf, pos)
            pos += 12
            item_size = _ITEM_SIZES.get(item_type)
            if item_size is not None:
                pos += n * item_size
                if pos > size:
                    raise self.truncated()
            elif item_type == _STRING:
                if n * 8 > size - pos:
                    raise self.truncated()
                self.pos = pos
                self._skip_strings(n)
                pos = self.pos
            else:
                raise ModelFileError(
                    f"{self.path} is a corrupt GGUF file (unknown metadata type {item_type} "
                    "in an array): download it again."
                )
        self.pos = pos


def inspect_gguf(path: str | os.PathLike[str], *, file_size: int | None = None) -> GGUFInfo:
    """Validate ``path`` as a GGUF file and return its metadata.

    Raises :class:`ModelFileError` with a one-line, actionable message for a
    missing path, a directory, an empty file, a known non-GGUF format, an
    unsupported version, out-of-bounds counts or a truncated file.

    ``file_size``: the whole file's size when ``path`` holds only its first bytes (a
    file shipped in byte chunks, as the starter model's package does): the header is
    read from ``path`` and the tensors are checked against ``file_size``.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"{p} does not exist: check the path, or run 'vibechat models list'.")
    if p.is_dir():
        ggufs = sorted(x.name for x in p.glob("*.gguf"))
        hint = f" (it holds {', '.join(ggufs[:3])})" if ggufs else ""
        raise ModelFileError(
            f"{p} is a directory, not a model file: pass the .gguf file inside it{hint}."
        )
    try:
        st = p.stat()
        kind = kind_of(st.st_mode)
        # A FIFO would block the read below; a device never ends.
        if kind is not None:
            raise ModelFileError(f"{p} is {kind}, not a model file: give the path of a .gguf file.")
        size = st.st_size
        if size == 0:
            raise ModelFileError(
                f"{p} is empty (0 bytes): the download probably failed; download it again."
            )
        with p.open("rb") as fh:
            head = fh.read(64)
            if head[:4] != GGUF_MAGIC:
                raise ModelFileError(_sniff_impostor(p, head, size))
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(p, buf, max(size, file_size or 0))
    except ModelFileError:
        raise
    except OSError as exc:
        raise ModelFileError(
            f"{p} cannot be read ({exc.strerror or exc}): check its permissions."
        ) from None


def _check_limits(info: GGUFInfo) -> None:
    """Refuse metadata llama.cpp would assert on (an abort that ends the process, with a
    backtrace): more layers than it supports, a context length no model has (or that turns
    negative in llama.cpp's 32-bit integer)."""
    arch = info.architecture
    # The metadata's layer count, not the tensors': a split's first file may hold no tensor.
    layers = info.metadata.get(f"{arch}.block_count")
    if isinstance(layers, int) and layers > MAX_LAYERS:
        raise ModelFileError(
            f"{info.path} is a corrupt GGUF file (its metadata says {layers:,} layers; "
            f"llama.cpp takes at most {MAX_LAYERS}): download it again."
        )
    context = info.metadata.get(f"{arch}.context_length")
    if isinstance(context, int) and context > MAX_CONTEXT_LENGTH:
        raise ModelFileError(
            f"{info.path} is a corrupt GGUF file (its metadata says a context of {context:,} "
            f"tokens, more than any model has): download it again."
        )


def _parse(path: Path, buf: mmap.mmap, size: int) -> GGUFInfo:
    r = _Reader(buf, path)
    r.take(4)
    version = r.u32()
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(
            f"{path} is GGUF version {version}, which this llama.cpp cannot read (2 or 3 "
            "expected): download a current GGUF build of the model."
        )
    tensor_count = r.u64()
    kv_count = r.u64()
    # Each metadata entry takes at least 13 bytes, each tensor description at least 29.
    if kv_count > MAX_KV or tensor_count > MAX_TENSORS or kv_count * 13 + tensor_count * 29 > size:
        raise ModelFileError(
            f"{path} is a corrupt GGUF file (its header claims {tensor_count:,} tensors and "
            f"{kv_count:,} metadata entries, more than {size:,} bytes can hold): download it again."
        )
    info = GGUFInfo(path=path, version=version, file_size=size, tensor_count=tensor_count)
    for _ in range(kv_count):
        key = r.string(limit=MAX_KEY)
        vtype = r.u32()
        start = r.pos
        value, length = r.value(vtype)
        if key is None:
            # A key too long to be a real one: its value is skipped too.
            continue
        if length is not None:
            info.array_lengths[key] = length
        if value is not None:
            info.metadata[key] = value
        elif vtype == _STRING:
            info.skipped_strings[key] = r.pos - start - 8

    _check_limits(info)
    alignment = info.metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ModelFileError(
            f"{path} is a corrupt GGUF file (bad alignment {alignment!r}): download it again."
        )
    data_needed = 0
    for _ in range(tensor_count):
        r.string(keep=False)
        n_dims = r.u32()
        if n_dims > MAX_DIMS:
            raise ModelFileError(
                f"{path} is a corrupt GGUF file (a tensor with {n_dims} dimensions): "
                "download it again."
            )
        elements = 1
        for _ in range(n_dims):
            elements *= r.u64()
        ggml_type = r.u32()
        offset = r.u64()
        block = GGML_TYPE_SIZES.get(ggml_type)
        nbytes = (elements // block[0]) * block[1] if block else 0
        data_needed = max(data_needed, offset + nbytes)
    data_start = (r.pos + alignment - 1) // alignment * alignment
    if data_needed and data_start + data_needed > size:
        raise ModelFileError(
            f"{path} is truncated: it has {size:,} bytes but its tensors need "
            f"{data_start + data_needed:,}; the download was interrupted: download it again."
        )
    return info
