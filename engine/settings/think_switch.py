"""Switching a reasoning model's thinking on or off, where its chat template takes a switch.

The setting (``thinking`` in the sampling parameters: ``auto``, ``on`` or ``off``) reaches
the model as a chat-template variable. Which variable, the template's own source tells: the
names it reads from outside (Jinja's ``meta.find_undeclared_variables`` over the parsed
template: no template code runs), first match wins:

* ``enable_thinking`` (Qwen3, GLM-4.5, some DeepSeek variants): true by default; ``off``
  passes ``false`` (Qwen3's template then writes an empty ``<think>\\n\\n</think>`` block
  into the generation prompt, and the model answers at once), ``on`` passes ``true``.
* ``thinking`` (IBM Granite 3.x, DeepSeek-V3.1): off by default; ``on`` passes ``true``,
  ``off`` passes ``false``.
* ``reasoning_effort`` (gpt-oss: low, medium, high; medium by default): gpt-oss always
  reasons, there is no full off; ``off`` asks for ``low``, ``on`` leaves the default.

``auto`` passes nothing: the template's default. Models whose template reads none of these
(DeepSeek-R1 and its distills, QwQ, Magistral) cannot be switched: the setting is ignored
for them (the chat's ``/think`` says so).

The remote backend cannot see the server's template; it sends
``chat_template_kwargs: {"enable_thinking": true|false}`` for ``on`` / ``off`` (what
llama-server and vLLM pass to the template), nothing for ``auto``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

from ..errors import InvalidParameterError

THINKING_MODES = ("auto", "on", "off")
DEFAULT_THINKING = "auto"

# The template variables that switch thinking, in the order they are looked for.
SWITCH_VARIABLES = ("enable_thinking", "thinking", "reasoning_effort")
_ALIASES = {
    "true": "on",
    "yes": "on",
    "1": "on",
    "false": "off",
    "no": "off",
    "0": "off",
    "none": "off",
    "default": "auto",
}

NO_SWITCH = (
    "this model's template has no switch for thinking (it reads none of enable_thinking, thinking, "
    "reasoning_effort): models such as DeepSeek-R1 and QwQ always think, others never do"
)


def check_thinking(value: object) -> str:
    """``value`` as a thinking mode (auto, on, off; true/false and yes/no too), or a one-line
    error."""
    name = value.strip().lower() if isinstance(value, str) else None
    if isinstance(value, bool):
        name = "on" if value else "off"
    name = _ALIASES.get(name or "", name)
    if name not in THINKING_MODES:
        raise InvalidParameterError(
            f"thinking must be one of {', '.join(THINKING_MODES)} (got {value!r})."
        )
    return name


def find_switch(variables: Collection[str]) -> str | None:
    """The template variable that switches thinking, of those a template reads (None: none)."""
    return next((name for name in SWITCH_VARIABLES if name in variables), None)


def template_variables(switch: str | None, mode: str) -> dict[str, Any]:
    """What to pass a template whose switch is ``switch`` for ``mode`` (empty: its default)."""
    if switch is None or mode == "auto":
        return {}
    if switch == "reasoning_effort":
        return {"reasoning_effort": "low"} if mode == "off" else {}
    return {switch: mode == "on"}


def remote_kwargs(mode: str) -> dict[str, Any] | None:
    """``chat_template_kwargs`` for a server (None: send none)."""
    return None if mode == "auto" else {"enable_thinking": mode == "on"}


def describe_switch(switch: str | None) -> str:
    """How thinking is switched for a template with ``switch``, in a few words."""
    if switch == "enable_thinking":
        return "the template's enable_thinking variable (Qwen3 style)"
    if switch == "thinking":
        return "the template's thinking variable (Granite style; off by default)"
    if switch == "reasoning_effort":
        return (
            "the template's reasoning_effort (gpt-oss: off asks for low effort; it always reasons)"
        )
    return "no switch"


# ChatTemplate.render(messages, add_generation_prompt=True, variables=None)
Render = Callable[..., str]


def switched(render: Render, switch: str | None, mode: str) -> Callable[..., str]:
    """``render`` with the variables of ``mode`` (itself when there are none)."""
    variables = template_variables(switch, mode)
    return functools.partial(render, variables=variables) if variables else render


class OpensThinking:
    """Whether a template's generation prompt opens the thinking block, per mode: probed
    once for each (``probe``: engine/turns/thinking.py's ``template_opens_thinking``)."""

    def __init__(
        self, render: Render, switch: str | None, probe: Callable[[Callable[..., str]], bool]
    ) -> None:
        self._render, self._switch, self._probe = render, switch, probe
        self._known: dict[str, bool] = {}

    def __call__(self, mode: str) -> bool:
        if mode not in self._known:
            self._known[mode] = self._probe(switched(self._render, self._switch, mode))
        return self._known[mode]


def unswitchable(server: str | None, switch: str | None, mode: str) -> str | None:
    """Why ``mode`` does nothing for a model (None: it applies): a local model whose template
    has no switch (``switch`` None). A server's template is not known here: it is asked."""
    if mode == "auto" or server is not None or switch is not None:
        return None
    return f"thinking {mode}: {NO_SWITCH}; the setting is ignored."
