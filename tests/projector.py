"""A tiny random-weight Gemma 3 multimodal projector ("mmproj") for the starter model, so the
whole local vision path (load, encode, evaluate, reply, reuse) runs in the tests without a
vision model to download.

The file is what llama.cpp's multimodal library (tools/mtmd/clip.cpp, projector type
``gemma3``) loads: a SigLIP-style vision tower (a patch embedding, learned positions, ``blocks``
pre-norm transformer blocks, a post norm) whose patches are average-pooled ``merge``×``merge``,
RMS-normed (``mm.soft_emb_norm``) and projected to the text model's width
(``mm.input_projection``). Everything is as small as clip.cpp accepts: a 32×32 image in 4×4
patches (8×8 patches, pooled 2×2: 16 image tokens), one block of width 32. Its weights are
random and small, so the embeddings it makes are finite and the model's reply is noise: the
tests judge that a reply came, never its words.

Tensor shapes below are numpy's (row-major), the reverse of ggml's ``ne``; names and keys are
clip-impl.h's.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ggufgen import ALIGN, _kv, _string

GGML_F32 = 0

IMAGE_SIZE = 32
PATCH_SIZE = 4
MERGE = 2
# The image tokens a picture costs with this projector: (32 / 4 / 2)² = 16.
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE // MERGE) ** 2


def projector_tensors(
    n_embd_text: int, *, width: int = 32, ff: int = 64, blocks: int = 1, seed: int = 29
) -> dict[str, np.ndarray]:
    """The projector's tensors (float32), random but small (scaled so activations stay finite)."""
    rng = np.random.default_rng(seed)
    n_patches = (IMAGE_SIZE // PATCH_SIZE) ** 2

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    t: dict[str, np.ndarray] = {
        "v.patch_embd.weight": w(width, 3, PATCH_SIZE, PATCH_SIZE),  # ggml ne: [p, p, 3, width]
        "v.patch_embd.bias": zeros(width),
        "v.position_embd.weight": w(n_patches, width),
    }
    for i in range(blocks):
        p = f"v.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t[f"{p}.{name}.weight"] = w(width, width)
            t[f"{p}.{name}.bias"] = zeros(width)
        t[f"{p}.ln1.weight"], t[f"{p}.ln1.bias"] = ones(width), zeros(width)
        t[f"{p}.ln2.weight"], t[f"{p}.ln2.bias"] = ones(width), zeros(width)
        t[f"{p}.ffn_up.weight"], t[f"{p}.ffn_up.bias"] = (
            w(ff, width),
            zeros(ff),
        )  # ggml ne: [width, ff]
        t[f"{p}.ffn_down.weight"], t[f"{p}.ffn_down.bias"] = w(width, ff), zeros(width)
    t["v.post_ln.weight"], t["v.post_ln.bias"] = ones(width), zeros(width)
    t["mm.soft_emb_norm.weight"] = ones(width)
    # ggml ne: [n_embd_text, width]: clip.cpp reads the projection's width as ne[0].
    t["mm.input_projection.weight"] = w(width, n_embd_text)
    return t


def projector_metadata(
    n_embd_text: int, *, width: int = 32, ff: int = 64, blocks: int = 1, heads: int = 2
) -> dict[str, object]:
    return {
        "general.architecture": "clip",
        "general.name": "vibechat test projector",
        "general.file_type": 0,  # all F32
        "clip.projector_type": "gemma3",
        "clip.has_vision_encoder": True,
        "clip.use_gelu": True,
        "clip.vision.embedding_length": width,
        "clip.vision.feed_forward_length": ff,
        "clip.vision.block_count": blocks,
        "clip.vision.projection_dim": n_embd_text,
        "clip.vision.attention.head_count": heads,
        "clip.vision.attention.layer_norm_epsilon": 1e-6,
        "clip.vision.image_size": IMAGE_SIZE,
        "clip.vision.patch_size": PATCH_SIZE,
        "clip.vision.projector.scale_factor": MERGE,
        "clip.vision.image_mean": [0.5, 0.5, 0.5],
        "clip.vision.image_std": [0.5, 0.5, 0.5],
    }


def write_gguf_tensors(
    path: Path, metadata: dict[str, object], tensors: dict[str, np.ndarray]
) -> Path:
    """A GGUF v3 file of ``metadata`` and F32 ``tensors`` (numpy shapes; ggml's ``ne`` is their
    reverse), aligned as llama.cpp reads them."""
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    header += b"".join(_kv(k, v) for k, v in metadata.items())
    offset = 0
    blobs: list[bytes] = []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        dims = tuple(reversed(array.shape))
        header += (
            _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        )
        header += struct.pack("<IQ", GGML_F32, offset)
        pad = b"\0" * ((-len(data)) % ALIGN)
        blobs.append(data + pad)
        offset += len(data) + len(pad)
    header += b"\0" * ((-len(header)) % ALIGN)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + b"".join(blobs))
    return path


def model_width(model_path: Path) -> int:
    """The text model's embedding width (``{arch}.embedding_length``) from its GGUF header."""
    from vibechat.engine.models.gguf import inspect_gguf

    info = inspect_gguf(model_path)
    value = info.metadata.get(f"{info.architecture}.embedding_length")
    if not isinstance(value, int):
        raise ValueError(f"{model_path} has no {info.architecture}.embedding_length")
    return value


def write_projector(path: Path, n_embd_text: int, **shape: int) -> Path:
    """Write the tiny Gemma 3 projector for a text model ``n_embd_text`` wide to ``path``."""
    return write_gguf_tensors(
        path, projector_metadata(n_embd_text, **shape), projector_tensors(n_embd_text, **shape)
    )


def write_test_image(path: Path, size: tuple[int, int] = (48, 40), seed: int = 0) -> Path:
    """A small PNG with varied pixels (a seed makes another picture), as engine/attach keeps one."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels, "RGB").save(path, format="PNG")
    return path
