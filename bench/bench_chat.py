"""The chat as a user starts it: `vibechat` in a pseudo-terminal (120x40), the bundled
starter model.

Per round, a fresh process:

- first frame: from starting the command until the terminal has received the first
  full frame (the footer's key line, which the first frame draws at the bottom);
- model ready: until the status bar says ``ready`` (the model loaded in its worker
  process and the chat can answer);
- memory: the resident set (VmRSS, /proc) of the chat process itself and, apart, of its
  model worker (``python -m vibechat.engine.llama.worker``), once the model is ready;

then Ctrl+Q. Decode speed and time to first token while the chat renders are in
``bench_tui.py`` (part 2), headless; ``--decode N`` measures them here too, where the chat
writes every frame to a real terminal (this script reads the pty, as a terminal emulator
would, on the same cores): after the model is ready, the prompt is typed and sent, the
chat (``-t 0 -n N``) streams the reply, and its saved stats (the history file) give the
decode tokens/s and the engine's time to first token; ``vibechat run`` with the same prompt
and settings runs right after, in the same round, for the ratio.

    .venv/bin/python bench/bench_chat.py [--rounds 5] [--decode 1000]
    .venv/bin/python bench/bench_chat.py --compare /tmp/before /tmp/after [--rounds 10]

``--compare A B``: two trees of the chat, each a folder holding ``vibechat/{app,engine,themes}``
(e.g. ``git archive COMMIT app engine themes | tar -x -C A/vibechat``), put first on
``PYTHONPATH`` (the engine process inherits it), round by round in ABBA order, so that a shared
host's load falls on both alike; the load average is printed with each round.

Linux only (pty, /proc). Runs with its own empty config and data directories; ``--no-save``
unless ``--save`` or ``--decode`` (then the history is this round's own new file, as on the
first start on a new machine: it is created while the model loads).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from _common import calibration, print_calibration

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


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (its own threads), from
    /proc: on a shared host, less disturbed by other work than the wall-clock figures."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


PROMPT = (
    "Write a long story about a lighthouse keeper and the sea, in many chapters."  # as bench_tui.py
)


def saved_reply_stats(db: Path) -> dict | None:
    """The stats of the chat's last reply once it is saved as finished (None: not yet). Read
    only, not through ``History``: opening one repairs replies left 'streaming' (a crash's),
    and the chat's reply is streaming while this looks."""
    if not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            row = con.execute(
                "SELECT status, stats FROM messages WHERE role = 'assistant' "
                "ORDER BY id DESC LIMIT 1"
            ).fetchone()
    except sqlite3.Error:
        return None
    if row is None or row[0] == "streaming" or not row[1]:
        return None
    return json.loads(row[1])


def drain(fd: int, until, timeout: float) -> bytes:
    """Read the terminal's output (as a terminal would: woken by output, else twice a second to
    check ``until()``) until ``until()`` or ``timeout``."""
    out, deadline = b"", time.perf_counter() + timeout
    while not until() and time.perf_counter() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                out += os.read(fd, 1 << 16)
            except OSError:
                break
    return out


def one_round(
    exe: Path, timeout: float = 60.0, decode: int = 0, save: bool = False
) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="vibechat-bench-chat-"))
    env = dict(
        os.environ,
        TERM="xterm-256color",
        COLUMNS=str(COLS),
        LINES=str(ROWS),
        VIBECHAT_CONFIG_DIR=str(home / "config"),
        VIBECHAT_DATA_DIR=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        VIBECHAT_STATE_DIR=str(home / "state"),
    )
    # With its bytecode cached, as an installed package has it (pip compiles it; the warm-up round
    # writes it here): a PYTHONDONTWRITEBYTECODE=1 in the caller's environment (this host's shells
    # set it) would have every start compile ~90 changed modules from source, ~0.2 s of a first
    # frame.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = (
        [str(exe), "-t", "0", "-n", str(decode)]
        if decode
        else [str(exe)]
        if save
        else [str(exe), "--no-save"]
    )
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the chat
        os.execve(str(exe), argv, env)
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
                marks["frame_cpu"] = cpu_s(pid)
            if "frame" in marks and re.search(rb"\bready\b", screen):
                marks["ready"] = now
        if os.environ.get("BENCH_CHAT_DUMP"):
            sys.stderr.write(screen[-3000:].decode("utf-8", "replace") + "\n")
        result = {
            "first_frame_s": marks.get("frame", float("nan")) - start,
            "model_ready_s": marks.get("ready", float("nan")) - start,
            "chat_rss_mb": rss_mb(pid) or float("nan"),
            "first_frame_cpu_s": marks.get("frame_cpu", float("nan")),
        }
        workers = children(pid)
        result["worker_rss_mb"] = (
            sum(filter(None, (rss_mb(w) for w in workers))) if workers else float("nan")
        )
        if decode and "ready" in marks:
            drain(fd, lambda: False, 1.0)  # as bench_tui: the Markdown warm-up after the load
            os.write(fd, PROMPT.encode())
            drain(fd, lambda: False, 0.2)
            os.write(fd, b"\r")
            stats: dict = {}
            checked = [0.0]

            def saved() -> (
                bool
            ):  # at most twice a second: the lookup costs CPU the model would miss
                if time.perf_counter() - checked[0] >= 0.5:
                    checked[0] = time.perf_counter()
                    stats.update(saved_reply_stats(home / "data" / "history.db") or {})
                return bool(stats)

            drain(fd, saved, 600)
            if stats:
                result["chat_tok_s"], result["chat_ttft_ms"] = (
                    stats["decode_tokens_per_s"],
                    stats["ttft_ms"],
                )
                result["chat_tokens"] = stats["completion_tokens"]
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
    try:
        if decode:
            out = subprocess.run(
                [str(exe), "run", "-p", PROMPT, "-t", "0", "-n", str(decode), "--json"],
                capture_output=True,
                text=True,
                check=True,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            ran = json.loads(out.stdout)["stats"]
            result["run_tok_s"], result["run_ttft_ms"] = ran["decode_tokens_per_s"], ran["ttft_ms"]
            result["ratio"] = result.get("chat_tok_s", float("nan")) / result["run_tok_s"]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return result


def compare(exe: Path, trees: list[str], rounds: int) -> None:
    """Alternate the two trees round by round (ABBA), then print each one's medians."""
    for tree in trees:
        if not (Path(tree) / "vibechat" / "app").is_dir():
            raise SystemExit(f"{tree} holds no vibechat/app: see --compare in this script's help.")
    rows: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    saved = os.environ.get("PYTHONPATH")
    try:
        for tree in trees:  # warm-up: the page cache, and each tree's bytecode written
            os.environ["PYTHONPATH"] = tree
            one_round(exe)
        for r in range(rounds):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                os.environ["PYTHONPATH"] = tree
                x = one_round(exe)
                rows[tree].append(x)
                print(
                    f"  round {r + 1} {tree}: first frame {x['first_frame_s']:.2f} s "
                    f"(chat CPU {x['first_frame_cpu_s']:.2f} s) | model ready "
                    f"{x['model_ready_s']:.2f} s | chat RSS {x['chat_rss_mb']:.0f} MB | load "
                    f"{os.getloadavg()[0]:.1f} | {time.strftime('%H:%M:%S', time.gmtime())} UTC",
                    flush=True,
                )
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    for key, label in (
        ("first_frame_s", "first frame s"),
        ("first_frame_cpu_s", "chat CPU to first frame s"),
        ("model_ready_s", "model ready s"),
        ("chat_rss_mb", "chat RSS MB"),
        ("worker_rss_mb", "worker RSS MB"),
    ):
        for tree in trees:
            values = [row[key] for row in rows[tree]]
            print(
                f"  median {label} {tree}: {statistics.median(values):.2f} "
                f"(range {min(values):.2f}–{max(values):.2f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="alternate two trees of the chat (folders holding vibechat/), ABBA",
    )
    parser.add_argument(
        "--decode",
        type=int,
        default=0,
        metavar="N",
        help="also stream an N-token greedy reply in the terminal, and run "
        "`vibechat run` for the ratio",
    )
    parser.add_argument(
        "--save",
        action="store_true",
        help="with the history on (a new file each round), as users run it",
    )
    args = parser.parse_args()
    targets = print_calibration(
        calibration(), ["first_frame", "model_ready"] + (["ttft_over_run"] if args.decode else [])
    )
    exe = Path(sys.executable).with_name("vibechat")
    if args.compare:
        compare(exe, list(args.compare), args.rounds)
        return
    one_round(
        exe
    )  # warm the page cache (model file, Python modules) and write their bytecode; not counted
    rows = []
    for r in range(args.rounds):
        rows.append(one_round(exe, decode=args.decode, save=args.save))
        x = rows[-1]
        line = (
            f"  round {r + 1}: first frame {x['first_frame_s']:.2f} s | model ready "
            f"{x['model_ready_s']:.2f} s "
            f"| chat RSS {x['chat_rss_mb']:.0f} MB | worker RSS {x['worker_rss_mb']:.0f} MB"
        )
        if args.decode:
            line += (
                f" | in the terminal: chat {x.get('chat_tok_s', float('nan')):.1f} tok/s "
                f"({x.get('chat_tokens', 0)} tokens), TTFT "
                f"{x.get('chat_ttft_ms', float('nan')):.0f} ms; "
                f"run {x['run_tok_s']:.1f} tok/s, TTFT {x['run_ttft_ms']:.0f} ms; ratio "
                f"{x['ratio']:.3f}"
            )
        print(line, flush=True)
    keys = [
        ("first_frame_s", "first frame s"),
        ("model_ready_s", "model ready s"),
        ("chat_rss_mb", "chat process RSS MB"),
        ("worker_rss_mb", "model worker RSS MB"),
    ]
    if args.decode:
        keys += [
            ("chat_tok_s", "chat decode tok/s (in the terminal)"),
            ("run_tok_s", "vibechat run decode tok/s"),
            ("ratio", "decode ratio chat / run, per round (target ≥ 0.97)"),
            ("chat_ttft_ms", "chat TTFT ms (engine)"),
            ("run_ttft_ms", "vibechat run TTFT ms"),
        ]
    for key, label in keys:
        values = [row.get(key, float("nan")) for row in rows]
        print(
            f"  median {label}: {statistics.median(values):.2f} (range "
            f"{min(values):.2f}–{max(values):.2f})"
        )
    verdicts = [
        ("first_frame", "first frame", [row["first_frame_s"] for row in rows]),
        ("model_ready", "model ready", [row["model_ready_s"] for row in rows]),
    ]
    if args.decode:
        verdicts.append(
            (
                "ttft_over_run",
                "chat TTFT minus run's (ms)",
                [row.get("chat_ttft_ms", float("nan")) - row["run_ttft_ms"] for row in rows],
            )
        )
    for key, label, values in verdicts:
        median = statistics.median(values)
        print(f"  {label}: median {median:.2f} | {targets[key].verdict(median)}")


if __name__ == "__main__":
    main()
