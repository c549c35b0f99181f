"""Saving the config file: settings changed in place, the rest of the file as it was.

``update_config()`` sets dotted keys (``threads``, ``params.top_k``) with tomlkit, so the
user's comments and formatting stay byte for byte; it refuses to touch a file that does not
load cleanly (engine/settings/config.py reads it), and writes atomically (a temporary file
beside it, then a rename; a symlinked file is written through its link). ``save_params()``
makes a reply's sampling parameters the defaults; ``write_template()`` creates the
documented file ``vibechat config edit`` opens.

Imports inside functions are deliberate: tomlkit loads only when the config file is edited
(start-up time).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .config import config_path, parse_config_text, read_config_file
from .config_check import check_value
from .config_doc import template
from .config_text import insert_top_level
from .params import PARAM_SPECS, SamplingParams
from .setting import Setting
from .table import SCHEMA, Schema


def update_config(
    changes: Mapping[str, Any], path: Path | None = None, *, schema: Schema = SCHEMA
) -> Path:
    """Set dotted keys (``threads``, ``params.top_k``) in the config file; None removes one.

    Everything else in the file stays byte for byte (tomlkit), an unchanged value keeps
    its spelling, a built-in default is not added (only updated where the file has the
    key), a missing file starts from ``template()``, and the write is atomic. A file
    that does not load cleanly (by ``schema``: the app's, whose settings it may hold) is
    never touched: ``ConfigError`` says why."""
    import tomlkit

    path = path or config_path()
    text = read_config_file(path)
    if text is None:
        text = template(schema)
    # Raises on any problem: never overwrite a broken file.
    parse_config_text(text, path, schema)
    doc = tomlkit.parse(text)
    new_top: dict[str, Any] = {}
    for key, value in changes.items():
        setting = schema.by_key.get(key)
        if setting is not None:
            value = check_value(setting, value, path.parent)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        head, _, name = key.partition(".")
        container: Any = doc.get(head, {}) if name else doc
        key = name or head
        present = key in container
        if value is None or value == []:
            if present:
                del container[key]
        elif not present and setting is not None and value == _plain_default(setting):
            # The built-in default already: not pinned in the file.
            continue
        elif not present and not name:
            # Placed by hand below: tomlkit would put it under a table's comment.
            new_top[key] = value
        elif not present or _plain(container[key]) != value:
            if name and head not in doc:
                doc[head] = container = tomlkit.table()
            container[key] = value
    new_text = tomlkit.dumps(doc)
    for key, value in new_top.items():
        new_text = insert_top_level(new_text, key, value)
    parse_config_text(new_text, path, schema)
    if new_text != text or not path.exists():
        _write_atomic(path, new_text)
    return path


def _plain_default(setting: Setting) -> Any:
    default = setting.default
    return list(default) if isinstance(default, tuple) else default


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


def save_params(
    params: SamplingParams, path: Path | None = None, *, schema: Schema = SCHEMA
) -> Path:
    """Make ``params`` the defaults (the ``[params]`` table): values the file has are
    updated (unset ones removed), others are added where they differ from the built-in
    defaults."""
    changes: dict[str, Any] = {f"params.{name}": getattr(params, name) for name in PARAM_SPECS}
    changes["params.stop"] = list(params.stop) or None
    changes["params.thinking"] = params.thinking
    return update_config(changes, path, schema=schema)


def _write_atomic(path: Path, text: str) -> None:
    # A dotfiles checkout: write through the link, keep it a link.
    if path.is_symlink():
        path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else None
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ConfigError(
            f"could not save the config file {path}: {exc.strerror or exc}."
        ) from None


def write_template(path: Path | None = None, schema: Schema = SCHEMA) -> bool:
    """Create the config file from ``template()`` unless it exists; True when created."""
    path = path or config_path()
    if path.exists():
        return False
    _write_atomic(path, template(schema))
    return True
