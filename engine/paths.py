"""Where vibechat keeps its files. Resolved on each call, never at import time.

platformdirs gives the per-OS defaults; ``VIBECHAT_CONFIG_DIR``,
``VIBECHAT_DATA_DIR``, ``VIBECHAT_CACHE_DIR`` and ``VIBECHAT_STATE_DIR`` override them
(tests point all four at a temporary directory).

The models folder depends on the config file too: ``config.models_dir()`` resolves it.

Imports inside functions are deliberate: platformdirs loads only when a user folder is first
asked for (start-up time).
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "vibechat"


def _dir(env: str, kind: str) -> Path:
    override = os.environ.get(env)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, appauthor=False))


def config_dir() -> Path:
    return _dir("VIBECHAT_CONFIG_DIR", "config")


def data_dir() -> Path:
    return _dir("VIBECHAT_DATA_DIR", "data")


def cache_dir() -> Path:
    return _dir("VIBECHAT_CACHE_DIR", "cache")


def state_dir() -> Path:
    return _dir("VIBECHAT_STATE_DIR", "state")


def crash_dir() -> Path:
    """Where the engine's crash reports go (engine/llama/crash_report.py)."""
    return state_dir() / "crashes"
