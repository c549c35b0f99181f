"""Conversation history benchmark: start-up with a large history against an empty one.

Builds (once, cached) a history database of N conversations × M messages (default
1,000 × 100: alternating user/assistant turns of 200–800 characters, full-text indexed
by the schema's own triggers), then runs the real app headless, one fresh process per
sample, in alternating rounds against three databases:

- ``empty``: no conversation (the baseline for start-up and for opening the sidebar);
- ``1×M``: one conversation of M messages (the baseline for opening a conversation);
- ``N×M``: the large history.

Each sample measures, from ``app.run_test()``:

- start-up: until the sidebar holds every conversation (``on_history_listed`` done)
  and the first frame after it;
- sidebar: from Ctrl+B until the first frame with the sidebar shown;
- open: from Enter on the newest conversation until its newest messages (at most
  ``OPEN_WINDOW``) are mounted and
  the first frame after it;
- save: with the sidebar shown, a save in the open conversation (already on top)
  and one in the oldest (it moves to the top), each until the next frame;

and which SQL statements ran during start-up (a trace callback on the history's
connection): lazy loading means none reads a message row. Figures are medians over
the rounds and ratios within this run; compare them across runs only as ratios.

Also printed: ``History.conversations()`` and ``History.search()`` on the large
database, and the query plan of the conversation list.

    .venv/bin/python bench/bench_history.py [--conversations 1000] [--messages 100] [--rounds 5]
[--db PATH]"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

SIZE = (120, 40)
TOUCHES_MESSAGES = re.compile(r"\bmessages\b", re.IGNORECASE)  # not messages_fts

# ------------------------------------------------------------------ the database
WORDS = (
    "the a to of and in is it that for you with on as this be are can or by not your have from at "
    "will but if an which do we more use one when so what there all about their how also "
    "each other "
    "some time into than then them these would like way make could been may first two most only "
    "over new just any very after where should through much before right because same well while "
    "value function return file error data example number list string line change default model "
    "memory thread query index table server request response version option problem result config "
    "window screen key test output input cache token context reply prompt message search history"
).split()
TOPICS = (
    "lighthouse keeper sqlite python garden recipe bicycle telescope glacier violin harbour "
    "compiler orchard volcano saxophone lantern meadow typhoon archive falcon quartz"
).split()


def message_text(rng: random.Random, conversation: int, turn: int) -> str:
    """200–800 characters of prose, with the conversation's topic words and a rare word
    that varies, so full-text search has common and rare terms to find."""
    target = rng.randint(200, 800)
    topic = TOPICS[conversation % len(TOPICS)]
    words: list[str] = []
    length = 0
    while length < target:
        sentence = rng.choices(WORDS, k=rng.randint(6, 16))
        sentence.insert(rng.randrange(len(sentence)), topic)
        if rng.random() < 0.05:
            sentence.append(f"zq{rng.randrange(2000)}")  # rare terms: zq0 … zq1999
        text = " ".join(sentence).capitalize() + "."
        words.append(text)
        length += len(text) + 1
    if turn == 0:
        words.insert(0, f"Question {conversation} about the {topic}:")
    return " ".join(words)


def build(path: Path, conversations: int, messages: int, seed: int = 7) -> float:
    """The schema from History (so the full-text triggers are the real ones), then every
    row in one transaction with executemany. Returns the build time in seconds."""
    from vibechat.engine.chat.history import History
    from vibechat.engine.chat.titles import title_from

    path.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    start = time.perf_counter()
    History(path).open().close()
    rng = random.Random(seed)
    base = time.time() - conversations * messages * 60  # one message a minute, oldest first

    def stamp(i: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + i * 60)) + ".000000Z"

    params = json.dumps({"temperature": 0.8})
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    convs, rows = [], []
    for c in range(conversations):
        texts = [message_text(rng, c, t) for t in range(messages)]
        first = stamp(c * messages)
        last = stamp(c * messages + max(messages - 1, 0))
        convs.append(
            (
                c + 1,
                title_from(texts[0]) if texts else "New conversation",
                "Bench 1B",
                "/models/bench.gguf",
                None,
                params,
                first,
                last,
            )
        )
        ids = range(
            c * messages + 1, (c + 1) * messages + 1
        )  # each message follows the one before it
        rows.extend(
            (
                ids[t],
                c + 1,
                ids[t] - 1 if t else None,
                "user" if t % 2 == 0 else "assistant",
                text,
                "complete",
                stamp(c * messages + t),
                stamp(c * messages + t),
            )
            for t, text in enumerate(texts)
        )
    conn.executemany(
        "INSERT INTO conversations(id, title, model, model_path, system, params, created, updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        convs,
    )
    conn.executemany(
        "INSERT INTO messages(id, conversation_id, parent_id, role, content, status, "
        "created, updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - start


def counts(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        return (
            conn.execute("SELECT COUNT(*) FROM conversations").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
        )
    except sqlite3.Error:
        return -1, -1
    finally:
        conn.close()


def ensure(path: Path, conversations: int, messages: int) -> float | None:
    """Build ``path`` unless it already holds exactly that history; the build time, or None
    when the cached file was reused."""
    if path.exists() and counts(path) == (conversations, conversations * messages):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return build(path, conversations, messages)


# ------------------------------------------------------------- one app sample
class InstantBackend:
    """No model: loads at once, replies nothing. Start-up cost is the app's own."""

    name = "bench"

    def __init__(self) -> None:
        from vibechat.engine.turns.backend import ModelInfo

        self.info = ModelInfo(
            name="Bench 1B",
            path="/models/bench.gguf",
            architecture="llama",
            quantization="Q4_K_M",
            trained_context=8192,
            context_size=8192,
            n_layers=16,
            gpu_layers=0,
            gpu_offload_supported=False,
            chat_format="gguf",
            file_size=1,
        )

    def load(self, on_progress=None):
        return self.info

    def describe(self):
        return self.info

    def cancel(self):
        pass

    def reset(self):
        pass

    def prefill(self, messages, thinking="auto"):
        return self.count_tokens(messages)

    def count_tokens(self, messages, thinking="auto"):
        return sum(len(m.content) // 4 for m in messages)

    def close(self):
        pass

    def stream_chat(self, messages, params):
        from vibechat.engine.turns.backend import GenerationDone

        yield GenerationDone("")


async def sample(db: Path, messages: int) -> dict:
    """One app, fresh process: start-up, Ctrl+B, Enter on the newest conversation."""
    from textual import events

    from vibechat.app.tui import create_app
    from vibechat.app.tui.controllers.conversations import Conversations
    from vibechat.engine.chat.history import History
    from vibechat.engine.chat.records import now

    statements: list[str] = []
    connect = sqlite3.connect

    def traced_connect(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    # the history's connection, in this process only
    sqlite3.connect = traced_connect  # type: ignore[assignment]
    marks: dict[str, float] = {}
    listed, loaded = asyncio.Event(), asyncio.Event()
    on_listed, on_loaded = Conversations.listed, Conversations.loaded

    def timed_listed(self, message):
        on_listed(self, message)
        marks["listed"] = time.perf_counter()
        marks["startup_statements"] = len(statements)
        self.host.call_after_refresh(
            lambda: (marks.__setitem__("listed_frame", time.perf_counter()), listed.set())
        )

    async def timed_loaded(self, message):
        await on_loaded(self, message)
        marks["loaded"] = time.perf_counter()
        self.host.call_after_refresh(
            lambda: (marks.__setitem__("loaded_frame", time.perf_counter()), loaded.set())
        )

    Conversations.listed = timed_listed  # type: ignore[method-assign]
    Conversations.loaded = timed_loaded  # type: ignore[method-assign]

    app = create_app(InstantBackend(), blink=False, history=History(db))
    result: dict = {}
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(listed.wait(), 60)
        sidebar = app.sidebar
        result["startup_ms"] = (marks["listed_frame"] - start) * 1000
        result["listed_ms"] = (marks["listed"] - start) * 1000
        result["sidebar_entries"] = sidebar.options.option_count
        startup = statements[: int(marks["startup_statements"])]
        result["startup_statements"] = len(startup)
        result["startup_message_statements"] = [s for s in startup if TOUCHES_MESSAGES.search(s)]
        await app.workers.wait_for_complete()
        await pilot.pause()

        # Ctrl+B, as typed: until the first frame that shows the sidebar.
        start = time.perf_counter()
        app.post_message(events.Key("ctrl+b", None))
        while not sidebar.has_class("-visible"):
            await asyncio.sleep(0)
        await next_frame(app)
        result["sidebar_ms"] = (time.perf_counter() - start) * 1000
        await pilot.pause()

        if result["sidebar_entries"]:
            # Enter on the highlighted (newest) conversation: until its messages are on screen.
            start = time.perf_counter()
            app.post_message(events.Key("enter", None))
            await asyncio.wait_for(loaded.wait(), 120)
            result["open_ms"] = (marks["loaded_frame"] - start) * 1000
            result["open_messages"] = len(app.chat.messages())
            await pilot.pause()

            # A save while the sidebar is shown: the open conversation, already on top, gets
            # a new time; then the oldest one is saved and moves to the top.
            for key, summary in (
                ("save_top_ms", sidebar.summaries[0]),
                ("save_moved_ms", sidebar.summaries[-1]),
            ):
                start = time.perf_counter()
                sidebar.upsert(replace(summary, updated=now()))
                await next_frame(app)
                result[key] = (time.perf_counter() - start) * 1000
                await pilot.pause()
    return result


async def next_frame(app) -> None:
    shown = asyncio.Event()
    app.call_after_refresh(shown.set)
    await shown.wait()


def rows_returned(db: Path, statements: list[str]) -> list[tuple[str, str, int]]:
    """(statement, query plan, rows it returns now) for read statements, on a fresh
    read-only connection: the start-up statements that touched ``messages``."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = []
    for sql in statements:
        if not sql.lstrip().upper().startswith("SELECT"):
            out.append((sql, "(write)", -1))
            continue
        plan = "; ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
        out.append((sql, plan, len(conn.execute(sql).fetchall())))
    conn.close()
    return out


def child(db: Path, messages: int) -> None:
    import logging

    logging.getLogger("vibechat").addHandler(logging.NullHandler())
    logging.getLogger("vibechat").propagate = False
    result = asyncio.run(sample(db, messages))
    result["startup_message_statements"] = rows_returned(db, result["startup_message_statements"])
    print("RESULT " + json.dumps(result))


def run_child(db: Path, messages: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(db), "--messages", str(messages)],
        capture_output=True,
        text=True,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"sample on {db} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


# ------------------------------------------------------------ store queries
def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def contended_ms(fn) -> float:
    """``fn`` timed while another thread spins in Python. sqlite3 lets go of the GIL for
    every row it steps, and a thread that lets go waits up to the switch interval (5 ms)
    to get it back from a busy one: a query's time grows with its row count."""
    busy = threading.Event()
    stop = False

    def spin() -> None:
        busy.set()
        while not stop:
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    busy.wait()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    stop = True
    thread.join()
    return elapsed * 1000


def store_figures(big: Path, empty: Path) -> None:
    from vibechat.engine.chat.history import History

    with History(big) as history, History(empty) as none:
        sql = (
            # as History.conversations()
            "SELECT id, title, model, created, updated FROM conversations "
            "ORDER BY updated DESC, id DESC LIMIT -1 OFFSET 0"
        )
        plan = "; ".join(r[3] for r in history.conn.execute("EXPLAIN QUERY PLAN " + sql))
        print(f"\nHistory.conversations() query plan: {plan}")
        big_ms, empty_ms = median_ms(history.conversations, 21), median_ms(none.conversations, 21)
        print(
            f"History.conversations(): {big_ms:.2f} ms for {history.count():,} conversations, "
            f"{empty_ms:.3f} ms empty (median of 21)"
        )
        print(
            "  the same in a thread while another thread runs Python the whole time "
            "(worst case of the "
            "start-up worker beside a busy UI): "
            f"{contended_ms(history.conversations):,.0f} ms (one sample)"
        )
        print("History.search() on the large database (median of 11):")
        for query in (
            "lighthouse",
            "lighthouse error",
            "zq1234",
            "telesc",
            "error cache thread",
            "nowhere",
        ):
            hits = len(history.search(query))
            ms = median_ms(lambda query=query: history.search(query), 11)
            print(f"  {query!r:24} {ms:7.2f} ms  {hits} hits (limit 50)")


# ---------------------------------------------------------------------- main
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--db",
        type=Path,
        help="the large database (built here unless it already holds "
        "exactly that history); default: cached under the temp dir",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.messages)
        return

    n, m = args.conversations, args.messages
    cache = Path(tempfile.gettempdir()) / "vibechat-bench-history"
    dbs = {
        "empty": cache / "history-empty.db",
        f"1×{m}": cache / f"history-1x{m}.db",
        f"{n}×{m}": args.db or cache / f"history-{n}x{m}.db",
    }
    big_label = f"{n}×{m}"
    for label, (path, (c, k)) in zip(
        dbs, zip(dbs.values(), [(0, 0), (1, m), (n, m)], strict=True), strict=True
    ):
        took = ensure(path, c, k)
        size = path.stat().st_size / 1e6
        if took is None:
            print(f"{label:>10}: {path} (cached, {size:.1f} MB)")
        else:
            print(
                f"{label:>10}: {path} built in {took:.1f} s "
                f"({c * k / max(took, 1e-9):,.0f} messages/s, "
                f"{size:.1f} MB)"
            )

    samples: dict[str, list[dict]] = {label: [] for label in dbs}
    labels = list(dbs)
    print(f"\n{args.rounds} rounds, one fresh process per sample, order rotating each round")
    for r in range(args.rounds):
        order = labels[r % 3 :] + labels[: r % 3]
        line = []
        for label in order:
            s = run_child(dbs[label], m)
            samples[label].append(s)
            line.append(
                f"{label} start-up {s['startup_ms']:.0f} ms, sidebar {s['sidebar_ms']:.0f} ms"
                + (f", open {s['open_ms']:.0f} ms" if "open_ms" in s else "")
            )
        print(f"  round {r + 1}: " + " | ".join(line))

    def med(label: str, key: str) -> float:
        return median([s[key] for s in samples[label] if key in s])

    one = f"1×{m}"
    print(f"\nMedians over {args.rounds} rounds (ms); ratio = {big_label} / baseline, same run")
    print(f"| measure | empty | {one} | {big_label} | ratio |")
    print("|---|---|---|---|---|")
    for key, name, base in (
        ("listed_ms", "start-up: sidebar filled", "empty"),
        ("startup_ms", "start-up: first frame after", "empty"),
        ("sidebar_ms", "Ctrl+B: sidebar on screen", "empty"),
        ("open_ms", f"open a conversation of {m} messages", one),
        ("save_top_ms", "save, sidebar shown: entry on top redrawn", one),
        ("save_moved_ms", "save, sidebar shown: oldest moves to top", one),
    ):
        values = {label: med(label, key) for label in labels}
        cells = " | ".join(
            "—" if values[label] != values[label] else f"{values[label]:.0f}" for label in labels
        )
        print(f"| {name} | {cells} | ×{values[big_label] / values[base]:.2f} (vs {base}) |")

    big = samples[big_label][-1]
    print(
        f"\nLazy loading, {big_label}: sidebar entries {big['sidebar_entries']:,} "
        f"(expected {n:,}); "
        f"{big['startup_statements']} SQL statements during start-up, "
        f"{len(big['startup_message_statements'])} touching the messages table:"
    )
    for sql, plan, rows in big["startup_message_statements"]:
        print(f"  {sql}\n    plan: {plan}; rows it returns: {rows}")
    read = sum(
        max(rows, 0) for s in samples[big_label] for _, _, rows in s["startup_message_statements"]
    )
    print(f"  message rows read during start-up, all rounds: {read}")
    from vibechat.app.tui.controllers.conversations import OPEN_WINDOW

    print(
        f"  opened conversation: {big.get('open_messages', 0)} messages on screen "
        f"(expected {min(m, OPEN_WINDOW)}: the newest; older ones are mounted on request)"
    )
    store_figures(dbs[big_label], dbs["empty"])


if __name__ == "__main__":
    main()
