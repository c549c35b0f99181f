"""Jinja's sandbox, bounded: what a chat template (code from outside) may spend while it renders.

Jinja's ``ImmutableSandboxedEnvironment`` stops a template from reaching Python's internals,
not from spending CPU and memory. The environment made here (``sandbox_environment``) bounds
that too, for one render at a time (``render_bounded``, under a ``RenderBudget``):

* time: a render stops after the budget's seconds, and at once when its ``cancelled()`` turns
  true: every loop iteration, call, filter and piece of output checks both;
* size: no string, list or output may exceed the budget's ``max_chars``; the operations that
  can make a large value from small ones (``*``, ``**``, ``+``, ``%``, ``~``, ``join``,
  ``replace``, widths and counts) are checked before they run, and no number a template
  passes to a filter or a method may exceed ``MAX_NUMBER_ARG`` (a width, a repeat count);
* constants are not folded at compile time (that would run template code outside these
  bounds): the environment is made with ``optimized=False``.

Past a bound, rendering raises ``RenderLimit`` (its ``what`` says which); a cancel raises
``RenderCancelled``. engine/turns/chat_template.py turns both into the user's one line.

Imports inside functions are deliberate: Jinja2 loads only when a model's chat template is
rendered (start-up time).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

# Seconds for one render (real templates take milliseconds).
RENDER_DEADLINE = 5.0
# Characters of any value or of the prompt, beyond the conversation's share.
MAX_OUTPUT = 1 << 20
# A width or count passed to a filter or method (Jinja's own range bound).
MAX_NUMBER_ARG = 100_000
# A whole number a template computes (65,536 bits: ~20,000 digits).
MAX_INT_BITS = 1 << 16
# A width or precision of a million or more in a format string.
_BIG_NUMBER = re.compile(r"\d{7,}")


class RenderLimit(Exception):
    """A bound was hit while rendering: ``what`` says which, in words that follow the
    template's name (``took longer than 5 s to render``)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class RenderCancelled(Exception):
    """The budget's ``cancelled()`` turned true while rendering."""


class RenderBudget:
    """One render's bounds: its deadline (``seconds`` from now), its size limit
    (``max_chars``), the cancel flag (``cancelled``: None, never cancelled)."""

    __slots__ = ("deadline", "max_chars", "cancelled", "seconds")

    def __init__(
        self, seconds: float, max_chars: int, cancelled: Callable[[], bool] | None
    ) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.max_chars = max_chars
        self.cancelled = cancelled

    def tick(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise RenderCancelled()
        if time.monotonic() > self.deadline:
            raise RenderLimit(f"took longer than {self.seconds:g} s to render")

    def size(self, n: int) -> None:
        if n > self.max_chars:
            raise RenderLimit(f"made a value of more than {self.max_chars:,} characters")

    def weigh(self, value: Any) -> Any:
        """``value``, once its printed size is known to be within bounds."""
        self.size(_weight(value, self.max_chars))
        return value


_BUDGET: ContextVar[RenderBudget | None] = ContextVar("vibechat_template_budget", default=None)


def _budget() -> RenderBudget:
    budget = _BUDGET.get()
    # Outside a render (never expected): the bounds still hold.
    if budget is None:
        budget = RenderBudget(RENDER_DEADLINE, MAX_OUTPUT, None)
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
    # The common case, first.
    if type(value) is str:
        budget.size(len(value))
        return value
    budget.weigh(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise RenderLimit(f"made a number of more than {MAX_INT_BITS:,} bits")
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
            raise RenderLimit(
                f"asked for {value:,} (a width or a count), more than {MAX_NUMBER_ARG:,}"
            )


def _check_format(text: Any) -> None:
    if isinstance(text, str) and _BIG_NUMBER.search(text):
        raise RenderLimit("asked for a format width or precision of a million or more")


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
                raise RenderLimit(f"made a number of more than {MAX_INT_BITS:,} bits")
            return
        for seq, times in ((left, right), (right, left)):
            if isinstance(times, int) and _length(seq):
                budget.size(_weight(seq, budget.max_chars) * max(0, times))
    elif operator == "**":
        if numbers and right > 0 and abs(left) > 1 and right * left.bit_length() > MAX_INT_BITS:
            raise RenderLimit(f"made a number of more than {MAX_INT_BITS:,} bits")
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
        # The common case, first.
        if operator == "+" and type(left) is str and type(right) is str:
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

        if (
            not isinstance(__obj, (Macro, LoopContext))
            and __obj is not _iterate
            and __obj is not _concat
        ):
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

    # A filter's args: (context,) value, then its arguments, which start at ``skip``.
    skip = 2 if _PassArg.from_obj(func) is not None else 1

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
                budget.size(_replaced_size(value, *args[skip : skip + 3]))
            elif name == "join" and "attribute" not in kwargs and len(args) <= skip + 1:
                items = list(_ticking(value))
                separator = args[skip] if len(args) > skip else kwargs.get("d", "")
                budget.size(_joined_size(separator, items, budget.max_chars))
                args = (*args[: skip - 1], items, *args[skip:])
            elif name == "sum" and not isinstance(
                kwargs.get("start", args[skip + 1] if len(args) > skip + 1 else 0), (int, float)
            ):
                raise RenderLimit("summed values other than numbers")
        return _checked(func(*args, **kwargs))

    return guarded


def _guard_tree(tree: Any) -> Any:
    """Every loop's iterable goes through ``_iterate``, every ``~`` through ``_concat``."""
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    def call(func: Callable[..., Any], args: list[Any], lineno: int) -> Any:
        name = f"{__name__}.{func.__name__}"
        return nodes.Call(
            nodes.ImportedName(name, lineno=lineno), args, [], None, None, lineno=lineno
        )

    class Guard(NodeTransformer):
        def visit_For(self, node: Any) -> Any:
            self.generic_visit(node)
            node.iter = call(_iterate, [node.iter], node.lineno)
            return node

        def visit_Concat(self, node: Any) -> Any:
            self.generic_visit(node)
            return call(_concat, list(node.nodes), node.lineno)

    return Guard().visit(tree)


def sandbox_environment(
    filters: Mapping[str, Callable[..., Any]], globals: Mapping[str, Any], **options: Any
) -> Any:
    """A bounded ``ImmutableSandboxedEnvironment``: Jinja's ``options`` (``trim_blocks``,
    ``extensions`` ...), with ``filters`` added to Jinja's own and every filter guarded, and
    ``globals`` added (``lipsum``, a text generator no chat template needs, left out).
    Templates it renders are made by ``compile_guarded`` and rendered by ``render_bounded``."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Environment(_Guarded, ImmutableSandboxedEnvironment):
        pass

    # optimized=False: no constant folding, it would run template code unbounded.
    env = Environment(**options, optimized=False, finalize=_finalize)
    env.filters.update(filters)
    env.filters = {name: _guard_filter(name, func) for name, func in env.filters.items()}
    env.globals.pop("lipsum", None)
    env.globals.update(globals)
    return env


def compile_guarded(env: Any, parsed: Any) -> Any:
    """The template of ``parsed`` (``env.parse``'s tree), each loop and ``~`` guarded."""
    tree = _guard_tree(parsed)
    tree.set_environment(env)
    return env.from_string(tree)


def render_bounded(template: Any, budget: RenderBudget, variables: Mapping[str, Any]) -> str:
    """``template`` (``compile_guarded``'s) rendered with ``variables`` within ``budget``:
    its output counted piece by piece; ``RenderLimit`` or ``RenderCancelled`` past a bound."""
    token = _BUDGET.set(budget)
    try:
        out: list[str] = []
        total = 0
        for piece in template.generate(**variables):
            total += len(piece)
            if total > budget.max_chars:
                raise RenderLimit(f"wrote more than {budget.max_chars:,} characters of prompt")
            out.append(piece)
            budget.tick()
        return "".join(out)
    except RecursionError:
        raise RenderLimit("recursed too deeply") from None
    finally:
        _BUDGET.reset(token)
