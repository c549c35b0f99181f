"""How a reply's statistics and the engine's settings are reported: one line of text (``run
--stats``, ``--prompts-file --stats``, the chat's stats panel), a long prompt's reading
progress (``reading_line``: the chat's reply and status bar, ``run --stats`` on a terminal),
the ``engine`` object of ``--json`` and the one object ``--json`` prints
(``RunResult.to_json``: also on failure, with an ``error``, and each line of
``--prompts-file``), and whether a structured reply is whole (``structured_state``: ``run``,
``--prompts-file`` and the chat say it alike). Shared by the CLI commands and the TUI, so it
imports neither.

Imports inside functions are deliberate: the remote options load only when a report names a
server (start-up time)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vibechat.engine.sanitize import sanitize
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import GenerationDone, GenerationStats, ModelInfo, PromptProgress

if TYPE_CHECKING:
    from vibechat.engine.chat.turn import Answer


def reading_line(progress: PromptProgress) -> str:
    """How far a long prompt's reading came: ``reading the prompt · 1,200 / 2,700 tokens``."""
    return f"reading the prompt · {progress.read:,} / {progress.total:,} tokens"


def format_stats(stats: GenerationStats, info: ModelInfo | None = None) -> str:
    """One line: tokens, timings, tokens/s, why it stopped, the seed; with ``info``, where the
    model runs too (device, threads, repacking, KV cache) and how it is prompted where that is
    not its own chat template (``prompt: completion``). What is not known (a seed a server
    did not say) is left out, never shown as ``None``."""
    # The thinking tokens are counted in the completion tokens, too.
    thinking = f" ({stats.thinking_tokens} thinking)" if stats.thinking_tokens else ""
    if stats.think_budget is not None:
        reached = " reached" if stats.think_budget_reached else ""
        thinking = thinking[:-1] + f", budget {stats.think_budget}{reached})" if thinking else ""
    text = (
        f"prompt {stats.prompt_tokens} tokens ({stats.prompt_tokens_evaluated} evaluated) "
        f"in {stats.prompt_eval_ms:.0f} ms · {stats.completion_tokens} tokens{thinking} · "
        f"first token {stats.ttft_ms:.0f} ms · {stats.decode_tokens_per_s:.1f} tokens/s · "
        f"{stats.finish_reason}" + ("" if stats.seed is None else f" · seed {stats.seed}")
    )
    if stats.restored_tokens:
        text += f" · restored {stats.restored_tokens} tokens in {stats.restore_ms / 1000:.2f} s"
    if stats.drafted_tokens:
        rate = stats.accepted_draft_tokens / stats.drafted_tokens
        text += (
            f" · drafted {stats.drafted_tokens}, accepted {stats.accepted_draft_tokens} "
            f"({rate:.0%})"
        )
    if stats.drafted_tokens or stats.drafting_turned_off:
        text += (
            " · drafting off (did not pay)"
            if stats.drafting_turned_off
            else f" · draft k {stats.draft_k}"
        )
    if info is not None:
        text += f" · {info.device}"
        if info.n_threads:
            text += f" · {info.n_threads} thread" + ("" if info.n_threads == 1 else "s")
        if info.repack is not None:
            text += f" · repack {info.repack}" + (
                " (auto)" if info.repack_setting == "auto" else ""
            )
        if info.kv_cache_bytes:
            text += f" · {info.kv_cache}" + (
                " (flash attention on)" if info.flash_attn_forced else ""
            )
        if info.draft_model:
            text += f" · draft model {info.draft_model}"
        # Not the model's own chat template: say so.
        if info.chat_format not in ("gguf", "server"):
            text += f" · prompt: {info.prompt_format}"
    return text


def engine_dict(info: ModelInfo) -> dict[str, object]:
    """How the model runs, for ``--json``. A server: its backend, its API root, the model id
    as the server names it, and what it said of the context; none of the local engine's
    fields (a server's GPU layers or KV cache are not known here, not "0" or "f16")."""
    if info.server:
        from vibechat.engine.remote.options import api_root

        return {
            "backend": info.backend,
            "server": sanitize(info.server),
            "base_url": sanitize(api_root(info) or info.server),
            "model": sanitize(info.name),
            "context_size": info.context_size or None,  # None: the server did not say
            "prompt_format": info.prompt_format,
        }
    return {
        "backend": info.backend,
        "device": info.device,
        "gpu_layers": info.gpu_layers,
        "n_layers": info.n_layers,
        "n_threads": info.n_threads,
        "context_size": info.context_size,
        "flash_attn": info.flash_attn,
        "kv_cache_type": info.kv_cache_type,
        "kv_cache_bytes": info.kv_cache_bytes,
        "speculative": info.speculative,
        "draft_tokens": info.draft_tokens,
        "draft_model": info.draft_model,
        "draft_model_bytes": info.draft_model_bytes,
        "repack": info.repack,
        "repack_setting": info.repack_setting,
        "repack_reason": info.repack_reason,
        "prompt_format": info.prompt_format,
        "prompt_format_reason": info.chat_format_reason,
        "projector": sanitize(info.projector) if info.projector else None,
    }


STATS_KEYS = (
    "prompt_tokens",
    "prompt_tokens_evaluated",
    "restored_tokens",
    "restore_ms",
    "completion_tokens",
    "thinking_tokens",
    "think_budget",
    "think_budget_reached",
    "ttft_ms",
    "prompt_eval_ms",
    "decode_ms",
    "decode_tokens_per_s",
    "seed",
    "dropped_messages",
    "drafted_tokens",
    "accepted_draft_tokens",
    "draft_k",
    "drafting_turned_off",
)


def json_stats(
    stats: GenerationStats | None, seed: int | None = None, meter: ReplyMeter | None = None
) -> dict[str, object]:
    """A reply's statistics for ``--json``, always with the same keys. ``stats`` None: the
    backend sent none (a reply cut short by the server, a crash): what ``meter`` measured
    here stands in (pieces received, each counted as a token, as a server's reply is
    measured when it sends no usage), the rest is null (unknown, never a made-up 0).
    ``elapsed_ms``: the reply's wall time as measured here (null without ``meter``)."""
    elapsed = meter.elapsed_ms() if meter is not None else None
    if stats is None:
        data: dict[str, object] = dict.fromkeys(STATS_KEYS)
        data["seed"] = seed
        if meter is not None:
            data.update(meter.measured())
        data["elapsed_ms"] = elapsed
        return data
    known = stats.to_dict()
    return {**{k: known[k] for k in STATS_KEYS}, "elapsed_ms": elapsed}


class ReplyMeter:
    """What the CLI sees of a reply as it streams (pieces of text and of thinking, when the
    first came and the last), so that a reply that ends without the backend's statistics
    (a server that died mid-reply, an engine crash) still reports what is known."""

    def __init__(self) -> None:
        self._clock = time.perf_counter
        self.started = self._clock()
        self.pieces = 0
        self.thinking_pieces = 0
        self.first = 0.0
        self.last = 0.0

    def piece(self, thinking: bool = False) -> None:
        """A piece of the reply (``thinking``: of its thinking) arrived now."""
        self.last = self._clock()
        if not self.first:
            self.first = self.last
        self.pieces += 1
        self.thinking_pieces += thinking

    def elapsed_ms(self) -> float:
        return round((self._clock() - self.started) * 1000, 2)

    def measured(self) -> dict[str, object]:
        """The statistics' keys this meter knows."""
        data: dict[str, object] = {
            "completion_tokens": self.pieces,
            "thinking_tokens": self.thinking_pieces,
        }
        if self.first:
            data["ttft_ms"] = round((self.first - self.started) * 1000, 2)
            data["decode_ms"] = round((self.last - self.first) * 1000, 2)
            if self.pieces > 1 and self.last > self.first:
                data["decode_tokens_per_s"] = round((self.pieces - 1) / (self.last - self.first), 2)
        return data


# What a script finds in ``error.kind`` (--json): which kind of failure, by the error's class.
ERROR_KINDS: tuple[tuple[str, str], ...] = (
    ("ConfigError", "config"),
    ("InvalidParameterError", "value"),
    ("ContextOverflowError", "context"),
    ("StreamInterrupted", "interrupted"),
    ("EngineCrashed", "crash"),
    ("RemoteServerError", "server"),
    ("HistoryError", "history"),
    ("HubError", "download"),
    ("DownloadError", "download"),
    ("ModelFileError", "model"),
    ("ModelLoadError", "model"),
    ("ModelRefError", "model"),
    ("ModelStoreError", "model"),
    ("GpuOffloadUnavailableError", "model"),
    ("BatchLineError", "value"),
    # a file that cannot be attached (exit 2), images for a model that takes none (the session's
    # check, the local engine's), a kept copy gone (the local engine's, the remote backend's)
    ("AttachmentError", "attachment"),
    ("ImagesNotTaken", "attachment"),
    ("ImagesNotSupported", "attachment"),
    ("ImageUnreadable", "attachment"),
    ("GenerationError", "generation"),
)


def error_kind(exc: BaseException) -> str:
    """``error.kind`` for ``exc``: its most specific class in ERROR_KINDS (``error``: any other)."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    for name in names:
        for cls_name, kind in ERROR_KINDS:
            if name == cls_name:
                return kind
    return "error"


def error_object(message: str, kind: str, exit_status: int) -> dict[str, object]:
    """``--json``'s ``error``: the message (one line, as on stderr without ``vibechat: error:``),
    its kind and the exit status the command ends with."""
    line = " ".join(sanitize(message).split())
    return {"message": line, "kind": kind, "exit_status": exit_status}


@dataclass
class RunResult:
    """What a run reports to a script, and THE one place its JSON object is made
    (:meth:`to_json`): ``run --json``'s object (on success and on failure: ``error`` with the
    message, kind and exit status, null for what is not known), each result line of
    ``--prompts-file`` (``line`` set: after ``line`` and ``id``, the same keys less those of
    the engine, which are the same for every line) and a line that failed (``line_error``:
    ``line``, ``id``, ``error`` as text, ``conversation_id``: a documented format).

    ``model``: the name asked for, when no model was loaded (``info`` None). A server's
    model has no file: ``model`` is the server's id, ``model_path`` null."""

    text: str = ""
    thinking: str = ""
    info: ModelInfo | None = None
    model: str | None = None
    conversation_id: int | None = None
    params: SamplingParams | None = None
    finish_reason: str | None = None
    # None: unknown (the seed sent, the rest null).
    stats: dict[str, object] | None = None
    # Under --json-schema/--grammar: whether the JSON (grammar) is whole.
    structured: str | None = None
    # error_object(): the run failed (or its reply was empty).
    error: dict[str, object] | None = None
    # The reply ended by itself with no text.
    empty: bool = False
    # --prompts-file: the line this result answers, the line's own "id" (if it gave one), and
    # why the line failed.
    line: int | None = None
    request_id: str | int | None = None
    line_error: str | None = None
    # The tool calls of a run offered tools, as they went.
    tool_calls: list[dict[str, object]] | None = None
    # --image / --file (attachment_list); None: none given.
    attachments: list[dict[str, object]] | None = None
    # Piped stdin joined before the prompt given (run_input.Prompt); None: not.
    stdin_chars: int | None = None
    # --logprobs N: the reply's candidates in OpenAI's shape (logprobs_object); None: not asked.
    logprobs: dict[str, object] | None = None
    # A compaction before the reply (run --compact, the compact context policy): the original
    # branch's message the summary replaces up to, the summary's id, the turns it replaces.
    compacted_from: dict[str, object] | None = None
    # The messages left out to fit the context (ChatSession.left_out_messages).
    left_out_messages: list[dict[str, object]] = field(default_factory=list)
    # run --compare: what the two sides were run with that differs (``{"temperature": {"a":
    # 0.2, "b": 1.2}}``, app/compare_plan.py); None: not a comparison.
    differs: dict[str, object] | None = None

    @classmethod
    def of_answer(
        cls,
        answer: Answer,
        *,
        params: SamplingParams,
        info: ModelInfo,
        conversation_id: int | None,
        raw: bool,
        meter: ReplyMeter | None,
    ) -> RunResult:
        """A reply that ended (by itself, at a limit, or stopped by Ctrl-C): its text and
        thinking as shown (sanitized unless ``raw``), the parameters the backend used
        (``params``: those sent, where it did not say), the statistics and whether it is empty."""
        done = answer.done
        used = done.params or params
        finish_reason = "cancelled" if answer.interrupted else done.stats.finish_reason
        return cls(
            text=answer.text if raw else sanitize(answer.text),
            thinking=done.thinking if raw else sanitize(done.thinking),
            info=info,
            conversation_id=conversation_id,
            params=used,
            finish_reason=finish_reason,
            stats=json_stats(done.stats, meter=meter),
            structured=structured_state(used, answer.text, done.stats),
            empty=not answer.interrupted
            and is_empty_reply(answer.text, finish_reason, used, done.stats),
        )

    def to_json(self) -> dict[str, object]:
        """The JSON object (key order included: scripts and tests read it as printed)."""
        obj: dict[str, object] = {}
        per_line = self.line is not None
        if per_line:
            obj["line"] = self.line
            if self.request_id is not None:
                obj["id"] = self.request_id
            if self.line_error is not None:
                obj["error"] = self.line_error
                if self.conversation_id is not None:
                    obj["conversation_id"] = self.conversation_id
                return obj
        info, params = self.info, self.params
        obj["text"], obj["thinking"] = self.text, self.thinking
        obj["model"] = (
            sanitize(info.name)
            if info is not None
            else (sanitize(self.model) if self.model else None)
        )
        if not per_line:
            obj["model_path"] = info.path if info is not None and not info.server else None
        obj["conversation_id"] = self.conversation_id
        obj["params"] = params.to_dict() if params is not None else None
        if not per_line:
            obj["prompt_format"] = info.prompt_format if info is not None else None
        obj["finish_reason"] = self.finish_reason
        obj["stats"] = (
            self.stats
            if self.stats is not None
            else json_stats(None, seed=params.seed if params is not None else None)
        )
        if not per_line:
            obj["engine"] = engine_dict(info) if info is not None else None
        if not per_line:
            obj["compacted_from"] = self.compacted_from
            obj["left_out_messages"] = self.left_out_messages
        if self.tool_calls is not None and not per_line:
            obj["tool_calls"] = self.tool_calls
        if self.attachments is not None and not per_line:
            obj["attachments"] = self.attachments
        # The prompt is stdin, a blank line, then PROMPT.
        if self.stdin_chars is not None and not per_line:
            obj["stdin"] = {"included": True, "chars": self.stdin_chars}
        if self.structured is not None:
            obj["structured_output"] = self.structured
        if self.logprobs is not None:
            obj["logprobs"] = self.logprobs
        if self.empty:
            obj["empty"] = True
        if self.differs is not None:
            obj["differs"] = self.differs
        if self.error is not None:
            obj["error"] = self.error
        return obj


def attachment_list(attachments: tuple[Attachment, ...]) -> list[dict[str, object]] | None:
    """``--json``'s ``attachments``: what the prompt carried, as kept (an image's pixels after
    scaling, the kept copy's bytes and digest), in order; None (no key) when nothing was
    attached."""
    if not attachments:
        return None
    return [
        {
            "kind": a.kind,
            "name": sanitize(a.name),
            "size": a.size,
            "width": a.width,
            "height": a.height,
            "digest": a.digest,
        }
        for a in attachments
    ]


def is_empty_reply(
    text: str, finish_reason: str, params: SamplingParams, stats: GenerationStats
) -> bool:
    """Whether a reply that ended by itself has no text to show: the model (or the server)
    sent none. A reply that one of the user's ``--stop`` strings cut at its very start is
    what was asked for, not an empty reply."""
    if finish_reason != "stop" or text.strip():
        return False
    return not (params.stop and stats.completion_tokens)


def structured_state(
    params: SamplingParams | None, text: str, stats: GenerationStats | None = None
) -> str | None:
    """``--json``'s ``structured_output`` under ``--json-schema``/``--grammar``: ``complete``
    only when the reply is whole and what was asked (its JSON parses and matches the schema;
    a grammar's end was accepted by the sampler: ``stats.grammar_accepted``), ``incomplete``
    when it was cut short, ``invalid`` when its JSON is not what was asked
    (``OutputFormat.judge``); None for free text (no field)."""
    if params is None or params.output_format is None:
        return None
    return params.output_format.judge(text, stats is not None and stats.grammar_accepted)[0]


def structured_note(done: GenerationDone) -> str:
    """What the chat adds to a ``/format`` reply's status when it is not complete, judged as
    ``structured_state`` judges it: ``: the JSON output is incomplete`` (or the grammar's),
    ``: the JSON does not match the schema``; empty when it is complete, or free text."""
    state = structured_state(done.params, done.text, done.stats)
    fmt = done.params.output_format if done.params is not None else None
    if fmt is None or state in (None, "complete"):
        return ""
    if state == "invalid":
        return (
            ": the JSON does not match the schema"
            if fmt.kind == "schema"
            else ": the output is not a JSON object"
        )
    return f": the {'grammar' if fmt.kind == 'grammar' else 'JSON'} output is incomplete"
