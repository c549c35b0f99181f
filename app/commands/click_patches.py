"""What vibechat changes in the click command that Typer builds, before it runs: help pages
that show what was written (``escape_help``) with tidy value labels (``quiet_flags``), unset
options that skip Typer's pydantic coercion (``skip_unset_coercion``), and click's exceptions
(``click_exception``) with a usage error as one line (``usage_error_line``).

Imports inside functions are deliberate: Rich's markup loads only where Typer draws help with
Rich, and Typer's private coercion module is tried where it is used (a Typer without it is left
alone)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer import core

from .clitools import usage_message


def click_exception(name: str) -> Any:
    """Click's exception class ``name`` as the installed Typer raises it: recent Typer
    vendors its own copy of click, older ones use click itself; typer.BadParameter is
    one of them in both."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


def usage_error_line(exc: Any) -> str:
    """Click's usage error as the one line vibechat prints: the message (typer's
    "Did you mean" suggestions included) and where to read the command's options."""

    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "vibechat"
    return f"vibechat: error: {usage_message(exc)} (see '{where} --help')"


def quiet_flags(command: Any, help_names: list[str] | None = None) -> None:
    """Tidy value labels in ``--help``: recent Typer shows every parameter's type, so
    ``<bool>`` beside ``--json`` or ``--help``, which take no value, and ``<str>`` beside
    an argument already named by its metavar (``QUERY``). Flags get no label; arguments
    with a metavar show just it."""
    help_names = command.context_settings.get("help_option_names", help_names) or ["--help"]
    options = [p for p in command.params if getattr(p, "is_flag", False)]
    # -h/--help, which click adds itself (and, since click 8.2, keeps).
    try:
        options.append(
            command.get_help_option(command.context_class(command, help_option_names=help_names))
        )
    except Exception:  # noqa: BLE001 - only the help page's looks are at stake
        pass
    for option in options:
        if option is not None and getattr(option, "is_flag", False) and option.metavar is None:
            option.metavar = ""
    for param in command.params:
        if (
            param.param_type_name == "argument"
            and param.metavar
            and hasattr(param, "display_type_rich")
        ):
            param.display_type_rich = lambda ctx: None
    for sub in getattr(command, "commands", {}).values():
        quiet_flags(sub, help_names)


def escape_help(command: Any) -> None:
    """Help texts as written: Typer renders them as Rich markup, which would take the
    bracketed words of a help text (``[thinking]``) for style tags and drop them. Each
    command's and option's help is escaped once, when the first page is drawn (Rich draws it;
    plain click help, ``TYPER_USE_RICH=0``, shows the text as is): not on a start that draws
    none, such as the chat's, whose engine process starts before Rich's markup is imported."""
    escaped: list[bool] = []

    def escape_all() -> None:
        if not escaped:
            escaped.append(True)
            _escape_texts(command, set())

    _before_each_page(command, escape_all, set())


def _before_each_page(command: Any, first: Callable[[], None], seen: set[int]) -> None:
    """``first()`` runs before any command of the tree under ``command`` formats its page."""
    # A command reached twice (an alias) is wrapped once.
    if id(command) in seen:
        return
    seen.add(id(command))

    def format_help(ctx: Any, formatter: Any, _format: Any = command.format_help) -> Any:
        first()
        return _format(ctx, formatter)

    command.format_help = format_help
    for sub in getattr(command, "commands", {}).values():
        _before_each_page(sub, first, seen)


def _escape_texts(command: Any, seen: set[int]) -> None:
    """Escape the help texts of ``command`` and every command under it, once each."""
    from rich.markup import escape

    # A command reached twice (an alias) is escaped once.
    if id(command) in seen:
        return
    seen.add(id(command))
    if core.HAS_RICH and getattr(command, "rich_markup_mode", None) == "rich":
        for attr in ("help", "short_help", "epilog"):
            text = getattr(command, attr, None)
            if isinstance(text, str):
                setattr(command, attr, escape(text))
        for param in command.params:
            if isinstance(getattr(param, "help", None), str) and id(param) not in seen:
                seen.add(id(param))
                param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        _escape_texts(sub, seen)


def skip_unset_coercion(command: Any) -> None:
    """A parameter the command line leaves unset (None) skips the pydantic ``TypeAdapter`` that
    this Typer builds for every parameter it processes, only to turn None into None (or ``()``).
    The chat's start parses ~30 of them, all unset: with pydantic's import, 0.17 s (busy 2-core
    host) before the engine process even starts, so before the first frame and the model's load
    (docs/PERFORMANCE.md, "Speed on slow CPUs"). The value
    is the same: Typer's coercion returns before any type's code for None, so a stand-in that
    has no adapter gives its result; a value that is given is coerced as before. A Typer
    without these internals is left alone."""
    try:
        from typer._coercion import PassThroughRuntimeParam
    except ImportError:
        return
    # With -h/--help, which click makes once per command (quiet_flags, run first, made it).
    for param in [*command.params, getattr(command, "_help_option", None)]:
        if not hasattr(param, "_runtime_param") or not hasattr(param, "type_descriptor"):
            continue

        def process_value(
            ctx: Any, value: Any, _param: Any = param, _process: Any = param.process_value
        ) -> Any:
            if value is not None or _param._runtime_param is not None:
                return _process(ctx, value)
            kind = _param.type_descriptor
            _param._runtime_param = PassThroughRuntimeParam(
                parameter_info=kind.parameter_info, annotation=kind.annotation
            )
            try:
                return _process(ctx, value)
            finally:
                # A later given value builds the real one.
                _param._runtime_param = None

        param.process_value = process_value
    for sub in getattr(command, "commands", {}).values():
        skip_unset_coercion(sub)
