"""Turn a list of chat messages into the prompt text a model was trained on.

The GGUF's own ``tokenizer.chat_template`` wins. When a file has none (the
starter model, many base models), we pick a built-in template from the
architecture and the special tokens in the vocabulary, instead of
llama-cpp-python's ``llama-2`` fallback, which makes most models answer
nonsense. All templates, built-in or not, render in Jinja's sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .backend import ChatMessage
from .errors import GenerationError

# Gemma's official template: no system role, so a system prompt opens the first
# user turn (what Google's own template does; llama-cpp-python's "gemma" format
# silently drops it).
GEMMA = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}"
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
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# For models with no template and no recognisable turn tokens: a plain transcript
# that base models continue sensibly.
PLAIN = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] + '\n\n' }}"
    "{% elif message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n' }}"
    "{% else %}{{ 'Assistant: ' + message['content'] + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

BUILTIN_TEMPLATES: dict[str, str] = {"gemma": GEMMA, "chatml": CHATML, "llama3": LLAMA3, "plain": PLAIN}

# The special tokens that open or close a turn in the formats we know. A reply ends when the
# model emits one of those its template uses: llama.cpp's vocabulary marks only some of them
# as end of generation (<end_of_turn>, <|im_end|>, <|eot_id|>), never the token that starts
# the next turn, after which a model writes the next role word ("user") and goes on.
TURN_TOKENS = ("<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>",
               "<|start_header_id|>", "<|eot_id|>")

# PLAIN has no special tokens: the next turn starts with this text.
PLAIN_STOPS = ("\nUser:",)


def choose_template(gguf_template: str | None, architecture: str,
                    has_token: Callable[[str], bool]) -> tuple[str, str]:
    """(name, template source): ``("gguf", ...)`` when the file has its own."""
    if gguf_template:
        return "gguf", gguf_template
    arch = architecture.lower()
    if arch.startswith("gemma") or has_token("<start_of_turn>"):
        return "gemma", GEMMA
    if has_token("<|im_start|>"):
        return "chatml", CHATML
    if has_token("<|start_header_id|>"):
        return "llama3", LLAMA3
    return "plain", PLAIN


def _raise(message: str) -> None:
    raise GenerationError(f"the model's chat template refused the conversation: {message}")


@dataclass
class ChatTemplate:
    name: str
    source: str
    bos_token: str = ""
    eos_token: str = ""

    @property
    def turn_tokens(self) -> tuple[str, ...]:
        """The turn tokens (``TURN_TOKENS``) this template writes: generation ends on each."""
        return tuple(token for token in TURN_TOKENS if token in self.source)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Text that starts a new turn in a format without turn tokens: generation ends there."""
        return PLAIN_STOPS if self.name == "plain" else ()

    def __post_init__(self) -> None:
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
        env.globals.update(
            raise_exception=_raise,
            strftime_now=lambda fmt: datetime.now().strftime(fmt),
        )
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise GenerationError(f"the model's chat template is broken ({exc}); "
                                  "pass a model with a working template.") from None

    def render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        dicts = [m.to_dict() for m in messages]
        try:
            return self._render(dicts, add_generation_prompt)
        except (GenerationError, Exception) as first:  # noqa: BLE001 - template code is arbitrary
            # Many templates reject a system role; fold it into the first user turn and retry.
            if dicts and dicts[0]["role"] == "system" and len(dicts) > 1 and dicts[1]["role"] == "user":
                merged = [{"role": "user", "content": dicts[0]["content"] + "\n\n" + dicts[1]["content"]},
                          *dicts[2:]]
                try:
                    return self._render(merged, add_generation_prompt)
                except Exception:  # noqa: BLE001
                    pass
            if isinstance(first, GenerationError):
                raise
            raise GenerationError(f"the model's chat template failed ({first}); "
                                  "use a model with a working template.") from None

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token,
        )
