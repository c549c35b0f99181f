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

The backend's parts live beside it: llama.cpp's process-wide state (native.py), the load's
steps (loading.py), the memory checks (memory_checks.py), the decode loop and sampling
(decoding.py) and speculative decoding's loop (drafting.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

import llama_cpp as ll

from ..errors import ContextOverflowError, GenerationError, TemplateCancelled
from ..models.gguf import GGUFInfo
from ..settings.knobs import LlamaCppOptions  # defined where the chat can read it without libllama
from ..settings.limits import CONTEXT_STEP, context_rounding_notice, prompt_byte_limit, prompt_too_large
from ..settings.params import SamplingParams
from ..settings.think_switch import OpensThinking, switched
from ..system import default_threads
from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    ContextTrimmed,
    DraftProgress,
    FinishReason,
    GenerationDone,
    GenerationStats,
    ModelInfo,
)
from ..settings.choices import COMPLETION
from ..turns.chat_template import ChatTemplate
from ..turns.tool_calls import ToolSpec
from ..turns.harmony import uses_harmony
from ..turns.prompt_format import PromptChoice, choose_template
from ..turns.thinking import template_opens_thinking
from . import loading
from . import repack as _repack
from .decoding import DecodeTarget, Emitter, make_sampler, plain_tokens, reply_stops, sampler_chain, split_events
from .draft_model import DraftModel
from .drafting import prompt_lookup_tokens
from .prompt_parts import common_prefix, drop_oldest_turn, owned_parts, text_bytes, tokenize
from .tool_replies import reply_tools, tool_calls_finish
from .tool_grammar import marker_tokens, tool_sampler
from .grammar_sampling import Sampler
from . import kv_snapshots
from .kv_snapshots import RESTORE_MARGIN, SnapshotStore
from .kv_state import make_store, restore_state, take_state, trim_allowed
from .memory_checks import check_draft_memory
from .native import ensure_llama_initialised, gpu_offload_supported
from .speculative import AdaptiveDraft, FixedDraft, make_policy
from .prompt_eval import AbortTicks, decode_all, read_prompt, trim_cache
from .vision import Vision, has_images, image_start, images_in_prompt

log = logging.getLogger("vibechat.llama_cpp")

DRAFT_PROGRESS_S = 0.5  # while drafting, a DraftProgress this often (the chat's live status)


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
        self._vision: Vision | None = None  # the projector (--mmproj; None: this model takes no images)
        self._cancel = threading.Event()
        self._ticks = AbortTicks(self._cancel)  # stops a decode on a cancel; counts how far it came
        # A NULL callback. typeshed's ctypes.cast() rejects None, which ctypes accepts (NULL).
        self._no_abort = ctypes.cast(None, ll.ggml_abort_callback)  # type: ignore[arg-type]
        self._piece = ctypes.create_string_buffer(256)
        self._special: frozenset[int] = frozenset()  # tokens rendered as text: the reply's tool-call markers
        self._snapshots: SnapshotStore | None = None  # KV snapshots (None: off, or no model loaded)
        self._snapshot_due = False  # a reply ended: its state is worth keeping (keep_snapshot())
        # The engine process takes the snapshot after it sent the reply's end (worker_child.py);
        # in process, stream_chat takes it once its consumer asks past the GenerationDone.
        self.defer_snapshots = False

    # ----------------------------------------------------------------- loading
    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        """Load the model (once): the steps are engine/llama/loading.py's, in order; every check
        that can refuse comes before the step that would cost memory or time."""
        if self._info is not None:
            return self._info
        opts = self.options
        request = loading.check_request(opts)  # knob values and file headers: a typo costs no time
        llama_log = ensure_llama_initialised()
        cancelled = self._cancel
        cancelled.clear()  # cancel() from now on stops the load (the probe, then llama.cpp between tensors)
        gguf = request.gguf
        repack = self._repack_choice(gguf.path)
        offload = gpu_offload_supported()
        notices: list[str] = []
        n_gpu_layers = loading.gpu_layers(opts, offload, notices)
        on_cpu = n_gpu_layers == 0 or not offload  # the weights and the KV cache are in RAM
        if on_cpu:
            loading.check_weights_fit(request)
        if repack.probed_now:
            notices.append(f"CPU weight repacking is {repack.describe()}; vibechat checked this once for this "
                           "machine (--repack on|off overrides it)")
        # (the progress callback stays referenced while the model loads: C holds the pointer)
        mparams, _progress_cb = loading.model_params(n_gpu_layers, repack.extra_buffers, on_progress, cancelled)
        speculative, draft_tokens = request.speculative, request.draft_tokens
        captured: list[tuple[int, str]] = []
        llama_log.captured = captured
        try:
            model = loading.load_model(gguf, mparams, captured, cancelled)
            if speculative != "off":
                speculative, draft_tokens = loading.check_drafting(model, speculative, draft_tokens, notices)
            trained = max(0, int(ll.llama_model_n_ctx_train(model)))  # an int32: garbage can be negative
            n_ctx = loading.context_size(opts, trained)
            n_threads = opts.threads or default_threads()
            cparams, flash_attn, forced = loading.context_params(opts, n_ctx, n_threads, request.kv_type)
            if on_cpu:
                loading.check_kv_fits(model, request, n_ctx, opts.context_size is not None)
            ctx = loading.create_context(model, cparams, request, captured)
        finally:
            llama_log.captured = None
        self._model, self._ctx, self._gguf = model, ctx, gguf
        self._vocab = ll.llama_model_get_vocab(model)
        self._mem = ll.llama_get_memory(ctx)
        if opts.mmproj_path is not None:
            try:  # a projector that does not fit (or that llama.cpp refuses) fails the load: one line
                self._vision = Vision(opts.mmproj_path, model, n_threads=n_threads, use_gpu=not on_cpu,
                                      cancelled=self._cancel.is_set)
            except BaseException:
                self.close()
                raise
        self._snapshots = make_store(opts.kv_snapshot_cache_mib, model, gguf.path, cparams, request.kv_type,
                                     loading.flash_attn_state(captured, flash_attn), n_gpu_layers)
        ll.llama_set_abort_callback(ctx, self._no_abort, None)
        choice = self._choose_template(gguf)
        assert self._template is not None

        n_layers = int(ll.llama_model_n_layer(model))
        context_size = int(ll.llama_n_ctx(ctx))
        rounded = context_rounding_notice(opts.context_size, context_size) if opts.context_size else None
        if rounded:
            log.info("%s", rounded)
            notices.append(rounded)
        kv_bytes = loading.kv_cache_logged(captured)
        if kv_bytes is None:
            kv_bytes = self._kv_cache_computed(context_size, request.kv_type)
        self._policy = (make_policy(speculative, draft_tokens, draft_model=request.draft_gguf is not None)
                        if speculative != "off" else None)
        if request.draft_gguf is not None and speculative != "off":
            self._load_draft(request, context_size, n_threads, n_gpu_layers, repack.extra_buffers, on_cpu)
        draft_gguf = request.draft_gguf
        self._info = ModelInfo(
            name=gguf.name,
            path=str(gguf.path),
            architecture=gguf.architecture,
            quantization=gguf.quantization,
            trained_context=trained or gguf.context_length,
            context_size=context_size,
            n_layers=n_layers,
            gpu_layers=loading.offloaded_layers(captured, n_gpu_layers, n_layers, offload),
            gpu_offload_supported=offload,
            chat_format=choice.name, chat_format_reason=choice.reason, thinking_switch=self._template.thinking_switch,
            tool_calls=fmt.family if (fmt := self._template.tool_format) is not None else "",
            file_size=gguf.file_size,
            n_threads=n_threads,
            flash_attn=loading.flash_attn_state(captured, flash_attn),
            kv_cache_type=request.kv_type,
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
            projector=self._vision.name if self._vision is not None else None,
        )
        log.info("loaded %s (%s, %s) ctx=%d threads=%d template=%s (%s) kv=%s (%s bytes) speculative=%s repack=%s",
                 gguf.path, gguf.architecture, gguf.quantization, context_size, n_threads, choice.name, choice.reason,
                 request.kv_type, kv_bytes, speculative, repack.describe())
        return self._info

    def _choose_template(self, gguf: GGUFInfo) -> PromptChoice:
        """How this model is prompted, and what its template says about replies: the turn tokens
        that end one, whether one starts inside a thinking block, harmony's channels."""
        bos = self._token_text(ll.llama_vocab_bos(self._vocab))
        eos = self._token_text(ll.llama_vocab_eos(self._vocab))
        # The GGUF's template, a built-in turn format, or (a base model) the completion frame.
        choice = choose_template(gguf.chat_template, gguf.architecture, self._has_token, gguf.metadata,
                                 gguf.path.name, self.options.prompt_format)
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
        return choice

    def _load_draft(self, request: loading.LoadRequest, context_size: int, n_threads: int, n_gpu_layers: int,
                    extra_buffers: bool, on_cpu: bool) -> None:
        """The draft model (--draft-model), beside the model loaded; closes the backend when it fails."""
        draft_info = request.draft_gguf
        assert draft_info is not None
        gguf = request.gguf

        def check_kv(draft_model: object) -> int | None:
            """The draft's KV cache (f16, the context's size), checked in RAM beside both
            models' weights (the model's own KV cache is allocated by now: what is
            available already leaves it out)."""
            draft_kv = loading.kv_cache_computed(draft_model, context_size, "f16", draft_info.architecture)
            if on_cpu:
                check_draft_memory(draft_kv, request.weights, context_size)
            return draft_kv

        try:
            self._draft = DraftModel(draft_info.path, n_ctx=context_size, n_threads=n_threads,
                                     n_gpu_layers=n_gpu_layers, extra_buffers=extra_buffers,
                                     target_vocab=self._vocab, name=gguf.name or gguf.path.name,
                                     check_kv=check_kv)
        except Exception:
            self.close()
            raise

    def _repack_choice(self, model_path: Path) -> _repack.RepackChoice:
        return loading.repack_choice(self.options.repack, model_path, self._cancel)

    def _kv_cache_computed(self, n_ctx: int, kv_type: str) -> int | None:
        """The loaded model's KV cache for ``n_ctx`` tokens of ``kv_type``, from its shape."""
        return loading.kv_cache_computed(self._model, n_ctx, kv_type, self._gguf.architecture if self._gguf else "")

    def describe(self) -> ModelInfo:
        if self._info is None:
            raise GenerationError("no model is loaded yet.")
        return self._info

    def close(self) -> None:
        if self._snapshots is not None:
            self.keep_snapshot()
            self._snapshots.close()  # its disk writes finish: ``vibechat run`` leaves its snapshot behind
            self._snapshots = None
        if self._draft is not None:
            self._draft.close()
            self._draft = None
        if self._vision is not None:
            self._vision.close()
            self._vision = None
        loading.free_model(self._ctx, self._model)
        self._ctx = self._model = None
        self._info = None
        self._tokens = []

    # ---------------------------------------------------------- tokenization
    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        raw = ll.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def _tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        return tokenize(self._vocab, text, add_special, parse_special)

    def _has_token(self, text: str) -> bool:
        tokens = self._tokenize(text, add_special=False)
        return len(tokens) == 1 and self._token_text(tokens[0]) == text

    def _single_token(self, text: str) -> int:
        return self._tokenize(text, add_special=False)[0]

    def _prompt_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto",
                       tools: Sequence[ToolSpec] = (), strict: bool = False) -> list[int]:
        """The prompt's tokens: the template's own text with its special tokens, each message's
        content as plain text, so a message holding ``<end_of_turn><start_of_turn>model`` cannot
        forge a turn (owned_parts). ``thinking``: the switch's mode (engine/settings/think_switch.py).
        A message's images go before its content, as placeholder runs (engine/llama/vision.py);
        ``strict``: images in the newest user message to a model without a projector raise."""
        assert self._template is not None
        images = images_in_prompt(messages, self._vision is not None, strict)
        render = switched(functools.partial(self._template.render, tools=tools) if tools else self._template.render,
                          self._template.thinking_switch, thinking)
        messages = self._template.framed(messages)  # the completion frame's own spelling of each content
        text = render(messages)
        bos = self._template.bos_token
        already_has_bos = bool(bos) and text.startswith(bos)
        parts = owned_parts(render, messages, text)
        if parts is None:  # a template that rewrites content: as llama.cpp's server tokenizes it
            if images:
                raise GenerationError(f"the chat template {self._template.name} rewrites messages, so images "
                                      "cannot be placed in them: choose another --prompt-format.")
            log.warning("chat template %s changes message content: special tokens in messages are parsed",
                        self._template.name)
            return self._tokenize(text, add_special=not already_has_bos)
        tokens: list[int] = []
        for i, (piece, owner) in enumerate(parts):
            if self._vision is not None and owner in images:  # before the content's first piece
                tokens += self._vision.tokens(images.pop(owner))
            if piece:
                tokens += self._tokenize(piece, add_special=i == 0 and not already_has_bos,
                                         parse_special=owner < 0)
        return tokens

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        self.load()
        return len(self._prompt_tokens(messages, thinking))

    def _fit(self, messages: Sequence[ChatMessage], params: SamplingParams,
             tools: Sequence[ToolSpec] = (), strict: bool = True) -> tuple[list[int], int]:
        """Prompt tokens for the newest messages that fit, and how many old ones were dropped
        (``strict``: images to a model without a projector raise, before anything is evaluated)."""
        n_ctx = self.describe().context_size
        reserve = min(params.max_tokens or 512, n_ctx // 4)
        system = [m for m in messages[:1] if m.role == "system"]
        rest = list(messages[len(system):])
        dropped = 0
        # Text that cannot fit whatever its tokens is dropped (old turns) or refused (the last
        # message) before anything is tokenized: tokenizing 32 MB takes most of a minute.
        size = text_bytes(system + rest)
        while size > prompt_byte_limit(n_ctx) and len(rest) > 1:
            gone = drop_oldest_turn(rest)
            dropped += len(gone)
            size -= text_bytes(gone)
        too_large = prompt_too_large(size, n_ctx)
        if too_large:
            raise ContextOverflowError(too_large)
        tokens = self._prompt_tokens(system + rest, params.thinking, tools, strict)
        while len(tokens) + reserve > n_ctx and len(rest) > 1:
            dropped += len(drop_oldest_turn(rest))
            tokens = self._prompt_tokens(system + rest, params.thinking, tools, strict)
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
        self._snapshot_due = False
        if self._draft is not None:
            self._draft.reset()

    def prefill(self, messages: Sequence[ChatMessage], thinking: str = "auto", tools: Sequence[ToolSpec] = ()) -> int:
        self.load()
        self._cancel.clear()
        assert self._template is not None
        _fmt, tools = reply_tools(self._template, tools, "none", None)  # listed as the replies will list them
        try:
            tokens, dropped = self._fit(messages, SamplingParams(thinking=thinking), tools, strict=False)
            # Where the next user turn will part from these tokens (past the last message, before
            # the generation prompt): the snapshot is taken there, so a new engine can continue it.
            cut = len(tokens) if dropped else image_start(tokens, common_prefix(
                tokens, self._prompt_tokens([*messages, ChatMessage("user", "\u2026")], thinking, tools)))
        except TemplateCancelled:
            return 0
        self._snapshot_due = False
        restored, restore_ms = self._restore_snapshot(tokens, len(tokens))
        keep = self._trim_to(tokens, len(tokens))
        if self._draft is not None:
            self._draft.reset()
        ll.llama_set_abort_callback(self._ctx, self._ticks.callback, None)
        try:
            for end in [c for c in (cut,) if keep < c < len(tokens)] + [len(tokens)]:
                if not decode_all(self._reading(tokens[len(self._tokens):end])):
                    self.reset()
                    return 0
                if end == cut:
                    self._snapshot_due = True
                    self.keep_snapshot()
        finally:
            ll.llama_set_abort_callback(self._ctx, self._no_abort, None)
        if restored:
            log.info("prefill: restored %d of %d tokens from a KV snapshot in %.0f ms, evaluated %d",
                     min(restored, keep), len(tokens), restore_ms, len(tokens) - keep)
        return len(tokens)

    # ------------------------------------------------------------ KV snapshots
    def _restore_snapshot(self, tokens: Sequence[int], at_most: int) -> tuple[int, float]:
        """Restore the KV snapshot that shares the most of ``tokens`` (up to ``at_most``) when it
        shares ``RESTORE_MARGIN`` more than the live cache: the tokens it holds, and the restore's
        milliseconds ((0, 0.0): nothing restored, the cache as it was, or emptied when a
        restore failed)."""
        store = self._snapshots
        if store is None:
            return 0, 0.0
        t0 = time.perf_counter()
        live = min(common_prefix(self._tokens, tokens), at_most)
        if live < len(self._tokens) and not trim_allowed(self._mem, self._model, live):
            live = 0  # the cache cannot be cut back there (a restored sliding window): a snapshot may
        if at_most - live < RESTORE_MARGIN:  # the cache has (nearly) all of it: no snapshot can do better
            return 0, 0.0
        match = store.best(tokens, at_most)
        if match is None or match.common < live + RESTORE_MARGIN:
            if at_most - live >= max(kv_snapshots.MIN_TOKENS, RESTORE_MARGIN):  # a long evaluation ahead: say why
                log.info("no KV snapshot shares more of this prompt than the cache (%d of %d tokens%s): "
                         "evaluating the rest", live, len(tokens),
                         f"; the best shares {match.common}" if match is not None else "")
            return 0, 0.0
        snap = store.load(match)
        if snap is None:
            return 0, 0.0
        if self._draft is not None:
            self._draft.reset()
        if not restore_state(self._ctx, self._mem, snap):
            self._tokens[:] = []
            return 0, 0.0
        self._tokens[:] = snap.tokens_list()
        ms = (time.perf_counter() - t0) * 1000
        log.info("restored %d tokens from a KV snapshot (%s) in %.0f ms", match.common, match.source, ms)
        return match.common, ms

    def _trim_to(self, tokens: Sequence[int], at_most: int) -> int:
        """Cut the KV cache back to its common prefix with ``tokens`` (prompt_eval.py): the tokens kept."""
        return trim_cache(self._mem, self._model, self._tokens, tokens, at_most)

    def keep_snapshot(self) -> None:
        """Keep the KV state the last reply (or prefill) left, if it is due: off the reply's
        critical path (after its end went out); the disk write runs in a background thread."""
        store, due, self._snapshot_due = self._snapshots, self._snapshot_due, False
        if not due or store is None or self._ctx is None or not store.worth(len(self._tokens)):
            return
        if has_images(self._tokens):  # a snapshot's key does not name the projector that made the image
            return
        data = take_state(self._ctx)
        if data is not None:
            store.keep(self._tokens, data)

    def _reading(self, tokens: Sequence[int], report: bool = False) -> Generator[ChatEvent, None, bool]:
        """Evaluate ``tokens`` after the cached ones, images through the projector (prompt_eval.py): a
        generator of a long prompt's ``PromptProgress`` when ``report``; it returns False if cancelled."""
        n_batch = max(1, min(self.options.n_batch, self.describe().context_size))
        return read_prompt(self._ctx, self._mem, self._tokens, tokens, n_batch, self._ticks, self._vision, report)

    def _sampler(self, params: SamplingParams) -> Sampler:
        """The sampler the decode loops draw with (engine/llama/decoding.py): this backend's
        chain, and for an output format llama.cpp's grammar sampler beside it."""
        return make_sampler(self._chain(params), self._vocab, params)

    def _chain(self, params: SamplingParams) -> object:
        return sampler_chain(self._vocab, params)

    def _piece_bytes(self, token: int) -> bytes:
        special = token in self._special  # a tool-call marker that is a control token: its text
        n = ll.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        if n < 0:
            self._piece = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        return self._piece.raw[:n]

    def stream_chat(self, messages: Sequence[ChatMessage], params: SamplingParams,
                    tools: Sequence[ToolSpec] = (), tool_choice: str = "auto") -> Generator[ChatEvent, None, None]:
        self.load()
        self._cancel.clear()
        assert self._template is not None
        # "auto" made this model's defaults (engine/settings/params.py): what is reported is what was used.
        params = params.with_seed().resolved(self._template.name)
        t_start = time.perf_counter()
        # Tools go to the template and a grammar shapes the calls (engine/llama/tool_replies.py).
        fmt, tools = reply_tools(self._template, tools, tool_choice, params.output_format)
        self._special = marker_tokens(self._vocab, fmt) if fmt is not None else frozenset()
        try:
            tokens, dropped = self._fit(messages, params, tools)
        except TemplateCancelled:  # cancel() while the chat template rendered: nothing was evaluated
            yield GenerationDone(text="", stats=GenerationStats(seed=params.seed, finish_reason="cancelled"),
                                 params=params)
            return
        n_ctx = self.describe().context_size
        stats = GenerationStats(prompt_tokens=len(tokens), seed=params.seed, dropped_messages=dropped)
        if dropped:
            yield ContextTrimmed(dropped_messages=dropped, prompt_tokens=len(tokens), context_size=n_ctx)

        # Reuse the cached prefix, or a KV snapshot's that shares more; always evaluate at least the
        # last prompt token for fresh logits.
        self._snapshot_due = False
        restored, stats.restore_ms = self._restore_snapshot(tokens, len(tokens) - 1)
        keep = self._trim_to(tokens, len(tokens) - 1)
        stats.restored_tokens = min(restored, keep)
        suffix = tokens[keep:]
        stats.prompt_tokens_evaluated = len(suffix)

        text_parts: list[str] = []
        thinking_parts: list[str] = []
        started = False
        finish: FinishReason = "stop"
        ll.llama_set_abort_callback(self._ctx, self._ticks.callback, None)
        try:
            t_prompt = time.perf_counter()
            evaluated = yield from self._reading(suffix, report=True)  # a long prompt says how far it came
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
            out = Emitter(self._piece_bytes, self._vocab, self._turn_stops, self._cancel, limit,
                          reply_stops(params, self._template.stop_strings), inside, self._harmony, lstrip=completion,
                          calls=fmt.recogniser() if fmt is not None else None)
            target = DecodeTarget(self._ctx, self._mem, self._tokens, self._cancel, self.options.n_batch, n_ctx)
            sampler = (tool_sampler(self._chain(params), self._vocab, fmt, tools, tool_choice)  # type: ignore[arg-type]
                       if fmt is not None else self._sampler(params))
            try:
                if self._policy is not None and has_images(tokens):  # drafts must not see placeholder ids
                    if self._draft is not None:
                        self._draft.reset()
                    pieces = plain_tokens(target, sampler, out)
                elif self._policy is not None:
                    pieces = prompt_lookup_tokens(target, self._policy, sampler, out, tokens, stats, self._draft)
                else:
                    pieces = plain_tokens(target, sampler, out)
                policy, next_progress = self._policy, 0.0
                for split in pieces:
                    if not started:
                        started, t_first_token = True, time.perf_counter()
                        next_progress = t_first_token + DRAFT_PROGRESS_S
                    yield from split_events(split, text_parts, thinking_parts, out.generated)
                    if policy is not None and (now := time.perf_counter()) >= next_progress:
                        next_progress = now + DRAFT_PROGRESS_S  # the status bar's live figures
                        yield DraftProgress(stats.drafted_tokens, stats.accepted_draft_tokens,
                                            0 if policy.turned_off else policy.k, policy.turned_off)
            finally:
                sampler.free()
            finish = out.finish
            out.count_into(stats, params)
            yield from split_events(out.tail(), text_parts, thinking_parts, out.generated)
            finish = tool_calls_finish(finish, out.tool_calls)
        t_end = time.perf_counter()
        stats.finish_reason = finish
        stats.ttft_ms = (t_first_token - t_start) * 1000 if started else 0.0
        stats.decode_ms = (t_end - t_prompt_done) * 1000
        if stats.completion_tokens and stats.decode_ms > 0:
            stats.decode_tokens_per_s = stats.completion_tokens / (stats.decode_ms / 1000)
        self._snapshot_due = evaluated  # the cache holds the prompt (and the reply): worth keeping
        yield GenerationDone(text="".join(text_parts), stats=stats, params=params,
                             thinking="".join(thinking_parts),
                             tool_calls=tuple(out.tool_calls) if evaluated and finish == "tool_calls" else ())
        # Here only once the consumer asks past the reply's end: it has shown the reply.
        if not self.defer_snapshots:
            self.keep_snapshot()

