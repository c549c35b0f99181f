"""Small, real GGUF files for tests: a valid v3 header, metadata, one F32 tensor and its
data, which ``vibechat.engine.models.gguf.inspect_gguf`` (and llama.cpp's parser) accept.
They are not loadable models (llama.cpp would miss most tensors); tests that load a
model use the starter model."""

from __future__ import annotations

import struct
from pathlib import Path

ALIGN = 32


def _string(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate: bytes that are not UTF-8
    return struct.pack("<Q", len(data)) + data


class Raw(bytes):
    """A metadata value written as is: its type (uint32) and bytes (see ``array``)."""


def _value(value: object) -> tuple[int, bytes]:
    """(GGUF type, encoded value): bool, int (uint32), float (f32), str, a list of one of
    those or of lists (an array, of arrays), or ``Raw``."""
    if isinstance(value, Raw):
        return struct.unpack_from("<I", value)[0], bytes(value[4:])
    if isinstance(value, bool):
        return 7, struct.pack("<?", value)
    if isinstance(value, int):
        return 4, struct.pack("<I", value)
    if isinstance(value, float):
        return 6, struct.pack("<f", value)
    if isinstance(value, str):
        return 8, _string(value)
    if isinstance(value, list):
        items = [_value(v) for v in value]
        item_type = items[0][0] if items else 4
        return 9, struct.pack("<IQ", item_type, len(items)) + b"".join(v for _, v in items)
    raise TypeError(f"unsupported metadata value {value!r}")


def array(item_type: int, count: int, items: bytes = b"") -> Raw:
    """An array value as written, with any ``count`` (true or not) and item bytes."""
    return Raw(struct.pack("<IIQ", 9, item_type, count) + items)


def _kv(key: str, value: object) -> bytes:
    if isinstance(value, (list, Raw)):
        vtype, data = _value(value)
        return _string(key) + struct.pack("<I", vtype) + data
    if isinstance(value, bool):
        return _string(key) + struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return _string(key) + struct.pack("<II", 4, value)  # uint32
    if isinstance(value, float):
        return _string(key) + struct.pack("<If", 6, value)
    if isinstance(value, str):
        return _string(key) + struct.pack("<I", 8) + _string(value)
    raise TypeError(f"unsupported metadata value {value!r}")


def gguf_bytes(
    *,
    architecture: str = "llama",
    name: str | None = None,
    context_length: int = 2048,
    file_type: int | None = 15,
    chat_template: str | None = None,
    extra: dict[str, object] | None = None,
    payload: int = 64,
) -> bytes:
    """A GGUF file's bytes. ``file_type``: llama_ftype (15 = Q4_K_M, 7 = Q8_0, None = absent);
    ``payload``: elements of the one F32 tensor (its data is ``payload * 4`` bytes)."""
    meta: dict[str, object] = {
        "general.architecture": architecture,
        f"{architecture}.context_length": context_length,
    }
    if name is not None:
        meta["general.name"] = name
    if file_type is not None:
        meta["general.file_type"] = file_type
    if chat_template is not None:
        meta["tokenizer.chat_template"] = chat_template
    meta.update(extra or {})
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, len(meta))
    header += b"".join(_kv(k, v) for k, v in meta.items())
    # One tensor: name, 1 dimension, its length, type F32 (0), offset 0 in the data section.
    header += _string("token_embd.weight") + struct.pack("<IQIQ", 1, payload, 0, 0)
    header += b"\0" * ((-len(header)) % ALIGN)
    data = struct.pack("<7f", *range(7)) * (payload // 7) + b"\0" * (4 * (payload % 7))
    return header + data


def write_gguf(path: Path, **kwargs) -> Path:
    """Write ``gguf_bytes(**kwargs)`` to ``path`` (parents created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(**kwargs))
    return path


def write_split_gguf(directory: Path, base: str, count: int, **kwargs) -> list[Path]:
    """A split model: ``{base}-00001-of-0000N.gguf`` ..., each a valid GGUF with split metadata."""
    paths = []
    more = kwargs.pop("extra", None) or {}
    for i in range(1, count + 1):
        extra = {"split.no": i - 1, "split.count": count, "split.tensors.count": count, **more}
        paths.append(
            write_gguf(directory / f"{base}-{i:05d}-of-{count:05d}.gguf", extra=extra, **kwargs)
        )
    return paths


def copy_with_metadata(src: Path, dst: Path, extra: dict[str, object]) -> Path:
    """A copy of the GGUF file ``src`` at ``dst`` with ``extra`` metadata entries added (or
    replacing entries of the same key): a loadable model with, say, another chat template.
    The tensor data is copied as is, after the new header, at the file's alignment."""
    import shutil

    with src.open("rb") as fh:
        head = fh.read(24)
        assert head[:4] == b"GGUF", src
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", head, 4)
        fh.seek(0)
        buf = fh.read(64 << 20)  # the header (a vocabulary included) is well within this
    pos = 24
    entries: list[tuple[str, bytes]] = []
    alignment = ALIGN

    def skip(vtype: int, at: int) -> int:
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if vtype in sizes:
            return at + sizes[vtype]
        if vtype == 8:
            return at + 8 + struct.unpack_from("<Q", buf, at)[0]
        item_type, count = struct.unpack_from("<IQ", buf, at)
        at += 12
        for _ in range(count):
            at = skip(item_type, at)
        return at

    for _ in range(n_kv):
        start = pos
        (length,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8 : pos + 8 + length].decode()
        pos += 8 + length
        (vtype,) = struct.unpack_from("<I", buf, pos)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, pos + 4)
        pos = skip(vtype, pos + 4)
        entries.append((key, buf[start:pos]))
    tensors_start = pos
    for _ in range(n_tensors):
        (length,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + length
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    tensor_infos = buf[tensors_start:pos]
    data_start = (pos + alignment - 1) // alignment * alignment

    kept = [raw for key, raw in entries if key not in extra]
    added = [_kv(key, value) for key, value in extra.items()]
    header = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kept) + len(added))
    header += b"".join(kept) + b"".join(added) + tensor_infos
    header += b"\0" * ((-len(header)) % alignment)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dst.open("wb") as fout:
        fout.write(header)
        fin.seek(data_start)
        shutil.copyfileobj(fin, fout, 16 << 20)
    return dst
