"""The decode loop's parts, shared by the plain loop here and the drafting loop
(engine/llama/drafting.py): what the loops are handed of the backend (``DecodeTarget``), what they
do with each sampled token (``Emitter``), the sampler they draw with, and the events the reply's
pieces become. Both loops sample with the same sampler and hand every token to the same Emitter;
they differ only in how many tokens one ``llama_decode`` evaluates."""

from __future__ import annotations

import codecs
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import llama_cpp as ll

from ..errors import GenerationError
from ..settings.params import PARAM_SPECS, SamplingParams
from ..turns.backend import ChatEvent, FinishReason, GenerationStats, TextDelta, ThinkingDelta
from ..turns.harmony import HarmonySplitter
from ..turns.stops import StopMatcher
from ..turns.thinking import Piece, StreamSplitter, ThinkingSplitter
from ..turns.tool_calls import ToolCall
from ..turns.tool_formats import ToolCallRecogniser
from .grammar_sampling import ChainSampler, GrammarSampler, Sampler
from .native import grammar_error


@dataclasses.dataclass
class DecodeTarget:
    """What a decode loop is handed of ``LlamaCppBackend`` for one reply: its llama.cpp context
    and memory, the tokens its KV cache holds (the loops append what they decode, and drop
    rejected drafts), its cancel flag and its sizes. Made per reply: ``reset()`` replaces the
    backend's token list."""

    ctx: Any  # llama_context_p
    memory: Any  # llama_memory_t
    # What the KV cache holds for sequence 0.
    tokens: list[int]
    cancel: threading.Event
    # The options' batch size (each loop bounds it by the context).
    n_batch: int
    context_size: int
    # A one-token batch's buffer.
    one: Any = dataclasses.field(default_factory=lambda: (ll.llama_token * 1)())

    def failed(self, rc: int, out: Emitter) -> None:
        """A ``llama_decode`` returned ``rc``: the reply ends cancelled (an abort, or a cancel
        meanwhile), else raises."""
        if rc == 2 or self.cancel.is_set():
            out.finish = "cancelled"
            return
        raise GenerationError(
            f"llama.cpp failed while generating (llama_decode returned {rc}); "
            "start a new conversation."
        )


def plain_tokens(target: DecodeTarget, sampler: Sampler, out: Emitter) -> Iterator[list[Piece]]:
    """One token per llama_decode. Yields the reply's pieces (thinking, answer) as they form."""
    ctx, one, kept = target.ctx, target.one, target.tokens
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
            target.failed(rc, out)
            return
        kept.append(token)


def sampler_chain(vocab: Any, params: SamplingParams) -> Any:
    """llama.cpp's C sampler chain for ``params``: each parameter's stage as its declaration
    says (``ParamSpec.llama``, engine/settings/params.py: penalties, top-k, top-p, min-p,
    temperature, the seeded draw), in their order; at temperature 0 the chain ends in the
    greedy pick, without the stages that only shape the draw."""
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    greedy = params.temperature <= 0
    stages = sorted(
        ((spec.llama, spec.name) for spec in PARAM_SPECS.values() if spec.llama is not None),
        key=lambda stage: stage[0].order,
    )
    for stage, name in stages:
        if greedy and stage.sampling:
            continue
        sampler = stage.make(ll, vocab, getattr(params, name))
        if sampler is not None:
            ll.llama_sampler_chain_add(chain, sampler)
    if greedy:
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    return chain


def make_sampler(chain: Any, vocab: Any, params: SamplingParams) -> Sampler:
    """The sampler the decode loops draw with: ``chain``, and for an output format llama.cpp's
    grammar sampler beside it, checked lazily (engine/llama/grammar_sampling.py). Takes
    ownership of ``chain`` (freed when the grammar is refused)."""
    if params.output_format is None:
        return ChainSampler(chain)
    gbnf = params.output_format.gbnf()
    # First, quietly: a bad grammar's complaint goes to stderr.
    reason = grammar_error(gbnf)
    grammar = (
        None if reason else ll.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    )
    if not grammar:
        ll.llama_sampler_free(chain)
        raise GenerationError(f"llama.cpp rejects the grammar: {reason or 'it does not parse'}.")
    return GrammarSampler(chain, grammar, ll.llama_vocab_n_tokens(vocab))


class Emitter:
    """What every decode loop does with a sampled token: stop on cancel or at the length
    limit, end at end-of-generation or at a token that opens or closes a turn, decode the
    token's bytes as UTF-8 without splitting a character, and hold back text that may be the
    start of a stop string."""

    __slots__ = (
        "_piece_bytes",
        "_cancel",
        "limit",
        "generated",
        "finish",
        "done",
        "_utf8",
        "_decode",
        "_stops",
        "_eog",
        "_vocab",
        "_turn_stops",
        "_splitter",
        "thinking_tokens",
        "_lstrip",
        "_line_start",
        "_calls",
        "_raw_calls",
        "tool_calls",
        "at_eog",
        "budget",
        "budget_reached",
        "_shown",
    )

    def __init__(
        self,
        piece_bytes: Callable[[int], bytes],
        vocab: Any,
        turn_stops: frozenset[int],
        cancel: threading.Event,
        limit: int,
        stop: Sequence[str],
        inside: bool = False,
        harmony: bool = False,
        lstrip: bool = False,
        calls: ToolCallRecogniser | None = None,
        budget: int | None = None,
    ) -> None:
        """``piece_bytes``: a token's bytes; ``vocab``: the model's (llama.cpp says which tokens end
        a generation); ``turn_stops``: the template's turn tokens that end a reply too;
        ``cancel``: set to stop; ``calls``: tools were offered: the recogniser of the family's
        calls (engine/turns/tool_formats.py), which holds a call's text back; the calls found
        are ``tool_calls`` once ``tail()`` ran; ``budget``: the thinking budget (None: none;
        engine/llama/think_budget.py)."""
        self._piece_bytes = piece_bytes
        self._cancel = cancel
        self._vocab = vocab
        self._eog = ll.llama_vocab_is_eog
        self._turn_stops = turn_stops
        self.limit = limit
        self.generated = 0
        # Of those, generated inside the thinking block (its tags included).
        self.thinking_tokens = 0
        self.finish: FinishReason = "stop"
        # Ended by end-of-generation or a stop string.
        self.done = False
        # Ended by an end-of-generation token (not a turn token, a stop string or a limit): under a
        # grammar, llama.cpp's sampler allows one only once the grammar is complete.
        self.at_eog = False
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decode = self._utf8.decode
        self._stops = StopMatcher(stop)
        # The reply's thinking apart: <think> tags (engine/turns/thinking.py) or gpt-oss's channels
        # (harmony.py).
        self._splitter: StreamSplitter = HarmonySplitter() if harmony else ThinkingSplitter(inside)
        # The completion frame's cue is "Assistant:", so an answer starts with a space (" Paris."):
        # not the reply's text. (Re-rendered, the frame puts it back: the cached tokens still
        # match.) Leading blank lines go too, and the stop strings see the answer as the start of a
        # line (a "\n" put before it, never emitted): an answer that opens with "User:" ends
        # there, one that opens with a blank line does not end empty.
        self._lstrip = lstrip
        # The "\n" put before the answer is still to be taken out.
        self._line_start = False
        # Harmony names a call's tool in a message header the splitter drops: its recogniser
        # reads the raw text; the others read the answer (a <tool_call> inside thinking stays
        # thinking).
        self._calls = calls
        self._raw_calls = harmony and calls is not None
        self.tool_calls: list[ToolCall] = []
        self.budget = budget
        # The closing phrase and the end of thinking were put in (think_budget.py).
        self.budget_reached = False
        # Generated tokens up to the last one whose text the reply shows (see ``after_stop``).
        self._shown = 0

    def budget_due(self) -> bool:
        """Whether the thinking has reached its budget and may be closed now: inside the
        thinking, not inside a tool call, no character half written."""
        budget = self.budget
        return (
            budget is not None
            and not self.budget_reached
            and self.thinking_tokens >= budget
            and self._splitter.thinking
            and not self._splitter.in_call
            and not self._utf8.getstate()[0]
        )

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
        eog = bool(self._eog(self._vocab, token))
        if eog or token in self._turn_stops:
            self.done, self.at_eog = True, eog
            return []
        self.generated += 1
        splitter = self._splitter
        was_thinking = splitter.thinking
        text = self._decode(self._piece_bytes(token))
        if self._raw_calls:
            assert self._calls is not None
            text = self._calls.feed(text)
        pieces = splitter.feed(text)
        # Inside the block, or the token that opens or closes it.
        if was_thinking or splitter.thinking:
            self.thinking_tokens += 1
        out = self._stopped_at(self._answer_calls(pieces))
        if out:
            self._shown = self.generated
        return out

    @property
    def after_stop(self) -> int | None:
        """Once a stop string ended the reply: the index of the first generated token the
        reply does not show (the tokens held back for the stop string, after the last one
        whose text the reply shows); None while no stop string matched."""
        return self._shown if self._stops.stopped else None

    def _answer_calls(self, pieces: list[Piece]) -> list[Piece]:
        """The answer's pieces through the call recogniser (a call's text held back)."""
        calls = self._calls
        if calls is None or self._raw_calls:
            return pieces
        out = [(thinking, text if thinking else calls.feed(text)) for thinking, text in pieces]
        return [(thinking, text) for thinking, text in out if text]

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

    def count_into(self, stats: GenerationStats, params: SamplingParams) -> None:
        """What this reply's tokens were, into its ``stats``: how many (thinking included), how
        many of them thinking, and (under an output format) whether the grammar accepted it."""
        stats.completion_tokens = self.generated
        stats.thinking_tokens = self.thinking_tokens
        stats.think_budget = self.budget
        stats.think_budget_reached = self.budget_reached
        stats.grammar_accepted = params.output_format is not None and self.at_eog

    def tail(self) -> list[Piece]:
        """What is still held back once generation ends (nothing after a stop string)."""
        calls = self._calls
        if self._stops.stopped:
            if calls is not None:
                # The calls made before the stop string, if any.
                self.tool_calls = calls.finish()[1]
            return []
        text = self._decode(b"", final=True)
        if calls is not None and self._raw_calls:
            text = calls.feed(text)
            rest, self.tool_calls = calls.finish()
            text += rest
        pieces = self._answer_calls(self._splitter.feed(text) + self._splitter.flush())
        if calls is not None and not self._raw_calls:
            rest, self.tool_calls = calls.finish()
            if rest:
                pieces.append((False, rest))
        out = self._stopped_at(pieces)
        rest = self._stops.flush()
        if self._line_start and rest:
            self._line_start, rest = False, rest[1:]
        if rest:
            out.append((False, rest))
        return out


def reply_stops(params: SamplingParams, frame_stops: Sequence[str]) -> tuple[str, ...]:
    """The stop strings a reply ends at: the user's, and the prompt format's (the completion
    frame's "\nUser:") for free text only. Under an output format the grammar decides where the
    reply ends: a frame's stop string would cut it wherever its text turned up (inside a JSON
    string), and once the grammar is complete it allows nothing but whitespace and the end."""
    return tuple(params.stop) if params.output_format is not None else (*params.stop, *frame_stops)


def split_events(
    pieces: list[Piece], text_parts: list[str], thinking_parts: list[str], tokens: int = 0
) -> Iterator[ChatEvent]:
    """The splitter's pieces as events, kept in ``text_parts`` / ``thinking_parts``;
    ``tokens``: generated so far (the live count the status bar shows)."""
    for thinking, text in pieces:
        if thinking:
            thinking_parts.append(text)
            yield ThinkingDelta(text, tokens)
        else:
            text_parts.append(text)
            yield TextDelta(text, tokens)
