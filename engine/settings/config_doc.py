"""The settings table in words: the commented config file a new user starts from
(``template()``) and the table of docs/USAGE.md (``markdown_table()``), both from ``SETTINGS``."""

from __future__ import annotations

from collections.abc import Collection

from .setting import Setting, show as _show
from .table import SETTINGS, Config


# ------------------------------------------------------------ documentation
def _wrap(text: str, prefix: str = "# ", width: int = 92) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=prefix, subsequent_indent=prefix,
                         break_on_hyphens=False, break_long_words=False) or [prefix.rstrip()]


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


def template(key_ids: Collection[str] | None = None) -> str:
    """A config file with every setting documented and commented out (it loads as defaults)."""
    out = [
        "# vibechat configuration (TOML). Every setting is optional: a commented-out line shows",
        "# an example; delete the leading '# ' to use it.",
        "# Command-line flags override environment variables, which override this file.",
        "# 'vibechat config show' prints the effective values and where each comes from.",
        "",
    ]
    for setting in SETTINGS:
        if setting.key == "params.temperature":
            out += [*_wrap(Config.__dataclass_fields__["params"].metadata["help"]), "[params]", ""]
        out += _wrap(_describe(setting))
        out += [f"# {setting.name} = {setting.example}", ""]
    keys_doc = Config.__dataclass_fields__["keys"].metadata
    out += _wrap(keys_doc["help"])
    if key_ids:
        out += _wrap("Binding ids: " + ", ".join(sorted(key_ids)) + ".")
    out += ["[keys]", f"# {keys_doc['example']}", ""]
    return "\n".join(out)


def markdown_table() -> str:
    """The settings table of docs/USAGE.md: each setting's key, flag, variable, default and help."""
    rows = ["| key | flag | variable | default | what it sets |", "| --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        help_text = s.help.replace("|", "\\|")
        if s.minimum is not None and s.maximum is not None:
            help_text += f" ({_show(s.minimum)}–{_show(s.maximum)})"
        env = f"`{s.env}`" if s.env else ""
        flag = f"`{s.flag}`" + (f", `{s.short}`" if s.short else "") if s.flag else ""
        rows.append(f"| `{s.key}` | {flag} | {env} | {s.default_text()} | {help_text} |")
    rows.append("| `keys.<id>` | | | | " + Config.__dataclass_fields__["keys"].metadata["help"] + " |")
    return "\n".join(rows)
