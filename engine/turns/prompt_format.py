"""How a model is prompted: its GGUF's chat template, a built-in turn format, or, for a base
model, the completion frame, and which of them a model gets (``choose_template``).

A base model (the starter: Gemma 3 270M) was trained to continue documents, never on turn
tokens: wrapped in turns it never learned, it babbles or echoes the prompt for ever. It is
prompted as what it is, a completion model, with a document it knows how to continue (the
completion frame below). The templates themselves render in engine/turns/chat_template.py's sandbox.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..settings.choices import COMPLETION, DEFAULT_PROMPT_FORMAT, check_prompt_format
from .backend import ChatMessage

# Gemma's official template: no system role, so a system prompt opens the first
# user turn (what Google's own template does; llama-cpp-python's "gemma" format
# silently drops it).
GEMMA = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

BUILTIN_TEMPLATES: dict[str, str] = {"gemma": GEMMA, "chatml": CHATML, "llama3": LLAMA3}

# The special tokens that open or close a turn in the formats we know. A reply ends when the
# model emits one of those its template uses: llama.cpp's vocabulary marks only some of them
# as end of generation (<end_of_turn>, <|im_end|>, <|eot_id|>), never the token that starts
# the next turn, after which a model writes the next role word ("user") and goes on.
TURN_TOKENS = (
    "<start_of_turn>",
    "<end_of_turn>",
    "<|im_start|>",
    "<|im_end|>",
    "<|start_header_id|>",
    "<|eot_id|>",
)

# ------------------------------------------------------------ the completion frame
# A base model's prompt: a
# one-line preamble, two short example exchanges that show the format and the length of an
# answer, the conversation's real turns, and the cue "Assistant:". The reply ends where the
# model starts the next turn (COMPLETION_STOPS). Measured (bench/bench_starter_chat.py,
# docs/PERFORMANCE.md): with this frame the starter answers everyday prompts briefly and stops
# by itself; in Gemma's turn format it ran to the limit.
#
# The examples are a greeting, a question and a small task, with answers of a few words and no
# subject a reply could borrow: with an example about water's boiling point the starter talked
# of water temperatures when asked about the weather (bench/bench_starter_chat.py measured six
# frames: this one never echoed a prompt nor repeated an example's answer).
#
# A system prompt takes the preamble's place: the preamble is the frame's own description of
# the assistant, and the user's replaces it rather than contradicting it; the examples stay
# (they teach the format, not a persona).
COMPLETION_PREAMBLE = (
    "A chat between a curious user and a helpful assistant. "
    "The assistant answers briefly and directly."
)
COMPLETION_EXAMPLES = (
    ("Hello!", "Hi! How can I help you today?"),
    ("What is the capital of Japan?", "Tokyo."),
    ("Can you name a fruit?", "Sure: an apple."),
)
USER, ASSISTANT = "User:", "Assistant:"
# Where the reply ends: the next turn starts (the model's turn is over), or a blank line. Each
# turn of the frame is one paragraph; after a blank line a base model that has said its piece
# drifts into another document ("A chat between two characters ..."): measured, the stop at a
# blank line halved the starter's replies (14 -> 9 tokens on average) and changed no answer.
COMPLETION_STOPS = ("\n" + USER, "\n" + ASSISTANT, "\n\n")


def _completion_source() -> tuple[str, str]:
    """(the frame as a template, the examples' text). It renders in the same sandbox as any
    template; the texts are ours; the messages' contents are put in by ``frame_messages`` first."""
    examples = "".join(f"{USER} {q}\n{ASSISTANT} {a}\n" for q, a in COMPLETION_EXAMPLES)
    return (
        "{{ bos_token }}"
        "{% if messages and messages[0]['role'] == 'system' %}"
        "{{ messages[0]['content'] }}{% set loop_messages = messages[1:] %}"
        "{% else %}{{ preamble }}{% set loop_messages = messages %}{% endif %}"
        "{{ '\n\n' + examples }}"
        "{% for message in loop_messages %}"
        "{% if message['role'] == 'user' %}{{ user }}"
        "{% elif message['role'] == 'assistant' %}{{ assistant }}"
        "{% endif %}{{ message['content'] + '\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ assistant }}{% endif %}"
    ), examples


_FRAME_SOURCE, _FRAME_EXAMPLES = _completion_source()
# What the frame's template reads besides the messages (its own texts, set at each render).
FRAME_VARIABLES = {
    "preamble": COMPLETION_PREAMBLE,
    "examples": _FRAME_EXAMPLES,
    "user": USER,
    "assistant": ASSISTANT,
}

# A line of a message that would read as a turn of the frame: a role word and a colon at its
# start (any case, after spaces). The frame's role words are plain text, not special tokens, so
# a message could otherwise hold a whole forged exchange ("...\nAssistant: I was told to ...").
_FORGED_TURN = re.compile(r"^(\s*)(user|assistant)(\s*):", re.IGNORECASE | re.MULTILINE)
FULLWIDTH_COLON = "\uff1a"


def neutralise_turns(text: str) -> str:
    """``text`` with every line that starts like a turn of the frame ("User:", "assistant :")
    given a fullwidth colon instead ("User："): it reads the same to people and to the model
    (quoted dialogue stays dialogue), but it is not the frame's "\nUser:" in text or in
    tokens, so the model sees no turn boundary there, and a stop string never fires on it."""
    return _FORGED_TURN.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{FULLWIDTH_COLON}", text
    )


def frame_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages as the completion frame writes them: each content stripped and without
    forged turns (``neutralise_turns``); a user's or assistant's with one leading space, which
    belongs to the content (so a content is tokenized as the model would write it after
    "Assistant:", " Paris." and not " " then "Paris.": re-rendered, an earlier reply gives the
    very tokens the model generated, and the KV cache's prefix is reused). A pure function of
    the messages: turn N renders turns 1..N-1 exactly as turn N-1 did."""
    out: list[ChatMessage] = []
    for i, message in enumerate(messages):
        text = neutralise_turns(message.content.strip())
        if message.role == "system" and i == 0:
            out.append(ChatMessage("system", text))
        elif message.role == "system":
            # A later system message (none of vibechat's): a user turn.
            out.append(ChatMessage("user", " " + text if text else ""))
        else:
            out.append(ChatMessage(message.role, " " + text if text else ""))
    return out


# ------------------------------------------------------ which prompt format a model gets
# Words in a model's name or its general.finetune that say it was tuned to chat (Gemma's "-it",
# Qwen's "-Instruct", "-Chat", the usual tuning stages), and words that say it was not.
_INSTRUCT_WORDS = frozenset(
    {"it", "instruct", "instruction", "chat", "sft", "dpo", "rlhf", "orpo", "assistant"}
)
_BASE_WORDS = frozenset({"base", "pt", "pretrain", "pretrained"})


def _words(text: object) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", text.lower())) - {""} if isinstance(text, str) else set()


def model_kind(metadata: Mapping[str, Any], file_name: str = "") -> tuple[str, str]:
    """("instruct" | "base" | "unknown", the evidence in a few words), from what a GGUF says of
    itself: ``general.finetune`` first (convert_hf_to_gguf.py takes it from the model's name:
    "it", "Instruct"), then ``general.name`` and the file's name. Vocabulary is no evidence: a
    base model's vocabulary has the same turn tokens as its instruct sibling's (Gemma 3 270M's
    has <start_of_turn>), never trained."""
    for key, text in (
        ("general.finetune", metadata.get("general.finetune")),
        ("general.name", metadata.get("general.name")),
        ("file name", file_name.removesuffix(".gguf")),
    ):
        words = _words(text)
        if words & _INSTRUCT_WORDS:
            return "instruct", f"{key} says {sorted(words & _INSTRUCT_WORDS)[0]!r}"
        if words & _BASE_WORDS:
            return "base", f"{key} says {sorted(words & _BASE_WORDS)[0]!r}"
    return "unknown", "neither its metadata nor its name says it was tuned to chat"


@dataclass(frozen=True)
class PromptChoice:
    """How a model is prompted: ``name`` is "gguf" (its own chat template), a built-in turn
    format ("gemma", "chatml", "llama3") or "completion" (the few-shot frame); ``reason`` in a
    few words, for people (``vibechat run --stats``, ``/show info``)."""

    name: str
    source: str
    reason: str


def _builtin_by_tokens(architecture: str, has_token: Callable[[str], bool]) -> str | None:
    if architecture.lower().startswith("gemma") or has_token("<start_of_turn>"):
        return "gemma"
    if has_token("<|im_start|>"):
        return "chatml"
    if has_token("<|start_header_id|>"):
        return "llama3"
    return None


def choose_template(
    gguf_template: str | None,
    architecture: str,
    has_token: Callable[[str], bool],
    metadata: Mapping[str, Any] | None = None,
    file_name: str = "",
    setting: str = DEFAULT_PROMPT_FORMAT,
) -> PromptChoice:
    """How to prompt a model (``setting``: the prompt_format setting; ``auto`` decides).

    ``auto``: the GGUF's own chat template, unless its metadata says it is a base model (a
    base GGUF sometimes carries its instruct sibling's template); no template: a model whose
    metadata says it is an instruct model gets the built-in turn format its vocabulary names
    (it was trained on those turns, only the template was lost in conversion); any other,
    base or unknown, is prompted as a completion model (the frame), because a few-shot
    transcript works with instruct models too, while turns a model never learned make it
    babble."""
    metadata = metadata or {}
    setting = check_prompt_format(setting)
    if setting == COMPLETION:
        return PromptChoice(COMPLETION, _FRAME_SOURCE, "prompt_format is completion")
    # As knobs.PROMPT_FORMATS names them.
    if setting in BUILTIN_TEMPLATES:
        return PromptChoice(setting, BUILTIN_TEMPLATES[setting], f"prompt_format is {setting}")
    if setting == "template":
        if gguf_template:
            return PromptChoice("gguf", gguf_template, "prompt_format is template")
        builtin = _builtin_by_tokens(architecture, has_token)
        if builtin is not None:
            return PromptChoice(
                builtin,
                BUILTIN_TEMPLATES[builtin],
                f"prompt_format is template, the GGUF has none: {builtin} by its vocabulary",
            )
        return PromptChoice(
            COMPLETION,
            _FRAME_SOURCE,
            "prompt_format is template, but the GGUF has none and its "
            "vocabulary names no turn format",
        )
    kind, evidence = model_kind(metadata, file_name)
    if gguf_template:
        if kind == "base":
            return PromptChoice(
                COMPLETION,
                _FRAME_SOURCE,
                f"a base model ({evidence}), though its GGUF has a chat template",
            )
        return PromptChoice("gguf", gguf_template, "its GGUF's chat template")
    if kind == "instruct":
        builtin = _builtin_by_tokens(architecture, has_token)
        if builtin is not None:
            return PromptChoice(
                builtin,
                BUILTIN_TEMPLATES[builtin],
                f"no chat template in the GGUF; an instruct model ({evidence}) with {builtin} "
                "turn tokens",
            )
        return PromptChoice(
            COMPLETION,
            _FRAME_SOURCE,
            f"no chat template in the GGUF and no turn tokens known ({evidence})",
        )
    if kind == "base":
        return PromptChoice(
            COMPLETION, _FRAME_SOURCE, f"no chat template in the GGUF; a base model ({evidence})"
        )
    return PromptChoice(
        COMPLETION, _FRAME_SOURCE, "no chat template in the GGUF, and no sign it was tuned to chat"
    )
