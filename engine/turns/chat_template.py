"""Turn a list of chat messages into the prompt text a model was trained on.

Which template a model gets is engine/turns/prompt_format.py's choice: the GGUF's own
``tokenizer.chat_template``; a built-in turn format for an instruct model whose file lost its
template; the completion frame (a few-shot transcript) for a base model, instead of
llama-cpp-python's ``llama-2`` fallback or turns it never learned, which make it answer
nonsense. All templates, built-in or not, the frame included, render in Jinja's sandbox.

A GGUF's template is code from outside. It renders in a bounded sandbox
(engine/turns/template_sandbox.py): within ``deadline`` seconds (``RENDER_DEADLINE``), stopped
at once when ``cancelled()`` turns true (the backend's ``cancel()``, which Ctrl-C calls), no
value or output over ``MAX_OUTPUT`` characters plus ``OUTPUT_PER_INPUT`` times the
conversation's; the template itself is at most ``MAX_SOURCE`` characters.

Past a bound, rendering raises ``ChatTemplateError`` naming the template and what to do;
a cancel raises ``TemplateCancelled``. Text a template shows (``raise_exception``, its
errors) is sanitised before it reaches a message.

Imports inside functions are deliberate: Jinja2 loads only when a model's chat template is
rendered (start-up time).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import ChatTemplateError, TemplateCancelled
from ..json_bounds import bounded_loads
from ..sanitize import sanitize
from ..settings.choices import COMPLETION
from ..settings.think_switch import find_switch
from .backend import ChatMessage
from .prompt_format import COMPLETION_STOPS, FRAME_VARIABLES, TURN_TOKENS, frame_messages
from .template_sandbox import (
    MAX_OUTPUT,
    RENDER_DEADLINE,
    RenderBudget,
    RenderCancelled,
    RenderLimit,
    compile_guarded,
    render_bounded,
    sandbox_environment,
)
from .tool_calls import ToolSpec
from .tool_formats import ToolFormat, tool_format

log = logging.getLogger("vibechat.template")

# Characters of prompt allowed for each character of the conversation (beyond MAX_OUTPUT).
OUTPUT_PER_INPUT = 4
# Characters of a template.
MAX_SOURCE = 1 << 20
_OWN_VARIABLES = frozenset({"messages", "add_generation_prompt", "bos_token", "eos_token"})


def _clean(text: object, limit: int = 300) -> str:
    """Text from a template (its own words, or an error about it) fit for a message:
    sanitised, one line, bounded."""
    line = " ".join(sanitize(str(text)[: limit * 4]).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _raise(message: object) -> None:
    """``raise_exception(message)``, which Hugging Face templates call to refuse a conversation."""
    raise ChatTemplateError(
        f"the model's chat template refused the conversation: {_clean(message)}"
    )


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    """The ``tojson`` filter as Hugging Face renders it: non-ASCII kept, keys in their order."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _strftime_now(fmt: str) -> str:
    """``strftime_now(fmt)``: today's date, which some templates write into the system turn."""
    return datetime.now().strftime(fmt)


@dataclass
class ChatTemplate:
    name: str
    source: str
    bos_token: str = ""
    eos_token: str = ""
    cancelled: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    deadline: float = RENDER_DEADLINE  # seconds for one render
    # Read from outside.
    variables: frozenset[str] = field(default=frozenset(), init=False, compare=False)

    @property
    def turn_tokens(self) -> tuple[str, ...]:
        """The turn tokens (``TURN_TOKENS``) this template writes: generation ends on each."""
        return tuple(token for token in TURN_TOKENS if token in self.source)

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Text that starts a new turn in a format without turn tokens (the completion frame):
        generation ends there."""
        return COMPLETION_STOPS if self.name == COMPLETION else ()

    def framed(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """The messages as this format writes them: the completion frame's ``frame_messages``,
        else as they are. What ``render`` is given to build a prompt (``prompt``)."""
        return frame_messages(messages) if self.name == COMPLETION else list(messages)

    def prompt(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        variables: Mapping[str, Any] | None = None,
        tools: Sequence[ToolSpec] | None = None,
    ) -> str:
        """The prompt text for ``messages`` (``render`` of ``framed``)."""
        return self.render(self.framed(messages), add_generation_prompt, variables, tools)

    @property
    def reads_tools(self) -> bool:
        """Whether this template reads the ``tools`` variable (offers tools to the model).
        Which call syntax it teaches is engine/turns/tool_formats.py's ``tool_format``."""
        return "tools" in self.variables

    @property
    def tool_format(self) -> ToolFormat | None:
        """How this template's model writes tool calls (engine/turns/tool_formats.py), or None:
        no tools for this model (the template does not offer them, or speaks no family we read)."""
        return tool_format(self.source) if self.reads_tools else None

    @property
    def described(self) -> str:
        if self.name == "gguf":
            return "the model's chat template (tokenizer.chat_template in its GGUF file)"
        if self.name == COMPLETION:
            return "the built-in completion frame"
        return f"the built-in {self.name!r} chat template"

    def _fix(self) -> str:
        if self.name == "gguf":
            return (
                "use another GGUF build of this model (one whose chat template is plainer), "
                "or another model"
            )
        return "report this: a built-in template should never do that"

    def __post_init__(self) -> None:
        import jinja2.ext
        import jinja2.meta

        if len(self.source) > MAX_SOURCE:
            raise ChatTemplateError(
                f"{self.described} is {len(self.source):,} characters long, more than the "
                f"{MAX_SOURCE:,} vibechat reads: {self._fix()}."
            )
        env = sandbox_environment(
            filters={"tojson": _tojson},
            globals={"raise_exception": _raise, "strftime_now": _strftime_now},
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols],
        )
        try:
            parsed = env.parse(self.source)
            # The names the template reads from outside (no template code runs): which
            # switch for thinking it takes, if any (engine/settings/think_switch.py).
            self.variables = frozenset(jinja2.meta.find_undeclared_variables(parsed))
            self._template = compile_guarded(env, parsed)
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(
                f"{self.described} is broken ({_clean(exc, 200)}): {self._fix()}."
            ) from None
        except (RecursionError, MemoryError):
            raise ChatTemplateError(
                f"{self.described} is nested too deeply to read: {self._fix()}."
            ) from None

    @property
    def thinking_switch(self) -> str | None:
        """The variable that switches thinking in this template (None: it has none)."""
        return find_switch(self.variables)

    def render(
        self,
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool = True,
        variables: Mapping[str, Any] | None = None,
        tools: Sequence[ToolSpec] | None = None,
    ) -> str:
        """The prompt for ``messages``; ``variables``: extra template variables (the thinking
        switch: ``enable_thinking=False`` ...), which never replace the ones set here.
        ``tools``: offered to the model as the ``tools`` variable Hugging Face templates read
        (``ToolSpec.to_openai()`` each); a template that does not read it raises
        ``ChatTemplateError``. Calls and results in the history are rendered in the shape
        those templates expect (:func:`template_messages`), with or without ``tools``."""
        dicts = [m.to_dict() for m in messages]
        extra = {k: v for k, v in (variables or {}).items() if k not in _OWN_VARIABLES}
        if self.name == COMPLETION:
            extra.update(FRAME_VARIABLES)
        with_tools = bool(tools) or any(m.tool_calls or m.role == "tool" for m in messages)
        # Only then: a conversation without tools renders as it always did.
        if with_tools:
            dicts = template_messages(dicts, short_ids="[TOOL_CALLS]" in self.source)
        if tools:
            if not self.reads_tools:
                raise ChatTemplateError(
                    f"{self.described} has no tool support (it does not read 'tools'): "
                    "chat without tools with this model (tool choice none), or use a "
                    "model whose template offers tools (Qwen 2.5/3, Llama 3.1+, Mistral, gpt-oss)."
                )
            extra["tools"] = [tool.to_openai() for tool in tools]
        try:
            return self._render(dicts, add_generation_prompt, extra)
        except (ChatTemplateError, Exception) as first:
            # Template code is arbitrary: it may raise anything.
            if isinstance(first, (RenderLimit, RenderCancelled)):
                raise self._bounded(first) from None
            # Many templates reject a system role; fold it into the first user turn and retry.
            if (
                dicts
                and dicts[0]["role"] == "system"
                and len(dicts) > 1
                and dicts[1]["role"] == "user"
            ):
                merged = [
                    {"role": "user", "content": dicts[0]["content"] + "\n\n" + dicts[1]["content"]},
                    *dicts[2:],
                ]
                try:
                    return self._render(merged, add_generation_prompt, extra)
                except (RenderLimit, RenderCancelled) as exc:
                    raise self._bounded(exc) from None
                except Exception:  # noqa: BLE001
                    pass
            if with_tools:
                raise ChatTemplateError(
                    f"{self.described} cannot render tools or tool calls ({_clean(first, 200)}): "
                    "chat without tools with this model (tool choice none), or use another model."
                ) from None
            if isinstance(first, ChatTemplateError):
                raise
            raise ChatTemplateError(
                f"{self.described} failed ({_clean(first, 200)}): {self._fix()}."
            ) from None

    def _bounded(self, exc: BaseException) -> ChatTemplateError:
        if isinstance(exc, RenderCancelled):
            return TemplateCancelled(f"rendering {self.described} was cancelled.")
        what = exc.what if isinstance(exc, RenderLimit) else str(exc)
        return ChatTemplateError(f"{self.described} {what}, so it was stopped: {self._fix()}.")

    def _render(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool, extra: dict[str, Any]
    ) -> str:
        conversation = sum(len(m.get("content") or "") for m in messages)
        # Tools and tool calls add to the prompt too.
        if "tools" in extra or any("tool_calls" in m for m in messages):
            conversation += len(
                json.dumps(
                    [extra.get("tools"), [m.get("tool_calls") for m in messages]],
                    ensure_ascii=False,
                    default=str,
                )
            )
        budget = RenderBudget(
            self.deadline, MAX_OUTPUT + OUTPUT_PER_INPUT * conversation, self.cancelled
        )
        log.debug("rendering %s (%d messages)", self.described, len(messages))
        variables = {
            **extra,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        return render_bounded(self._template, budget, variables)


def template_messages(dicts: list[dict[str, Any]], short_ids: bool = False) -> list[dict[str, Any]]:
    """Messages with tool calls and results in the shape Hugging Face chat templates expect:
    each call's ``function.arguments`` a mapping (templates write ``arguments | tojson``, and
    Llama's iterate it), left as text when it is not a JSON object; ``short_ids``: ids as
    nine letters and digits (Mistral's templates refuse any other), the same id for a call
    and its result, the same across renders (a cached prompt prefix stays valid)."""
    out: list[dict[str, Any]] = []
    for message in dicts:
        message = dict(message)
        calls = message.get("tool_calls")
        if calls:
            converted = []
            for call in calls:
                function = dict(call.get("function", {}))
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    try:
                        parsed = bounded_loads(arguments) if arguments.strip() else {}
                    except ValueError:
                        # Not JSON, or nested too deeply: left as text.
                        parsed = None
                    if isinstance(parsed, dict):
                        function["arguments"] = parsed
                converted.append(
                    {
                        **call,
                        "id": _short_id(call.get("id", "")) if short_ids else call.get("id", ""),
                        "function": function,
                    }
                )
            message["tool_calls"] = converted
        if short_ids and message.get("tool_call_id") is not None:
            message["tool_call_id"] = _short_id(message["tool_call_id"])
        out.append(message)
    return out


def _short_id(call_id: str) -> str:
    """A call id as nine letters and digits: itself when it is one, else a digest of it."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id

    return hashlib.sha256(call_id.encode("utf-8", "replace")).hexdigest()[:9]
