"""The prompt of ``LlamaCppBackend`` (engine/llama/llamacpp.py): how the loaded model is
prompted (its chat template, a built-in turn format, or the completion frame) and what that
says about its replies; a conversation's tokens (the template's text with its special tokens,
each message's content as plain text, images as placeholder runs); and the newest messages
that fit the context.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence

import llama_cpp as ll

from ..errors import ContextOverflowError, GenerationError
from ..models.gguf import GGUFInfo
from ..settings.choices import COMPLETION
from ..settings.knobs import LlamaCppOptions
from ..settings.limits import CONTEXT_STEP, prompt_byte_limit, prompt_too_large, reply_reserve
from ..settings.params import SamplingParams
from ..settings.think_switch import OpensThinking, switched
from ..turns.backend import ChatMessage
from ..turns.chat_template import ChatTemplate
from ..turns.harmony import uses_harmony
from ..turns.prompt_format import PromptChoice, choose_template
from ..turns.thinking import template_opens_thinking
from ..turns.tool_calls import ToolSpec
from ..turns.tool_formats import ToolCallRecogniser
from .decoding import Emitter, reply_stops
from .prompt_parts import common_prefix, oldest_turn, owned_parts, text_bytes, tokenize
from .think_budget import applies
from .vision import Vision, image_start, images_in_prompt

log = logging.getLogger("vibechat.llama_cpp")


class Prompter:
    """A loaded model's prompt: its template and what that says about replies (chosen when
    made), a conversation's tokens (``tokens``) and the newest messages that fit its context
    (``fit``)."""

    template: ChatTemplate
    # The template chosen, and why.
    choice: PromptChoice
    # Turn tokens that end a reply (besides EOG).
    turn_stops: frozenset[int]
    # The generation prompt opens <think>: replies start thinking.
    reply_thinks: bool
    # The reply is in gpt-oss's harmony format (channels).
    harmony: bool
    # Whether the generation prompt opens <think> with the thinking switched on or off.
    opens_thinking: OpensThinking

    def __init__(
        self,
        vocab: object,
        gguf: GGUFInfo,
        options: LlamaCppOptions,
        vision: Vision | None,
        context_size: int,
        trained_context: int | None,
        cancelled: threading.Event,
    ) -> None:
        """``vision``: the projector (None: this model takes no images); ``cancelled``: set, it
        stops a template's render."""
        self.vocab = vocab
        self.options = options
        self.vision = vision
        self.context_size = context_size
        self.trained_context = trained_context
        self.choice = self._choose_template(gguf, cancelled)

    def _choose_template(self, gguf: GGUFInfo, cancelled: threading.Event) -> PromptChoice:
        """How this model is prompted, and what its template says about replies: the turn tokens
        that end one, whether one starts inside a thinking block, harmony's channels."""
        bos = self.token_text(ll.llama_vocab_bos(self.vocab))
        eos = self.token_text(ll.llama_vocab_eos(self.vocab))
        # The GGUF's template, a built-in turn format, or (a base model) the completion frame.
        choice = choose_template(
            gguf.chat_template,
            gguf.architecture,
            self.has_token,
            gguf.metadata,
            gguf.path.name,
            self.options.prompt_format,
        )
        name, source = choice.name, choice.source
        # cancel() (Ctrl-C) also stops a render: a GGUF's template is code that may loop for long.
        template = ChatTemplate(
            name, source, bos_token=bos, eos_token=eos, cancelled=cancelled.is_set
        )
        self.template = template
        self.turn_stops = frozenset(
            self.single_token(text) for text in template.turn_tokens if self.has_token(text)
        )
        # A generation prompt that ends inside <think> (DeepSeek-R1's distills): the reply
        # starts inside the thinking block (engine/turns/thinking.py).
        self.reply_thinks = template_opens_thinking(template.render)
        # gpt-oss's channels (engine/turns/harmony.py); never in the completion frame, which
        # has no channels.
        self.harmony = name != COMPLETION and uses_harmony(source, self.has_token)
        # ... and with the thinking switched on or off, where the template takes a switch.
        self.opens_thinking = OpensThinking(
            template.render, template.thinking_switch, template_opens_thinking
        )
        return choice

    def emitter(
        self,
        piece_bytes: Callable[[int], bytes],
        cancel: threading.Event,
        n_prompt: int,
        params: SamplingParams,
        calls: ToolCallRecogniser | None,
    ) -> Emitter:
        """What a reply after a prompt of ``n_prompt`` tokens does with its tokens
        (decoding.py's ``Emitter``): its limit (the context left, or ``max_tokens``), its stop
        strings and turn tokens, whether it starts inside thinking; ``calls``: the offered tools'
        recogniser."""
        limit = self.context_size - n_prompt
        if params.max_tokens is not None:
            limit = min(limit, params.max_tokens)
        inside = self.reply_thinks
        if params.thinking != "auto":
            inside = self.opens_thinking(params.thinking)
        template = self.template
        return Emitter(
            piece_bytes,
            self.vocab,
            self.turn_stops,
            cancel,
            limit,
            reply_stops(params, template.stop_strings),
            inside,
            self.harmony,
            lstrip=template.name == COMPLETION,
            calls=calls,
            budget=applies(params),
        )

    # ---------------------------------------------------------- tokenization
    def token_text(self, token: int) -> str:
        """The text of a token of the vocabulary ("" for none)."""
        if token < 0:
            return ""
        raw = ll.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        """``text``'s tokens (engine/llama/prompt_parts.py)."""
        return tokenize(self.vocab, text, add_special, parse_special)

    def has_token(self, text: str) -> bool:
        """Whether ``text`` is one token of the vocabulary."""
        tokens = self.tokenize(text, add_special=False)
        return len(tokens) == 1 and self.token_text(tokens[0]) == text

    def single_token(self, text: str) -> int:
        """The token ``text`` is (when ``has_token``)."""
        return self.tokenize(text, add_special=False)[0]

    # ---------------------------------------------------------------- prompt
    def tokens(
        self,
        messages: Sequence[ChatMessage],
        thinking: str = "auto",
        tools: Sequence[ToolSpec] = (),
        strict: bool = False,
    ) -> list[int]:
        """The prompt's tokens: the template's own text with its special tokens, each message's
        content as plain text, so a message holding ``<end_of_turn><start_of_turn>model`` cannot
        forge a turn (owned_parts). ``thinking``: the switch's mode
        (engine/settings/think_switch.py). A message's images go before its content, as
        placeholder runs (engine/llama/vision.py); ``strict``: images in the newest user message
        to a model without a projector raise."""
        template = self.template
        images = images_in_prompt(messages, self.vision is not None, strict)
        render = switched(
            functools.partial(template.render, tools=tools) if tools else template.render,
            template.thinking_switch,
            thinking,
        )
        # The completion frame's own spelling of each content.
        messages = template.framed(messages)
        text = render(messages)
        bos = template.bos_token
        already_has_bos = bool(bos) and text.startswith(bos)
        parts = owned_parts(render, messages, text)
        if parts is None:
            # A template that rewrites content: tokenized as llama.cpp's server tokenizes it.
            if images:
                raise GenerationError(
                    f"the chat template {template.name} rewrites messages, so images "
                    "cannot be placed in them: choose another --prompt-format."
                )
            log.warning(
                "chat template %s changes message content: special tokens in messages are parsed",
                template.name,
            )
            return self.tokenize(text, add_special=not already_has_bos)
        tokens: list[int] = []
        for i, (piece, owner) in enumerate(parts):
            if self.vision is not None and owner in images:
                # Before the content's first piece.
                tokens += self.vision.tokens(images.pop(owner))
            if piece:
                tokens += self.tokenize(
                    piece, add_special=i == 0 and not already_has_bos, parse_special=owner < 0
                )
        return tokens

    def next_turn_cut(
        self,
        messages: Sequence[ChatMessage],
        tokens: list[int],
        thinking: str,
        tools: Sequence[ToolSpec],
    ) -> int:
        """Where the next user turn will part from ``tokens``, the prompt of ``messages`` (past
        the last message, before the generation prompt): a prefill's snapshot is taken there,
        so a new engine can continue it."""
        following = [*messages, ChatMessage("user", "\u2026")]
        shared = common_prefix(tokens, self.tokens(following, thinking, tools))
        return image_start(tokens, shared)

    def fit(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        tools: Sequence[ToolSpec] = (),
        strict: bool = True,
    ) -> tuple[list[int], tuple[int, ...]]:
        """Prompt tokens for the newest messages that fit, and the indices (in ``messages``) of
        the old ones left out: whole turns, oldest first; the system prompt and pinned messages
        never (``strict``: images to a model without a projector raise, before anything is
        evaluated)."""
        n_ctx = self.context_size
        reserve = reply_reserve(params.max_tokens, n_ctx)
        system = [m for m in messages[:1] if m.role == "system"]
        # The indices of the messages still in the prompt, after the system prompt.
        kept = list(range(len(system), len(messages)))
        left_out: list[int] = []

        def drop() -> list[ChatMessage]:
            rest = [messages[i] for i in kept]
            span = oldest_turn(rest)
            if span is None:
                return []
            start, end = span
            left_out.extend(kept[i] for i in range(start, end) if not rest[i].pinned)
            kept[start:end] = [kept[i] for i in range(start, end) if rest[i].pinned]
            return [m for m in rest[start:end] if not m.pinned]

        def prompt() -> list[ChatMessage]:
            return system + [messages[i] for i in kept]

        # Text that cannot fit whatever its tokens is dropped (old turns) or refused (the last
        # message) before anything is tokenized: tokenizing 32 MB takes most of a minute.
        size = text_bytes(prompt())
        while size > prompt_byte_limit(n_ctx) and len(kept) > 1:
            gone = drop()
            if not gone:
                break
            size -= text_bytes(gone)
        too_large = prompt_too_large(size, n_ctx)
        if too_large:
            raise ContextOverflowError(too_large)
        tokens = self.tokens(prompt(), params.thinking, tools, strict)
        while len(tokens) + reserve > n_ctx and len(kept) > 1:
            if not drop():
                break
            tokens = self.tokens(prompt(), params.thinking, tools, strict)
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(self._overflow(len(tokens)))
        return tokens, tuple(sorted(left_out))

    def _overflow(self, n_tokens: int) -> str:
        """The line that says a prompt of ``n_tokens`` does not fit, and what to do."""
        n_ctx, trained = self.context_size, self.trained_context
        more = f" (this model was trained for {trained:,})" if trained and trained > n_ctx else ""
        asked = self.options.context_size
        if asked and asked != n_ctx:
            n_ctx_text = f"{n_ctx:,} ({asked:,} rounded up to a multiple of {CONTEXT_STEP})"
        else:
            n_ctx_text = f"{n_ctx:,}"
        return (
            f"the prompt takes {n_tokens:,} tokens but the context holds {n_ctx_text}: "
            f"shorten the message or system prompt, or raise --ctx{more}."
        )
