"""Path completion for "Open a file" (the model picker's path line): a ``Suggester``
for Textual's ``Input`` that completes folders and ``.gguf`` files as a shell would.

What is typed stays as typed (``~/mo`` completes to ``~/models/``, not to the home
folder's full path: an ``Input``'s suggestion must start with its value). Hidden
entries are offered only once a ``.`` is typed; files other than ``.gguf`` never are.
Listing a folder is the user's file system (a network mount can be slow, a folder can
hold a million files): it runs in a thread, reads at most ``MAX_ENTRIES`` entries and
is given up after ``TIME_S`` seconds (no suggestion then).
"""

from __future__ import annotations

import asyncio
import os

from textual.suggester import Suggester

# Folder entries read per suggestion at most.
MAX_ENTRIES = 2000
# A listing that takes longer gives no suggestion.
TIME_S = 0.5


def complete_path(value: str, max_entries: int = MAX_ENTRIES) -> str | None:
    """``value`` completed to a folder (with its ``/``) or a ``.gguf`` file: the longest
    part all matches share, or, when that adds nothing, the first match by name. None:
    no match (or nothing to complete)."""
    if not value or "\x00" in value:
        return None
    if value == "~":
        return "~/"
    cut = max(value.rfind("/"), value.rfind(os.sep))
    folder_text, fragment = value[: cut + 1], value[cut + 1 :]
    folder = os.path.expanduser(folder_text) if folder_text else "."
    matches: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= max_entries:
                    break
                name = entry.name
                if not name.startswith(fragment) or (
                    name.startswith(".") and not fragment.startswith(".")
                ):
                    continue
                try:
                    if entry.is_dir():  # follows a symlink
                        matches.append(name + "/")
                    elif name.lower().endswith(".gguf") and entry.is_file():
                        matches.append(name)
                except OSError:
                    continue
    except (OSError, ValueError):
        return None
    if not matches:
        return None
    matches.sort()
    common = os.path.commonprefix(matches)
    chosen = common if len(common) > len(fragment) else matches[0]
    suggestion = folder_text + chosen
    return suggestion if suggestion != value else None


class GGUFPathSuggester(Suggester):
    """Suggests ``complete_path``'s completion (Right accepts it). Not cached: folders change."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        try:
            return await asyncio.wait_for(asyncio.to_thread(complete_path, value), TIME_S)
        except (asyncio.TimeoutError, OSError):
            return None
