"""Switching a reasoning model's thinking on or off, or setting its effort, where its chat
template takes a switch.

The setting (``thinking`` in the sampling parameters: ``auto``, ``on``, ``off`` or an effort,
``low``, ``medium``, ``high``) reaches the model as a chat-template variable. Which variable,
the template's own source tells: the names it reads from outside (Jinja's
``meta.find_undeclared_variables`` over the parsed template: no template code runs), first
match wins:

* ``enable_thinking`` (Qwen3, GLM-4.5, some DeepSeek variants): true by default; ``off``
  passes ``false`` (Qwen3's template then writes an empty ``<think>\\n\\n</think>`` block
  into the generation prompt, and the model answers at once), ``on`` passes ``true``. An
  effort passes ``true``: these models have no levels (``no_levels`` says so once).
* ``thinking`` (IBM Granite 3.x, DeepSeek-V3.1): off by default; ``on`` passes ``true``,
  ``off`` passes ``false``; an effort passes ``true``, as for ``enable_thinking``.
* ``reasoning_effort`` (gpt-oss: low, medium, high; medium by default): gpt-oss always
  reasons, there is no full off; ``off`` asks for ``low``, an effort for itself, ``on`` leaves
  the default.

``auto`` passes nothing: the template's default. Models whose template reads none of these
(DeepSeek-R1 and its distills, QwQ, Magistral) cannot be switched: the setting is ignored
for them (the chat's ``/think`` says so).

The remote backend cannot see the server's template; it sends
``chat_template_kwargs: {"enable_thinking": true|false}`` for ``on`` / ``off`` (what
llama-server and vLLM pass to the template; an effort is ``true``), and for an effort the
request's own ``reasoning_effort`` field too (OpenAI's, which llama-server, vLLM and Ollama
take for gpt-oss); nothing for ``auto``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

from ..errors import InvalidParameterError

# The efforts, least first: what gpt-oss's reasoning_effort (and a server's) takes.
EFFORTS = ("low", "medium", "high")
THINKING_MODES = ("auto", "on", "off", *EFFORTS)
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
    "med": "medium",
}

# What the local engine puts into a reply's thinking, on a line of its own, when it reaches its
# budget, before the model's own end of thinking (think_budget_message; llama.cpp's
# --reasoning-budget-message).
DEFAULT_THINK_BUDGET_MESSAGE = "I have thought enough; time to answer."
MAX_THINK_BUDGET_MESSAGE = 1000

NO_SWITCH = (
    "this model's template has no switch for thinking (it reads none of enable_thinking, thinking, "
    "reasoning_effort): models such as DeepSeek-R1 and QwQ always think, others never do"
)


def check_thinking(value: object) -> str:
    """``value`` as a thinking mode (auto, on, off, low, medium, high; true/false and yes/no
    too), or a one-line error."""
    name = value.strip().lower() if isinstance(value, str) else None
    if isinstance(value, bool):
        name = "on" if value else "off"
    name = _ALIASES.get(name or "", name)
    if name not in THINKING_MODES:
        raise InvalidParameterError(
            f"thinking must be one of {', '.join(THINKING_MODES)} (got {value!r})."
        )
    return name


def check_think_budget_message(value: object) -> str:
    """``value`` as the thinking budget's closing phrase: text of at most
    ``MAX_THINK_BUDGET_MESSAGE`` characters, no control characters but newlines and tabs (it
    becomes tokens of the reply, as text: it cannot open a turn); or a one-line error."""
    if not isinstance(value, str):
        raise InvalidParameterError(f"think_budget_message must be text (got {value!r}).")
    if len(value) > MAX_THINK_BUDGET_MESSAGE:
        raise InvalidParameterError(
            f"think_budget_message takes at most {MAX_THINK_BUDGET_MESSAGE} characters "
            f"(got {len(value)}): shorten it."
        )
    bad = next((c for c in value if (ord(c) < 32 and c not in "\n\t") or 127 <= ord(c) < 160), None)
    if bad is not None:
        raise InvalidParameterError(
            f"think_budget_message holds a control character ({ord(bad):#04x}): take it out."
        )
    return value


def check_budget(budget: int | None, context_size: int) -> None:
    """A thinking budget the model's context cannot hold, refused in one line (0 and negative
    budgets never get here: ``think_budget``'s declaration refuses them)."""
    if budget is not None and context_size and budget >= context_size:
        raise InvalidParameterError(
            f"think budget {budget:,} is beyond the model's context ({context_size:,} tokens): "
            "give a smaller budget, or 'off' for none."
        )


def find_switch(variables: Collection[str]) -> str | None:
    """The template variable that switches thinking, of those a template reads (None: none)."""
    return next((name for name in SWITCH_VARIABLES if name in variables), None)


def template_variables(switch: str | None, mode: str) -> dict[str, Any]:
    """What to pass a template whose switch is ``switch`` for ``mode`` (empty: its default)."""
    if switch is None or mode == "auto":
        return {}
    if switch == "reasoning_effort":
        if mode == "off":
            return {"reasoning_effort": "low"}
        return {"reasoning_effort": mode} if mode in EFFORTS else {}
    return {switch: mode != "off"}


def remote_kwargs(mode: str) -> dict[str, Any] | None:
    """``chat_template_kwargs`` for a server (None: send none)."""
    return None if mode == "auto" else {"enable_thinking": mode != "off"}


def remote_effort(mode: str) -> str | None:
    """The request's ``reasoning_effort`` field for a server (None: send none)."""
    return mode if mode in EFFORTS else None


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


def no_levels(switch: str | None, mode: str) -> str | None:
    """What an effort becomes for a template whose switch is only on or off (None: the mode is
    taken as it is): said once, where the effort is set."""
    if mode not in EFFORTS or switch not in ("enable_thinking", "thinking"):
        return None
    return (
        f"thinking {mode}: this model's template switches thinking only on or off (its {switch} "
        "variable) and has no levels: thinking is on."
    )


def unswitchable(server: str | None, switch: str | None, mode: str) -> str | None:
    """Why ``mode`` does nothing for a model, or less than asked (None: it applies as it is): a
    local model whose template has no switch (``switch`` None), or an effort for a template
    that has no levels. A server's template is not known here: it is asked."""
    if mode == "auto" or server is not None:
        return None
    if switch is not None:
        return no_levels(switch, mode)
    return f"thinking {mode}: {NO_SWITCH}; the setting is ignored."
