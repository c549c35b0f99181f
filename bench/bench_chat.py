"""The chat as a user starts it: `vibechat` in a pseudo-terminal (120x40), the bundled
starter model.

Per round, a fresh process:

- first frame: from starting the command until the terminal has received the first
  full frame (the footer's key line, which the first frame draws at the bottom);
- model ready: until the status bar says ``ready`` (the model loaded in its worker
  process and the chat can answer);
- memory: the resident set (VmRSS, /proc) of the chat process itself and, apart, of its
  model worker (``python -m vibechat.engine.worker``), once the model is ready;

then Ctrl+Q. Decode speed and time to first token while the chat renders are in
``bench_tui.py`` (part 2).

    .venv/bin/python bench/bench_chat.py [--rounds 5]

Linux only (pty, /proc). Runs with its own empty config and data directories, ``--no-save``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import statistics
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

ROWS, COLS = 40, 120
FIRST_FRAME = re.compile(rb"\^p palette")  # the footer: drawn by the first frame
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Za-z0-9]|\x1b[=>]")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def one_round(exe: Path, timeout: float = 60.0) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="vibechat-bench-chat-"))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS),
               VIBECHAT_CONFIG_DIR=str(home / "config"), VIBECHAT_DATA_DIR=str(home / "data"),
               XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the chat
        os.execve(str(exe), [str(exe), "--no-save"], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    screen = b""
    marks: dict[str, float] = {}
    try:
        while "ready" not in marks and time.perf_counter() - start < timeout:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                break
            screen += ANSI.sub(b"", data)
            now = time.perf_counter()
            if "frame" not in marks and FIRST_FRAME.search(screen):
                marks["frame"] = now
            if "frame" in marks and re.search(rb"\bready\b", screen):
                marks["ready"] = now
        if os.environ.get("BENCH_CHAT_DUMP"):
            sys.stderr.write(screen[-3000:].decode("utf-8", "replace") + "\n")
        result = {"first_frame_s": marks.get("frame", float("nan")) - start,
                  "model_ready_s": marks.get("ready", float("nan")) - start,
                  "chat_rss_mb": rss_mb(pid) or float("nan")}
        workers = children(pid)
        result["worker_rss_mb"] = sum(filter(None, (rss_mb(w) for w in workers))) if workers else float("nan")
        os.write(fd, b"\x11")  # Ctrl+Q
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            try:
                if select.select([fd], [], [], 0.1)[0]:
                    os.read(fd, 1 << 16)
            except OSError:
                pass
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("vibechat")
    one_round(exe)  # warm the page cache (model file, Python modules); not counted
    rows = []
    for r in range(args.rounds):
        rows.append(one_round(exe))
        x = rows[-1]
        print(f"  round {r + 1}: first frame {x['first_frame_s']:.2f} s | model ready {x['model_ready_s']:.2f} s "
              f"(target ≤ 1.2) | chat RSS {x['chat_rss_mb']:.0f} MB | worker RSS {x['worker_rss_mb']:.0f} MB",
              flush=True)
    for key, label in (("first_frame_s", "first frame s"), ("model_ready_s", "model ready s"),
                       ("chat_rss_mb", "chat process RSS MB"), ("worker_rss_mb", "model worker RSS MB")):
        values = [row[key] for row in rows]
        print(f"  median {label}: {statistics.median(values):.2f} (range {min(values):.2f}–{max(values):.2f})")


if __name__ == "__main__":
    main()
