"""KV snapshots on the real starter model (issue 27): a conversation reopened in a new engine
process restores its state and evaluates only the new turn, with the same greedy reply as the
process that never stopped; ``vibechat run --continue`` restores in a new process; every bad
snapshot falls back to evaluating the prompt, with a log line."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, collect, loaded_starter, worker_threads
from vibechat.engine.llama import kv_files as kf
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0, max_tokens=24, seed=7)
# ~330 tokens: over MIN_TOKENS (the engine process keeps its own module constant)
STORY = (
    "Here are my notes on the history of Rome, from its founding by Romulus to the fall "
    "of the western "
    "empire, with the kings, the republic, the Punic wars against Carthage, Caesar, "
    "Augustus and the "
    "emperors after him. "
) * 6
TURN1 = [
    ChatMessage("system", "You are a terse assistant."),
    ChatMessage("user", STORY + "Who founded Rome?"),
]


def turn2(first: str) -> list[ChatMessage]:
    return [
        *TURN1,
        ChatMessage("assistant", first),
        ChatMessage("user", "And who defeated Hannibal?"),
    ]


def done_of(backend, messages) -> GenerationDone:
    return collect(backend, messages, GREEDY)[1]


def options(starter_path: Path, **changes) -> LlamaCppOptions:
    return LlamaCppOptions(
        **{
            "model_path": starter_path,
            "context_size": 2048,
            "repack": "off",
            "threads": worker_threads(),
            **changes,
        }
    )


def snapshot_files() -> list[Path]:
    return sorted(kf.snapshot_folder().glob("*" + kf.SUFFIX))


def test_a_new_engine_process_restores_the_conversation_and_replies_as_the_first_would(
    starter_path,
):
    from vibechat.engine.llama.worker import WorkerBackend

    first_process = WorkerBackend(options(starter_path))
    try:
        first = done_of(first_process, TURN1)
        assert first.stats.restored_tokens == 0 and first.text
    finally:
        first_process.close()  # its snapshot is written by now
    (path,) = snapshot_files()
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700

    second_process = WorkerBackend(options(starter_path))
    try:
        n_turn1 = second_process.count_tokens(TURN1)
        reopened = done_of(second_process, turn2(first.text))
    finally:
        second_process.close()
    stats = reopened.stats
    assert stats.restored_tokens >= n_turn1 - 2 and stats.restore_ms > 0
    # only the new turn is evaluated: the reply and its end marker, the user's words, the turn marks
    assert stats.prompt_tokens_evaluated == stats.prompt_tokens - stats.restored_tokens
    assert stats.prompt_tokens_evaluated < 30

    # The same turn continued in one process that never restored (snapshots off): the KV bytes
    # are the same, so greedy decoding gives the same tokens.
    unbroken = WorkerBackend(options(starter_path, kv_snapshot_cache_mib=0))
    try:
        assert done_of(unbroken, TURN1).text == first.text
        continued = done_of(unbroken, turn2(first.text))
    finally:
        unbroken.close()
    assert continued.stats.restored_tokens == 0
    assert continued.stats.prompt_tokens_evaluated == stats.prompt_tokens_evaluated
    assert reopened.text == continued.text


def test_prefill_of_an_opened_conversation_restores(starter_path, caplog):
    """The chat's Ctrl+B → Enter path: prefill a conversation another engine left a snapshot of."""
    with loaded_starter(starter_path, context_size=2048) as writer:
        first = done_of(writer, TURN1)
    history = turn2(first.text)[:-1]  # the conversation as saved: turn one and its reply
    with (
        loaded_starter(starter_path, context_size=2048) as reader,
        caplog.at_level(logging.INFO, "vibechat.llama_cpp"),
    ):
        assert reader.prefill(history) == reader.count_tokens(history)
        assert "prefill: restored" in caplog.text
        done = done_of(reader, turn2(first.text))
    assert (
        done.stats.prompt_tokens_evaluated < 30
    )  # the prefill left the cache holding the conversation


def test_run_continue_restores_in_a_new_process(starter_installed, monkeypatch):
    monkeypatch.setenv("VIBECHAT_CONTEXT_SIZE", "2048")

    def run(*args: str) -> dict:
        out = subprocess.run(
            [str(VIBECHAT_BIN), "run", *args, "-t", "0", "-n", "16", "--json", "--stats"],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, out.stderr
        return {"json": json.loads(out.stdout), "stderr": out.stderr}

    first = run("-p", STORY + "Who founded Rome?")
    assert first["json"]["stats"]["restored_tokens"] == 0
    assert len(snapshot_files()) == 1  # the run left its snapshot behind
    again = run("--continue", "-p", "And who defeated Hannibal?")
    stats = again["json"]["stats"]
    assert stats["restored_tokens"] > 300 and stats["restore_ms"] > 0
    assert (
        stats["prompt_tokens_evaluated"] == stats["prompt_tokens"] - stats["restored_tokens"] < 40
    )
    assert f"restored {stats['restored_tokens']} tokens in" in again["stderr"]


@pytest.fixture(scope="module")
def a_snapshot(
    starter_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[bytes, str, str]:
    """One snapshot file of TURN1's reply (its name and bytes), and the reply."""
    folder = tmp_path_factory.mktemp("snapshot")
    old = os.environ.get("VIBECHAT_CACHE_DIR")
    os.environ["VIBECHAT_CACHE_DIR"] = str(folder)
    try:
        with loaded_starter(starter_path, context_size=2048) as backend:
            first = done_of(backend, TURN1)
    finally:
        if old is None:
            os.environ.pop("VIBECHAT_CACHE_DIR", None)
        else:
            os.environ["VIBECHAT_CACHE_DIR"] = old
    (path,) = (folder / kf.FOLDER).glob("*" + kf.SUFFIX)
    return path.read_bytes(), path.name, first.text


@pytest.mark.parametrize("damage", ["missing", "stale", "corrupt", "truncated", "fifo"])
def test_a_bad_snapshot_falls_back_to_evaluating_the_prompt(
    starter_path, a_snapshot, caplog, damage
):
    data, name, first = a_snapshot
    folder = kf.snapshot_folder()
    folder.mkdir(parents=True, mode=0o700)
    path = folder / name
    context = 2048
    if damage == "stale":  # made for another context size
        path.write_bytes(data)
        context = 1024
    elif damage == "corrupt":
        raw = bytearray(data)
        raw[-1000] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif damage == "truncated":
        path.write_bytes(data[:-4096])
    elif damage == "fifo":
        os.mkfifo(path)
    with (
        loaded_starter(starter_path, context_size=context) as backend,
        caplog.at_level(logging.INFO, "vibechat"),
    ):
        done = done_of(backend, turn2(first))
    assert done.text and done.stats.finish_reason in ("stop", "length")
    assert done.stats.restored_tokens == 0
    assert done.stats.prompt_tokens_evaluated == done.stats.prompt_tokens
    why = {
        "missing": "no KV snapshot shares more of this prompt",
        "stale": "made with other settings (n_ctx 2048",
        "corrupt": "corrupt (checksum)",
        "truncated": "truncated",
        "fifo": "not a regular file",
    }[damage]
    assert why in caplog.text


def test_a_state_llama_cpp_refuses_is_cleared_and_the_prompt_evaluated(
    starter_path, a_snapshot, caplog
):
    """A file whose checks pass but whose state llama.cpp will not read (here: a key that lies
    about the context, as a bug in the key would): set_data's 0 clears the cache, nothing breaks."""
    data, name, first = a_snapshot
    with loaded_starter(starter_path, context_size=2048) as backend:
        store = backend._kv.snapshots
        assert store is not None
        tokens = backend._prompt.tokens(turn2(first))[:400]
        store.keep(tokens, bytearray(b"\x01" * 4096))  # a state of another shape
        with caplog.at_level(logging.INFO, "vibechat"):
            done = done_of(backend, turn2(first))
    assert done.text and done.stats.restored_tokens == 0
    assert done.stats.prompt_tokens_evaluated == done.stats.prompt_tokens
    assert "llama.cpp read 0 of its 4096 bytes" in caplog.text


def test_snapshots_off_leave_nothing(starter_path):
    with loaded_starter(starter_path, context_size=2048, kv_snapshot_cache_mib=0) as backend:
        done_of(backend, TURN1)
    assert not kf.snapshot_folder().exists()


def test_the_key_names_what_makes_a_state_valid(starter_path):
    with loaded_starter(starter_path, context_size=2048) as backend:
        assert backend._kv.snapshots is not None
        key = backend._kv.snapshots.key
    assert (
        key.model_path == str(starter_path.resolve())
        and key.model_size == starter_path.stat().st_size
    )
    assert key.n_ctx == 2048 and key.type_k == key.type_v == "f16" and key.swa_full
    assert key.llama_cpp_version and key.format == kf.FORMAT_VERSION
    assert dataclasses.replace(key, n_ctx=4096).digest != key.digest


def test_a_restored_sliding_window_is_only_continued_from_its_end(starter_path, caplog):
    """The starter's sliding-window layers (512 tokens): a state llama.cpp saves holds only the
    window's cells of those layers, so a restored state longer than the window is continued from
    its end, never cut back to an earlier fork (that would attend to cells it lacks)."""
    long_turn = [
        ChatMessage("system", "You are a terse assistant."),
        ChatMessage("user", STORY * 2 + "Who founded Rome?"),
    ]
    with loaded_starter(starter_path, context_size=2048) as first:
        reply1 = done_of(first, long_turn).text
        branch = [*long_turn, ChatMessage("assistant", reply1)]
        two = [*branch, ChatMessage("user", "And who defeated Hannibal?")]
        reply2 = done_of(first, two).text
        sibling = [*branch, ChatMessage("user", "And who built the Colosseum?")]
        same = done_of(
            first, sibling
        ).stats  # this engine evaluated it all: its cache can be cut anywhere
        assert (
            same.prompt_tokens > 600
            and same.prompt_tokens_evaluated < 30
            and same.restored_tokens == 0
        )
    with (
        loaded_starter(starter_path, context_size=2048) as second,
        caplog.at_level(logging.INFO, "vibechat"),
    ):
        three = [*two, ChatMessage("assistant", reply2), ChatMessage("user", "Thanks.")]
        resumed = done_of(second, three).stats  # branch two continued from its end: restored
        assert resumed.restored_tokens > 600 and resumed.prompt_tokens_evaluated < 30
        caplog.clear()
        switched = done_of(
            second, sibling
        ).stats  # back to the fork: neither the cache nor a snapshot reaches
        assert (
            switched.restored_tokens == 0
            and switched.prompt_tokens_evaluated == switched.prompt_tokens
        )
        assert "sliding-window layers start later" in caplog.text
    with loaded_starter(starter_path, context_size=2048) as third:
        fresh = done_of(third, sibling).stats  # a new engine: every snapshot goes on past the fork
        assert fresh.restored_tokens == 0 and fresh.prompt_tokens_evaluated == fresh.prompt_tokens


def test_a_prefilled_conversation_leaves_a_snapshot_its_next_turn_continues(starter_path):
    """The chat's Ctrl+B → Enter evaluates a saved conversation (prefill): its snapshot ends where
    the next user turn parts from it (before the generation prompt), so a new engine continues it
    even where a restored state cannot be cut back (the starter's sliding window, > 512 tokens)."""
    history = [
        ChatMessage("system", "You are a terse assistant."),
        ChatMessage("user", STORY * 2 + "Who founded Rome?"),
        ChatMessage("assistant", "Romulus."),
    ]
    with loaded_starter(starter_path, context_size=2048) as opener:
        assert opener.prefill(history) == opener.count_tokens(history) > 600
    with loaded_starter(starter_path, context_size=2048) as later:
        done = done_of(later, [*history, ChatMessage("user", "And who defeated Hannibal?")])
    assert done.stats.restored_tokens > 600 and done.stats.prompt_tokens_evaluated < 30


def test_an_engine_started_under_a_lowered_bound_prunes_the_folder_at_once(starter_path):
    """issue 40, point 7: 1.8 MiB of snapshots on disk, the engine starts with
    kv_snapshot_cache_mib = 1: the least recently used go before any reply."""
    folder = kf.snapshot_folder()
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        path = folder / f"{i:016x}-{'0' * 24}{kf.SUFFIX}"
        path.write_bytes(bytes(600 << 10))
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    with loaded_starter(starter_path, context_size=2048, kv_snapshot_cache_mib=1):
        left = snapshot_files()
        assert [p.name[:16] for p in left] == [f"{2:016x}"]  # the most recently used stays
        assert sum(p.stat().st_size for p in left) <= 1 << 20


def _left_from_before(count: int = 2) -> list[Path]:
    """``count`` snapshot files and a temp file a crashed write left, in the real cache folder."""
    folder = kf.snapshot_folder()
    folder.mkdir(parents=True, exist_ok=True)
    made = [folder / f"{i:016x}-{'0' * 24}{kf.SUFFIX}" for i in range(count)]
    for path in made:
        path.write_bytes(bytes(4096))
    (folder / f"{'f' * 16}{kf.SUFFIX}.tmp").write_bytes(b"half")
    return made


def test_an_engine_started_with_snapshots_off_deletes_them_and_writes_none(starter_path):
    """kv_snapshot_cache_mib = 0 means off: the files of that cache (a cache, never the user's
    data) are deleted when the engine starts, the folder with them, and a reply writes none."""
    _left_from_before()
    with loaded_starter(starter_path, context_size=2048, kv_snapshot_cache_mib=0) as backend:
        assert not kf.snapshot_folder().exists()
        done_of(backend, TURN1)  # over MIN_TOKENS: snapshots on would keep this one
    assert not kf.snapshot_folder().exists()


def test_snapshots_off_deletes_them_but_a_prompts_file_run_leaves_them(
    starter_installed, monkeypatch, tmp_path
):
    """A --prompts-file run takes no snapshot of its own and leaves those on disk (the user's
    setting is on); `run` with the setting at 0 deletes them. Real processes, real folder."""
    monkeypatch.setenv("VIBECHAT_CONTEXT_SIZE", "2048")
    made = _left_from_before()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n')

    def run(*args: str, mib: str | None = None) -> None:
        env = {**os.environ, **({"VIBECHAT_KV_SNAPSHOT_CACHE_MIB": mib} if mib else {})}
        out = subprocess.run(
            [str(VIBECHAT_BIN), "run", *args, "-t", "0", "-n", "4", "--no-save"],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        assert out.returncode in (0, 4), out.stderr  # 4: an empty reply (the starter may end so)

    run("--prompts-file", str(prompts))
    assert snapshot_files() == made
    run("-p", "Hi", mib="0")
    assert not kf.snapshot_folder().exists()


def paired_a(backend) -> GenerationDone:
    """Side A's end of a pair answering TURN1 (greedy A, a sampled B)."""
    from vibechat.engine.turns.backend import SideRequest

    a = SideRequest(tuple(TURN1), GREEDY)
    b = SideRequest(tuple(TURN1), GREEDY.replace(temperature=1.0, seed=3))
    done = {}
    for item in backend.stream_pair(a, b):
        if isinstance(item.event, GenerationDone):
            done[item.side] = item.event
    return done["A"]


@pytest.mark.parametrize("where", ["in process", "engine process"])
def test_a_pair_leaves_side_a_s_snapshot_and_reopening_on_a_restores_it(starter_path, where):
    """Two replies at once (engine/llama/pairing.py) leave side A's conversation in the cache,
    kept as a plain reply's snapshot: a new engine continuing on A's reply evaluates only the
    new turn."""
    from vibechat.engine.llama.worker import WorkerBackend

    if where == "in process":
        with loaded_starter(starter_path, context_size=2048) as first:
            side_a = paired_a(first)
    else:
        first_process = WorkerBackend(options(starter_path))
        try:
            side_a = paired_a(first_process)
        finally:
            first_process.close()
    assert len(snapshot_files()) == 1
    second_process = WorkerBackend(options(starter_path))
    try:
        n_turn1 = second_process.count_tokens(TURN1)
        reopened = done_of(second_process, turn2(side_a.text))
    finally:
        second_process.close()
    assert reopened.stats.restored_tokens >= n_turn1 - 2
    assert reopened.stats.prompt_tokens_evaluated < 30
