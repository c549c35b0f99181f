"""``LlamaCppBackend``: GGUF models in process through llama-cpp-python's bindings.

We drive llama.cpp's C API directly (model, context, batch decode, the C sampler
chain) instead of the high-level ``Llama`` class, because that class

* redirects file descriptors 1 and 2 while loading unless ``verbose=True``, and
  then prints to stderr instead (either way a TUI breaks);
* re-detokenizes the whole reply on every streamed token;
* defaults to one thread on a 2-core machine and to a 512-token context;
* has no way to stop a long prompt evaluation.

The loop here is lean: per token one ``llama_sampler_sample``, one
``llama_token_to_piece`` and one ``llama_decode`` of a one-token batch.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as ll

from .backend import (
    ChatEvent,
    ChatMessage,
    ContextTrimmed,
    FinishReason,
    GenerationDone,
    GenerationStats,
    ModelInfo,
    TextDelta,
)
from .chat_template import ChatTemplate, choose_template
from .errors import ContextOverflowError, GenerationError, ModelLoadError
from .gguf import GGUFInfo, inspect_gguf
from .params import SamplingParams
from .stops import StopMatcher
from .system import available_memory, default_threads

log = logging.getLogger("vibechat.llama_cpp")

DEFAULT_MAX_CONTEXT = 8192
PENALTY_LAST_N = 64

# ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


class _LlamaLog:
    """Routes llama.cpp's log to Python logging (never to the terminal) and lets a
    load capture its own lines (errors, "offloaded N/M layers")."""

    def __init__(self) -> None:
        self._buffer = ""
        self._level = logging.INFO
        self._lock = threading.Lock()
        self.captured: list[tuple[int, str]] | None = None
        self._callback = ll.llama_log_callback(self._on_log)  # keep a reference: C holds the pointer

    def install(self) -> None:
        ll.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        try:
            with self._lock:
                if level != 5:
                    self._level = _LEVELS.get(level, logging.INFO)
                self._buffer += text.decode("utf-8", errors="replace")
                while "\n" in self._buffer:
                    line, self._buffer = self._buffer.split("\n", 1)
                    if line.strip():
                        log.log(self._level, "%s", line)
                        if self.captured is not None:
                            self.captured.append((self._level, line))
        except Exception:  # noqa: BLE001 - never raise into C
            pass


_LOG: _LlamaLog | None = None
_BACKEND_INIT = threading.Lock()


def _ensure_llama_initialised() -> _LlamaLog:
    global _LOG
    with _BACKEND_INIT:
        if _LOG is None:
            _LOG = _LlamaLog()
            _LOG.install()  # replaces llama-cpp-python's own callback (wrong levels, prints to stderr)
            ll.llama_backend_init()
        return _LOG


def gpu_offload_supported() -> bool:
    return bool(ll.llama_supports_gpu_offload())


@dataclass
class LlamaCppOptions:
    """How to load a model. ``None`` means "choose like llama.cpp would"."""

    model_path: Path
    n_ctx: int | None = None  # default: trained context, capped at 8192
    n_gpu_layers: int | None = None  # default: all when the build can offload, else 0
    n_threads: int | None = None  # default: physical performance cores
    flash_attn: bool | None = None  # default: auto (llama.cpp decides per device)
    n_batch: int = 2048
    n_ubatch: int = 512


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class LlamaCppBackend:
    """A GGUF model in this process. One thread drives it; ``cancel()`` is thread-safe."""

    name = "llama.cpp"

    def __init__(self, options: LlamaCppOptions) -> None:
        self.options = options
        self._model = None
        self._ctx = None
        self._vocab = None
        self._mem = None
        self._info: ModelInfo | None = None
        self._gguf: GGUFInfo | None = None
        self._template: ChatTemplate | None = None
        self._tokens: list[int] = []  # what the KV cache holds for sequence 0
        self._cancel = threading.Event()
        self._aborting = ll.ggml_abort_callback(lambda _data: self._cancel.is_set())
        self._no_abort = ctypes.cast(None, ll.ggml_abort_callback)
        self._one = (ll.llama_token * 1)()
        self._piece = ctypes.create_string_buffer(256)

    # ----------------------------------------------------------------- loading
    def load(self, on_progress: Callable[[float], None] | None = None) -> ModelInfo:
        if self._info is not None:
            return self._info
        opts = self.options
        gguf = inspect_gguf(opts.model_path)  # raises ModelFileError before llama.cpp sees a bad file
        llama_log = _ensure_llama_initialised()
        offload = gpu_offload_supported()
        if opts.n_gpu_layers is None:
            n_gpu_layers = -1 if offload else 0
        else:
            n_gpu_layers = opts.n_gpu_layers
            if n_gpu_layers != 0 and not offload:
                log.warning("this llama-cpp-python build cannot offload to a GPU; running on the CPU")

        if n_gpu_layers == 0 or not offload:
            check_memory(gguf.file_size, gguf.path.name)

        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        progress_cb = None
        if on_progress is not None:
            report = on_progress

            def _progress(value: float, _user: ctypes.c_void_p) -> bool:
                try:
                    report(float(value))
                except Exception:  # noqa: BLE001
                    pass
                return True

            progress_cb = ll.llama_progress_callback(_progress)
            mparams.progress_callback = progress_cb

        captured: list[tuple[int, str]] = []
        llama_log.captured = captured
        try:
            model = ll.llama_model_load_from_file(str(gguf.path).encode("utf-8"), mparams)
            if not model:
                raise ModelLoadError(f"llama.cpp could not load {gguf.path}: "
                                     f"{_last_error(captured) or 'unsupported or corrupt model'}; "
                                     "try another file or a newer vibechat.")
            trained = int(ll.llama_model_n_ctx_train(model))
            n_ctx = opts.n_ctx or min(trained or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)
            n_threads = opts.n_threads or default_threads()
            cparams = ll.llama_context_default_params()
            cparams.n_ctx = n_ctx
            cparams.n_batch = min(opts.n_batch, n_ctx)
            cparams.n_ubatch = min(opts.n_ubatch, cparams.n_batch)
            cparams.n_threads = n_threads
            cparams.n_threads_batch = n_threads
            cparams.no_perf = False
            cparams.flash_attn_type = (ll.LLAMA_FLASH_ATTN_TYPE_AUTO if opts.flash_attn is None
                                       else ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if opts.flash_attn
                                       else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED)
            ctx = ll.llama_init_from_model(model, cparams)
            if not ctx:
                ll.llama_model_free(model)
                raise ModelLoadError(
                    f"llama.cpp could not create a {n_ctx:,}-token context for {gguf.path.name} "
                    f"({_last_error(captured) or 'not enough memory?'}): try a smaller --ctx."
                )
        finally:
            llama_log.captured = None
        self._model, self._ctx, self._gguf = model, ctx, gguf
        self._vocab = ll.llama_model_get_vocab(model)
        self._mem = ll.llama_get_memory(ctx)
        ll.llama_set_abort_callback(ctx, self._no_abort, None)

        bos = self._token_text(ll.llama_vocab_bos(self._vocab))
        eos = self._token_text(ll.llama_vocab_eos(self._vocab))
        name, source = choose_template(gguf.chat_template, gguf.architecture, self._has_token)
        self._template = ChatTemplate(name, source, bos_token=bos, eos_token=eos)

        n_layers = int(ll.llama_model_n_layer(model))
        self._info = ModelInfo(
            name=gguf.name,
            path=str(gguf.path),
            architecture=gguf.architecture,
            quantization=gguf.quantization,
            trained_context=trained or gguf.context_length,
            context_size=int(ll.llama_n_ctx(ctx)),
            n_layers=n_layers,
            gpu_layers=_offloaded_layers(captured, n_gpu_layers, n_layers, offload),
            gpu_offload_supported=offload,
            chat_format=name,
            file_size=gguf.file_size,
            n_threads=n_threads,
            flash_attn=_flash_attn_state(captured, opts.flash_attn),
        )
        log.info("loaded %s (%s, %s) ctx=%d threads=%d template=%s", gguf.path, gguf.architecture,
                 gguf.quantization, self._info.context_size, n_threads, name)
        return self._info

    def describe(self) -> ModelInfo:
        if self._info is None:
            raise GenerationError("no model is loaded yet.")
        return self._info

    def close(self) -> None:
        if self._ctx is not None:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model is not None:
            ll.llama_model_free(self._model)
            self._model = None
        self._info = None
        self._tokens = []

    # ---------------------------------------------------------- tokenization
    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        raw = ll.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def _tokenize(self, text: str, add_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, True)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, True)
            if n < 0:
                raise GenerationError("the prompt could not be tokenized.")
        return list(buf[:n])

    def _has_token(self, text: str) -> bool:
        tokens = self._tokenize(text, add_special=False)
        return len(tokens) == 1 and self._token_text(tokens[0]) == text

    def _prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        assert self._template is not None
        text = self._template.render(messages)
        bos = self._template.bos_token
        already_has_bos = bool(bos) and text.startswith(bos)
        return self._tokenize(text, add_special=not already_has_bos)

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        self.load()
        return len(self._prompt_tokens(messages))

    def _fit(self, messages: Sequence[ChatMessage], params: SamplingParams) -> tuple[list[int], int]:
        """Prompt tokens for the newest messages that fit, and how many old ones were dropped."""
        n_ctx = self.describe().context_size
        reserve = min(params.max_tokens or 512, n_ctx // 4)
        system = [m for m in messages[:1] if m.role == "system"]
        rest = list(messages[len(system):])
        dropped = 0
        tokens = self._prompt_tokens(system + rest)
        while len(tokens) + reserve > n_ctx and len(rest) > 1:
            # Drop the oldest turn: a user message and the replies that follow it.
            rest.pop(0)
            dropped += 1
            while len(rest) > 1 and rest[0].role != "user":
                rest.pop(0)
                dropped += 1
            tokens = self._prompt_tokens(system + rest)
        if len(tokens) >= n_ctx:
            trained = self.describe().trained_context
            more = f" (this model was trained for {trained:,})" if trained and trained > n_ctx else ""
            raise ContextOverflowError(
                f"the prompt takes {len(tokens):,} tokens but the context holds {n_ctx:,}: "
                f"shorten the message or system prompt, or raise --ctx{more}."
            )
        return tokens, dropped

    # ------------------------------------------------------------ generation
    def cancel(self) -> None:
        self._cancel.set()

    def reset(self) -> None:
        """Forget the conversation: empty the KV cache so the next turn evaluates everything."""
        if self._mem is not None:
            ll.llama_memory_clear(self._mem, True)
        self._tokens = []

    def prefill(self, messages: Sequence[ChatMessage]) -> int:
        self.load()
        self._cancel.clear()
        tokens, _dropped = self._fit(messages, SamplingParams())
        self.reset()
        ll.llama_set_abort_callback(self._ctx, self._aborting, None)
        try:
            if not self._decode(tokens):
                self.reset()
                return 0
        finally:
            ll.llama_set_abort_callback(self._ctx, self._no_abort, None)
        return len(tokens)

    def _decode(self, tokens: Sequence[int]) -> bool:
        """Evaluate ``tokens`` after the cached ones; False if cancelled."""
        n_batch = max(1, min(self.options.n_batch, self.describe().context_size))
        for start in range(0, len(tokens), n_batch):
            if self._cancel.is_set():
                return False
            chunk = tokens[start:start + n_batch]
            arr = (ll.llama_token * len(chunk))(*chunk)
            rc = ll.llama_decode(self._ctx, ll.llama_batch_get_one(arr, len(chunk)))
            if rc == 2:
                return False
            if rc != 0:
                raise GenerationError(f"llama.cpp failed to evaluate the prompt (llama_decode returned {rc}); "
                                      "start a new conversation or lower --ctx.")
            self._tokens.extend(chunk)
        return True

    def _sampler(self, params: SamplingParams):
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        add = ll.llama_sampler_chain_add
        if params.repeat_penalty != 1.0:
            n_vocab = ll.llama_vocab_n_tokens(self._vocab)
            add(chain, ll.llama_sampler_init_penalties(n_vocab, PENALTY_LAST_N, params.repeat_penalty, 0.0, 0.0))
        if params.temperature <= 0:
            add(chain, ll.llama_sampler_init_greedy())
            return chain
        if params.top_k > 0:
            add(chain, ll.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            add(chain, ll.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            add(chain, ll.llama_sampler_init_min_p(params.min_p, 1))
        add(chain, ll.llama_sampler_init_temp(params.temperature))
        assert params.seed is not None
        add(chain, ll.llama_sampler_init_dist(params.seed))
        return chain

    def _piece_bytes(self, token: int) -> bytes:
        n = ll.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, False)
        if n < 0:
            self._piece = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, False)
        return self._piece.raw[:n]

    def stream_chat(self, messages: Sequence[ChatMessage], params: SamplingParams) -> Iterator[ChatEvent]:
        self.load()
        self._cancel.clear()
        params = params.with_seed()
        t_start = time.perf_counter()
        tokens, dropped = self._fit(messages, params)
        n_ctx = self.describe().context_size
        stats = GenerationStats(prompt_tokens=len(tokens), seed=params.seed, dropped_messages=dropped)
        if dropped:
            yield ContextTrimmed(dropped_messages=dropped, prompt_tokens=len(tokens), context_size=n_ctx)

        # Reuse the cached prefix; always evaluate at least the last prompt token for fresh logits.
        keep = min(_common_prefix(self._tokens, tokens), len(tokens) - 1)
        if keep < len(self._tokens):
            if not ll.llama_memory_seq_rm(self._mem, 0, keep, -1):
                ll.llama_memory_clear(self._mem, True)
                keep = 0
            del self._tokens[keep:]
        suffix = tokens[keep:]
        stats.prompt_tokens_evaluated = len(suffix)

        text_parts: list[str] = []
        finish: FinishReason = "stop"
        ll.llama_set_abort_callback(self._ctx, self._aborting, None)
        try:
            t_prompt = time.perf_counter()
            evaluated = self._decode(suffix)
        finally:
            ll.llama_set_abort_callback(self._ctx, self._no_abort, None)
        t_first_token = t_prompt_done = time.perf_counter()
        stats.prompt_eval_ms = (t_prompt_done - t_prompt) * 1000
        if not evaluated:
            finish = "cancelled"
        else:
            limit = n_ctx - len(tokens)
            if params.max_tokens is not None:
                limit = min(limit, params.max_tokens)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            stops = StopMatcher(params.stop)
            chain = self._sampler(params)
            generated = 0
            first = True
            vocab, ctx, one = self._vocab, self._ctx, self._one
            try:
                while True:
                    if self._cancel.is_set():
                        finish = "cancelled"
                        break
                    if generated >= limit:
                        finish = "length"
                        break
                    token = ll.llama_sampler_sample(chain, ctx, -1)
                    if ll.llama_vocab_is_eog(vocab, token):
                        break
                    generated += 1
                    text = stops.feed(decoder.decode(self._piece_bytes(token)))
                    if text:
                        if first:
                            t_first_token = time.perf_counter()
                            first = False
                        text_parts.append(text)
                        yield TextDelta(text)
                    if stops.stopped:
                        break
                    one[0] = token
                    rc = ll.llama_decode(ctx, ll.llama_batch_get_one(one, 1))
                    if rc != 0:
                        if rc == 2 or self._cancel.is_set():
                            finish = "cancelled"
                            break
                        raise GenerationError(f"llama.cpp failed while generating (llama_decode returned {rc}); "
                                              "start a new conversation.")
                    self._tokens.append(token)
            finally:
                ll.llama_sampler_free(chain)
            stats.completion_tokens = generated
            tail = stops.flush() + decoder.decode(b"", final=True)
            if tail and not stops.stopped:
                text_parts.append(tail)
                yield TextDelta(tail)
        t_end = time.perf_counter()
        stats.finish_reason = finish
        stats.ttft_ms = (t_first_token - t_start) * 1000 if text_parts else 0.0
        stats.decode_ms = (t_end - t_prompt_done) * 1000
        if stats.completion_tokens and stats.decode_ms > 0:
            stats.decode_tokens_per_s = stats.completion_tokens / (stats.decode_ms / 1000)
        yield GenerationDone(text="".join(text_parts), stats=stats, params=params)


def check_memory(needed: int, name: str, available: int | None = None) -> None:
    """Refuse a model whose weights cannot fit in the memory available (it would page
    the machine to a crawl, or get killed)."""
    available = available_memory() if available is None else available
    if available is not None and needed > available:
        raise ModelLoadError(
            f"{name} needs about {needed / 1e9:.1f} GB of memory but {available / 1e9:.1f} GB is available: "
            "choose a smaller quantization (vibechat models search), or close other programs."
        )


def _last_error(captured: list[tuple[int, str]]) -> str:
    errors = [line.strip() for level, line in captured if level >= logging.ERROR]
    return errors[-1] if errors else ""


def _offloaded_layers(captured: list[tuple[int, str]], requested: int, n_layers: int, offload: bool) -> int:
    import re

    for _level, line in captured:
        match = re.search(r"offloaded (\d+)/(\d+) layers to GPU", line)
        if match:
            return int(match.group(1))
    if not offload or requested == 0:
        return 0
    return n_layers if requested < 0 else min(requested, n_layers)


def _flash_attn_state(captured: list[tuple[int, str]], requested: bool | None) -> bool | None:
    if requested is not None:
        return requested
    state = None
    for _level, line in captured:
        lower = line.lower()
        if "flash attention" in lower or "flash_attn" in lower:
            if "enabled" in lower:
                state = True
            elif "disabled" in lower:
                state = False
    return state
