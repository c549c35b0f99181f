"""Two replies to one prompt at once (``PairedReplies``, engine/turns/backend.py), for
``LlamaCppBackend`` (engine/llama/llamacpp.py): side A is sequence 0 of the context (the KV
cache's, ``KVCache``), side B sequence 1 (the context allows two: ``loading.context_params``).
Each side has what a plain reply has: its own settings, output format (its grammar in its own
sampler), thinking and thinking budget, tools (a call ends that side asking for it), images.

1. Both prompts are fitted as a plain reply's (tools listed, images as placeholder runs); their
   common prefix (all of it but the last token when A and B differ only in sampling; never
   ending inside an image) is made to sit in sequence 0 as for a plain reply (the cache's
   prefix kept, or a snapshot's), the rest of it evaluated once (an image in it through the
   projector: prompt_eval.py), then shared with sequence 1 (``llama_memory_seq_cp``: in the
   unified KV cache the cells are shared, not copied).
2. Each side's own rest is evaluated on its sequence (an image in it encoded and evaluated into
   that sequence: the two sides parted before it); the two last prompt tokens go in one
   batch, which gives each side its logits.
3. Each step samples each live side from its own row with its own sampler, and decodes one
   batch holding one token per live side. A side ends alone (its end-of-generation, its limit,
   its stop string, its tool call, its cancel); the other goes on.
4. Afterwards sequence 1 is removed: the cache holds side A's conversation (its prompt and
   reply), and its token list says so; its KV snapshot is taken as a plain reply's is
   (kv_snapshots.py), so a conversation reopened on side A's reply restores it (none of a
   prompt with images, as for a plain reply).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol

import llama_cpp as ll

from ..errors import GenerationError
from ..settings.knobs import LlamaCppOptions
from ..settings.params import SamplingParams
from ..settings.think_switch import check_budget
from ..turns.backend import (
    SIDES,
    ChatEvent,
    ContextTrimmed,
    GenerationStats,
    Side,
    SideEvent,
    SideRequest,
)
from ..turns.thinking import Piece
from ..turns.tool_calls import ToolSpec
from ..turns.tool_formats import ToolFormat
from .decoding import Emitter, make_sampler, sampler_chain
from .grammar_sampling import Sampler
from .kv_cache import KVCache
from .prompt_eval import OUT_OF_PLACE, AbortTicks, read_prompt
from .prompt_parts import common_prefix
from .prompting import Prompter
from .replying import Reply
from .think_budget import budgeted, closing_tokens
from .tool_grammar import marker_tokens, tool_sampler
from .tool_replies import reply_tools, tool_calls_finish
from .vision import Vision, image_start, is_image_start

# The sequence each side decodes in.
SEQ: dict[Side, int] = {"A": 0, "B": 1}


@dataclasses.dataclass
class PairTarget:
    """What the pair is handed of ``LlamaCppBackend``: its vocabulary, its prompt and KV cache
    (whose context and memory the pair decodes in), how a token becomes bytes (``special``: a
    control token rendered as text, a tool call's marker), each side's cancel flag
    (``cancels``), the abort callback's ticks (whose ``cancel`` stops both sides), the NULL
    abort callback put back after a prompt, its batch size, the thinking budget's closing
    phrase and the projector."""

    vocab: Any
    prompt: Prompter
    kv: KVCache
    token_bytes: Callable[[int, bool], bytes]
    cancels: dict[Side, threading.Event]
    ticks: AbortTicks
    no_abort: Any
    n_batch: int
    # What the thinking budget's closing says (``think_budget_message``).
    budget_message: str = ""
    # The projector (None: the model takes no images).
    vision: Vision | None = None

    @property
    def ctx(self) -> Any:
        return self.kv.ctx

    @property
    def memory(self) -> Any:
        return self.kv.mem

    @property
    def cancel(self) -> threading.Event:
        return self.ticks.cancel


@dataclasses.dataclass
class _Side:
    """One side under way: its prompt's tokens, its settings, its emitter and sampler, the
    reply forming, its stats, the next position in its sequence, its logits' row in the last
    batch, and the tokens decoded into its sequence."""

    name: Side
    tokens: list[int]
    params: SamplingParams
    out: Emitter
    sampler: Sampler
    reply: Reply
    stats: GenerationStats
    pos: int = 0
    row: int = 0
    decoded: list[int] = dataclasses.field(default_factory=list)


def pair_events(
    target: PairTarget, a: SideRequest, b: SideRequest
) -> Generator[SideEvent, None, None]:
    """Both replies as ``SideEvent``s (the module's steps). The cache is left holding side A's
    conversation, or emptied when the pair failed midway."""
    prompt = target.prompt
    t_start = time.perf_counter()
    fitted = [_fitted(prompt, request) for request in (a, b)]
    for name, side in zip(SIDES, fitted, strict=True):
        if side.dropped:
            trimmed = ContextTrimmed(side.dropped, len(side.tokens), prompt.context_size)
            yield SideEvent(name, trimmed)
    fa, fb = fitted
    ta, tb = fa.tokens, fb.tokens
    limits = side_limits(prompt.context_size, ta, tb, fa.params.max_tokens, fb.params.max_tokens)
    shared = shared_prefix(ta, tb)
    ll.llama_memory_seq_rm(target.memory, SEQ["B"], -1, -1)
    sides = [
        _start(target, name, side, limit, t_start)
        for name, side, limit in zip(SIDES, fitted, limits, strict=True)
    ]
    finished = False
    try:
        ok = yield from _read_prompts(target, sides, shared)
        yield from _decode(target, sides if ok else [], sides)
        finished = True
    finally:
        for one in sides:
            one.sampler.free()
        _settle(target, sides[0], finished)


@dataclasses.dataclass(frozen=True)
class _Fitted:
    """A side's prompt as fitted: its tokens (the newest messages that fit), the messages
    dropped, its settings as used (the seed drawn, "auto" made the model's defaults), and the
    tools it offers in the call format ``fmt`` (None: none), with its tool choice."""

    tokens: list[int]
    dropped: int
    params: SamplingParams
    fmt: ToolFormat | None
    tools: tuple[ToolSpec, ...]
    tool_choice: str


def _fitted(prompt: Prompter, request: SideRequest) -> _Fitted:
    """A side's prompt fitted as a plain reply's is (its tools listed as the template
    lists them: tool_replies.py)."""
    params = request.params.with_seed().resolved(prompt.template.name)
    check_budget(params.think_budget, prompt.context_size)
    fmt, tools = reply_tools(
        prompt.template, request.tools, request.tool_choice, params.output_format
    )
    tokens, left_out = prompt.fit(request.messages, params, tools)
    return _Fitted(tokens, len(left_out), params, fmt, tools, request.tool_choice)


def shared_prefix(ta: list[int], tb: list[int]) -> int:
    """The prompts' tokens evaluated once: their common prefix, short of each one's last token
    (evaluated on each side's own sequence, for its logits), never ending inside an image (one
    the prompts part in is each side's own)."""
    return image_start(ta, min(common_prefix(ta, tb), len(ta) - 1, len(tb) - 1))


def side_limits(
    n_ctx: int, ta: list[int], tb: list[int], max_a: int | None, max_b: int | None
) -> tuple[int, int]:
    """Each side's most tokens: its ``max_tokens``, within what the context's cells leave once
    both prompts (their shared prefix once: ``shared_prefix``) are in. When both cannot have all
    they ask, the smaller ask gets up to half and the other the rest."""
    room = n_ctx - (len(ta) + len(tb) - shared_prefix(ta, tb))
    if room < 2:
        raise GenerationError(
            f"the two prompts take {n_ctx - room:,} of the context's {n_ctx:,} tokens: no room "
            "for two replies; shorten them or raise --ctx."
        )
    ask_a = room if max_a is None else max_a
    ask_b = room if max_b is None else max_b
    if ask_a + ask_b <= room:
        return ask_a, ask_b
    if ask_a <= ask_b:
        small = min(ask_a, room // 2)
        return small, room - small
    small = min(ask_b, room // 2)
    return room - small, small


def _start(target: PairTarget, name: Side, side: _Fitted, limit: int, t_start: float) -> _Side:
    """A side ready to decode: its emitter (its stop strings, its limit, its own cancel, its
    thinking budget, its tools' call recogniser) and its sampler (its chain, its output format's
    or its tools' grammar, the budget's closing tokens: think_budget.py), as a plain reply's."""
    prompt, vocab, params, fmt = target.prompt, target.vocab, side.params, side.fmt
    cancel = target.cancels[name]
    cancel.clear()
    # A call's markers that are control tokens are rendered for the recogniser (tool_grammar.py).
    markers = marker_tokens(vocab, fmt) if fmt is not None else frozenset()
    out = prompt.emitter(
        lambda token: target.token_bytes(token, token in markers),
        cancel,
        len(side.tokens),
        params,
        fmt.recogniser() if fmt is not None else None,
    )
    out.limit = limit
    chain = sampler_chain(vocab, params)
    drawn = (
        make_sampler(chain, vocab, params)
        if fmt is None
        else tool_sampler(chain, vocab, fmt, side.tools, side.tool_choice)  # type: ignore[arg-type]
    )
    sampler = budgeted(
        drawn,
        out,
        lambda: closing_tokens(prompt.tokenize, target.budget_message, prompt.harmony),
    )
    stats = GenerationStats(prompt_tokens=len(side.tokens), seed=params.seed)
    return _Side(name, side.tokens, params, out, sampler, Reply(t_start=t_start), stats)


def _read_prompts(
    target: PairTarget, sides: list[_Side], shared: int
) -> Generator[SideEvent, None, bool]:
    """Evaluate the shared prefix once in sequence 0 (what the cache holds of it kept), share it
    with sequence 1, then each side's rest on its own sequence, the two last tokens in one batch
    (each side's logits row). False: cancelled."""
    kv, a, b = target.kv, sides[0], sides[1]
    keep, a.stats.restored_tokens, a.stats.restore_ms = kv.reuse(a.tokens, shared)
    n_batch = max(1, min(target.n_batch, target.prompt.context_size))
    ll.llama_set_abort_callback(target.ctx, target.ticks.callback, None)
    t0 = time.perf_counter()
    try:
        reading = read_prompt(
            target.ctx,
            target.memory,
            kv.tokens,
            a.tokens[keep:shared],
            n_batch,
            target.ticks,
            target.vision,
            report=True,
        )
        while True:
            try:
                progress = next(reading)
            except StopIteration as end:
                ok = bool(end.value)
                break
            yield SideEvent("A", progress)
            yield SideEvent("B", progress)
        if ok:
            ll.llama_memory_seq_cp(target.memory, SEQ["A"], SEQ["B"], -1, -1)
            ok = _read_rests(target, sides, shared, n_batch)
    finally:
        ll.llama_set_abort_callback(target.ctx, target.no_abort, None)
    t_done = time.perf_counter()
    a.stats.prompt_tokens_evaluated = shared - keep + len(a.tokens) - shared
    b.stats.prompt_tokens_evaluated = len(b.tokens) - shared
    for side in sides:
        side.stats.prompt_eval_ms = (t_done - t0) * 1000
        side.reply.t_prompt_done = t_done
        side.pos = len(side.tokens)
    return ok


def _read_rests(target: PairTarget, sides: list[_Side], shared: int, n_batch: int) -> bool:
    """Each side's prompt past the shared prefix on its own sequence: text in batches of at
    most ``n_batch`` rows (both sides' in one), an image through the projector into its side's
    sequence (the text before it first); the last token of each in the final batch, with logits
    (each side's ``row``). False: cancelled."""
    rows: list[tuple[int, int, int]] = []
    batch = ll.llama_batch_init(max(n_batch, len(sides)), 0, 1)
    try:
        for side in sides:
            rest, pos = side.tokens[:-1], shared
            while pos < len(rest):
                if rest[pos] >= 0:
                    rows.append((rest[pos], pos, SEQ[side.name]))
                    pos += 1
                    continue
                if not _flush(target, batch, rows, n_batch):
                    return False
                n = _side_image(target, side, pos, n_batch)
                if not n:
                    return False
                pos += n
        if not _flush(target, batch, rows, n_batch):
            return False
        last = [(side.tokens[-1], len(side.tokens) - 1, SEQ[side.name]) for side in sides]
        if not _decode_rows(target, batch, last, range(len(last))):
            return False
    finally:
        ll.llama_batch_free(batch)
    for row, side in enumerate(sides):
        side.row = row
    target.kv.tokens.extend(sides[0].tokens[shared:])
    return True


def _flush(target: PairTarget, batch: Any, rows: list[tuple[int, int, int]], n_batch: int) -> bool:
    """Decode the text ``rows`` gathered (then emptied), ``n_batch`` at a time, no logits.
    False: cancelled."""
    for start in range(0, len(rows), n_batch):
        if not _decode_rows(target, batch, rows[start : start + n_batch], ()):
            return False
    rows.clear()
    return True


def _side_image(target: PairTarget, side: _Side, pos: int, n_batch: int) -> int:
    """Encode and evaluate the image run at ``side.tokens[pos]`` into the side's sequence: its
    length, or 0 if cancelled; a failure raises (one line)."""
    head, vision = side.tokens[pos], target.vision
    if vision is None or not is_image_start(head):
        raise GenerationError(OUT_OF_PLACE)
    n = vision.run_length(head)
    rc = vision.evaluate(target.ctx, head, pos, n_batch, SEQ[side.name])
    if rc == 0 and not target.cancel.is_set():
        return n
    if rc in (0, 2) or target.cancel.is_set():
        return 0
    raise GenerationError(
        f"llama.cpp failed to evaluate side {side.name}'s image (code {rc}); start a new "
        "conversation or lower --ctx."
    )


def _decode_rows(
    target: PairTarget, batch: Any, rows: list[tuple[int, int, int]], logits: Any
) -> bool:
    """One ``llama_decode`` of ``rows`` (token, position, sequence), logits for the rows in
    ``logits``. False: cancelled (the abort callback); raises on a failure."""
    for i, (token, pos, seq) in enumerate(rows):
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = i in logits
    batch.n_tokens = len(rows)
    rc = int(ll.llama_decode(target.ctx, batch))
    if rc == 0:
        return True
    if rc == 2 or target.cancel.is_set():
        return False
    raise GenerationError(
        f"llama.cpp failed while generating two replies (llama_decode returned {rc}); "
        "start a new conversation."
    )


def _decode(target: PairTarget, live: list[_Side], sides: list[_Side]) -> Iterator[SideEvent]:
    """The steps: each live side samples from its row, and the tokens go in one batch, one per
    live side; a side that ends yields its end. ``sides``: both (those not live end cancelled)."""
    live = list(live)
    for side in sides:
        if side not in live:
            side.out.finish = "cancelled"
            yield from _side_end(side)
    batch = ll.llama_batch_init(len(SIDES), 0, 1)
    try:
        while live:
            if target.cancel.is_set():
                for side in live:
                    target.cancels[side.name].set()
            step: list[tuple[_Side, int]] = []
            for side in list(live):
                token = yield from _sample(target, side)
                if token is None:
                    live.remove(side)
                    yield from _side_end(side)
                else:
                    step.append((side, token))
            if not step:
                break
            rows = [(token, side.pos, SEQ[side.name]) for side, token in step]
            if not _decode_rows(target, batch, rows, range(len(rows))):
                for side in live:
                    side.out.finish = "cancelled"
                    yield from _side_end(side)
                return
            for row, (side, token) in enumerate(step):
                side.row, side.pos = row, side.pos + 1
                side.decoded.append(token)
    finally:
        ll.llama_batch_free(batch)


def _sample(target: PairTarget, side: _Side) -> Generator[SideEvent, None, int | None]:
    """Side ``side``'s next token, its text's events yielded: None when the side ends (its
    cancel, its limit, its end of generation or stop string)."""
    out = side.out
    if not out.may_continue():
        return None
    token = side.sampler.sample(target.ctx, side.row)
    pieces = out.emit(token)
    if pieces:
        if side.reply.t_first_token is None:
            side.reply.t_first_token = time.perf_counter()
        yield from _tagged(side, pieces)
    return None if out.done else token


def _tagged(side: _Side, pieces: list[Piece]) -> Iterator[SideEvent]:
    """The pieces as side ``side``'s events (kept in its reply)."""
    for event in side.reply.events(pieces, side.out.generated):
        yield SideEvent(side.name, event)


def _side_end(side: _Side) -> Iterator[SideEvent]:
    """A side's end: what its emitter held back, then its ``GenerationDone``."""
    out = side.out
    out.count_into(side.stats, side.params)
    yield from _tagged(side, out.tail())
    # A side that ended by itself with a call ends asking for it, as a plain reply.
    side.reply.ended(out, tool_calls_finish(out.finish, out.tool_calls))
    event: ChatEvent = side.reply.done(side.stats, side.params)
    yield SideEvent(side.name, event)


def _settle(target: PairTarget, a: _Side, finished: bool) -> None:
    """Sequence 1 removed; the cache says what sequence 0 holds: side A's prompt and the tokens
    decoded into it, due to be kept as a plain reply's KV snapshot (kv_snapshots.py); emptied
    when the pair stopped midway: what it holds is not known."""
    kv = target.kv
    ll.llama_memory_seq_rm(target.memory, SEQ["B"], -1, -1)
    kv.snapshot_due = False
    if not finished or len(kv.tokens) != len(a.tokens):
        kv.reset()
        return
    kv.tokens.extend(a.decoded)
    kv.snapshot_due = True


def _then_snapshot(events: Iterator[SideEvent], kv: KVCache) -> Generator[SideEvent, None, None]:
    """``events``, then the snapshot of side A's conversation, once the consumer asked past
    both ends (it has shown them), as ``stream_chat`` takes a plain reply's."""
    yield from events
    kv.keep_snapshot()


class PairHost(Protocol):
    """What ``Pairs`` reads of the backend it is mixed into (``LlamaCppBackend``), as the backend
    itself reads it: the model loaded (``_loaded``), a token's bytes, its vocabulary, options and
    projector, its cancel flags and abort callbacks, and whether its snapshots wait for the
    engine process."""

    @property
    def options(self) -> LlamaCppOptions: ...

    @property
    def _vocab(self) -> Any: ...

    @property
    def _cancel(self) -> threading.Event: ...

    @property
    def _ticks(self) -> AbortTicks: ...

    @property
    def _no_abort(self) -> Any: ...

    @property
    def _vision(self) -> Vision | None: ...

    @property
    def defer_snapshots(self) -> bool: ...

    @property
    def _sides(self) -> dict[Side, threading.Event]:
        """Each side's own stop while a pair is decoded."""

    def _loaded(self) -> tuple[Prompter, KVCache]: ...

    def _token_bytes(self, token: int, special: bool) -> bytes: ...


class Pairs:
    """``LlamaCppBackend``'s two replies at once (``PairedReplies``): its ``stream_pair`` and
    ``cancel_side``, a mixin of the backend (llamacpp.py), which reads what ``PairHost`` says
    of it."""

    def stream_pair(
        self: PairHost, a: SideRequest, b: SideRequest
    ) -> Generator[SideEvent, None, None]:
        """Two replies to one prompt at once, as two sequences of this context
        (``PairedReplies``, engine/turns/backend.py; the steps above)."""
        prompt, kv = self._loaded()
        self._cancel.clear()
        target = PairTarget(
            self._vocab,
            prompt,
            kv,
            self._token_bytes,
            self._sides,
            self._ticks,
            self._no_abort,
            self.options.n_batch,
            self.options.think_budget_message,
            self._vision,
        )
        events = pair_events(target, a, b)
        # The engine process takes it itself once the pair's answer went out (worker_child.py).
        return events if self.defer_snapshots else _then_snapshot(events, kv)

    def cancel_side(self: PairHost, side: Side) -> None:
        """Stop one side of the pair under way soon; the other goes on (any thread)."""
        self._sides[side].set()
