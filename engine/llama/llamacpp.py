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

The backend composes its parts, which live beside it: llama.cpp's process-wide state
(native.py), the load's steps (loading.py), the memory checks (memory_checks.py), the prompt
(prompting.py: the template, a conversation's tokens, what fits), the KV cache (kv_cache.py:
the prefix a prompt reuses, snapshots), the decode loop and sampling (decoding.py), speculative
decoding's loop (drafting.py) and a reply as it forms (replying.py).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence

import llama_cpp as ll

from ..errors import GenerationError, TemplateCancelled
from ..models.gguf import GGUFInfo
from ..settings.knobs import LlamaCppOptions  # defined where the chat can read it without libllama
from ..settings.limits import context_rounding_notice
from ..settings.params import SamplingParams
from ..settings.think_switch import check_budget
from ..system import default_threads
from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    ContextTrimmed,
    GenerationDone,
    GenerationStats,
    ModelInfo,
    ReplyPrefix,
    TokenCandidates,
)
from ..turns.thinking import Piece
from ..turns.tool_calls import ToolSpec
from ..turns.tool_formats import ToolFormat
from . import loading
from .decoding import (
    DecodeTarget,
    Emitter,
    make_sampler,
    plain_tokens,
    sampler_chain,
)
from .draft_model import DraftModel, load_draft
from .drafting import prompt_lookup_tokens
from .grammar_sampling import Sampler
from .kv_cache import KVCache
from .kv_state import make_store
from .lens import LensSampler, lens_events
from .native import ensure_llama_initialised, gpu_offload_supported
from .pairing import SEQ, Pairs
from .paths import check_fits, path_events, path_tokens
from .prompt_eval import AbortTicks, decode_all, read_prompt
from .prompting import Prompter
from .replying import Reply, reply_events
from .speculative import AdaptiveDraft, FixedDraft, make_policy
from .think_budget import budgeted, closing_tokens
from .tool_grammar import marker_tokens, tool_sampler
from .tool_replies import reply_tools, tool_calls_finish
from .vision import Vision, has_images

log = logging.getLogger("vibechat.llama_cpp")


class LlamaCppBackend(Pairs):
    """A GGUF model in this process. One thread drives it; ``cancel()`` is thread-safe.

    Its parts, made when the model loads: the prompt (``Prompter``), the KV cache
    (``KVCache``), the projector (``Vision``) and the draft model (``DraftModel``); the
    backend loads, strings a reply's steps together and frees them."""

    name = "llama.cpp"

    def __init__(self, options: LlamaCppOptions) -> None:
        self.options = options
        self._model = None
        self._ctx = None
        self._vocab = None
        self._mem = None
        self._info: ModelInfo | None = None
        self._gguf: GGUFInfo | None = None
        # The template and the prompt's tokens.
        self._prompt: Prompter | None = None
        # What the KV cache holds, its snapshots.
        self._kv: KVCache | None = None
        # The draft length's policy (None: off).
        self._policy: FixedDraft | AdaptiveDraft | None = None
        # --draft-model (None: drafts by prompt lookup).
        self._draft: DraftModel | None = None
        # The projector (--mmproj; None: no images).
        self._vision: Vision | None = None
        self._cancel = threading.Event()
        # Each side's own stop while a pair is decoded (pairing.py).
        self._sides = {side: threading.Event() for side in SEQ}
        # Stops a decode on a cancel; counts how far it came.
        self._ticks = AbortTicks(self._cancel)
        # A NULL callback. typeshed's ctypes.cast() rejects None, which ctypes accepts (NULL).
        self._no_abort = ctypes.cast(None, ll.ggml_abort_callback)  # type: ignore[arg-type]
        self._piece = ctypes.create_string_buffer(256)
        # Tokens rendered as text: the reply's tool-call markers.
        self._special: frozenset[int] = frozenset()
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
        # Knob values and file headers: a typo costs no time.
        request = loading.check_request(opts)
        llama_log = ensure_llama_initialised()
        cancelled = self._cancel
        # cancel() from now on stops the load (the probe, then llama.cpp between tensors).
        cancelled.clear()
        gguf = request.gguf
        repack = loading.repack_choice(opts.repack, gguf.path, cancelled)
        offload = gpu_offload_supported()
        notices: list[str] = []
        n_gpu_layers = loading.gpu_layers(opts, offload, notices)
        # The weights and the KV cache are in RAM.
        on_cpu = n_gpu_layers == 0 or not offload
        if on_cpu:
            loading.check_weights_fit(request)
        if repack.probed_now:
            notices.append(
                f"CPU weight repacking is {repack.describe()}; vibechat checked this once for "
                "this machine (--repack on|off overrides it)"
            )
        # (the progress callback stays referenced while the model loads: C holds the pointer)
        mparams, _progress_cb = loading.model_params(
            n_gpu_layers, repack.extra_buffers, on_progress, cancelled
        )
        speculative, draft_tokens = request.speculative, request.draft_tokens
        captured: list[tuple[int, str]] = []
        llama_log.captured = captured
        try:
            model = loading.load_model(gguf, mparams, captured, cancelled)
            if speculative != "off":
                speculative, draft_tokens = loading.check_drafting(
                    model, speculative, draft_tokens, notices
                )
            # An int32: garbage can be negative.
            trained = max(0, int(ll.llama_model_n_ctx_train(model)))
            n_ctx = loading.context_size(opts, trained)
            n_threads = opts.threads or default_threads()
            cparams, flash_attn, forced = loading.context_params(
                opts, n_ctx, n_threads, request.kv_type
            )
            if on_cpu:
                loading.check_kv_fits(model, request, n_ctx, opts.context_size is not None)
            ctx = loading.create_context(model, cparams, request, captured)
        finally:
            llama_log.captured = None
        self._model, self._ctx, self._gguf = model, ctx, gguf
        self._vocab = ll.llama_model_get_vocab(model)
        self._mem = ll.llama_get_memory(ctx)
        if opts.mmproj_path is not None:
            # A projector that does not fit (or that llama.cpp refuses) fails the load: one line.
            try:
                self._vision = Vision(
                    opts.mmproj_path,
                    model,
                    n_threads=n_threads,
                    use_gpu=not on_cpu,
                    cancelled=self._cancel.is_set,
                )
            except BaseException:
                self.close()
                raise
        flash_attn_on = loading.flash_attn_state(captured, flash_attn)
        snapshots = (
            make_store(
                opts.kv_snapshot_cache_mib,
                model,
                gguf.path,
                cparams,
                request.kv_type,
                flash_attn_on,
                n_gpu_layers,
            )
            if opts.kv_snapshots
            else None
        )
        self._kv = KVCache(ctx, self._mem, model, snapshots)
        ll.llama_set_abort_callback(ctx, self._no_abort, None)
        context_size = int(ll.llama_n_ctx(ctx))
        prompt = Prompter(
            self._vocab,
            gguf,
            opts,
            self._vision,
            context_size,
            trained or gguf.context_length,
            self._cancel,
        )
        self._prompt = prompt

        n_layers = int(ll.llama_model_n_layer(model))
        rounded = None
        if opts.context_size:
            rounded = context_rounding_notice(opts.context_size, context_size)
        if rounded:
            log.info("%s", rounded)
            notices.append(rounded)
        kv_bytes = loading.kv_cache_logged(captured)
        if kv_bytes is None:
            kv_bytes = self._kv_cache_computed(context_size, request.kv_type)
        if speculative != "off":
            self._policy = make_policy(
                speculative, draft_tokens, draft_model=request.draft_gguf is not None
            )
        if request.draft_gguf is not None and speculative != "off":
            # A draft model that does not fit (or fails) fails the load: one line.
            try:
                self._draft = load_draft(
                    request,
                    context_size,
                    n_threads,
                    n_gpu_layers,
                    repack.extra_buffers,
                    on_cpu,
                    self._vocab,
                )
            except Exception:
                self.close()
                raise
            # Emptied whenever the KV cache is replaced.
            self._kv.draft = self._draft
        draft_gguf = request.draft_gguf
        draft_name = None
        if self._draft is not None and draft_gguf is not None:
            draft_name = draft_gguf.name or draft_gguf.path.name
        tool_format = prompt.template.tool_format
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
            chat_format=prompt.choice.name,
            chat_format_reason=prompt.choice.reason,
            thinking_switch=prompt.template.thinking_switch,
            tool_calls=tool_format.family if tool_format is not None else "",
            file_size=gguf.file_size,
            n_threads=n_threads,
            flash_attn=flash_attn_on,
            kv_cache_type=request.kv_type,
            kv_cache_bytes=kv_bytes,
            flash_attn_forced=forced,
            speculative=speculative,
            draft_tokens=draft_tokens,
            draft_model=draft_name,
            draft_model_bytes=self._draft.memory_bytes if self._draft is not None else None,
            repack=repack.state,
            repack_setting=repack.setting,
            repack_reason=repack.reason,
            notices=tuple(notices),
            projector=self._vision.name if self._vision is not None else None,
        )
        loading.log_loaded(self._info, repack.describe())
        return self._info

    def _kv_cache_computed(self, n_ctx: int, kv_type: str) -> int | None:
        """The loaded model's KV cache for ``n_ctx`` tokens of ``kv_type``, from its shape."""
        arch = self._gguf.architecture if self._gguf else ""
        return loading.kv_cache_computed(self._model, n_ctx, kv_type, arch)

    def describe(self) -> ModelInfo:
        """The model loaded (GenerationError before a load)."""
        if self._info is None:
            raise GenerationError("no model is loaded yet.")
        return self._info

    def close(self) -> None:
        """Free the model and its parts; a snapshot that is due is kept first."""
        if self._kv is not None:
            self._kv.close()
            self._kv = None
        if self._draft is not None:
            self._draft.close()
            self._draft = None
        if self._vision is not None:
            self._vision.close()
            self._vision = None
        loading.free_model(self._ctx, self._model)
        self._ctx = self._model = None
        self._info = None

    def _loaded(self) -> tuple[Prompter, KVCache]:
        """The model loaded (once): its prompt and its KV cache."""
        self.load()
        assert self._prompt is not None and self._kv is not None
        return self._prompt, self._kv

    # ------------------------------------------------------------ the prompt
    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        """The tokens ``messages`` take as a prompt."""
        prompt, _kv = self._loaded()
        return len(prompt.tokens(messages, thinking))

    def _reading(
        self, tokens: Sequence[int], report: bool = False
    ) -> Generator[ChatEvent, None, bool]:
        """Evaluate ``tokens`` after the cached ones, images through the projector
        (prompt_eval.py): a generator of a long prompt's ``PromptProgress`` when ``report``; it
        returns False if cancelled."""
        assert self._kv is not None
        n_batch = max(1, min(self.options.n_batch, self.describe().context_size))
        return read_prompt(
            self._ctx,
            self._mem,
            self._kv.tokens,
            tokens,
            n_batch,
            self._ticks,
            self._vision,
            report,
        )

    # ------------------------------------------------------------ the KV cache
    def cancel(self) -> None:
        """Stop the load, the prompt's evaluation or the reply under way (any thread)."""
        self._cancel.set()

    def reset(self) -> None:
        """Forget the conversation: empty the KV cache so the next turn evaluates everything."""
        if self._kv is not None:
            self._kv.reset()

    def keep_snapshot(self) -> None:
        """Keep the KV state the last reply (or prefill) left, if it is due (kv_cache.py)."""
        if self._kv is not None:
            self._kv.keep_snapshot()

    def prefill(
        self,
        messages: Sequence[ChatMessage],
        thinking: str = "auto",
        tools: Sequence[ToolSpec] = (),
    ) -> int:
        """Evaluate ``messages`` into the KV cache before anyone asks for a reply, keeping a
        snapshot where the next user turn will part from them: the prompt's tokens (0 when
        cancelled)."""
        prompt, kv = self._loaded()
        self._cancel.clear()
        # The tools listed as the replies will list them.
        _fmt, tools = reply_tools(prompt.template, tools, "none", None)
        try:
            tokens, dropped = prompt.fit(
                messages, SamplingParams(thinking=thinking), tools, strict=False
            )
            cut = len(tokens)
            if not dropped:
                cut = prompt.next_turn_cut(messages, tokens, thinking, tools)
        except TemplateCancelled:
            return 0
        keep, restored, restore_ms = kv.reuse(tokens, len(tokens))
        if self._draft is not None:
            self._draft.reset()
        ll.llama_set_abort_callback(self._ctx, self._ticks.callback, None)
        try:
            for end in [c for c in (cut,) if keep < c < len(tokens)] + [len(tokens)]:
                if not decode_all(self._reading(tokens[len(kv.tokens) : end])):
                    self.reset()
                    return 0
                if end == cut:
                    kv.snapshot_due = True
                    kv.keep_snapshot()
        finally:
            ll.llama_set_abort_callback(self._ctx, self._no_abort, None)
        if restored:
            log.info(
                "prefill: restored %d of %d tokens from a KV snapshot in %.0f ms, evaluated %d",
                restored,
                len(tokens),
                restore_ms,
                len(tokens) - keep,
            )
        return len(tokens)

    # ------------------------------------------------------------- the reply
    def _sampler(self, params: SamplingParams) -> Sampler:
        """The sampler the decode loops draw with (engine/llama/decoding.py): this backend's
        chain, and for an output format llama.cpp's grammar sampler beside it."""
        return make_sampler(self._chain(params), self._vocab, params)

    def _chain(self, params: SamplingParams) -> object:
        """llama.cpp's sampler chain for ``params``."""
        return sampler_chain(self._vocab, params)

    def _piece_bytes(self, token: int) -> bytes:
        """A token's bytes; a tool-call marker that is a control token: its text."""
        return self._token_bytes(token, token in self._special)

    def _token_bytes(self, token: int, special: bool) -> bytes:
        """A token's bytes; ``special``: a control token's text (else nothing)."""
        n = ll.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        if n < 0:
            self._piece = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(
                self._vocab, token, self._piece, len(self._piece), 0, special
            )
        return self._piece.raw[:n]

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto",
        prefix: ReplyPrefix | None = None,
    ) -> Generator[ChatEvent, None, None]:
        """A reply to ``messages`` as events: the prompt fitted to the context, the cached
        prefix (or a snapshot's) reused and the rest evaluated, the reply decoded token by
        token, then ``GenerationDone`` with its statistics. ``prefix``: the reply goes on from
        those tokens (another path: paths.py), evaluated after the prompt as far as the cache
        does not hold them."""
        prompt, kv = self._loaded()
        self._cancel.clear()
        # "auto" made this model's defaults (engine/settings/params.py): what is reported is
        # what was used.
        params = params.with_seed().resolved(prompt.template.name)
        check_budget(params.think_budget, prompt.context_size)
        reply = Reply(t_start=time.perf_counter())
        # Tools go to the template and a grammar shapes the calls (engine/llama/tool_replies.py).
        fmt, tools = reply_tools(prompt.template, tools, tool_choice, params.output_format)
        self._special = marker_tokens(self._vocab, fmt) if fmt is not None else frozenset()
        try:
            tokens, left_out = prompt.fit(messages, params, tools)
            path = [] if prefix is None else path_tokens(prompt, self._n_vocab(), prefix)
        except TemplateCancelled:
            # cancel() while the template rendered: nothing was evaluated.
            stats = GenerationStats(seed=params.seed, finish_reason="cancelled")
            yield GenerationDone(text="", stats=stats, params=params)
            return
        stats = GenerationStats(
            prompt_tokens=len(tokens), seed=params.seed, dropped_messages=len(left_out)
        )
        if left_out:
            yield ContextTrimmed(
                dropped_messages=len(left_out),
                prompt_tokens=len(tokens),
                context_size=prompt.context_size,
                left_out=left_out,
            )
        check_fits(len(tokens), len(path), prompt.context_size)
        evaluated = yield from self._evaluate_prompt(tokens + path, stats, reply)
        if evaluated:
            yield from self._decode_reply(
                tokens,
                params,
                fmt,
                tools,
                tool_choice,
                stats,
                reply,
                path,
                prefix.steps if prefix else (),
            )
        # The cache holds the prompt (and the reply): worth keeping.
        kv.snapshot_due = evaluated
        yield reply.done(stats, params)
        # Here only once the consumer asks past the reply's end: it has shown the reply.
        if not self.defer_snapshots:
            self.keep_snapshot()

    def _evaluate_prompt(
        self, tokens: list[int], stats: GenerationStats, reply: Reply
    ) -> Generator[ChatEvent, None, bool]:
        """Reuse the cached prefix, or a KV snapshot's that shares more, and evaluate the rest:
        always at least the last prompt token, for fresh logits. A long prompt says how far it
        came. False: cancelled."""
        assert self._kv is not None
        keep, stats.restored_tokens, stats.restore_ms = self._kv.reuse(tokens, len(tokens) - 1)
        suffix = tokens[keep:]
        stats.prompt_tokens_evaluated = len(suffix)
        ll.llama_set_abort_callback(self._ctx, self._ticks.callback, None)
        try:
            t_prompt = time.perf_counter()
            evaluated = yield from self._reading(suffix, report=True)
        finally:
            ll.llama_set_abort_callback(self._ctx, self._no_abort, None)
        reply.t_prompt_done = time.perf_counter()
        stats.prompt_eval_ms = (reply.t_prompt_done - t_prompt) * 1000
        return evaluated

    def _reply_sampler(
        self,
        params: SamplingParams,
        fmt: ToolFormat | None,
        tools: Sequence[ToolSpec],
        tool_choice: str,
    ) -> Sampler:
        """What the reply draws with: with tools, the chain and the calls' grammar
        (tool_grammar.py), else ``_sampler``."""
        if fmt is None:
            return self._sampler(params)
        chain = self._chain(params)
        return tool_sampler(chain, self._vocab, fmt, tools, tool_choice)  # type: ignore[arg-type]

    def _decode_reply(
        self,
        tokens: list[int],
        params: SamplingParams,
        fmt: ToolFormat | None,
        tools: Sequence[ToolSpec],
        tool_choice: str,
        stats: GenerationStats,
        reply: Reply,
        path: list[int],
        steps: Sequence[TokenCandidates],
    ) -> Generator[ChatEvent, None, None]:
        """Decode the reply after the prompt ``tokens`` as events, offering ``tools`` in the
        call format ``fmt``; its counts go to ``stats``, how it ended to ``reply``. ``path``:
        the reply's first tokens (a prefix's, evaluated already; ``steps``: their lens steps),
        emitted before it goes on."""
        assert self._prompt is not None
        prompt = self._prompt
        out = prompt.emitter(
            self._piece_bytes, self._cancel, len(tokens), params, fmt.recogniser() if fmt else None
        )
        message = self.options.think_budget_message
        sampler = budgeted(
            self._reply_sampler(params, fmt, tools, tool_choice),
            out,
            lambda: closing_tokens(prompt.tokenize, message, prompt.harmony),
        )
        # Seen through the token lens (engine/llama/lens.py): its chain's stages.
        lens = (
            LensSampler.over(sampler, self._vocab, params, self._piece_bytes, len(path))
            if params.logprobs
            else None
        )
        try:
            yield from path_events(path, steps, out, reply, lens)
            pieces = self._decode_loop(tokens + path, lens or sampler, out, stats)
            if lens is None:
                yield from reply_events(pieces, out, reply, self._policy, stats)
            else:
                yield from lens_events(
                    reply_events(pieces, out, reply, self._policy, stats), lens, out
                )
        finally:
            sampler.free()
        out.count_into(stats, params)
        if lens is not None:
            yield from lens.take(out.generated, out.after_stop)
        yield from reply.events(out.tail(), out.generated)
        reply.ended(out, tool_calls_finish(out.finish, out.tool_calls))

    def _n_vocab(self) -> int:
        return int(ll.llama_vocab_n_tokens(self._vocab))

    def _decode_loop(
        self, tokens: list[int], sampler: Sampler, out: Emitter, stats: GenerationStats
    ) -> Iterator[list[Piece]]:
        """The loop that decodes this reply: one token a step, or drafts (prompt lookup or the
        draft model, drafting.py) when drafting is on and the prompt holds no image."""
        assert self._kv is not None
        if out.done:
            # A path's prefix ended the reply.
            return iter(())
        n_ctx = self.describe().context_size
        target = DecodeTarget(
            self._ctx, self._mem, self._kv.tokens, self._cancel, self.options.n_batch, n_ctx
        )
        if self._policy is None:
            return plain_tokens(target, sampler, out)
        if has_images(tokens):
            # Drafts must not see placeholder ids.
            if self._draft is not None:
                self._draft.reset()
            return plain_tokens(target, sampler, out)
        return prompt_lookup_tokens(target, self._policy, sampler, out, tokens, stats, self._draft)
