"""The engine process's crash report (a private text file under the state dir's ``crashes/``)
and the setting to suggest when a crash repeats. Written by the parent (engine/llama/worker.py),
which saw the child end; needs no libllama.

Imports inside functions are deliberate: what a crash report needs (platform, dates, the
settings table) loads only when one is written."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from ..turns.backend import ModelInfo

log = logging.getLogger("vibechat.llama_cpp")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def suggest_setting(options: Any, info: ModelInfo | None, doing: str, rc: int | None) -> str:
    """The setting most likely to avoid a crash that repeats, in a few words (each named by
    its flag, from the config's settings table)."""
    from ..settings.table import SETTINGS_BY_KEY

    def flag(key: str) -> str:
        return SETTINGS_BY_KEY[key].flag or key

    ideas: list[str] = []
    if getattr(options, "repack", "off") != "off":
        ideas.append(f"{flag('repack')} off")
    gpu = info.gpu_layers if info is not None else (options.gpu_layers or 0)
    if gpu:
        ideas.append(f"{flag('gpu_layers')} 0")
    if getattr(options, "speculative", "off") != "off" and not doing.startswith("while loading"):
        ideas.append(f"{flag('speculative')} off")
    if getattr(options, "kv_cache_type", "f16") != "f16":
        ideas.append(f"{flag('kv_cache_type')} f16")
    smaller = f"a smaller {flag('context_size')}"
    ideas.append(smaller)
    # SIGKILL is the OOM killer's signal: memory first.
    if rc is not None and rc == -getattr(signal, "SIGKILL", -1):
        ideas.remove(smaller)
        ideas.insert(0, smaller)
    ideas.append("another model")
    return ", ".join(ideas[:-1]) + " or " + ideas[-1]


def write_crash_report(
    how: str,
    doing: str,
    rc: int | None,
    log_lines: list[str],
    stderr_lines: list[str],
    options: Any,
    info: ModelInfo | None,
) -> Path | None:
    """A text file under the state dir's ``crashes/`` folder; None if it could not be written."""
    import platform
    from datetime import datetime, timezone

    from ..paths import crash_dir

    now = datetime.now(timezone.utc)
    signal_line = (
        f"{signal_name(-rc)} (signal {-rc})" if rc is not None and rc < 0 else f"exit status {rc}"
    )
    try:
        opts = dataclasses.asdict(options)
    except TypeError:
        opts = {"options": repr(options)}
    lines = [
        "vibechat engine crash report",
        f"time: {now.isoformat(timespec='seconds')}",
        f"what: the engine {how} {doing}",
        f"signal: {signal_line}",
        f"vibechat: {_version('vibechat')}",
        f"llama-cpp-python: {_version('llama_cpp_python')}",
        f"python: {platform.python_version()} ({platform.platform()})",
        "options:",
        *(f"  {key} = {value}" for key, value in opts.items()),
    ]
    if info is not None:
        lines += ["model:", *(f"  {key} = {value}" for key, value in info.to_dict().items())]
    lines += [
        f"last {len(log_lines)} llama.cpp log lines (INFO and above):",
        *(f"  {line}" for line in log_lines),
    ]
    lines += [
        f"last {len(stderr_lines)} lines on the engine's stderr:",
        *(f"  {line}" for line in stderr_lines),
    ]
    try:
        folder = crash_dir()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Made earlier, or by an older vibechat, with the umask's mode.
        _private(folder, 0o700)
        path = folder / f"crash-{now:%Y%m%d-%H%M%S}-{os.getpid()}-{time.monotonic_ns() % 10**6}.txt"
        _write_private(path, "\n".join(lines) + "\n")
        return path
    except OSError as exc:
        log.warning("could not write the crash report: %s", exc)
        return None


def _private(path: Path, mode: int) -> None:
    """``path`` readable by its owner only (best effort: a folder of someone else's stays as it
    is)."""
    try:
        if os.name == "posix" and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    except OSError:
        pass


def _write_private(path: Path, text: str) -> None:
    """A new file with mode 0600 from the start (the report holds the user's settings and log
    lines): never briefly readable by others, whatever the umask."""
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_BINARY", 0)
    )
    fd = os.open(path, flags, 0o600)
    try:
        if os.name == "posix":
            # The umask may have taken bits off, never added them: exact.
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out:
            fd = -1
            out.write(text.encode("utf-8"))
    except OSError:
        # A full disk: no half a report left behind.
        path.unlink(missing_ok=True)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"
