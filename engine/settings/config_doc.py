"""The settings table in words: the commented config file a new user starts from
(``template()``) and the table of docs/USAGE.md (``markdown_table()``), both from a settings
table (``Schema``: the engine's own, or the app's with its settings and text tables)."""

from __future__ import annotations

import textwrap

from .setting import Setting
from .setting import show as _show
from .table import SCHEMA, Config, Schema


# ------------------------------------------------------------ documentation
def _wrap(text: str, prefix: str = "# ", width: int = 92) -> list[str]:
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=prefix,
        subsequent_indent=prefix,
        break_on_hyphens=False,
        break_long_words=False,
    ) or [prefix.rstrip()]


def _describe(setting: Setting) -> str:
    parts = [setting.help]
    if setting.minimum is not None and setting.maximum is not None:
        parts.append(f"Range {_show(setting.minimum)} to {_show(setting.maximum)}.")
    parts.append(f"Default: {setting.default_text()}.")
    if setting.env:
        parts.append(f"Variable: {setting.env}.")
    if setting.flag:
        parts.append(f"Flag: {setting.flag}.")
    return " ".join(parts)


def template(schema: Schema = SCHEMA) -> str:
    """A config file with every setting of ``schema`` documented and commented out (it loads as
    defaults); a text table's field may name its entries (``entries``: a sentence)."""
    out = [
        "# vibechat configuration (TOML). Every setting is optional: a commented-out line shows",
        "# an example; delete the leading '# ' to use it.",
        "# Command-line flags override environment variables, which override this file.",
        "# 'vibechat config show' prints the effective values and where each comes from.",
        "",
    ]
    first_param = next((s.key for s in schema.settings if s.key.startswith("params.")), None)
    for setting in schema.settings:
        # [params] opens before the first parameter, whichever it is.
        if setting.key == first_param:
            out += [*_wrap(Config.__dataclass_fields__["params"].metadata["help"]), "[params]", ""]
        out += _wrap(_describe(setting))
        out += [f"# {setting.name} = {setting.example}", ""]
    for name, table in schema.tables.items():
        out += _wrap(table.metadata["help"])
        if table.metadata.get("entries"):
            out += _wrap(table.metadata["entries"])
        out += [f"[{name}]", f"# {table.metadata['example']}", ""]
    return "\n".join(out)


def markdown_table(schema: Schema = SCHEMA) -> str:
    """The settings table of docs/USAGE.md: each setting's key, flag, variable, default and help
    (a text table: one row for its entries, ``TABLE.<entry>``)."""
    rows = [TABLE_HEADER, "| --- | --- | --- | --- | --- |"]
    for s in schema.settings:
        help_text = s.help.replace("|", "\\|")
        if s.minimum is not None and s.maximum is not None:
            help_text += f" ({_show(s.minimum)}–{_show(s.maximum)})"
        env = f"`{s.env}`" if s.env else ""
        flag = f"`{s.flag}`" + (f", `{s.short}`" if s.short else "") if s.flag else ""
        rows.append(f"| `{s.key}` | {flag} | {env} | {s.default_text()} | {help_text} |")
    for name, table in schema.tables.items():
        rows.append(f"| `{name}.<{table.metadata['entry']}>` | | | | {table.metadata['help']} |")
    return "\n".join(rows)


TABLE_HEADER = "| key | flag | variable | default | what it sets |"


def with_table(text: str, table: str) -> str:
    """``text`` (docs/USAGE.md) with its settings table, the lines from ``TABLE_HEADER`` to the
    first line that is no table row, replaced by ``table`` (``markdown_table``): what
    ``python3 dev.py docs`` writes. Raises ValueError where the text has no such table."""
    lines = text.split("\n")
    start = lines.index(TABLE_HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join([*lines[:start], table, *lines[end:]])
