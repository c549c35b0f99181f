"""How a reply's statistics and the engine's settings are reported: one line of text (``run
--stats``, ``--prompts-file --stats``, the chat's stats panel), the ``engine`` object of
``--json``, and whether a structured reply is whole (``structured_state``: ``run``,
``--prompts-file`` and the chat say it alike). Shared by the CLI commands and the TUI, so it
imports neither."""

from __future__ import annotations

from vibechat.engine.backend import GenerationStats, ModelInfo
from vibechat.engine.params import SamplingParams


def format_stats(stats: GenerationStats, info: ModelInfo | None = None) -> str:
    """One line: tokens, timings, tokens/s, why it stopped, the seed; with ``info``, where the
    model runs too (device, threads, repacking, KV cache) and how it is prompted where that is
    not its own chat template (``prompt: completion``). What is not known (a seed a server
    did not say) is left out, never shown as ``None``."""
    thinking = f" ({stats.thinking_tokens} thinking)" if stats.thinking_tokens else ""  # counted in, too
    text = (f"prompt {stats.prompt_tokens} tokens ({stats.prompt_tokens_evaluated} evaluated) "
            f"in {stats.prompt_eval_ms:.0f} ms · {stats.completion_tokens} tokens{thinking} · "
            f"first token {stats.ttft_ms:.0f} ms · {stats.decode_tokens_per_s:.1f} tokens/s · "
            f"{stats.finish_reason}" + ("" if stats.seed is None else f" · seed {stats.seed}"))
    if stats.drafted_tokens:
        rate = stats.accepted_draft_tokens / stats.drafted_tokens
        text += f" · drafted {stats.drafted_tokens}, accepted {stats.accepted_draft_tokens} ({rate:.0%})"
    if stats.drafted_tokens or stats.drafting_turned_off:
        text += " · drafting off (did not pay)" if stats.drafting_turned_off else f" · draft k {stats.draft_k}"
    if info is not None:
        text += f" · {info.device}"
        if info.n_threads:
            text += f" · {info.n_threads} thread" + ("" if info.n_threads == 1 else "s")
        if info.repack is not None:
            text += f" · repack {info.repack}" + (" (auto)" if info.repack_setting == "auto" else "")
        if info.kv_cache_bytes:
            text += f" · {info.kv_cache}" + (" (flash attention on)" if info.flash_attn_forced else "")
        if info.draft_model:
            text += f" · draft model {info.draft_model}"
        if info.chat_format not in ("gguf", "server"):  # not the model's own chat template: say so
            text += f" · prompt: {info.prompt_format}"
    return text


def engine_dict(info: ModelInfo) -> dict[str, object]:
    """How the model runs, for ``--json``."""
    return {"device": info.device, "gpu_layers": info.gpu_layers, "n_layers": info.n_layers,
            "n_threads": info.n_threads, "context_size": info.context_size, "flash_attn": info.flash_attn,
            "kv_cache_type": info.kv_cache_type, "kv_cache_bytes": info.kv_cache_bytes,
            "speculative": info.speculative, "draft_tokens": info.draft_tokens,
            "draft_model": info.draft_model, "draft_model_bytes": info.draft_model_bytes,
            "repack": info.repack, "repack_setting": info.repack_setting, "repack_reason": info.repack_reason,
            "prompt_format": info.prompt_format, "prompt_format_reason": info.chat_format_reason}


def json_stats(stats: GenerationStats | None, seed: int | None = None) -> dict[str, object]:
    """A reply's statistics for ``--json`` (None: unknown, a reply cut short by the server)."""
    if stats is None:  # none known (a reply cut short by the server)
        return {"prompt_tokens": None, "prompt_tokens_evaluated": None, "completion_tokens": None,
                "thinking_tokens": None, "ttft_ms": None, "prompt_eval_ms": None, "decode_tokens_per_s": None,
                "seed": seed}
    data = stats.to_dict()
    keys = ("prompt_tokens", "prompt_tokens_evaluated", "completion_tokens", "thinking_tokens", "ttft_ms",
            "prompt_eval_ms", "decode_ms", "decode_tokens_per_s", "seed", "dropped_messages",
            "drafted_tokens", "accepted_draft_tokens", "draft_k", "drafting_turned_off")
    return {k: data[k] for k in keys}


def structured_state(params: SamplingParams | None, finish_reason: str, text: str) -> str | None:
    """``--json``'s ``structured_output`` under ``--json-schema``/``--grammar``: ``complete``
    when the reply ended by itself (the grammar allows the end only once it is complete), or
    when a limit or Ctrl-C cut it just as its JSON was whole (it parses); ``incomplete``
    otherwise; None for free text (no field)."""
    if params is None or params.output_format is None:
        return None
    if finish_reason == "stop":
        return "complete"
    if params.output_format.kind != "grammar" and _parses(text):
        return "complete"  # cut just as it was whole: the limit fell on the end-of-reply token
    return "incomplete"


def _parses(text: str) -> bool:
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    return True
