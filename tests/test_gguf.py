"""Every kind of bad model file gets a one-line error saying what it is and what to do,
and never reaches llama.cpp."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from vibechat.engine.errors import ModelFileError
from vibechat.engine.gguf import inspect_gguf, quant_from_filename


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


@pytest.mark.parametrize(("name", "quant"), [
    ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M"),
    ("Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0"),
    ("model.IQ4_XS.gguf", "IQ4_XS"),
    ("qwen2.5-7b-instruct-q5_k_m-00001-of-00002.gguf", "Q5_K_M"),
    ("phi-3-mini-4k-instruct-fp16.gguf", None),
    ("tinyllama-f16.gguf", "F16"),
])
def test_quant_from_filename(name, quant):
    assert quant_from_filename(name) == quant
