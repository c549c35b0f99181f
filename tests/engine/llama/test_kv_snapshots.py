"""The KV snapshot store (engine/llama/kv_snapshots.py) with small fake payloads: matching,
the disk format's checks, the bound, the modes, the fallbacks; and ``vibechat history cache``.
The real model's restores are in test_kv_snapshots_model.py."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import read_only_dir
from vibechat.engine.llama import kv_files as kf
from vibechat.engine.llama import kv_snapshots as ks
from vibechat.engine.llama.kv_snapshots import SnapshotKey, SnapshotStore

KEY = SnapshotKey(
    model_path="/m.gguf",
    model_size=10,
    model_mtime_ns=1,
    n_ctx=4096,
    type_k="f16",
    type_v="f16",
    flash_attn=True,
    swa_full=True,
    n_seq_max=1,
    kv_unified=False,
    offload_kqv=True,
    n_gpu_layers=0,
    llama_cpp_version="0.3.36",
)


@pytest.fixture(autouse=True)
def few_tokens(monkeypatch):
    monkeypatch.setattr(ks, "MIN_TOKENS", 4)


def store(folder: Path, key: SnapshotKey = KEY, mib: int = 64, **kw) -> SnapshotStore:
    return SnapshotStore(key, mib << 20, folder=lambda: folder, **kw)


def payload(n: int, seed: int = 1) -> bytearray:
    return bytearray((i * seed) % 251 for i in range(n))


def kept(
    folder: Path, tokens: list[int], data: bytearray, key: SnapshotKey = KEY, mib: int = 64
) -> None:
    """``tokens`` kept by a store of its own (another process, as far as memory goes), on disk."""
    s = store(folder, key, mib)
    s.keep(tokens, data)
    s.close()


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*" + kf.SUFFIX))


def test_a_new_store_finds_the_longest_common_prefix_on_disk_and_restores_its_bytes(tmp_path):
    folder = tmp_path / "snaps"
    kept(folder, [1, 2, 3, 4, 5, 6], payload(1000, 3))
    kept(folder, [1, 2, 3, 9, 9, 9, 9, 9], payload(500, 5))
    s = store(folder)
    match = s.best([1, 2, 3, 4, 5, 6, 7, 8])
    assert match is not None and (match.source, match.common) == ("disk", 6)
    snap = s.load(match)
    assert (
        snap is not None
        and bytes(snap.data) == bytes(payload(1000, 3))
        and snap.tokens_list() == [1, 2, 3, 4, 5, 6]
    )
    assert s.best([1, 2, 3, 9, 9, 1]).common == 5
    assert (
        s.best([1, 2, 3, 4, 5, 6], at_most=5).common == 5
    )  # capped: the last prompt token is evaluated
    assert s.best([7, 7]) is None
    # loaded once, it is in memory now: a tie goes to memory
    assert s.best([1, 2, 3, 4, 5, 6, 7]).source == "memory"
    # the folder is private, the files too
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files(folder))


def test_one_conversation_leaves_one_file(tmp_path):
    folder = tmp_path / "snaps"
    s = store(folder)
    s.keep([1, 2, 3, 4], payload(100))
    s.flush()
    s.keep([1, 2, 3, 4, 5, 6], payload(150))  # the next reply of the same conversation
    s.keep([1, 2, 3, 4, 5], payload(120))  # a regenerate: a longer snapshot already has these
    s.close()
    (only,) = files(folder)
    assert kf.read_header(only).tokens == kf.token_bytes([1, 2, 3, 4, 5, 6])
    assert len(s._memory) == 0  # closed: memory dropped


def test_the_disk_bound_drops_the_least_recently_used_first(tmp_path):
    folder = tmp_path / "snaps"
    size = 300 << 10
    for first in (10, 20, 30):  # three conversations of ~300 KiB under a 1 MiB bound
        kept(folder, [first, 1, 2, 3], payload(size, first), mib=1)
        kept(folder, [first, 1, 2, 3], payload(size, first), mib=1)  # (the same again: one file)
    assert len(files(folder)) == 3
    old = {kf.read_header(p).tokens[:4]: p for p in files(folder)}
    now = os.stat(folder).st_mtime
    for i, first in enumerate((10, 20, 30)):  # 20 used last but one, 10 least recently
        os.utime(old[kf.token_bytes([first])], (now - 100 + i * 10, now - 100 + i * 10))
    s = store(folder, mib=1)
    assert s.load(s.best([20, 1, 2, 3, 4])) is not None  # a use makes it recent
    kept(folder, [40, 1, 2, 3], payload(size, 40), mib=1)
    left = {kf.tokens_of(kf.read_header(p).tokens)[0] for p in files(folder)}
    assert left == {20, 30, 40}  # 10, the least recently used, went first
    assert sum(p.stat().st_size for p in files(folder)) <= 1 << 20


def test_a_snapshot_over_the_bound_is_not_written_and_zero_turns_snapshots_off(tmp_path, caplog):
    folder = tmp_path / "snaps"
    with caplog.at_level(logging.INFO, "vibechat.kv_snapshots"):
        kept(folder, [1, 2, 3, 4], payload(2 << 20), mib=1)
    assert not files(folder) and "not written" in caplog.text
    off = SnapshotStore(KEY, 0, folder=lambda: folder)
    off.keep([1, 2, 3, 4], payload(10))
    off.close()
    assert off.best([1, 2, 3, 4]) is None and not folder.exists() or not files(folder)


def test_below_the_minimum_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(ks, "MIN_TOKENS", 10)
    folder = tmp_path / "snaps"
    kept(folder, [1, 2, 3], payload(10))
    assert not files(folder)


def test_the_memory_bound(tmp_path):
    s = store(tmp_path / "snaps", memory_bytes=250)
    s.keep([1, 1, 1, 1], payload(100))
    s.keep([2, 2, 2, 2], payload(100))
    s.keep([3, 3, 3, 3], payload(100))
    assert [kf.tokens_of(t)[0] for t in s._memory] == [2, 3]
    s.close()


def _stale_key() -> SnapshotKey:
    return dataclasses.replace(KEY, n_ctx=2048)


@pytest.mark.parametrize(
    "damage", ["stale", "corrupt", "truncated", "fifo", "gone", "not-a-snapshot", "unreadable"]
)
def test_a_bad_snapshot_is_never_used_and_says_why(tmp_path, caplog, monkeypatch, damage):
    folder = tmp_path / "snaps"
    tokens = list(range(1, 40))
    kept(folder, tokens, payload(5000))
    (path,) = files(folder)
    key = KEY
    s = store(folder)
    if damage == "stale":
        key = _stale_key()
    elif damage == "corrupt":
        with path.open("r+b") as f:  # a byte of the state flipped
            f.seek(-100, os.SEEK_END)
            byte = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "truncated":
        os.truncate(path, path.stat().st_size - 10)
    elif damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif (
        damage == "gone"
    ):  # found, then deleted (another process cleared the cache) before it is read
        found = s.best(tokens + [1])
        assert found is not None
        s.best = lambda *_args: found  # type: ignore[method-assign]
        path.unlink()
    elif damage == "not-a-snapshot":
        path.write_bytes(b"GGUF" + bytes(100))
    elif damage == "unreadable":
        path.chmod(0)
        if (
            os.geteuid() == 0
        ):  # root reads any file (CI runs as root): its open is refused as a mode 000 one is
            real_open = os.open

            def refused(name, *args, **kwargs):
                if Path(name) == path:
                    raise PermissionError(13, "Permission denied", str(name))
                return real_open(name, *args, **kwargs)

            monkeypatch.setattr(os, "open", refused)
    reader = s if damage == "gone" else store(folder, key)
    with caplog.at_level(logging.INFO, "vibechat.kv_snapshots"):
        match = reader.best(tokens + [1])
        snap = reader.load(match) if match is not None else None
    assert snap is None
    words = {
        "stale": "other settings (n_ctx 4096 (now 2048))",
        "corrupt": "corrupt (checksum)",
        "truncated": "truncated",
        "fifo": "not a regular file",
        "gone": "it is gone",
        "not-a-snapshot": "no vibechat KV snapshot",
        "unreadable": "cannot be opened",
    }[damage]
    assert words in caplog.text
    assert len([r for r in caplog.records if r.name == "vibechat.kv_snapshots"]) == 1


def test_a_fifo_under_the_name_is_replaced_not_written_through(tmp_path):
    folder = tmp_path / "snaps"
    kept(folder, [1, 2, 3, 4], payload(100))
    (path,) = files(folder)
    path.unlink()
    os.mkfifo(path)
    kept(folder, [1, 2, 3, 4], payload(100))  # would block forever writing into the FIFO
    assert path.is_file() and kf.read_header(path).tokens == kf.token_bytes([1, 2, 3, 4])


def test_a_read_only_or_blocked_cache_folder_says_so_once_and_goes_on(tmp_path, caplog):
    with read_only_dir(tmp_path / "ro") as ro:
        s = store(ro / "snaps")
        with caplog.at_level(logging.WARNING, "vibechat.kv_snapshots"):
            s.keep([1, 2, 3, 4], payload(100))
            s.keep([5, 6, 7, 8], payload(100))
            s.flush()
        assert caplog.text.count("are not written") == 1
        assert s.best([1, 2, 3, 4]) is not None  # memory still serves this process
        s.close()
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    s = store(blocked / "snaps")
    with caplog.at_level(logging.WARNING, "vibechat.kv_snapshots"):
        s.keep([1, 2, 3, 4], payload(100))
        s.close()
    assert "are not written" in caplog.text


def test_the_index_reads_headers_only_and_within_its_bounds(tmp_path, monkeypatch):
    folder = tmp_path / "snaps"
    for first in range(5):
        kept(folder, [first, 1, 2, 3], payload(1000, first + 1))
    reads: list[int] = []
    real = kf._read_exact

    def counting(fd: int, n: int) -> bytes:
        reads.append(n)
        return real(fd, n)

    monkeypatch.setattr(kf, "_read_exact", counting)
    monkeypatch.setattr(ks, "MAX_FILES", 3)
    s = store(folder)
    assert len(s._scan()) == 3  # the three most recently used
    assert max(reads) < 1000  # never a payload
    reads.clear()
    s._scan()
    assert not reads  # unchanged files are not read again


def test_history_cache_shows_and_clears(tmp_path, monkeypatch):
    from vibechat.app.commands.cli import cli

    folder = kf.snapshot_folder()
    kept(folder, [1, 2, 3, 4], payload(4096))
    monkeypatch.setenv("VIBECHAT_KV_SNAPSHOT_CACHE_MIB", "512")
    runner = CliRunner()
    shown = runner.invoke(cli, ["history", "cache", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["folder"] == str(folder) and data["files"] == 1 and data["bytes"] > 4096
    assert data["limit_bytes"] == 512 << 20
    text = runner.invoke(cli, ["history", "cache"])
    assert text.exit_code == 0 and "1 file," in text.output and "512 MiB" in text.output
    cleared = runner.invoke(cli, ["history", "cache", "--clear"])
    assert cleared.exit_code == 0 and "Deleted 1 KV snapshot" in cleared.output
    assert not files(folder)
    assert json.loads(runner.invoke(cli, ["history", "cache", "--json"]).output)["files"] == 0


def _rewrite(path: Path, target: Path, tokens: list[int]) -> None:
    """``path``'s snapshot with its tokens swapped for ``tokens`` (as many) and its checksums
    recomputed by hand, written as ``target``: what someone with write access to the folder
    could make of another conversation's file."""
    import struct
    import zlib

    raw = path.read_bytes()
    (hlen,) = struct.unpack("<I", raw[len(kf.MAGIC) : len(kf.MAGIC) + 4])
    at = len(kf.MAGIC) + 4
    header = json.loads(raw[at : at + hlen])
    new_tokens = kf.token_bytes(tokens)
    assert len(new_tokens) == 4 * header["n_tokens"]
    header["tokens_crc32"] = zlib.crc32(new_tokens)
    body = json.dumps(header).encode("utf-8")
    payload = raw[at + hlen + len(new_tokens) :]
    path.unlink()
    target.write_bytes(kf.MAGIC + struct.pack("<I", len(body)) + body + new_tokens + payload)


@pytest.mark.parametrize("renamed", [False, True])
def test_a_snapshot_is_restored_only_for_the_tokens_it_was_taken_for(tmp_path, caplog, renamed):
    """issue 40, point 7: tokens swapped for another conversation's, checksums recomputed: never
    restored (the name's token digest, then the state's binding digest, refuse it)."""
    folder = tmp_path / "snaps"
    mine, theirs = list(range(1, 40)), list(range(100, 139))
    kept(folder, theirs, payload(5000, 7))
    (path,) = files(folder)
    target = folder / kf.file_name(KEY.digest, kf.token_bytes(mine)) if renamed else path
    _rewrite(path, target, mine)
    s = store(folder)
    with caplog.at_level(logging.INFO, "vibechat.kv_snapshots"):
        match = s.best(mine + [1])
        snap = s.load(match) if match is not None else None
    assert snap is None
    assert (
        "not taken for these tokens" if renamed else "not those it was taken for"
    ) in caplog.text


def _sized(folder: Path, count: int, size: int) -> list[Path]:
    """``count`` snapshots of ``size`` bytes, the first least recently used."""
    for first in range(count):
        kept(folder, [first + 10, 1, 2, 3], payload(size, first + 1))
    by_first = {kf.tokens_of(kf.read_header(p).tokens)[0]: p for p in files(folder)}
    now = os.stat(folder).st_mtime
    for first, path in by_first.items():
        os.utime(path, (now - 1000 + first, now - 1000 + first))
    return [by_first[first + 10] for first in range(count)]


def test_lowering_the_bound_prunes_at_once_least_recently_used_first(tmp_path):
    folder = tmp_path / "snaps"
    made = _sized(folder, 3, 600 << 10)  # 1.8 MiB written under 64 MiB
    store(folder, mib=1).prune()  # the next start, with 1 MiB
    assert files(folder) == [made[2]]  # the most recently used stays
    assert sum(p.stat().st_size for p in files(folder)) <= 1 << 20


def test_history_cache_keeps_the_bound_shows_off_plainly_and_a_bad_value_as_the_problem(
    tmp_path, monkeypatch
):
    from vibechat.app.commands.cli import cli

    folder = kf.snapshot_folder()
    made = _sized(folder, 3, 600 << 10)
    runner = CliRunner()
    monkeypatch.setenv("VIBECHAT_KV_SNAPSHOT_CACHE_MIB", "1")
    shown = runner.invoke(cli, ["history", "cache"])
    assert shown.exit_code == 0, shown.output
    assert "1 file, " in shown.output and " of 1 MiB (kv_snapshot_cache_mib)" in shown.output
    assert files(folder) == [made[2]]
    monkeypatch.setenv("VIBECHAT_KV_SNAPSHOT_CACHE_MIB", "0")
    off = runner.invoke(cli, ["history", "cache"])
    assert off.exit_code == 0 and "of off" not in off.output
    assert "off (kv_snapshot_cache_mib = 0): none are taken or used; 1 file, " in off.output
    monkeypatch.setenv("VIBECHAT_KV_SNAPSHOT_CACHE_MIB", "lots")
    bad = runner.invoke(cli, ["history", "cache"])
    assert bad.exit_code == 1 and "Traceback" not in bad.output
    assert len(bad.output.strip().splitlines()) == 1
    assert "VIBECHAT_KV_SNAPSHOT_CACHE_MIB" in bad.output and "lots" in bad.output
    assert "4 GiB" not in bad.output and "4096" not in bad.output  # not the default in its place


def test_history_cache_clear_says_what_it_could_not_delete_and_fails(tmp_path, monkeypatch):
    """As root no mode stops an unlink: a non-empty folder under a snapshot's name does."""
    from vibechat.app.commands.cli import cli

    folder = kf.snapshot_folder()
    kept(folder, [1, 2, 3, 4], payload(4096))
    stuck = folder / ("0" * 16 + "-" + "1" * 24 + kf.SUFFIX)
    stuck.mkdir()
    (stuck / "inside").write_text("x")
    cleared = CliRunner().invoke(cli, ["history", "cache", "--clear"])
    assert cleared.exit_code == 1
    assert "Deleted 1 KV snapshot" in cleared.output
    assert f"could not delete {stuck.name} (" in cleared.output
    assert not [p for p in files(folder) if p.is_file()] and stuck.is_dir()


def test_a_header_nested_too_deeply_is_corrupt_not_a_recursion_error(tmp_path):
    import struct

    path = tmp_path / ("0" * 16 + "-" + "0" * 24 + kf.SUFFIX)
    body = b"[" * 10_000 + b"]" * 5_000  # within the header's 16 KiB
    path.write_bytes(kf.MAGIC + struct.pack("<I", len(body)) + body)
    with pytest.raises(kf.SnapshotError, match="header is corrupt"):
        kf.read_header(path)
