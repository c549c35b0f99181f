"""One setting's row of the settings table: its key, type, default, flag, variable and help
(``Setting``), and ``doc()``, the row's fields as a dataclass field's metadata, where a setting
is declared (``EngineSettings`` in knobs.py, ``Config`` in table.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The flag groups: where a flag shows on the help pages (app/options.py titles them).
ENGINE, REMOTE, SAMPLING = "engine", "remote", "sampling"


def show(value: Any) -> str:
    """A value as the config file spells it (``none`` for unset)."""
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def first_clause(help: str) -> str:
    """What a setting does, in a few words: its help up to the first ``;``, ``:`` or full stop
    (the parameter panel's line under each slider). The help is the one declaration; this
    never restates it."""
    cut = min(
        (at for at in (help.find("; "), help.find(": "), help.find(". ")) if at >= 0),
        default=len(help),
    )
    return help[:cut].rstrip(".")


def doc(
    help: str,
    *,
    kind: str,
    example: str,
    unset: str = "",
    env: str | None = None,
    flag: str | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
    choices: tuple[str, ...] = (),
    check: Any = None,
    short: str | None = None,
    metavar: str | None = None,
    flag_help: str = "",
    group: str | None = None,
) -> dict[str, Any]:
    """A setting's row, as its field's metadata. ``check``: for a text setting with fixed choices,
    the function that validates it (returns the canonical value or raises InvalidParameterError
    naming the choices). ``flag``, ``short``, ``metavar``, ``flag_help``, ``group``: its
    command-line option (app/options.py builds it; ``flag_help`` is the help page's shorter
    line)."""
    return {
        "help": help,
        "kind": kind,
        "example": example,
        "unset": unset,
        "env": env,
        "flag": flag,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "check": check,
        "short": short,
        "metavar": metavar,
        "flag_help": flag_help,
        "group": group,
    }


@dataclass(frozen=True)
class Setting:
    """One documented setting; ``key`` is its dotted TOML key (``params.top_k``)."""

    key: str
    kind: str  # "text", "whole number", "number", "path", "list of text"
    help: str
    default: Any
    example: str
    # What happens when unset (the default is None).
    unset: str = ""
    env: str | None = None
    flag: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    # None (unset) is a valid value.
    optional: bool = True
    # The values a text setting may take (none: any), and the function that validates them.
    choices: tuple[str, ...] = ()
    check: Any = None
    # The flag's one-letter alias ("-m"), its value on the help page ("TOKENS") and its line there.
    short: str | None = None
    metavar: str | None = None
    flag_help: str = ""
    # ENGINE, REMOTE, SAMPLING or None: the help page's panel.
    group: str | None = None
    # An EngineSettings field (what the engine is started with).
    engine: bool = False

    @property
    def name(self) -> str:
        return self.key.rpartition(".")[2]

    @property
    def summary(self) -> str:
        """The help's first clause (``first_clause``): what the setting does, in one short line."""
        return first_clause(self.help)

    def default_text(self) -> str:
        # As TOML writes it.
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return self.unset if self.default is None and self.unset else show(self.default)
