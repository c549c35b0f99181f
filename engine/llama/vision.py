"""Images for a local vision model: llama.cpp's multimodal library (libmtmd, bound in
``llama_cpp.mtmd_cpp``) with the projector file (``--mmproj``) beside the loaded text model.

The backend keeps a prompt as a list of token ids (engine/llama/llamacpp.py): the KV-prefix reuse,
the snapshots' matching and the cut logic all compare such lists. An image has no token ids, so
each image chunk of a picture is written into the list as *placeholder ids*: negative numbers
derived from the picture's digest and the chunk's index, one per position the chunk takes.
The same picture in the same place gives the same ids (it compares equal, and is not encoded
again while its turn is in the KV cache); another picture differs at its first id. The run's
first id says where an image starts (``is_image_start``): a cut inside a run backs up to it
(``image_start``), since an image is evaluated whole.

What mtmd wraps around an image (Gemma 3: ``<start_of_image>`` before, ``<end_of_image>``
after) comes back as text chunks: those are real tokens in the list, evaluated as text.

The picture is decoded here, in the engine process, with Pillow (never stb), from the copy
engine/attach kept (already checked and scaled): the file's bytes and pixels are bounded again
in case the copy changed. Only projectors whose image chunks take one position per token are
taken (not Qwen-VL's M-RoPE): the backend's positions are its list's indices.

Imports inside functions are deliberate: Pillow and llama-cpp-python's multimodal bindings load
only when a projector is used (start-up time).
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp as ll

from ..errors import ModelFileError
from ..models.gguf import inspect_gguf
from ..sanitize import sanitize
from ..turns.attachments import Attachment
from ..turns.backend import ChatMessage
from .native import ensure_llama_initialised
from .vision_errors import NO_PROJECTOR, ImagesNotSupported, ImageUnreadable, ProjectorError

log = logging.getLogger("vibechat.llama_cpp")

# Images in one prompt (each costs hundreds of tokens and an encode).
MAX_IMAGES = 16
# A kept copy larger than this is refused before Pillow reads it, and one with more pixels than
# MAX_IMAGE_PIXELS before it is decoded.
MAX_IMAGE_BYTES = 64 << 20
MAX_IMAGE_PIXELS = 40_000_000
# What engine/attach keeps.
IMAGE_FORMATS = ("PNG", "JPEG")
# The encoder's graph nodes between two looks at the cancel flag.
CHECK_EVERY = 32
# Pictures whose token layout is remembered (a few ints each).
LAYOUT_CACHE = 256

# Placeholder ids: an image run's first id is <= -START (its start), the others are in [-START, -1].
START = 1 << 30


def is_image_token(token: int) -> bool:
    return token < 0


def is_image_start(token: int) -> bool:
    return token <= -START


def has_images(tokens: Sequence[int]) -> bool:
    return any(t < 0 for t in tokens)


def image_start(tokens: Sequence[int], k: int) -> int:
    """``k``, or where the image run holding position ``k`` starts when ``k`` falls inside one
    (a KV-cache cut there would keep half an image: it is evaluated whole)."""
    if k >= len(tokens) or not (-START < tokens[k] < 0):
        return k
    while k > 0 and not is_image_start(tokens[k]):
        k -= 1
    return k


def placeholders(digest: str, chunk: int, n: int) -> tuple[int, ...]:
    """The ids of chunk ``chunk`` of the picture ``digest``, ``n`` positions long: 60 bits of the
    pair's hash (30 in the start id, 30 in the rest), so two pictures differ at their start."""
    h = int.from_bytes(hashlib.sha256(f"{digest}:{chunk}".encode()).digest()[:8], "little")
    first, rest = h & (START - 1), (h >> 30) & (START - 1)
    return (-(START + first), *([-(1 + rest)] * (n - 1)))


def images_in_prompt(
    messages: Sequence[ChatMessage], takes_images: bool, strict: bool
) -> dict[int, tuple[Attachment, ...]]:
    """The images each message (by index) puts into the prompt.

    At most ``MAX_IMAGES``: the newest message's (more there is an error), then the earlier
    messages' newest first; older ones are left out (logged). A model without a projector gets
    none: with ``strict``, images in the newest user message raise ``ImagesNotSupported``
    (before anything is evaluated); images in earlier turns are left out, so a conversation
    that had them can go on with a text model."""
    found = [(i, m.images) for i, m in enumerate(messages) if m.images]
    if not found:
        return {}
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if takes_images:
        # A kept copy gone (a reopened conversation): its turn goes on without it.
        gone = [
            a for i, images in found if i != last_user or not strict for a in images if not _kept(a)
        ]
        if gone:
            log.info(
                "%d image(s) of this conversation are missing from the attachment store: left out",
                len(gone),
            )
            found = [
                (i, kept)
                for i, images in found
                if (kept := tuple(a for a in images if a not in gone))
            ]
            if not found:
                return {}
    if not takes_images:
        if strict and found[-1][0] == last_user:
            raise ImagesNotSupported(NO_PROJECTOR)
        log.info(
            "this model takes no images: the %d image(s) of earlier turns are left out",
            sum(len(images) for _, images in found),
        )
        return {}
    if found[-1][0] == last_user and len(found[-1][1]) > MAX_IMAGES:
        raise ImageUnreadable(
            f"a message takes at most {MAX_IMAGES} images ({len(found[-1][1])} were "
            "attached): send fewer."
        )
    budget, out, left_out = MAX_IMAGES, {}, 0
    for i, images in reversed(found):
        kept = (
            images[len(images) - budget :]
            if 0 < budget < len(images)
            else images
            if budget > 0
            else ()
        )
        left_out += len(images) - len(kept)
        budget -= len(kept)
        if kept:
            out[i] = tuple(kept)
    if left_out:
        log.info(
            "a prompt takes at most %d images: the %d oldest are left out", MAX_IMAGES, left_out
        )
    return out


def _kept(image: Attachment) -> bool:
    return bool(image.path) and Path(image.path).is_file()


@dataclass(frozen=True)
class ImageChunk:
    """Where an image chunk's placeholder run comes from: the picture and the chunk's index
    among mtmd's chunks for it, and how many positions it takes."""

    image: Attachment
    index: int
    n_tokens: int


class Vision:
    """The projector, initialised against a loaded text model; one thread uses it (the one
    driving the backend). ``encodes`` counts image chunks encoded (the tests' and bench's view
    of what the KV-prefix reuse spared)."""

    def __init__(
        self,
        path: Path,
        model: Any,
        *,
        n_threads: int,
        use_gpu: bool,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        from llama_cpp import mtmd_cpp as mt

        self._mt = mt
        self.path = Path(path)
        self.name = file_label(self.path)
        check_projector(self.path, int(ll.llama_model_n_embd_inp(model)))
        llama_log = ensure_llama_initialised()
        llama_log.install_mtmd()
        params = mt.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = max(1, n_threads)
        params.print_timings = False
        # The first image pays the warmup; a load stays fast.
        params.warmup = False
        self._cancelled = cancelled
        self._nodes = 0
        if cancelled is not None:
            # The callback is kept referenced: C holds the pointer.
            self._between_nodes_cb = ll.ggml_backend_sched_eval_callback(self._between_nodes)
            params.cb_eval = self._between_nodes_cb
        captured: list[tuple[int, str]] = []
        previous, llama_log.captured = llama_log.captured, captured
        try:
            ctx = mt.mtmd_init_from_file(
                str(self.path).encode("utf-8", "surrogateescape"), model, params
            )
        finally:
            llama_log.captured = previous
        if not ctx:
            said = next((line for level, line in captured if level >= logging.ERROR), "")
            why = f" ({said.strip()[:200]})" if said else ""
            raise ProjectorError(
                f"llama.cpp could not load the projector {self.name}{why}: use the mmproj "
                "file made for this model."
            )
        self._ctx = ctx
        if not mt.mtmd_support_vision(ctx) or mt.mtmd_decode_use_mrope(ctx):
            what = (
                "has no vision encoder"
                if not mt.mtmd_support_vision(ctx)
                else "places image tokens with M-RoPE (Qwen-VL)"
            )
            self.close()
            raise ProjectorError(
                f"the projector {self.name} {what}, which vibechat does not support: load the "
                "model without --mmproj."
            )
        self.encodes = 0
        self._layouts: collections.OrderedDict[str, tuple[tuple[int, ...], ...]] = (
            collections.OrderedDict()
        )
        # A run's start id -> its chunk.
        self._chunks: dict[int, ImageChunk] = {}

    def _between_nodes(self, _tensor: Any, ask: bool, _data: Any) -> bool:
        """The encoder's graph scheduler asks before each node whether we want to see it: every
        ``CHECK_EVERY`` nodes we do, so the graph runs in pieces, and between pieces a cancel (Esc)
        ends the encode. Its output is then never used: the backend drops the image after it."""
        try:
            assert self._cancelled is not None
            if ask:
                self._nodes += 1
                return self._nodes % CHECK_EVERY == 0 or self._cancelled()
            return not self._cancelled()
        except Exception:  # noqa: BLE001 - never raise into C
            return True

    def close(self) -> None:
        if self._ctx:
            self._mt.mtmd_free(self._ctx)
            self._ctx = None

    # ------------------------------------------------------------------ layout
    def layout(self, image: Attachment) -> tuple[tuple[int, ...], ...]:
        """The picture's pieces as prompt tokens, in order: real tokens for mtmd's text chunks,
        placeholder runs for its image chunks. Prepares the image (decode, resize) but does not
        encode it: counting a prompt's tokens stays cheap. Remembered by digest."""
        known = self._layouts.get(image.digest)
        if known is not None:
            self._layouts.move_to_end(image.digest)
            # The picture (a same-digest copy at another path) evaluates from here.
            for run in known:
                if run and is_image_start(run[0]):
                    chunk = self._chunks.get(run[0])
                    if chunk is not None and chunk.image.path != image.path:
                        self._chunks[run[0]] = ImageChunk(image, chunk.index, chunk.n_tokens)
            return known
        mt = self._mt
        pieces: list[tuple[int, ...]] = []
        chunks, bitmap = self._tokenize(image)
        try:
            for i in range(mt.mtmd_input_chunks_size(chunks)):
                chunk = mt.mtmd_input_chunks_get(chunks, i)
                kind = mt.mtmd_input_chunk_get_type(chunk)
                if kind == mt.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t()
                    tokens = mt.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    pieces.append(tuple(int(tokens[j]) for j in range(min(n.value, 4096))))
                elif kind == mt.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    n_tokens = int(mt.mtmd_input_chunk_get_n_tokens(chunk))
                    if int(mt.mtmd_input_chunk_get_n_pos(chunk)) != n_tokens:
                        raise ImageUnreadable(
                            f"the projector {self.name} places the image {image.name} in another "
                            "number of positions than tokens, which vibechat does not support."
                        )
                    run = placeholders(image.digest, i, n_tokens)
                    self._chunks[run[0]] = ImageChunk(image, i, n_tokens)
                    pieces.append(run)
        finally:
            self._free(chunks, bitmap)
        layout = tuple(pieces)
        self._layouts[image.digest] = layout
        while len(self._layouts) > LAYOUT_CACHE:
            _digest, gone = self._layouts.popitem(last=False)
            for run in gone:
                if run and is_image_start(run[0]):
                    self._chunks.pop(run[0], None)
        return layout

    def tokens(self, images: Sequence[Attachment]) -> list[int]:
        """``images`` one after the other as prompt tokens (``layout``)."""
        return [token for image in images for run in self.layout(image) for token in run]

    # -------------------------------------------------------------- evaluation
    def run_length(self, start: int) -> int:
        chunk = self._chunks.get(start)
        if chunk is None:
            raise ImageUnreadable(
                "an image in the prompt was forgotten before it was evaluated: send it again."
            )
        return chunk.n_tokens

    def evaluate(self, lctx: Any, start: int, n_past: int, n_batch: int, seq: int = 0) -> int:
        """Encode the image chunk whose run starts with ``start`` and evaluate its embeddings at
        positions ``n_past``... of sequence ``seq`` (the other side of a pair: pairing.py):
        llama.cpp's return code (0: done, 2: aborted by the cancel).
        mtmd's helper switches the attention to non-causal for the image where the model wants
        it (Gemma 3) and back."""
        mt = self._mt
        info = self._chunks.get(start)
        if info is None:
            raise ImageUnreadable(
                "an image in the prompt was forgotten before it was evaluated: send it again."
            )
        n_ubatch = int(ll.llama_n_ubatch(lctx))
        chunks, bitmap = self._tokenize(info.image)
        try:
            if info.index >= mt.mtmd_input_chunks_size(chunks):
                raise ImageUnreadable(
                    f"the image {info.image.name} changed since it was attached: attach it again."
                )
            chunk = mt.mtmd_input_chunks_get(chunks, info.index)
            if (
                mt.mtmd_input_chunk_get_type(chunk) != mt.MTMD_INPUT_CHUNK_TYPE_IMAGE
                or int(mt.mtmd_input_chunk_get_n_tokens(chunk)) != info.n_tokens
            ):
                raise ImageUnreadable(
                    f"the image {info.image.name} changed since it was attached: attach it again."
                )
            if mt.mtmd_decode_use_non_causal(self._ctx, chunk) and info.n_tokens > n_ubatch:
                raise ImageUnreadable(
                    f"the image {info.image.name} takes {info.n_tokens} tokens, more than one "
                    f"batch of {n_ubatch} (n_ubatch): raise n_ubatch to at least {info.n_tokens}."
                )
            new_past = ll.llama_pos(n_past)
            self.encodes += 1
            return int(
                mt.mtmd_helper_eval_chunk_single(
                    self._ctx,
                    lctx,
                    chunk,
                    n_past,
                    seq,
                    max(n_batch, info.n_tokens),
                    False,
                    ctypes.byref(new_past),
                )
            )
        finally:
            self._free(chunks, bitmap)

    # ------------------------------------------------------------------ images
    def _tokenize(self, image: Attachment) -> tuple[Any, Any]:
        """mtmd's chunks for the picture alone (its markers and its image chunks), and the
        bitmap."""
        mt = self._mt
        bitmap = self._bitmap(image)
        chunks = mt.mtmd_input_chunks_init()
        part = mt.mtmd_input_part(text=None, bitmap=bitmap)
        parts = (ctypes.POINTER(mt.mtmd_input_part) * 1)(ctypes.pointer(part))
        rc = mt.mtmd_tokenize_from_parts(self._ctx, chunks, parts, 1, False)
        if rc != 0:
            self._free(chunks, bitmap)
            raise ImageUnreadable(
                f"llama.cpp could not prepare the image {image.name} for the projector "
                f"{self.name} (code {rc})."
            )
        return chunks, bitmap

    def _bitmap(self, image: Attachment) -> Any:
        """The kept copy decoded to RGB by Pillow, as an mtmd bitmap (the caller frees it)."""
        from PIL import Image

        path = Path(image.path) if image.path else None
        if path is None or not path.is_file():
            raise ImageUnreadable(
                f"the image {image.name} is missing (its kept copy is gone): attach it again."
            )
        size = path.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise ImageUnreadable(
                f"the image {image.name} is {size:,} bytes, more than an attachment keeps: "
                "attach it again."
            )
        try:
            with Image.open(path, formats=IMAGE_FORMATS) as img:
                if img.width * img.height > MAX_IMAGE_PIXELS:
                    raise ImageUnreadable(
                        f"the image {image.name} has {img.width}×{img.height} pixels, more than "
                        "an attachment keeps: attach it again."
                    )
                rgb = img.convert("RGB")
                rgb.load()
        except ImageUnreadable:
            raise
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            raise ImageUnreadable(
                f"the image {image.name} could not be decoded ({type(exc).__name__}): "
                "attach it again."
            ) from None
        data = rgb.tobytes()
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = self._mt.mtmd_bitmap_init(rgb.width, rgb.height, buf)
        if not bitmap:
            raise ImageUnreadable(f"llama.cpp could not take the image {image.name}.")
        return bitmap

    def _free(self, chunks: Any, bitmap: Any) -> None:
        if chunks:
            self._mt.mtmd_input_chunks_free(chunks)
        if bitmap:
            self._mt.mtmd_bitmap_free(bitmap)


def check_projector(path: Path, n_embd: int | None = None) -> None:
    """Refuse, in one line and before llama.cpp reads it, a projector file that is no GGUF, no
    projector, or (``n_embd``: the loaded model's width) one made for a model of another width."""
    name = file_label(path)
    try:
        info = inspect_gguf(path)
    except ModelFileError as exc:
        raise ProjectorError(f"the projector (--mmproj): {exc}") from None
    meta = info.metadata
    if info.architecture != "clip" or not any(
        k.startswith("clip.") and "projector_type" in k for k in meta
    ):
        raise ProjectorError(
            f"{name} is not a multimodal projector (its architecture is "
            f"{info.architecture}): pass the model's mmproj-*.gguf file to --mmproj."
        )
    width = meta.get("clip.vision.projection_dim")
    if n_embd is not None and isinstance(width, int) and width > 0 and width != n_embd:
        raise ProjectorError(
            f"the projector {name} does not fit this model (it projects to {width}, the "
            f"model takes {n_embd}): use the mmproj file made for this model."
        )


def file_label(path: Path) -> str:
    """A file's name as a one-line message may show it (a name is outside text)."""
    return " ".join(sanitize(path.name).split())[:120] or "(unnamed)"
