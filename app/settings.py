"""Small UI settings that persist across runs (the theme), in a JSON file under the
config dir. Written atomically; a broken file is reported and left untouched."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from vibechat.engine.paths import config_dir

log = logging.getLogger("vibechat.settings")
DEFAULT_THEME = "vibechat-dusk"


@dataclass
class Settings:
    theme: str = DEFAULT_THEME
    problem: str | None = None  # why the file could not be read, if it could not

    @staticmethod
    def path() -> Path:
        return config_dir() / "settings.json"

    @classmethod
    def load(cls) -> "Settings":
        path = cls.path()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            return cls(problem=f"{path} could not be read ({exc}); using defaults and leaving it as it is.")
        theme = data.get("theme") if isinstance(data, dict) else None
        return cls(theme=theme if isinstance(theme, str) and theme else DEFAULT_THEME)

    def save(self) -> None:
        if self.problem:  # never overwrite a file we could not read
            return
        path = self.path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            data = {k: v for k, v in asdict(self).items() if k != "problem"}
            tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not save settings to %s: %s", path, exc)
