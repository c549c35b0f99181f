"""Turn a list of chat messages into the prompt text a model was trained on.

Which template a model gets is engine/turns/prompt_format.py's choice: the GGUF's own
``tokenizer.chat_template``; a built-in turn format for an instruct model whose file lost its
template; the completion frame (a few-shot transcript) for a base model, instead of
llama-cpp-python's ``llama-2`` fallback or turns it never learned, which make it answer
nonsense. All templates, built-in or not, the frame included, render in Jinja's sandbox.

A GGUF's template is code from outside. The sandbox stops it from reaching Python's
internals, not from spending CPU and memory, so rendering is bounded too:

* time: a render stops after ``deadline`` seconds (``RENDER_DEADLINE``), and at once when
  ``cancelled()`` turns true (the backend's ``cancel()``, which Ctrl-C calls): every loop
  iteration, call, filter and piece of output checks both;
* size: no string, list or output may exceed ``MAX_OUTPUT`` characters plus
  ``OUTPUT_PER_INPUT`` times the conversation's; the operations that can make a large
  value from small ones (``*``, ``**``, ``+``, ``%``, ``~``, ``join``, ``replace``, widths and
  counts) are checked before they run, and no number a template passes to a filter or a
  method may exceed ``MAX_NUMBER_ARG`` (a width, a repeat count);
* the template itself: at most ``MAX_SOURCE`` characters; constants are not folded at
  compile time (that would run template code outside these bounds).

Past a bound, rendering raises ``ChatTemplateError`` naming the template and what to do;
a cancel raises ``TemplateCancelled``. Text a template shows (``raise_exception``, its
errors) is sanitised before it reaches a message.

Imports inside functions are deliberate: Jinja2 loads only when a model's chat template is
rendered (start-up time).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
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
from .tool_calls import ToolSpec
from .tool_formats import ToolFormat, tool_format

log = logging.getLogger("vibechat.template")

RENDER_DEADLINE = 5.0  # seconds for one render (real templates take milliseconds)
MAX_OUTPUT = 1 << 20  # characters of any value or of the prompt, beyond the conversation's share
OUTPUT_PER_INPUT = 4  # characters allowed for each character of the conversation
MAX_NUMBER_ARG = 100_000  # a width or count passed to a filter or method (Jinja's own range bound)
MAX_INT_BITS = 1 << 16  # a whole number a template computes (65,536 bits: ~20,000 digits)
MAX_SOURCE = 1 << 20  # characters of a template
_OWN_VARIABLES = frozenset({"messages", "add_generation_prompt", "bos_token", "eos_token"})
_BIG_NUMBER = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format string

def _clean(text: object, limit: int = 300) -> str:
    """Text from a template (its own words, or an error about it) fit for a message:
    sanitised, one line, bounded."""
    line = " ".join(sanitize(str(text)[:limit * 4]).split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _raise(message: object) -> None:
    raise ChatTemplateError(f"the model's chat template refused the conversation: {_clean(message)}")


class _Limit(Exception):
    """A bound was hit while rendering (internal): ``what`` says which."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _Cancelled(Exception):
    """``cancelled()`` turned true while rendering (internal)."""


class _Budget:
    """One render's bounds: its deadline, its size limit, the cancel flag."""

    __slots__ = ("deadline", "max_chars", "cancelled", "seconds")

    def __init__(self, seconds: float, max_chars: int, cancelled: Callable[[], bool] | None) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.max_chars = max_chars
        self.cancelled = cancelled

    def tick(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise _Cancelled()
        if time.monotonic() > self.deadline:
            raise _Limit(f"took longer than {self.seconds:g} s to render")

    def size(self, n: int) -> None:
        if n > self.max_chars:
            raise _Limit(f"made a value of more than {self.max_chars:,} characters")

    def weigh(self, value: Any) -> Any:
        """``value``, once its printed size is known to be within bounds."""
        self.size(_weight(value, self.max_chars))
        return value


_BUDGET: ContextVar[_Budget | None] = ContextVar("vibechat_template_budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # outside a render (never expected): the bounds still hold
        budget = _Budget(RENDER_DEADLINE, MAX_OUTPUT, None)
    return budget


def _length(value: Any) -> int:
    """The size of a value a template made: characters of a string, items of a container."""
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value)
    return 0


def _weight(value: Any, limit: int) -> int:
    """About how many characters ``value`` prints as (``str()`` of a list prints every
    item: ``[s] * 1000`` of a long ``s`` is small as a list, huge as text); it stops
    counting past ``limit``."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(item)
            if total <= limit:
                stack.extend(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            if total <= limit:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        else:
            total += 8
    return total


def _checked(value: Any) -> Any:
    """``value`` after its size is checked; an iterator comes back wrapped (each item ticks)."""
    budget = _budget()
    if type(value) is str:  # the common case, first
        budget.size(len(value))
        return value
    budget.weigh(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise _Limit(f"made a number of more than {MAX_INT_BITS:,} bits")
    if isinstance(value, Iterator):
        return _ticking(value)
    return value


def _ticking(items: Iterable[Any]) -> Iterator[Any]:
    budget = _budget()
    count = 0
    for item in items:
        budget.tick()
        count += 1
        budget.size(count)
        yield item


def _check_numbers(args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """No width or count over ``MAX_NUMBER_ARG`` (padding, indenting, wrapping, batching)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER_ARG:
            raise _Limit(f"asked for {value:,} (a width or a count), more than {MAX_NUMBER_ARG:,}")


def _check_format(text: Any) -> None:
    if isinstance(text, str) and _BIG_NUMBER.search(text):
        raise _Limit("asked for a format width or precision of a million or more")


def _joined_size(separator: Any, items: list[Any], limit: int) -> int:
    sep = _weight(separator, limit)
    return sum(_weight(x, limit) for x in items) + sep * max(0, len(items) - 1)


def _replaced_size(text: str, old: Any, new: Any, count: Any = None) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    found = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * (len(new) - len(old))


def _binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be too large, before it runs."""
    budget = _budget()
    budget.tick()
    numbers = all(isinstance(x, int) and not isinstance(x, bool) for x in (left, right))
    if operator == "*":
        if numbers:
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise _Limit(f"made a number of more than {MAX_INT_BITS:,} bits")
            return
        for seq, times in ((left, right), (right, left)):
            if isinstance(times, int) and _length(seq):
                budget.size(_weight(seq, budget.max_chars) * max(0, times))
    elif operator == "**":
        if numbers and right > 0 and abs(left) > 1 and right * left.bit_length() > MAX_INT_BITS:
            raise _Limit(f"made a number of more than {MAX_INT_BITS:,} bits")
    elif operator == "+":
        budget.size(_weight(left, budget.max_chars) + _weight(right, budget.max_chars))
    elif operator == "%" and isinstance(left, str):
        _check_format(left)
        if "*" in left:
            _check_numbers(right if isinstance(right, tuple) else (right,), {})


class _Guarded:
    """What makes a sandboxed environment bounded (mixed into the environment class)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, first
            budget = _budget()
            budget.tick()
            budget.size(len(left) + len(right))
            return left + right
        _binop(operator, left, right)
        return _checked(super().call_binop(context, operator, left, right))  # type: ignore[misc]

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        from jinja2.runtime import LoopContext, Macro

        if not isinstance(__obj, (Macro, LoopContext)) and __obj is not _iterate and __obj is not _concat:
            _check_numbers(args, kwargs)
            method = getattr(__obj, "__wrapped__", __obj)
            owner = getattr(method, "__self__", None)
            name = getattr(method, "__name__", "")
            if isinstance(owner, str):
                if name in ("format", "format_map"):
                    _check_format(owner)
                elif name == "join" and args:
                    items = list(_ticking(args[0]))
                    budget.size(_joined_size(owner, items, budget.max_chars))
                    args = (items, *args[1:])
                elif name == "replace" and len(args) >= 2:
                    budget.size(_replaced_size(owner, *args[:3]))
        return _checked(super().call(__context, __obj, *args, **kwargs))  # type: ignore[misc]


def _iterate(items: Any) -> Iterator[Any]:
    """What a ``for`` loop iterates (the guard puts it around every loop's iterable)."""
    return _ticking(items)


def _concat(*parts: Any) -> str:
    """The ``~`` operator, checked: the guard puts it in place of every concatenation."""
    budget = _budget()
    budget.size(sum(_weight(p, budget.max_chars) for p in parts))
    return "".join(p if isinstance(p, str) else str(p) for p in parts)


def _finalize(value: Any) -> Any:
    """What ``{{ ... }}`` prints, checked before it becomes text."""
    if type(value) is str:
        return value
    return _budget().weigh(value)


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A filter with the same checks as a call, and the pre-checks of the filters that
    can make a large value from small inputs."""
    from jinja2.utils import _PassArg

    skip = 2 if _PassArg.from_obj(func) is not None else 1  # (context,) value, then its arguments

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        _check_numbers(args[skip:], kwargs)
        if len(args) >= skip:
            value = args[skip - 1]
            if name == "format":
                _check_format(value)
            elif name == "replace" and isinstance(value, str) and len(args) >= skip + 2:
                budget.size(_replaced_size(value, *args[skip:skip + 3]))
            elif name == "join" and "attribute" not in kwargs and len(args) <= skip + 1:
                items = list(_ticking(value))
                separator = args[skip] if len(args) > skip else kwargs.get("d", "")
                budget.size(_joined_size(separator, items, budget.max_chars))
                args = (*args[:skip - 1], items, *args[skip:])
            elif name == "sum" and not isinstance(kwargs.get("start", args[skip + 1] if len(args) > skip + 1
                                                             else 0), (int, float)):
                raise _Limit("summed values other than numbers")
        return _checked(func(*args, **kwargs))

    return guarded


def _guard_tree(tree: Any) -> Any:
    """Every loop's iterable goes through ``_iterate``, every ``~`` through ``_concat``."""
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    def call(func: Callable[..., Any], args: list[Any], lineno: int) -> Any:
        name = f"{__name__}.{func.__name__}"
        return nodes.Call(nodes.ImportedName(name, lineno=lineno), args, [], None, None, lineno=lineno)

    class Guard(NodeTransformer):
        def visit_For(self, node: Any) -> Any:
            self.generic_visit(node)
            node.iter = call(_iterate, [node.iter], node.lineno)
            return node

        def visit_Concat(self, node: Any) -> Any:
            self.generic_visit(node)
            return call(_concat, list(node.nodes), node.lineno)

    return Guard().visit(tree)


@dataclass
class ChatTemplate:
    name: str
    source: str
    bos_token: str = ""
    eos_token: str = ""
    cancelled: Callable[[], bool] | None = field(default=None, repr=False, compare=False)
    deadline: float = RENDER_DEADLINE  # seconds for one render
    variables: frozenset[str] = field(default=frozenset(), init=False, compare=False)  # read from outside

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

    def prompt(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True,
               variables: Mapping[str, Any] | None = None, tools: Sequence[ToolSpec] | None = None) -> str:
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
            return "use another GGUF build of this model (one whose chat template is plainer), or another model"
        return "report this: a built-in template should never do that"

    def __post_init__(self) -> None:
        import jinja2.ext
        import jinja2.meta
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if len(self.source) > MAX_SOURCE:
            raise ChatTemplateError(f"{self.described} is {len(self.source):,} characters long, more than the "
                                    f"{MAX_SOURCE:,} vibechat reads: {self._fix()}.")

        class Environment(_Guarded, ImmutableSandboxedEnvironment):
            pass

        env = Environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols],
                          optimized=False,  # no constant folding: it would run template code unbounded
                          finalize=_finalize)
        env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
        env.filters = {name: _guard_filter(name, func) for name, func in env.filters.items()}
        env.globals.pop("lipsum", None)  # a text generator no chat template needs
        env.globals.update(
            raise_exception=_raise,
            strftime_now=lambda fmt: datetime.now().strftime(fmt),
        )
        try:
            parsed = env.parse(self.source)
            # The names the template reads from outside (no template code runs): which
            # switch for thinking it takes, if any (engine/settings/think_switch.py).
            self.variables = frozenset(jinja2.meta.find_undeclared_variables(parsed))
            tree = _guard_tree(parsed)
            tree.set_environment(env)
            self._template = env.from_string(tree)
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"{self.described} is broken ({_clean(exc, 200)}): {self._fix()}.") from None
        except (RecursionError, MemoryError):
            raise ChatTemplateError(f"{self.described} is nested too deeply to read: {self._fix()}.") from None

    @property
    def thinking_switch(self) -> str | None:
        """The variable that switches thinking in this template (None: it has none)."""
        return find_switch(self.variables)

    def render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True,
               variables: Mapping[str, Any] | None = None, tools: Sequence[ToolSpec] | None = None) -> str:
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
        if with_tools:  # (only then: a conversation without tools renders as it always did)
            dicts = template_messages(dicts, short_ids="[TOOL_CALLS]" in self.source)
        if tools:
            if not self.reads_tools:
                raise ChatTemplateError(f"{self.described} has no tool support (it does not read 'tools'): "
                                        "chat without tools with this model (tool choice none), or use a "
                                        "model whose template offers tools (Qwen 2.5/3, Llama 3.1+, Mistral, gpt-oss).")
            extra["tools"] = [tool.to_openai() for tool in tools]
        try:
            return self._render(dicts, add_generation_prompt, extra)
        except (ChatTemplateError, Exception) as first:  # template code is arbitrary
            if isinstance(first, (_Limit, _Cancelled)):
                raise self._bounded(first) from None
            # Many templates reject a system role; fold it into the first user turn and retry.
            if dicts and dicts[0]["role"] == "system" and len(dicts) > 1 and dicts[1]["role"] == "user":
                merged = [{"role": "user", "content": dicts[0]["content"] + "\n\n" + dicts[1]["content"]},
                          *dicts[2:]]
                try:
                    return self._render(merged, add_generation_prompt, extra)
                except (_Limit, _Cancelled) as exc:
                    raise self._bounded(exc) from None
                except Exception:  # noqa: BLE001
                    pass
            if with_tools:
                raise ChatTemplateError(
                    f"{self.described} cannot render tools or tool calls ({_clean(first, 200)}): chat without "
                    "tools with this model (tool choice none), or use another model.") from None
            if isinstance(first, ChatTemplateError):
                raise
            raise ChatTemplateError(f"{self.described} failed ({_clean(first, 200)}): {self._fix()}.") from None

    def _bounded(self, exc: BaseException) -> ChatTemplateError:
        if isinstance(exc, _Cancelled):
            return TemplateCancelled(f"rendering {self.described} was cancelled.")
        what = exc.what if isinstance(exc, _Limit) else str(exc)
        return ChatTemplateError(f"{self.described} {what}, so it was stopped: {self._fix()}.")

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool,
                extra: dict[str, Any]) -> str:
        conversation = sum(len(m.get("content") or "") for m in messages)
        if "tools" in extra or any("tool_calls" in m for m in messages):  # what tools add to the prompt
            conversation += len(json.dumps([extra.get("tools"), [m.get("tool_calls") for m in messages]],
                                           ensure_ascii=False, default=str))
        budget = _Budget(self.deadline, MAX_OUTPUT + OUTPUT_PER_INPUT * conversation, self.cancelled)
        log.debug("rendering %s (%d messages)", self.described, len(messages))
        token = _BUDGET.set(budget)
        try:
            out: list[str] = []
            total = 0
            for piece in self._template.generate(
                    **extra, messages=messages, add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token, eos_token=self.eos_token):
                total += len(piece)
                if total > budget.max_chars:
                    raise _Limit(f"wrote more than {budget.max_chars:,} characters of prompt")
                out.append(piece)
                budget.tick()
            return "".join(out)
        except RecursionError:
            raise _Limit("recursed too deeply") from None
        finally:
            _BUDGET.reset(token)


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
                    except ValueError:  # not JSON, or nested too deeply: left as text
                        parsed = None
                    if isinstance(parsed, dict):
                        function["arguments"] = parsed
                converted.append({**call, "id": _short_id(call.get("id", "")) if short_ids else call.get("id", ""),
                                  "function": function})
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
