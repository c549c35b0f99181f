"""Every kind of bad model file gets a one-line error saying what it is and what to do,
and never reaches llama.cpp."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from vibechat.engine.errors import ModelFileError
from vibechat.engine.models.gguf import inspect_gguf
from vibechat.engine.settings.refs import quant_from_filename


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _header(version=3, tensors=0, kvs=0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kvs)


def _error(path: Path) -> str:
    with pytest.raises(ModelFileError) as info:
        inspect_gguf(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_starter_model_header(starter_path: Path):
    info = inspect_gguf(starter_path)
    assert info.version == 3
    assert info.architecture == "gemma3"
    assert info.quantization == "Q4_K_M"
    assert info.context_length == 32768
    assert info.block_count == 18
    assert info.chat_template is None  # the starter GGUF ships no template
    assert info.array_lengths["tokenizer.ggml.tokens"] == 262144


def test_missing_path(tmp_path):
    assert "does not exist" in _error(tmp_path / "nope.gguf")


def test_directory(tmp_path):
    (tmp_path / "inside.gguf").write_bytes(b"")
    message = _error(tmp_path)
    assert "is a directory" in message and "inside.gguf" in message


def test_zero_bytes(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    assert "is empty (0 bytes)" in _error(path)


def test_git_lfs_pointer(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    assert "Git LFS pointer" in _error(path)


def test_html_page(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("\n<!DOCTYPE html><html><body>Sign in</body></html>")
    assert "HTML page" in _error(path)


def test_safetensors(tmp_path):
    header = b'{"weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0\0\0")
    assert "safetensors" in _error(path)


def test_random_bytes(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"\x13\x37" * 100)
    assert "not a GGUF model" in _error(path)


def test_truncated_download(tmp_path, starter_path: Path):
    path = tmp_path / "half.gguf"
    with starter_path.open("rb") as src:
        path.write_bytes(src.read(starter_path.stat().st_size // 2))
    message = _error(path)
    assert "truncated" in message and "download it again" in message


def test_truncated_inside_header(tmp_path, starter_path: Path):
    path = tmp_path / "head.gguf"
    with starter_path.open("rb") as src:
        path.write_bytes(src.read(4096))
    assert "truncated" in _error(path)


def test_counts_beyond_file_size(tmp_path):
    path = tmp_path / "liar.gguf"
    path.write_bytes(_header(tensors=2**40, kvs=2**40) + b"\0" * 64)
    assert "corrupt" in _error(path)


def test_string_length_beyond_file_size(tmp_path):
    path = tmp_path / "liar.gguf"
    path.write_bytes(_header(kvs=1) + struct.pack("<Q", 2**62) + b"general.name")
    assert "truncated" in _error(path)


def test_unsupported_version(tmp_path):
    path = tmp_path / "future.gguf"
    path.write_bytes(_header(version=99) + b"\0" * 64)
    assert "version 99" in _error(path)


def test_minimal_valid_gguf(tmp_path):
    body = _header(kvs=2)
    body += _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama")
    body += _gguf_string("llama.context_length") + struct.pack("<I", 4) + struct.pack("<I", 2048)
    path = tmp_path / "tiny-Q8_0.gguf"
    path.write_bytes(body)
    info = inspect_gguf(path)
    assert info.architecture == "llama"
    assert info.context_length == 2048
    assert info.quantization == "Q8_0"  # from the file name when general.file_type is absent


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M"),
        ("Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0"),
        ("model.IQ4_XS.gguf", "IQ4_XS"),
        ("qwen2.5-7b-instruct-q5_k_m-00001-of-00002.gguf", "Q5_K_M"),
        ("phi-3-mini-4k-instruct-fp16.gguf", None),
        ("tinyllama-f16.gguf", "F16"),
    ],
)
def test_quant_from_filename(name, quant):
    assert quant_from_filename(name) == quant


# --------------------------------------------- the header is untrusted too (issue 13)
def test_arrays_of_arrays_are_skipped_without_being_built(tmp_path):
    """An array of 300,000 small arrays (3.9 MB): before, every inner array was built as a
    list and thrown away (3.9 s and +240 MB for a 36 MB file)."""
    import tracemalloc

    from ggufgen import array, write_gguf

    n = 300_000
    path = write_gguf(
        tmp_path / "nested.gguf",
        extra={
            "x.nested": array(9, n, struct.pack("<IQB", 0, 1, 7) * n),
            "x.small": [[1, 2], ["a", "b"]],
        },
    )
    tracemalloc.start()
    try:
        info = inspect_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.array_lengths["x.nested"] == n and "x.nested" not in info.metadata
    assert info.metadata["x.small"] == [[1, 2], ["a", "b"]]  # a short one is still kept
    assert info.architecture == "llama" and info.tensor_count == 1  # what follows is read right
    assert peak < 2_000_000, peak  # bytes: nothing built per inner array


@pytest.mark.parametrize(
    ("item_type", "count", "items"),
    [
        (9, 2**40, b""),  # arrays of arrays: far more than the file holds
        (9, 3, struct.pack("<IQ", 0, 2**50)),  # an inner array longer than the file
        (9, 1, struct.pack("<IQ", 8, 2**40)),  # inner strings more than the bytes left
        (8, 2**40, b""),  # strings
        (4, 2**61, b""),  # numbers (a count times 4 that wraps a 64-bit product)
    ],
)
def test_every_count_is_bounded_by_the_bytes_left(tmp_path, item_type, count, items):
    from ggufgen import array, write_gguf

    path = write_gguf(tmp_path / "liar.gguf", extra={"x.liar": array(item_type, count, items)})
    assert "truncated" in _error(path)


def test_a_nested_array_inside_a_nested_array_is_refused(tmp_path):
    from ggufgen import array, write_gguf

    inner = struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 0)
    path = write_gguf(tmp_path / "deep.gguf", extra={"x.deep": array(9, 100, inner * 100)})
    assert "unknown metadata type 9 in an array" in _error(path)


def test_names_from_the_header_are_sanitised_and_bounded(tmp_path):
    from ggufgen import write_gguf

    path = write_gguf(
        tmp_path / "evil.gguf",
        architecture="llama",
        name="Evil\x1b]0;title\x07 model\x1b[2J\n[reverse]" + "x" * 5000 + "\ud800",
    )
    info = inspect_gguf(path)
    assert info.name.startswith("Evil model [reverse]xxx") and info.name.endswith("…")
    assert len(info.name) <= 200 and info.name.isprintable()
    evil_arch = write_gguf(tmp_path / "arch.gguf", architecture="ll\x1b[31mama\u202e" + "a" * 100)
    info = inspect_gguf(evil_arch)
    assert info.architecture.isprintable() and len(info.architecture) <= 64
    assert inspect_gguf(write_gguf(tmp_path / "nameless.gguf")).name == "nameless"


def test_a_huge_string_or_key_is_skipped_not_kept(tmp_path):
    from ggufgen import write_gguf

    path = write_gguf(
        tmp_path / "big.gguf",
        extra={
            "general.description": "d" * (2 << 20),
            "k" * 70_000: "value",
            "general.license": "mit",
        },
    )
    info = inspect_gguf(path)
    assert (
        "general.description" not in info.metadata
        and info.skipped_strings["general.description"] == 2 << 20
    )
    assert not any(len(key) > 65536 for key in info.metadata)
    assert info.metadata["general.license"] == "mit" and info.architecture == "llama"


# ----------------------------- issue 25: files that are no files, metadata llama.cpp asserts on
def test_a_fifo_or_a_device_as_a_model_is_named_as_such_without_blocking(tmp_path):
    """Before: "empty (0 bytes): the download probably failed" (and a FIFO with a writer would
    block the read)."""
    import os

    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.gguf"
    zero.symlink_to("/dev/zero")
    assert "is a named pipe (FIFO), not a model file" in _error(fifo)
    assert "is a character device, not a model file" in _error(zero)


@pytest.mark.parametrize(
    "key, value, said",
    [
        (
            "llama.block_count",
            100_000,
            "its metadata says 100,000 layers; llama.cpp takes at most 512",
        ),
        ("llama.context_length", 0xFFFFFFFF, "a context of 4,294,967,295 tokens"),
    ],
    ids=["layers", "context"],
)
def test_metadata_llama_cpp_would_assert_on_is_refused_before_it_loads(tmp_path, key, value, said):
    from ggufgen import write_gguf

    path = write_gguf(tmp_path / "odd.gguf", extra={key: value})
    message = _error(path)
    assert "corrupt GGUF file" in message and said in message


@pytest.mark.model
def test_run_on_a_model_claiming_100000_layers_is_one_line_not_an_abort(tmp_path, starter_path):
    """Before: llama.cpp's GGML_ASSERT, a 114-line backtrace and exit 134."""
    from ggufgen import copy_with_metadata
    from test_cli_run import vibechat

    path = copy_with_metadata(
        starter_path, tmp_path / "many-layers.gguf", {"gemma3.block_count": 100_000}
    )
    out = vibechat("run", "-p", "hi", "--model", str(path), "-n", "4", timeout=120)
    assert out.returncode == 1, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "100,000 layers" in out.stderr, out.stderr


# ----------------------------------------------- issue 26: the vocabulary skipped in one tight loop
def test_a_long_string_array_is_skipped_and_what_follows_is_read(tmp_path):
    """A tokenizer's vocabulary (here 5,000 strings of 0-300 bytes, some not ASCII) is skipped
    without a check per string (engine/models/gguf.py, ``_skip_strings``): the keys after it,
    nested string arrays and the tensors are read as before."""
    from ggufgen import array, write_gguf

    words = [("tok" + "é" * (i % 150))[: i % 300] for i in range(5000)]
    vocab = b"".join(_gguf_string(w) for w in words)
    nested = struct.pack("<IQ", 8, 3) + b"".join(_gguf_string(w) for w in ("a", "", "ü" * 40))
    path = write_gguf(
        tmp_path / "vocab.gguf",
        extra={
            "tokenizer.ggml.tokens": array(8, len(words), vocab),
            "x.nested": array(9, 70, nested * 70),
            "general.license": "mit",
        },
    )
    info = inspect_gguf(path)
    assert (
        info.array_lengths["tokenizer.ggml.tokens"] == 5000 and info.array_lengths["x.nested"] == 70
    )
    assert info.metadata["general.license"] == "mit"
    assert info.architecture == "llama" and info.tensor_count == 1


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize(
    "length", [2**40, 2**64 - 1]
)  # past the file; past what an offset can hold
def test_a_string_in_a_long_array_claiming_more_than_the_file_is_refused(tmp_path, where, length):
    from ggufgen import array, write_gguf

    good = [_gguf_string("tok") for _ in range(99)]
    liar = struct.pack("<Q", length) + b"tok"
    items = [liar, *good] if where == "first" else [*good, liar]
    path = write_gguf(
        tmp_path / "liar.gguf", extra={"tokenizer.ggml.tokens": array(8, 100, b"".join(items))}
    )
    message = _error(path)
    assert "truncated or corrupt" in message and "download it again" in message
