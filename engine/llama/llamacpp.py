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
import functools
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path

import llama_cpp as ll

from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    ContextTrimmed,
    DraftProgress,
    FinishReason,
    GenerationDone,
    GenerationStats,
    ModelInfo,
    TextDelta,
    ThinkingDelta,
)
from ..turns.chat_template import COMPLETION, ChatTemplate, choose_template
from ..turns.harmony import HarmonySplitter, uses_harmony
from ..settings.think_switch import OpensThinking, switched
from ..turns.thinking import Piece, StreamSplitter, ThinkingSplitter, template_opens_thinking
from ..errors import (
    ContextOverflowError,
    TemplateCancelled,
    GenerationError,
    GpuOffloadUnavailableError,
    InvalidParameterError,
    LoadCancelled,
    ModelFileError,
    ModelLoadError,
)
from .draft_model import DraftModel
from .drafting import prompt_lookup_tokens
from ..models.gguf import GGUFInfo, inspect_gguf
from .grammar_sampling import ChainSampler, GrammarSampler, Sampler
from ..settings.knobs import LlamaCppOptions  # noqa: F401 - defined where the chat can read it without libllama
from ..settings.knobs import (
    CONTEXT_STEP,
    check_draft_logits,
    check_draft_tokens,
    check_kv_cache_type,
    check_speculative,
    context_rounding_notice,
    gpu_unavailable_message,
    kv_cache_bytes,
    prompt_byte_limit,
    prompt_too_large,
    round_context,
)
from . import repack as _repack
from ..settings.params import SamplingParams
from .speculative import AdaptiveDraft, FixedDraft, make_policy
from ..settings.structured import OutputFormat
from ..turns.stops import StopMatcher
from ..system import available_memory, default_threads

log = logging.getLogger("vibechat.llama_cpp")

DEFAULT_MAX_CONTEXT = 8192
PENALTY_LAST_N = 64
DRAFT_PROGRESS_S = 0.5  # while drafting, a DraftProgress this often (the chat's live status)

# llama.cpp's ggml_type ids for the KV-cache types in knobs.KV_CACHE_TYPES
_GGML_TYPES = {"f16": ll.GGML_TYPE_F16, "q8_0": ll.GGML_TYPE_Q8_0, "q4_0": ll.GGML_TYPE_Q4_0}

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


@functools.lru_cache(maxsize=32)
def grammar_error(gbnf: str, root: str = "root") -> str | None:
    """Why llama.cpp's grammar parser rejects ``gbnf`` (its own words, one line), or None.
    Parsing needs no model: the sampler is made without a vocabulary and freed. The parser
    prints its complaint with ``fprintf(stderr)``, past the log callback: file descriptor 2
    is pointed at a temporary file meanwhile (call this where no other thread draws on the
    terminal: the CLI before loading, the engine's own process)."""
    llama_log = _ensure_llama_initialised()
    previous = llama_log.captured  # some complaints come through the log callback instead
    captured = previous if previous is not None else []
    start = len(captured)
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        llama_log.captured = captured
        try:
            os.dup2(sink.fileno(), 2)
            sampler = ll.llama_sampler_init_grammar(None, gbnf.encode("utf-8"), root.encode("utf-8"))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            llama_log.captured = previous
        sink.seek(0)
        said = sink.read(65536).decode("utf-8", errors="replace")
    if sampler:
        ll.llama_sampler_free(sampler)
        return None
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    lines += [line.strip() for _level, line in captured[start:]]
    for line in lines:
        if "error parsing grammar:" in line:
            return line.split("error parsing grammar:", 1)[1].strip()
    for line in lines:
        if "grammar" in line or "recursion" in line:
            return line
    return "it does not parse"


def check_output_format(fmt: OutputFormat) -> None:
    """A one-line ``InvalidParameterError`` unless the local engine can use ``fmt``: the schema
    converts to GBNF and llama.cpp's parser takes the grammar. Needs no model."""
    gbnf = fmt.gbnf()
    error = grammar_error(gbnf)
    if error is not None:
        raise InvalidParameterError(f"{fmt.label}: llama.cpp rejects the grammar: {error}.")


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
        self._turn_stops: frozenset[int] = frozenset()  # turn tokens that end a reply (besides EOG)
        self._reply_thinks = False  # the generation prompt opens <think>: replies start thinking
        self._harmony = False  # the reply is in gpt-oss's harmony format (channels)
        self._tokens: list[int] = []  # what the KV cache holds for sequence 0
        self._policy: FixedDraft | AdaptiveDraft | None = None  # the draft length's policy (None: not drafting)
        self._draft: DraftModel | None = None  # --draft-model (None: drafts come from prompt lookup)
        self._cancel = threading.Event()
        self._aborting = ll.ggml_abort_callback(lambda _data: self._cancel.is_set())
        # A NULL callback. typeshed's ctypes.cast() rejects None, which ctypes accepts (NULL).
        self._no_abort = ctypes.cast(None, ll.ggml_abort_callback)  # type: ignore[arg-type]
        self._one = (ll.llama_token * 1)()
        self._piece = ctypes.create_string_buffer(256)

    # ----------------------------------------------------------------- loading
    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        if self._info is not None:
            return self._info
        opts = self.options
        # Knob values are checked before anything is loaded: a typo costs no time.
        kv_type = check_kv_cache_type(opts.kv_cache_type)
        speculative = check_speculative(opts.speculative)
        if opts.draft_model_path is not None and speculative == "off":
            speculative = "auto"  # a draft model turns drafting on
        draft_tokens = check_draft_tokens(opts.draft_tokens) if speculative != "off" else 0
        _repack.check_repack(opts.repack)
        gguf = inspect_gguf(opts.model_path)  # raises ModelFileError before llama.cpp sees a bad file
        draft_gguf = inspect_gguf(opts.draft_model_path) if opts.draft_model_path is not None else None
        llama_log = _ensure_llama_initialised()
        cancelled = self._cancel
        cancelled.clear()  # cancel() from now on stops the load (the probe, then llama.cpp between tensors)
        repack = self._repack_choice(gguf.path)
        offload = gpu_offload_supported()
        notices: list[str] = []
        if opts.gpu_layers is None:
            n_gpu_layers = -1 if offload else 0
        else:
            n_gpu_layers = opts.gpu_layers
            if n_gpu_layers != 0 and not offload:
                message = gpu_unavailable_message(n_gpu_layers, getattr(ll, "__version__", None))
                if not opts.cpu_fallback:
                    raise GpuOffloadUnavailableError(message)
                log.warning("%s", message)
                notices.append("Running on the CPU: " + message)

        if n_gpu_layers == 0 or not offload:
            if draft_gguf is None:
                check_memory(gguf.file_size, gguf.path.name)
            else:  # the draft model's weights sit beside the model's
                check_memory(gguf.file_size + draft_gguf.file_size, f"{gguf.path.name} with {draft_gguf.path.name}")

        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        mparams.use_extra_bufts = repack.extra_buffers
        if repack.probed_now:
            notices.append(f"CPU weight repacking is {repack.describe()}; vibechat checked this once for this "
                           "machine (--repack on|off overrides it)")

        def _progress(value: float, _user: ctypes.c_void_p) -> bool:
            if on_progress is not None:
                try:
                    on_progress(float(value))
                except Exception:  # noqa: BLE001
                    pass
            return not cancelled.is_set()

        progress_cb = ll.llama_progress_callback(_progress)
        mparams.progress_callback = progress_cb

        captured: list[tuple[int, str]] = []
        llama_log.captured = captured
        try:
            model = ll.llama_model_load_from_file(str(gguf.path).encode("utf-8"), mparams)
            if not model and cancelled.is_set():
                raise LoadCancelled(f"loading {gguf.path.name} was cancelled.")
            if not model:
                raise ModelLoadError(f"llama.cpp could not load {gguf.path}: "
                                     f"{_last_error(captured) or 'unsupported or corrupt model'}; "
                                     "try another file or a newer vibechat.")
            if speculative != "off":
                speculative, draft_tokens = self._check_drafting(model, speculative, draft_tokens, notices)
            trained = max(0, int(ll.llama_model_n_ctx_train(model)))  # an int32: garbage can be negative
            # Rounded up here as llama.cpp would: every size and message below is the real one.
            n_ctx = round_context(opts.context_size or min(trained or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT))
            n_threads = opts.threads or default_threads()
            cparams = ll.llama_context_default_params()
            cparams.n_ctx = n_ctx
            cparams.n_batch = min(opts.n_batch, n_ctx)
            cparams.n_ubatch = min(opts.n_ubatch, cparams.n_batch)
            cparams.n_threads = n_threads
            cparams.n_threads_batch = n_threads
            cparams.no_perf = False
            cparams.type_k = cparams.type_v = _GGML_TYPES[kv_type]
            flash_attn = opts.flash_attn
            forced = False
            if kv_type != "f16" and flash_attn is None:
                # llama.cpp cannot create a quantized V cache without flash attention.
                flash_attn = forced = True
                log.info("flash attention turned on: the %s V cache needs it", kv_type)
            cparams.flash_attn_type = (ll.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn is None
                                       else ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                       else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED)
            if n_gpu_layers == 0 or not offload:  # the KV cache is in RAM too: will it fit beside the weights?
                needed = self._kv_cache_computed(n_ctx, kv_type, model, gguf.architecture)
                try:
                    weights = gguf.file_size + (draft_gguf.file_size if draft_gguf is not None else 0)
                    check_context_memory(needed, weights, n_ctx, kv_type, opts.context_size is not None)
                except ModelLoadError:
                    ll.llama_model_free(model)
                    raise
            ctx = ll.llama_init_from_model(model, cparams)
            if not ctx:
                ll.llama_model_free(model)
                reason = _last_error(captured) or "not enough memory?"
                if kv_type != "f16":
                    raise ModelLoadError(
                        f"llama.cpp could not create a {n_ctx:,}-token context with a {kv_type} KV cache for "
                        f"{gguf.path.name} ({reason}): a quantized V cache needs flash attention on this device; "
                        "use --kv-cache-type f16 (kv_cache_type in the config)."
                    )
                raise ModelLoadError(
                    f"llama.cpp could not create a {n_ctx:,}-token context for {gguf.path.name} "
                    f"({reason}): try a smaller --ctx."
                )
        finally:
            llama_log.captured = None
        self._model, self._ctx, self._gguf = model, ctx, gguf
        self._vocab = ll.llama_model_get_vocab(model)
        self._mem = ll.llama_get_memory(ctx)
        ll.llama_set_abort_callback(ctx, self._no_abort, None)

        bos = self._token_text(ll.llama_vocab_bos(self._vocab))
        eos = self._token_text(ll.llama_vocab_eos(self._vocab))
        # The GGUF's template, a built-in turn format, or (a base model) the completion frame.
        choice = choose_template(gguf.chat_template, gguf.architecture, self._has_token, gguf.metadata,
                                 gguf.path.name, opts.prompt_format)
        name, source = choice.name, choice.source
        # cancel() (Ctrl-C) also stops a render: a GGUF's template is code that may loop for long.
        self._template = ChatTemplate(name, source, bos_token=bos, eos_token=eos, cancelled=self._cancel.is_set)
        self._turn_stops = frozenset(self._single_token(text) for text in self._template.turn_tokens
                                     if self._has_token(text))
        # A generation prompt that ends inside <think> (DeepSeek-R1's distills): the reply
        # starts inside the thinking block (engine/turns/thinking.py).
        self._reply_thinks = template_opens_thinking(self._template.render)
        # gpt-oss's channels (engine/turns/harmony.py); never in the completion frame, which has no channels.
        self._harmony = name != COMPLETION and uses_harmony(source, self._has_token)
        # ... and with the thinking switched on or off, where the template takes a switch.
        self._opens_thinking = OpensThinking(self._template.render, self._template.thinking_switch,
                                             template_opens_thinking)

        n_layers = int(ll.llama_model_n_layer(model))
        context_size = int(ll.llama_n_ctx(ctx))
        rounded = context_rounding_notice(opts.context_size, context_size) if opts.context_size else None
        if rounded:
            log.info("%s", rounded)
            notices.append(rounded)
        kv_bytes = _kv_cache_logged(captured)
        if kv_bytes is None:
            kv_bytes = self._kv_cache_computed(context_size, kv_type)
        self._policy = (make_policy(speculative, draft_tokens, draft_model=draft_gguf is not None)
                        if speculative != "off" else None)
        if draft_gguf is not None and speculative != "off":
            draft_info = draft_gguf

            def check_kv(draft_model) -> int | None:
                """The draft's KV cache (f16, the context's size), checked in RAM beside both
                models' weights (the model's own KV cache is allocated by now: what is
                available already leaves it out)."""
                draft_kv = self._kv_cache_computed(context_size, "f16", draft_model, draft_info.architecture)
                if n_gpu_layers == 0 or not offload:
                    check_draft_memory(draft_kv, gguf.file_size + draft_info.file_size, context_size)
                return draft_kv

            try:
                self._draft = DraftModel(draft_gguf.path, n_ctx=context_size, n_threads=n_threads,
                                         n_gpu_layers=n_gpu_layers, extra_buffers=repack.extra_buffers,
                                         target_vocab=self._vocab, name=gguf.name or gguf.path.name,
                                         check_kv=check_kv)
            except Exception:
                self.close()
                raise
        self._info = ModelInfo(
            name=gguf.name,
            path=str(gguf.path),
            architecture=gguf.architecture,
            quantization=gguf.quantization,
            trained_context=trained or gguf.context_length,
            context_size=context_size,
            n_layers=n_layers,
            gpu_layers=_offloaded_layers(captured, n_gpu_layers, n_layers, offload),
            gpu_offload_supported=offload,
            chat_format=name, chat_format_reason=choice.reason, thinking_switch=self._template.thinking_switch,
            file_size=gguf.file_size,
            n_threads=n_threads,
            flash_attn=_flash_attn_state(captured, flash_attn),
            kv_cache_type=kv_type,
            kv_cache_bytes=kv_bytes,
            flash_attn_forced=forced,
            speculative=speculative,
            draft_tokens=draft_tokens,
            draft_model=(draft_gguf.name or draft_gguf.path.name) if self._draft is not None and draft_gguf else None,
            draft_model_bytes=self._draft.memory_bytes if self._draft is not None else None,
            repack=repack.state,
            repack_setting=repack.setting,
            repack_reason=repack.reason,
            notices=tuple(notices),
        )
        log.info("loaded %s (%s, %s) ctx=%d threads=%d template=%s (%s) kv=%s (%s bytes) speculative=%s repack=%s",
                 gguf.path, gguf.architecture, gguf.quantization, context_size, n_threads, name, choice.reason, kv_type,
                 kv_bytes, speculative, repack.describe())
        return self._info

    def _repack_choice(self, model_path: Path) -> _repack.RepackChoice:
        """Whether to load with llama.cpp's extra buffer types (engine/llama/repack.py): on unless this
        build's AMX kernel may crash on this CPU; then a one-time probe (cached) decides. The
        probe runs the starter model (small and the same everywhere; unpacked first if need be),
        else the model being loaded."""
        from ..paths import cache_dir
        from ..models.starter import starter_model_path

        info = _repack.system_info()

        def verdict() -> tuple[_repack.ProbeVerdict | None, bool]:
            try:
                probe_model = starter_model_path()
            except ModelFileError:  # its package is missing, or the cache is not writable
                probe_model = model_path
            key = _repack.probe_key(info, getattr(ll, "__version__", ""))
            return _repack.probe_verdict(probe_model, cache_dir() / _repack.VERDICT_FILE, key,
                                         cancelled=self._cancel.is_set)

        return _repack.decide_repack(self.options.repack, info, _repack.cpu_flags(), verdict)

    def _check_drafting(self, model, mode: str, draft_tokens: int, notices: list[str]) -> tuple[str, int]:
        """Whether prompt-lookup drafting (``mode``: auto or prompt-lookup) can run on ``model``: refuses a draft length whose
        logits would be absurd (frees the model first), turns it off for models whose
        memory cannot drop rejected tokens."""
        n_vocab = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model)))
        try:
            check_draft_logits(draft_tokens, n_vocab)
        except Exception:
            ll.llama_model_free(model)
            raise
        if ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model):
            notices.append("Prompt-lookup drafting is off: this model's recurrent state cannot drop "
                           "rejected draft tokens.")
            return "off", 0
        return mode, draft_tokens

    def _kv_cache_computed(self, n_ctx: int, kv_type: str, model=None, arch: str | None = None) -> int | None:
        """n_ctx x layers x (K + V width) x bytes per element, from the model's shape (before the
        context exists, and when llama.cpp's log did not say)."""
        model = model or self._model
        if arch is None:
            arch = self._gguf.architecture if self._gguf else ""
        n_head = int(ll.llama_model_n_head(model))
        n_head_kv = int(ll.llama_model_n_head_kv(model))
        n_embd = int(ll.llama_model_n_embd(model))
        if not n_head or not n_head_kv:
            return None
        head_k = self._meta_int(f"{arch}.attention.key_length", model) or n_embd // n_head
        head_v = self._meta_int(f"{arch}.attention.value_length", model) or n_embd // n_head
        return kv_cache_bytes(n_ctx, int(ll.llama_model_n_layer(model)), head_k * n_head_kv, head_v * n_head_kv,
                              kv_type)

    def _meta_int(self, key: str, model=None) -> int | None:
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_model_meta_val_str(model or self._model, key.encode("utf-8"), buf, len(buf))
        try:
            return int(buf.value) if n > 0 else None
        except ValueError:
            return None

    def describe(self) -> ModelInfo:
        if self._info is None:
            raise GenerationError("no model is loaded yet.")
        return self._info

    def close(self) -> None:
        if self._draft is not None:
            self._draft.close()
            self._draft = None
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

    def _tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        """``text``'s tokens; ``parse_special``: whether special-token texts in it
        (``<end_of_turn>``, ``<|im_start|>``) become those tokens (the template's own text) or
        stay plain text (what people and models wrote)."""
        data = text.encode("utf-8", "replace")
        cap = len(data) + 16
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
            if n < 0:
                raise GenerationError("the prompt could not be tokenized.")
        return list(buf[:n])

    def _has_token(self, text: str) -> bool:
        tokens = self._tokenize(text, add_special=False)
        return len(tokens) == 1 and self._token_text(tokens[0]) == text

    def _single_token(self, text: str) -> int:
        return self._tokenize(text, add_special=False)[0]

    def _prompt_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> list[int]:
        """The prompt's tokens: the template's own text with its special tokens, each message's
        content as plain text, so a message holding ``<end_of_turn><start_of_turn>model`` cannot
        forge a turn (content_parts). ``thinking``: the switch's mode (engine/settings/think_switch.py)."""
        assert self._template is not None
        render = switched(self._template.render, self._template.thinking_switch, thinking)
        messages = self._template.framed(messages)  # the completion frame's own spelling of each content
        text = render(messages)
        bos = self._template.bos_token
        already_has_bos = bool(bos) and text.startswith(bos)
        parts = content_parts(render, messages, text)
        if parts is None:  # a template that rewrites content: as llama.cpp's server tokenizes it
            log.warning("chat template %s changes message content: special tokens in messages are parsed",
                        self._template.name)
            return self._tokenize(text, add_special=not already_has_bos)
        tokens: list[int] = []
        for i, (piece, is_content) in enumerate(parts):
            if piece:
                tokens += self._tokenize(piece, add_special=i == 0 and not already_has_bos,
                                         parse_special=not is_content)
        return tokens

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        self.load()
        return len(self._prompt_tokens(messages, thinking))

    def _fit(self, messages: Sequence[ChatMessage], params: SamplingParams) -> tuple[list[int], int]:
        """Prompt tokens for the newest messages that fit, and how many old ones were dropped."""
        n_ctx = self.describe().context_size
        reserve = min(params.max_tokens or 512, n_ctx // 4)
        system = [m for m in messages[:1] if m.role == "system"]
        rest = list(messages[len(system):])
        dropped = 0
        # Text that cannot fit whatever its tokens is dropped (old turns) or refused (the last
        # message) before anything is tokenized: tokenizing 32 MB takes most of a minute.
        size = _text_bytes(system + rest)
        while size > prompt_byte_limit(n_ctx) and len(rest) > 1:
            gone = _drop_oldest_turn(rest)
            dropped += len(gone)
            size -= _text_bytes(gone)
        too_large = prompt_too_large(size, n_ctx)
        if too_large:
            raise ContextOverflowError(too_large)
        tokens = self._prompt_tokens(system + rest, params.thinking)
        while len(tokens) + reserve > n_ctx and len(rest) > 1:
            dropped += len(_drop_oldest_turn(rest))
            tokens = self._prompt_tokens(system + rest, params.thinking)
        if len(tokens) >= n_ctx:
            trained = self.describe().trained_context
            more = f" (this model was trained for {trained:,})" if trained and trained > n_ctx else ""
            asked = self.options.context_size
            if asked and asked != n_ctx:
                n_ctx_text = f"{n_ctx:,} ({asked:,} rounded up to a multiple of {CONTEXT_STEP})"
            else:
                n_ctx_text = f"{n_ctx:,}"
            raise ContextOverflowError(
                f"the prompt takes {len(tokens):,} tokens but the context holds {n_ctx_text}: "
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
        if self._draft is not None:
            self._draft.reset()

    def prefill(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        self.load()
        self._cancel.clear()
        try:
            tokens, _dropped = self._fit(messages, SamplingParams(thinking=thinking))
        except TemplateCancelled:
            return 0
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

    def _sampler(self, params: SamplingParams) -> Sampler:
        """The sampler the decode loops draw with: the C chain, and for an output format
        llama.cpp's grammar sampler beside it, checked lazily (engine/llama/grammar_sampling.py)."""
        chain = self._chain(params)
        if params.output_format is None:
            return ChainSampler(chain)
        gbnf = params.output_format.gbnf()
        reason = grammar_error(gbnf)  # first, quietly: a bad grammar's complaint goes to stderr
        grammar = None if reason else ll.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not grammar:
            ll.llama_sampler_free(chain)
            raise GenerationError(f"llama.cpp rejects the grammar: {reason or 'it does not parse'}.")
        return GrammarSampler(chain, grammar, ll.llama_vocab_n_tokens(self._vocab))

    def _chain(self, params: SamplingParams):
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        add = ll.llama_sampler_chain_add
        if params.repeat_penalty is not None and params.repeat_penalty != 1.0:  # None: unresolved "auto", off
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

    def stream_chat(self, messages: Sequence[ChatMessage],
                    params: SamplingParams) -> Generator[ChatEvent, None, None]:
        self.load()
        self._cancel.clear()
        assert self._template is not None
        # "auto" made this model's defaults (engine/settings/params.py): what is reported is what was used.
        params = params.with_seed().resolved(self._template.name)
        t_start = time.perf_counter()
        try:
            tokens, dropped = self._fit(messages, params)
        except TemplateCancelled:  # cancel() while the chat template rendered: nothing was evaluated
            yield GenerationDone(text="", stats=GenerationStats(seed=params.seed, finish_reason="cancelled"),
                                 params=params)
            return
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
        thinking_parts: list[str] = []
        started = False
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
            assert self._template is not None
            inside = self._reply_thinks if params.thinking == "auto" else self._opens_thinking(params.thinking)
            completion = self._template.name == COMPLETION
            out = _Emitter(self, limit, (*params.stop, *self._template.stop_strings), inside, self._harmony,
                           lstrip=completion)
            sampler = self._sampler(params)
            try:
                if self._policy is not None:
                    pieces = prompt_lookup_tokens(self, self._policy, sampler, out, tokens, stats, self._draft)
                else:
                    pieces = self._plain_tokens(sampler, out)
                policy, next_progress = self._policy, 0.0
                for split in pieces:
                    if not started:
                        started, t_first_token = True, time.perf_counter()
                        next_progress = t_first_token + DRAFT_PROGRESS_S
                    yield from _split(split, text_parts, thinking_parts, out.generated)
                    if policy is not None and (now := time.perf_counter()) >= next_progress:
                        next_progress = now + DRAFT_PROGRESS_S  # the status bar's live figures
                        yield DraftProgress(stats.drafted_tokens, stats.accepted_draft_tokens,
                                            0 if policy.turned_off else policy.k, policy.turned_off)
            finally:
                sampler.free()
            finish = out.finish
            stats.completion_tokens = out.generated  # thinking tokens included
            stats.thinking_tokens = out.thinking_tokens
            yield from _split(out.tail(), text_parts, thinking_parts, out.generated)
        t_end = time.perf_counter()
        stats.finish_reason = finish
        stats.ttft_ms = (t_first_token - t_start) * 1000 if started else 0.0
        stats.decode_ms = (t_end - t_prompt_done) * 1000
        if stats.completion_tokens and stats.decode_ms > 0:
            stats.decode_tokens_per_s = stats.completion_tokens / (stats.decode_ms / 1000)
        yield GenerationDone(text="".join(text_parts), stats=stats, params=params,
                             thinking="".join(thinking_parts))

    # Both decode loops (this one and engine/llama/drafting.py's) sample with the same sampler and hand every token to the same
    # _Emitter; they differ only in how many tokens one llama_decode evaluates.
    def _plain_tokens(self, sampler: Sampler, out: "_Emitter") -> Iterator[list[Piece]]:
        """One token per llama_decode. Yields the reply's pieces (thinking, answer) as they form."""
        ctx, one = self._ctx, self._one
        sample, decode, batch_one = sampler.sample, ll.llama_decode, ll.llama_batch_get_one
        while out.may_continue():
            token = sample(ctx, -1)
            split = out.emit(token)
            if split:
                yield split
            if out.done:
                return
            one[0] = token
            rc = decode(ctx, batch_one(one, 1))
            if rc != 0:
                self._decode_failed(rc, out)
                return
            self._tokens.append(token)

    def _decode_failed(self, rc: int, out: "_Emitter") -> None:
        if rc == 2 or self._cancel.is_set():
            out.finish = "cancelled"
            return
        raise GenerationError(f"llama.cpp failed while generating (llama_decode returned {rc}); "
                              "start a new conversation.")


class _Emitter:
    """What every decode loop does with a sampled token: stop on cancel or at the length
    limit, end at end-of-generation or at a token that opens or closes a turn, decode the
    token's bytes as UTF-8 without splitting a character, and hold back text that may be the
    start of a stop string."""

    __slots__ = ("_backend", "_cancel", "limit", "generated", "finish", "done", "_decode", "_stops", "_eog",
                 "_vocab", "_turn_stops", "_splitter", "thinking_tokens", "_lstrip", "_line_start")

    def __init__(self, backend: LlamaCppBackend, limit: int, stop: Sequence[str], inside: bool = False,
                 harmony: bool = False, lstrip: bool = False) -> None:
        self._backend = backend
        self._cancel = backend._cancel
        self._vocab = backend._vocab
        self._eog = ll.llama_vocab_is_eog
        self._turn_stops = backend._turn_stops
        self.limit = limit
        self.generated = 0
        self.thinking_tokens = 0  # of those, generated inside the thinking block (its tags included)
        self.finish: FinishReason = "stop"
        self.done = False  # ended by end-of-generation or a stop string
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        self._stops = StopMatcher(stop)
        # The reply's thinking apart: <think> tags (engine/turns/thinking.py) or gpt-oss's channels (harmony.py).
        self._splitter: StreamSplitter = HarmonySplitter() if harmony else ThinkingSplitter(inside)
        # The completion frame's cue is "Assistant:", so an answer starts with a space (" Paris."):
        # not the reply's text. (Re-rendered, the frame puts it back: the cached tokens still match.)
        # Leading blank lines go too, and the stop strings see the answer as the start of a line
        # (a "\n" put before it, never emitted): an answer that opens with "User:" ends there,
        # one that opens with a blank line does not end empty.
        self._lstrip = lstrip
        self._line_start = False  # the "\n" put before the answer is still to be taken out

    def may_continue(self) -> bool:
        """Whether to sample another token (False: cancelled, or the limit is reached)."""
        if self._cancel.is_set():
            self.finish = "cancelled"
            return False
        if self.generated >= self.limit:
            self.finish = "length"
            return False
        return True

    def emit(self, token: int) -> list[Piece]:
        """The thinking and answer pieces ``token`` adds to the reply (none when held back);
        sets ``done`` at the end."""
        if token in self._turn_stops or self._eog(self._vocab, token):
            self.done = True
            return []
        self.generated += 1
        splitter = self._splitter
        was_thinking = splitter.thinking
        pieces = splitter.feed(self._decode(self._backend._piece_bytes(token)))
        if was_thinking or splitter.thinking:  # inside the block, or the token that opens or closes it
            self.thinking_tokens += 1
        return self._stopped_at(pieces)

    def _stopped_at(self, pieces: list[Piece]) -> list[Piece]:
        """Stop strings apply to the answer only (the thinking comes first, and is not matched)."""
        out: list[Piece] = []
        stops = self._stops
        for thinking, text in pieces:
            if stops.stopped:
                break
            if not thinking:
                if self._lstrip:
                    text = text.lstrip()
                    if not text:
                        continue
                    self._lstrip, self._line_start, text = False, True, "\n" + text
                text = stops.feed(text)
                if stops.stopped:
                    self.done = True
                if self._line_start and text:
                    self._line_start, text = False, text[1:]
            if text:
                out.append((thinking, text))
        return out

    def tail(self) -> list[Piece]:
        """What is still held back once generation ends (nothing after a stop string)."""
        if self._stops.stopped:
            return []
        out = self._stopped_at(self._splitter.feed(self._decode(b"", final=True)) + self._splitter.flush())
        rest = self._stops.flush()
        if self._line_start and rest:
            self._line_start, rest = False, rest[1:]
        if rest:
            out.append((False, rest))
        return out


def _split(pieces: list[Piece], text_parts: list[str],
           thinking_parts: list[str], tokens: int = 0) -> Iterator[ChatEvent]:
    """The splitter's pieces as events, kept in ``text_parts`` / ``thinking_parts``;
    ``tokens``: generated so far (the live count the status bar shows)."""
    for thinking, text in pieces:
        if thinking:
            thinking_parts.append(text)
            yield ThinkingDelta(text, tokens)
        else:
            text_parts.append(text)
            yield TextDelta(text, tokens)


def _text_bytes(messages: Sequence[ChatMessage]) -> int:
    return sum(len(m.content.encode("utf-8", "replace")) for m in messages)


def _drop_oldest_turn(rest: list[ChatMessage]) -> list[ChatMessage]:
    """Drop the oldest turn from ``rest`` (a user message and the replies that follow it);
    returns the messages that went."""
    gone = [rest.pop(0)]
    while len(rest) > 1 and rest[0].role != "user":
        gone.append(rest.pop(0))
    return gone


def content_parts(render: Callable[[Sequence[ChatMessage]], str], messages: Sequence[ChatMessage],
                  text: str) -> list[tuple[str, bool]] | None:
    """``text`` (the template's rendering of ``messages``) cut into the template's own pieces
    (False) and the messages' contents (True), or None when that cannot be told apart.

    The template is rendered again with each content replaced by a placeholder no message can
    contain (a fresh random nonce); the placeholders are then filled with the contents, as is
    or stripped (templates that ``trim``), and the result must be ``text`` exactly."""
    import secrets

    nonce = secrets.token_hex(8)
    marks = [f"\ue000{nonce}{i}\ue001" for i in range(len(messages))]
    skeleton = render([ChatMessage(m.role, mark) for m, mark in zip(messages, marks)])
    pattern = re.compile("\ue000" + nonce + "(\\d+)\ue001")
    for strip in (False, True):
        parts: list[tuple[str, bool]] = []
        at = 0
        for match in pattern.finditer(skeleton):
            parts.append((skeleton[at:match.start()], False))
            content = messages[int(match.group(1))].content
            parts.append((content.strip() if strip else content, True))
            at = match.end()
        parts.append((skeleton[at:], False))
        if "".join(piece for piece, _ in parts) == text:
            return parts
    return None


def _context_that_fits(kv_bytes: int | None, weights: int, n_ctx: int, available: int | None) -> int | None:
    """None when an ``n_ctx``-token KV cache of ``kv_bytes`` fits in ``available`` memory
    beside ``weights`` (or either is unknown); else the largest context that would, in steps of
    CONTEXT_STEP (0: none)."""
    if not kv_bytes or available is None or weights + kv_bytes <= available:
        return None
    return int((available - weights) / (kv_bytes / n_ctx)) // CONTEXT_STEP * CONTEXT_STEP if available > weights else 0


def check_context_memory(kv_bytes: int | None, weights: int, n_ctx: int, kv_type: str, asked: bool,
                         available: int | None = None) -> None:
    """Refuse a context whose KV cache cannot fit in memory beside the weights (llama.cpp would
    allocate it and the machine would swap, or the process be killed), naming the context size
    that fits. ``asked``: the size came from --ctx / the config (else it is the model's own)."""
    available = available_memory() if available is None else available
    fits = _context_that_fits(kv_bytes, weights, n_ctx, available)
    if fits is None:
        return
    assert kv_bytes and available is not None
    how = f"use --ctx {fits} or less" if fits >= CONTEXT_STEP else "free some memory"
    smaller = " or --kv-cache-type q8_0 (about half)" if kv_type == "f16" else ""
    where = "" if asked else " (the model's default context)"
    raise ModelLoadError(
        f"a {n_ctx:,}-token context{where} needs about {kv_bytes / 1e9:.1f} GB of {kv_type} KV cache beside "
        f"{weights / 1e9:.1f} GB of weights, but {available / 1e9:.1f} GB of memory is available: {how}{smaller}."
    )


def check_draft_memory(kv_bytes: int | None, weights: int, n_ctx: int, available: int | None = None) -> None:
    """Refuse a draft model whose KV cache (as long as the model's context) cannot fit in the
    memory left beside both models' weights, naming the context size that fits."""
    available = available_memory() if available is None else available
    fits = _context_that_fits(kv_bytes, weights, n_ctx, available)
    if fits is None:
        return
    assert kv_bytes and available is not None
    how = f"use --ctx {fits} or less, or drop --draft-model" if fits >= CONTEXT_STEP else "drop --draft-model"
    raise ModelLoadError(
        f"the draft model's {n_ctx:,}-token KV cache needs about {kv_bytes / 1e9:.1f} GB beside {weights / 1e9:.1f} GB "
        f"of weights, but {available / 1e9:.1f} GB of memory is available: {how}."
    )


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
    for _level, line in captured:
        match = re.search(r"offloaded (\d+)/(\d+) layers to GPU", line)
        if match:
            return int(match.group(1))
    if not offload or requested == 0:
        return 0
    return n_layers if requested < 0 else min(requested, n_layers)


_KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([0-9.]+) MiB")


def _kv_cache_logged(captured: list[tuple[int, str]]) -> int | None:
    """The KV cache's size from llama.cpp's own lines ("llama_kv_cache: size = 24.00 MiB ...";
    one per cache: models with sliding-window layers have two)."""
    sizes = [float(m.group(1)) for _level, line in captured for m in [_KV_SIZE.search(line)] if m]
    return round(sum(sizes) * (1 << 20)) if sizes else None


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
