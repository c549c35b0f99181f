"""The backend interface: what the app needs from any model runtime.

A backend loads one model, streams a chat as events, can be cancelled from any
thread, resets its conversation cache, counts the tokens a message list takes,
and describes the model it has loaded. ``LlamaCppBackend`` runs GGUF files in
process, ``OpenAICompatibleBackend`` talks to a server over HTTP; tests use
recording doubles that implement the same protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from ..settings.choices import COMPLETION
from ..settings.knobs import human_mib
from ..settings.params import SamplingParams
from .attachments import Attachment, model_text
from .tool_calls import ToolCall, ToolSpec

Role = Literal["system", "user", "assistant", "tool"]
# "tool_calls": the reply ends asking for tool calls (``GenerationDone.tool_calls``).
FinishReason = Literal["stop", "length", "cancelled", "tool_calls"]


@dataclass(frozen=True)
class ChatMessage:
    """One message. An assistant message may ask for tool calls (``tool_calls``, its
    ``content`` then often empty); a ``tool`` message is a call's result (``tool_call_id``:
    the call it answers, ``name``: the tool's). A user message may carry ``attachments``
    (engine/turns/attachments.py): a backend is handed them ``inlined()``, images only."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    attachments: tuple[Attachment, ...] = ()
    # Pinned by the user: never left out to fit the context (as the system prompt is not).
    pinned: bool = False

    @property
    def images(self) -> tuple[Attachment, ...]:
        """The images this message sends the model."""
        return tuple(a for a in self.attachments if a.is_image)

    def inlined(self) -> ChatMessage:
        """The message as a backend takes it: its text files inlined into its content (with their
        names), its images kept as attachments."""
        if all(a.is_image for a in self.attachments):
            return self
        return replace(
            self, content=model_text(self.content, self.attachments), attachments=self.images
        )

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI chat message (what servers and Hugging Face chat templates read)."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            data["name"] = self.name
        return data


def prompt_format_name(chat_format: str) -> str:
    """How a model is prompted, in the words every place uses (``vibechat show``, ``/show
    info``, ``run --json``'s ``prompt_format``): ``completion``, ``chat template (gguf)``,
    ``chat template (built-in gemma)``, ``chat template (server)``."""
    if chat_format == COMPLETION:
        return COMPLETION
    if chat_format in ("gguf", "server"):
        return f"chat template ({chat_format})"
    return f"chat template (built-in {chat_format})"


def prompt_format_line(chat_format: str, reason: str = "") -> str:
    """:func:`prompt_format_name` and why (``ModelInfo.chat_format_reason``,
    ``PromptChoice.reason``), as ``vibechat show`` and ``/show info`` print it:
    ``completion (no chat template in the GGUF, ...)``."""
    name = prompt_format_name(chat_format)
    return f"{name} ({reason})" if reason else name


@dataclass(frozen=True)
class ModelInfo:
    """What the status bar, ``vibechat run --json`` and ``models info`` show."""

    name: str
    path: str
    architecture: str
    quantization: str
    trained_context: int | None
    context_size: int
    n_layers: int | None
    # Layers offloaded to the GPU (0 = CPU only).
    gpu_layers: int
    gpu_offload_supported: bool
    # How the model is prompted: "gguf" (the file's own template), a built-in turn format
    # ("gemma", "chatml", "llama3"), "completion" (a base model: the few-shot frame of
    # engine/turns/chat_template.py) or "server" (the server applies its own).
    chat_format: str
    file_size: int
    n_threads: int | None = None
    flash_attn: bool | None = None
    backend: str = "llama.cpp"
    # A remote backend's server (its URL, without credentials).
    server: str | None = None
    # The K and V cache element type.
    kv_cache_type: str = "f16"
    # What llama.cpp allocated for the KV cache (None: unknown).
    kv_cache_bytes: int | None = None
    # Turned on because the quantized V cache needs it.
    flash_attn_forced: bool = False
    # "auto" (adaptive) or "prompt-lookup" (fixed) when drafting.
    speculative: str = "off"
    # Most tokens drafted per step (0: not drafting).
    draft_tokens: int = 0
    # The draft model's name (None: drafts come from prompt lookup), and its weights and its KV
    # cache, loaded beside the model.
    draft_model: str | None = None
    draft_model_bytes: int | None = None
    # llama.cpp's CPU weight repacking: "on" / "off" (None: not a local model); as asked (auto, on
    # or off); why, in a few words (e.g. "no AMX kernel in this build").
    repack: str | None = None
    repack_setting: str | None = None
    repack_reason: str = ""
    # Warnings about how it was loaded (one line each), e.g. GPU -> CPU.
    notices: tuple[str, ...] = ()
    # The chat-template variable that switches thinking (enable_thinking, thinking,
    # reasoning_effort; engine/settings/think_switch.py); None: the template has none, or it is a
    # server's (not known here).
    thinking_switch: str | None = None
    # Why that format, in a few words (prompt_format auto decides).
    chat_format_reason: str = ""
    # How the model calls tools: the call format its chat template speaks (hermes, llama3,
    # mistral, harmony: engine/turns/tool_formats.py), "server" (the server parses calls), or
    # "" (none: its template offers no tools, so a reply is offered none).
    tool_calls: str = ""
    # Images: the projector file a local model sees them through (--mmproj; None: none loaded), or
    # for a remote model "server" (the server decides whether its model takes images).
    projector: str | None = None

    @property
    def takes_images(self) -> bool:
        """Whether an image can be sent: a local model with a projector, or any server's."""
        return self.projector is not None

    @property
    def prompt_format(self) -> str:
        """How the model is prompted, as ``vibechat run --json`` says it
        (:func:`prompt_format_name`)."""
        return prompt_format_name(self.chat_format)

    @property
    def device(self) -> str:
        """Where the model runs: ``GPU 18/18 layers``, ``CPU``, why not the GPU, or the
        remote server (``openai · http://127.0.0.1:8080``)."""
        if self.server:
            return f"{self.backend} · {self.server}"
        if self.gpu_layers:
            return (
                f"GPU {self.gpu_layers}/{self.n_layers} layers"
                if self.n_layers
                else f"GPU {self.gpu_layers} layers"
            )
        if self.backend != "llama.cpp" or self.gpu_offload_supported:
            return "CPU" if self.backend == "llama.cpp" else self.backend
        return "CPU (no GPU offload in this build)"

    @property
    def kv_cache(self) -> str:
        """``KV q8_0 76 MiB`` (the size when known)."""

        size = f" {human_mib(self.kv_cache_bytes)}" if self.kv_cache_bytes else ""
        return f"KV {self.kv_cache_type}{size}"

    @property
    def memory_bytes(self) -> int:
        """What the loaded model holds in memory, as far as known: its weights, its KV cache,
        and a draft model's weights and KV cache (0 for a server)."""
        if self.server:
            return 0
        return self.file_size + (self.kv_cache_bytes or 0) + (self.draft_model_bytes or 0)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class GenerationStats:
    """Per-reply statistics; times in milliseconds."""

    prompt_tokens: int = 0
    # After KV-cache prefix reuse.
    prompt_tokens_evaluated: int = 0
    # The prompt's tokens that came from a KV snapshot (engine/llama/kv_snapshots.py: a reopened
    # conversation, another branch) instead of being evaluated, and the restore's time.
    restored_tokens: int = 0
    restore_ms: float = 0.0
    prompt_eval_ms: float = 0.0
    completion_tokens: int = 0
    ttft_ms: float = 0.0
    decode_ms: float = 0.0
    decode_tokens_per_s: float = 0.0
    finish_reason: FinishReason = "stop"
    seed: int | None = None
    # Oldest messages left out to fit the context.
    dropped_messages: int = 0
    # Speculative decoding: tokens proposed by the draft, and how many of them the model confirmed.
    drafted_tokens: int = 0
    accepted_draft_tokens: int = 0
    # Of completion_tokens, those spent thinking (a reasoning model): exact on the local engine
    # (the tokens generated inside the thinking block, its tags included); on a server, its
    # usage.completion_tokens_details.reasoning_tokens. 0: no thinking, or not known.
    thinking_tokens: int = 0
    # The draft length at the end of the reply (0: not drafting then).
    draft_k: int = 0
    # Adaptive drafting judged, last, that drafting did not pay.
    drafting_turned_off: bool = False
    # Under an output format on the local engine: the reply ended at an end-of-generation token,
    # which llama.cpp's grammar sampler allows only once the grammar is complete. False: cut (a
    # limit, a stop string, a turn token), or not known (a server; free text).
    grammar_accepted: bool = False
    # The thinking budget the reply was given (None: none), and whether its thinking reached it:
    # on the local engine the closing phrase and the end of thinking were put in
    # (engine/llama/think_budget.py). None: not known (a server is sent the budget and says
    # nothing of it).
    think_budget: int | None = None
    think_budget_reached: bool | None = False

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        for key in ("prompt_eval_ms", "restore_ms", "ttft_ms", "decode_ms", "decode_tokens_per_s"):
            data[key] = round(data[key], 2)
        return data


@dataclass(frozen=True)
class TextDelta:
    """A piece of the reply; never splits a UTF-8 character. ``tokens``: the reply's
    generated tokens so far (thinking included), when the backend knows them (the local
    engine; 0: not known, then a front end counts pieces instead), as for ``ThinkingDelta``:
    the status bar's live count."""

    text: str
    tokens: int = 0


@dataclass(frozen=True)
class ThinkingDelta:
    """A piece of the reply's thinking (a reasoning model's ``<think>`` block, or a server's
    ``reasoning_content``): never part of the answer's ``TextDelta``s, never sent back to the
    model. Unsanitized model output, like ``TextDelta``. ``tokens``: the reply's generated
    tokens so far, when the backend knows them (the local engine; 0: not known, then a front
    end counts pieces instead)."""

    text: str
    tokens: int = 0


@dataclass(frozen=True)
class ContextTrimmed:
    """Sent before the reply when the oldest messages were left out to fit the context;
    ``left_out``: their indices in the messages the backend was sent (a pinned message is never
    among them, so they need not be the first ones)."""

    dropped_messages: int
    prompt_tokens: int
    context_size: int
    left_out: tuple[int, ...] = ()


@dataclass(frozen=True)
class PromptProgress:
    """The prompt is being read (evaluated) before the reply's first token: ``read`` of its
    ``total`` tokens so far. ``total`` counts only what this reply evaluates: a prefix the KV
    cache (or a snapshot) already held is not read again. Sent by the local engine for a prompt
    long enough to take a while (engine/llama/prompt_eval.py: more than 128 tokens, and more
    than a quarter of a second to go after the first few), a few times a second, the last with
    ``read == total``; never part of the text. A server sends none."""

    read: int
    total: int


@dataclass(frozen=True)
class DraftProgress:
    """Speculative decoding while a reply is generated (the local engine, drafting on): the
    tokens drafted and accepted so far in this reply, the draft length now (0: not drafting
    at the moment) and whether adaptive drafting judged, last, that drafting does not pay.
    Sent now and then while the reply streams (about twice a second), never part of the
    text; the final figures are in ``GenerationDone.stats``."""

    drafted: int
    accepted: int
    k: int
    turned_off: bool = False


# The sampler chain's stages a candidate can be cut by, in the words the lens shows (llama.cpp's
# sampler names mapped in engine/llama/lens.py); a remote reply's cuts are computed from the
# slider values over the candidates the server returned (engine/remote/lens.py).
CutStage = Literal["top-k", "top-p", "min-p", "temperature", "repeat penalty", "other"]


@dataclass(frozen=True)
class Candidate:
    """One candidate token of a step (``TokenCandidates``). ``data``: its bytes, raw (a piece of
    a UTF-8 character when the token splits one); ``text``: those bytes shown safely
    (``engine.sanitize.escaped_token``: an invalid byte as ``\\xNN``, a control character
    escaped, never raw). ``logprob``: the natural log of its probability before the sampler
    chain, after temperature (at temperature 0: the model's own distribution, temperature 1);
    ``p_after``: its probability in the draw, after the chain (0 when cut; at temperature 0, 1
    for the greedy pick); ``cut``: the stage that removed it (None: kept); ``penalized``: the
    repeat penalty lowered it. ``token_id``: its id in the model's vocabulary (-1: a server's
    candidate, whose id is not known)."""

    token_id: int
    data: bytes
    text: str
    logprob: float
    p_after: float
    cut: CutStage | None = None
    penalized: bool = False


@dataclass(frozen=True)
class TokenCandidates:
    """The token lens for one step of a reply (sent only when ``SamplingParams.logprobs`` > 0):
    the token drawn (``chosen``) and the step's ``top`` candidates, most likely first, at most
    ``logprobs`` of them (the chosen one among them when it ranks there), each with its
    probability before and after the sampler chain and the stage that cut it; ``index``: the
    token's place in the reply (0 = its first generated token, thinking included); ``thinking``:
    the token is part of a reasoning model's thinking; ``sliders``: the sampling values the step
    used (``(name, value)`` in ``PARAM_SPECS``' order, e.g. ``("temperature", 0.8)``).

    Sent before the text the token adds (a ``TextDelta`` may join several tokens' text, hold a
    token's text back for a stop string, or never show it). The last token (the end of the
    turn) has none. The local engine computes it from the logits llama.cpp used for the draw
    (engine/llama/lens.py); a server's from its ``logprobs`` (engine/remote/lens.py)."""

    index: int
    chosen: Candidate
    top: tuple[Candidate, ...]
    sliders: tuple[tuple[str, float | int | None], ...] = ()
    thinking: bool = False
    # The token was put there by the user taking another path (a candidate picked, or typed:
    # ``ReplyPrefix``), not drawn by the sampler; a typed token's step has no candidates and its
    # ``chosen`` no probability of the model's (logprob 0, p_after 0).
    forced: bool = False
    # The token was held back for a stop string that then matched: drawn by the model, but no
    # part of the reply (the lens shows it struck through, "cut by a stop string").
    after_stop: bool = False

    def slider(self, name: str) -> float | int | None:
        """The value of sampling parameter ``name`` this step used (None: not known, or auto)."""
        return dict(self.sliders).get(name)

    def to_openai(self) -> dict[str, object]:
        """The step as an item of OpenAI's ``logprobs.content``: the chosen token (``token``: its
        escaped text, ``bytes``: its raw bytes, ``logprob``: before the chain, after
        temperature) and its ``top_logprobs``, each with vibechat's ``p_after``, ``cut`` and, for
        the local engine, ``id`` (the token's id in the model's vocabulary); a thinking token's
        item says ``"thinking": true``. ``engine/turns/lens_steps.py`` reads it back."""
        item: dict[str, object] = {
            **_openai_token(self.chosen),
            "top_logprobs": [_openai_token(c) for c in self.top],
        }
        if self.thinking:
            item["thinking"] = True
        if self.forced:
            item["forced"] = True
        if self.after_stop:
            item["after_stop"] = True
        return item


# Most tokens a reply prefix may carry (``ReplyPrefix``): a saved lens holds at most this many steps
# (engine/turns/lens_steps.py's MAX_STEPS), and a typed replacement's bytes.
MAX_PREFIX_TOKENS = 100_000
MAX_PREFIX_BYTES = 64 * 1024


@dataclass(frozen=True)
class ReplyPrefix:
    """Where a reply goes on from, for taking another path from one of a reply's tokens (issue
    43): the reply's first tokens, by ``token_ids`` in the local engine's vocabulary (the
    original's chosen tokens before the step, then the candidate picked there), then ``data``:
    text the user typed as the replacement (UTF-8, tokenized by the backend as plain text, no
    special tokens). ``steps``: the lens's steps of the ids, in order (the original's, the
    picked one's with its ``chosen`` replaced and ``forced``); a backend yields them first when
    the lens is on. The reply's text is the prefix's text, then what the model writes after it.
    Made by ``engine/turns/lens_steps.py``'s ``path_prefix``."""

    token_ids: tuple[int, ...]
    data: bytes = b""
    steps: tuple[TokenCandidates, ...] = ()

    def __post_init__(self) -> None:
        if len(self.token_ids) > MAX_PREFIX_TOKENS or len(self.data) > MAX_PREFIX_BYTES:
            raise ValueError("a reply prefix is bounded (MAX_PREFIX_TOKENS, MAX_PREFIX_BYTES)")


def _openai_token(candidate: Candidate) -> dict[str, object]:
    token: dict[str, object] = {
        "token": candidate.text,
        "logprob": round(candidate.logprob, 6),
        "bytes": list(candidate.data),
        "p_after": round(candidate.p_after, 6),
        "cut": candidate.cut,
    }
    if candidate.token_id >= 0:
        token["id"] = candidate.token_id
    return token


def logprobs_object(steps: Sequence[TokenCandidates]) -> dict[str, object]:
    """A reply's steps as OpenAI's ``choices[0].logprobs`` (``run --logprobs N --json``,
    ``history show --json``): ``{"content": [...]}``, one item per token."""
    return {"content": [step.to_openai() for step in steps]}


@dataclass(frozen=True)
class LensNotice:
    """The lens was asked for (``SamplingParams.logprobs``) but this reply has none, in one line
    (``reason``): a server that returns no ``logprobs``, a draw the lens cannot follow. Sent at
    most once per reply, never part of the text."""

    reason: str


@dataclass(frozen=True)
class GenerationDone:
    """The last event of every stream: the full text (the answer, without the thinking),
    the thinking apart (empty for a model that does not think), and the stats (whose
    ``completion_tokens`` count the thinking's tokens too)."""

    text: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    # Exactly what was used, the drawn seed included.
    params: SamplingParams | None = None
    thinking: str = ""
    # A bound of vibechat's own that ended the reply (finish_reason "length"), in words, for the
    # line that says so ("" when none did: the model, max_tokens or the server ended it).
    bound: str = ""
    # The tool calls the reply ends with (finish_reason "tool_calls"), in the order asked for.
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def finish_reason(self) -> FinishReason:
        return self.stats.finish_reason


ChatEvent = (
    TextDelta
    | ThinkingDelta
    | ContextTrimmed
    | PromptProgress
    | DraftProgress
    | TokenCandidates
    | LensNotice
    | GenerationDone
)


@runtime_checkable
class Backend(Protocol):
    """Everything the app asks of a model runtime. One thread drives a backend;
    only :meth:`cancel` may be called from another thread."""

    name: str

    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        """Load the model (blocking; idempotent); ``on_progress`` gets 0..1 while it loads
        (what it returns is ignored). Raises a ``VibechatError`` on failure."""

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto",
        prefix: ReplyPrefix | None = None,
    ) -> Generator[ChatEvent, None, None]:
        """Yield ``TextDelta``s (maybe a ``ContextTrimmed`` first), then one ``GenerationDone``.
        While a long prompt is read, before the first ``TextDelta`` or ``ThinkingDelta``, the
        local engine yields ``PromptProgress`` now and then (a consumer may ignore it); a
        ``cancel()`` meanwhile stops the reading, and the reply ends cancelled.
        ``tools``: offered to the model (``tool_choice``: auto, none, or required: a call first);
        a reply that asks for calls ends with them in ``GenerationDone.tool_calls`` (finish
        reason ``tool_calls``), its text before them as usual. A model that cannot call tools
        (a template without them) answers without.
        A reasoning model's thinking comes as ``ThinkingDelta``s (before the answer's
        ``TextDelta``s), kept out of the answer and out of ``GenerationDone.text``; it is in
        ``GenerationDone.thinking``. A reply whose thinking never ended has an empty answer.
        ``prefix``: the reply goes on from these tokens (another path taken from a token:
        ``ReplyPrefix``): their text (and, with the lens on, their steps) comes first, as if
        generated, and the model writes on after them; the local engine evaluates only what its
        KV cache does not hold of the prompt and the prefix. A backend that cannot (a server)
        raises a one-line ``GenerationError`` before anything is sent. Passed only when set.
        A generator: ``close()`` on it, before the end, ends the reply and frees what it holds."""

    def cancel(self) -> None:
        """Ask the running generation (or prompt evaluation) to stop soon. Thread-safe."""

    def reset(self) -> None:
        """Forget the conversation cache (a new conversation starts)."""

    def prefill(
        self,
        messages: Sequence[ChatMessage],
        thinking: str = "auto",
        tools: Sequence[ToolSpec] = (),
    ) -> int:
        """Rebuild the conversation cache from ``messages`` (an opened conversation), so the
        next reply evaluates only what is new; returns the tokens cached. Cancellable.
        ``thinking``: the thinking switch the next replies use (``SamplingParams.thinking``);
        ``tools``: those the next replies are offered (a template lists them in the prompt)."""

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        """Tokens the prompt for ``messages`` takes, rendered exactly as for generation
        (with the thinking switch ``thinking``: the prompt differs)."""

    def describe(self) -> ModelInfo:
        """The loaded model's description."""

    def close(self) -> None:
        """Free the model."""


@runtime_checkable
class RemoteModels(Protocol):
    """A backend that is a server with models to choose from (``OpenAICompatibleBackend``):
    the model picker lists them and switches between them."""

    # The server's URL, without credentials.
    server: str

    @property
    def model_id(self) -> str | None:
        """The server's model in use (None: the server's default)."""

    def list_models(self) -> list[str]:
        """The server's model ids (blocking; may run beside a reply)."""

    def switch_model(self, model: str) -> ModelInfo:
        """Use another of the server's models from now on (blocking)."""


# The two sides of a comparison (``PairedReplies``): A and B.
Side = Literal["A", "B"]
SIDES: tuple[Side, Side] = ("A", "B")


@dataclass(frozen=True)
class SideRequest:
    """One side of a comparison: the conversation it answers (A and B may differ in their
    system prompt), its settings (an output format, a thinking budget) and its tools, as
    ``Backend.stream_chat`` takes them. A side's tool call ends it (``GenerationDone``'s
    ``tool_calls``): its tool round and what follows are a normal reply's."""

    messages: tuple[ChatMessage, ...]
    params: SamplingParams
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"


@dataclass(frozen=True)
class SideEvent:
    """One side's event in a comparison's stream (``PairedReplies.stream_pair``): ``event`` is
    what a plain reply's stream yields, for side ``side``. Each side ends with its own
    ``GenerationDone``, when it ends: the other may go on."""

    side: Side
    event: ChatEvent


@runtime_checkable
class PairedReplies(Protocol):
    """A backend that answers one prompt twice at once (``LlamaCppBackend``, and
    ``WorkerBackend`` through its engine process): the two replies are two sequences of one
    llama.cpp context, decoded in one batch per step, the prompt's shared prefix evaluated once
    (engine/llama/pairing.py). The chat's ``/compare`` and ``vibechat run --compare`` use it when
    both sides are the same local model; otherwise they run two backends side by side.

    Side A's stats count the shared prefix's evaluation, side B's only its own rest: the two
    add up to what the pair evaluated. Afterwards the KV cache holds side A's conversation,
    kept as a plain reply's KV snapshot is."""

    def stream_pair(self, a: SideRequest, b: SideRequest) -> Generator[SideEvent, None, None]:
        """Both replies as ``SideEvent``s, interleaved as they are decoded; each side ends with
        its ``GenerationDone`` (EOS, ``max_tokens``, a stop string, ``cancel_side``);
        ``cancel()`` stops both. Raises one line (``VibechatError``) when the pair cannot run."""

    def cancel_side(self, side: Side) -> None:
        """Stop side ``side`` of the pair under way soon; the other goes on. Thread-safe."""
