"""What a local engine setting may be, and each setting's check: the KV-cache types, the
speculative modes and draft lengths, the prompt formats and CPU weight repacking (the values;
what they do to a load is engine/llama's). Light: no llama_cpp import."""

from __future__ import annotations

from ..errors import InvalidParameterError

# CPU weight repacking: the setting only (what it does to a load is engine/llama/repack.py's).
REPACK_MODES = ("auto", "on", "off")
DEFAULT_REPACK = "auto"
_ALIASES = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}


def check_repack(value: object) -> str:
    """``value`` as auto, on or off (true/false/yes/no/1/0 too), or a one-line error."""
    name = str(value).strip().lower() if isinstance(value, (str, bool)) else None
    if name is not None:
        name = _ALIASES.get(name, name)
    if name not in REPACK_MODES:
        raise InvalidParameterError(
            f"repack must be one of {', '.join(REPACK_MODES)} (got {value!r})."
        )
    return name


# KV-cache element types: name -> bytes per element (ggml block size / elements per block).
KV_CACHE_TYPES: dict[str, float] = {
    "f16": 2.0,
    "q8_0": 34 / 32,  # 32 int8 values + one f16 scale
    "q4_0": 18 / 32,  # 32 4-bit values + one f16 scale
}
DEFAULT_KV_CACHE_TYPE = "f16"

# Speculative decoding: "off", or drafts looked up in the prompt and the reply so far, either
# "auto" (the draft length adapts to what pays on this machine, and drafting turns itself off
# when it does not: engine/llama/speculative.py) or "prompt-lookup" (always draft_tokens drafts).
SPECULATIVE_MODES = ("off", "auto", "prompt-lookup")
# As llama-cpp-python's LlamaPromptLookupDecoding(num_pred_tokens=10, max_ngram_size=2).
DEFAULT_DRAFT_TOKENS = 10
DRAFT_NGRAM = 2
MAX_DRAFT_TOKENS = 1024
# Verifying k drafted tokens asks llama.cpp for (k + 1) rows of logits, n_vocab floats each.
MAX_DRAFT_LOGITS_BYTES = 1 << 30


# How a local model is prompted (engine/turns/chat_template.py choose_template): "auto" decides from
# the GGUF (its chat template; a base model, or none: the completion frame); "completion" is
# the few-shot frame for base models; "template" the GGUF's own chat template (even where its
# metadata says base); or one of the built-in turn formats. COMPLETION is also
# ModelInfo.chat_format for a model prompted this way.
COMPLETION = "completion"
PROMPT_FORMATS = ("auto", COMPLETION, "template", "gemma", "chatml", "llama3")
DEFAULT_PROMPT_FORMAT = "auto"


def check_prompt_format(value: object) -> str:
    """``value`` as a known prompt format (any case), or a one-line error listing them."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name not in PROMPT_FORMATS:
        raise InvalidParameterError(
            f"prompt_format must be one of {', '.join(PROMPT_FORMATS)} (got {value!r})."
        )
    return name


def check_kv_cache_type(value: object) -> str:
    """``value`` as a known KV-cache type name (any case), or a one-line error listing them."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name not in KV_CACHE_TYPES:
        raise InvalidParameterError(
            f"kv_cache_type must be one of {', '.join(KV_CACHE_TYPES)} (got {value!r})."
        )
    return name


def check_speculative(value: object) -> str:
    """``value`` as a known speculative mode ('none' means 'off'), or a one-line error."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name in ("none", "no", "false", ""):
        name = "off"
    if name not in SPECULATIVE_MODES:
        raise InvalidParameterError(
            f"speculative must be one of {', '.join(SPECULATIVE_MODES)} (got {value!r})."
        )
    return name


def check_draft_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DRAFT_TOKENS:
        raise InvalidParameterError(
            f"draft_tokens must be a whole number between 1 and {MAX_DRAFT_TOKENS} (got {value!r})."
        )
    return value


def kv_cache_bytes(
    n_ctx: int, n_layers: int, n_embd_k_gqa: int, n_embd_v_gqa: int, cache_type: str
) -> int:
    """The KV cache's size: ``n_ctx`` cells of K and V for every layer."""
    return int(n_ctx * n_layers * (n_embd_k_gqa + n_embd_v_gqa) * KV_CACHE_TYPES[cache_type])


def draft_logits_bytes(draft_tokens: int, n_vocab: int) -> int:
    """The logits one verification batch needs: the last token and each draft, float32."""
    return (draft_tokens + 1) * n_vocab * 4


def check_draft_logits(draft_tokens: int, n_vocab: int) -> None:
    """Refuse a draft length whose logits buffer would be absurd (one line, naming the flag)."""
    need = draft_logits_bytes(draft_tokens, n_vocab)
    if need > MAX_DRAFT_LOGITS_BYTES:
        most = MAX_DRAFT_LOGITS_BYTES // (n_vocab * 4) - 1
        raise InvalidParameterError(
            f"--draft-tokens {draft_tokens} would need {need / (1 << 20):,.0f} MiB of logits "
            f"per verification ({draft_tokens + 1} positions x {n_vocab:,} vocabulary x 4 "
            f"bytes; the limit is {MAX_DRAFT_LOGITS_BYTES >> 20:,} MiB): use --draft-tokens "
            f"{most} or fewer (draft_tokens in the config)."
        )


# Where replies come from: llama.cpp on this machine, or an OpenAI-compatible server.
BACKENDS = ("llama", "openai")


# What a prompt that no longer fits the context does (the ``context_policy`` setting): "trim"
# leaves out the oldest messages (the chat marks where), "compact" has the model summarise the
# conversation's start first (engine/chat/compaction.py), "stop" refuses the prompt.
CONTEXT_POLICIES = ("trim", "compact", "stop")
DEFAULT_CONTEXT_POLICY = "trim"


def check_context_policy(value: object) -> str:
    """``value`` as trim, compact or stop (any case), or a one-line error."""
    name = str(value).strip().lower()
    if name not in CONTEXT_POLICIES:
        raise InvalidParameterError(
            f"context_policy must be one of {', '.join(CONTEXT_POLICIES)} "
            f"(got {str(value)[:40]!r})."
        )
    return name
