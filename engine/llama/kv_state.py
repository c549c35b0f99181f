"""Sequence 0's KV state in and out of a llama.cpp context, for the KV snapshots
(engine/llama/kv_snapshots.py keeps them; engine/llama/kv_cache.py decides when): the key a
context's snapshots are valid under, taking a state, restoring one."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp as ll

from .kv_files import Snapshot, clear, snapshot_folder
from .kv_snapshots import SnapshotKey, SnapshotStore

log = logging.getLogger("vibechat.kv_snapshots")

# The one sequence the backend uses.
SEQ = 0


def snapshot_key(
    model_path: Path, cparams: Any, kv_type: str, flash_attn: bool | None, n_gpu_layers: int
) -> SnapshotKey:
    """What a state of this context is valid under: the model file, and every context
    parameter that changes the state's layout or meaning (see ``SnapshotKey``)."""
    return SnapshotKey.for_model(
        model_path,
        n_ctx=int(cparams.n_ctx),
        type_k=kv_type,
        type_v=kv_type,
        flash_attn=flash_attn,
        swa_full=bool(cparams.swa_full),
        n_seq_max=int(cparams.n_seq_max),
        kv_unified=bool(cparams.kv_unified),
        offload_kqv=bool(cparams.offload_kqv),
        n_gpu_layers=n_gpu_layers,
        llama_cpp_version=str(getattr(ll, "__version__", "")),
    )


def restorable(model: Any) -> Callable[[int, int], bool] | None:
    """Whether a state of n tokens, restored, can be continued after its first k (None: always).
    llama.cpp writes only the window's cells of a sliding-window layer (those the next token
    sees), so a state longer than the window continues from its end or one token before; a
    recurrent state cannot be cut."""
    if ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model):
        return lambda n, k: k == n
    n_swa = int(ll.llama_model_n_swa(model))
    if n_swa <= 0:
        return None
    return lambda n, k: max(0, n - n_swa) <= max(0, k - n_swa + 1)


def trim_allowed(memory: Any, model: Any, keep: int) -> bool:
    """Whether the cache can be continued at position ``keep`` with what it holds: a sliding
    window of n_swa needs the cells from ``keep - n_swa + 1`` on (a restored state lacks the
    older ones; a cache evaluated here holds them all: ``swa_full``)."""
    n_swa = int(ll.llama_model_n_swa(model))
    if n_swa <= 0 or keep <= 0:
        return True
    pos_min = int(ll.llama_memory_seq_pos_min(memory, SEQ))
    return pos_min <= max(0, keep - n_swa + 1)


def make_store(
    mib: int,
    model: Any,
    model_path: Path,
    cparams: Any,
    kv_type: str,
    flash_attn: bool | None,
    n_gpu_layers: int,
) -> SnapshotStore | None:
    """The KV snapshots of this model and context, up to ``mib`` MiB on disk; None when the
    setting turns them off (0: the files left from before go too, a cache and never the user's
    data) or the model file has no identity to key them by."""
    if not mib:
        clear_off()
        return None
    try:
        key = snapshot_key(model_path, cparams, kv_type, flash_attn, n_gpu_layers)
    except OSError as exc:
        # The model file vanished since it loaded.
        log.warning("KV snapshots are off: %s", exc)
        return None
    store = SnapshotStore(key, mib << 20, restorable=restorable(model))
    # A bound lowered since the last start holds from now on.
    store.prune()
    return store


def clear_off() -> None:
    """``kv_snapshot_cache_mib = 0`` at the engine's start: the snapshot files (and the folder,
    once empty) are deleted, as a bound of 0 bytes says; what cannot be is one log line."""
    folder = snapshot_folder()
    done = clear(folder)
    if done.files:
        log.info("KV snapshots are off: %d deleted (%d bytes)", done.files, done.bytes)
    for name, why in done.failed[:3]:
        log.warning("KV snapshot %s could not be deleted: %s", name, why)
    try:
        folder.rmdir()
    except OSError:
        # Not there, or not empty (what could not be deleted).
        pass


def take_state(ctx: Any) -> Any | None:
    """Sequence 0's state as a ctypes byte array (None when llama.cpp gives none)."""
    size = int(ll.llama_state_seq_get_size(ctx, SEQ))
    if size <= 0:
        return None
    buf = (ctypes.c_uint8 * size)()
    got = int(ll.llama_state_seq_get_data(ctx, buf, size, SEQ))
    if got != size:
        log.warning("KV snapshot not taken: llama.cpp wrote %d of %d bytes", got, size)
        return None
    return buf


def restore_state(ctx: Any, memory: Any, snap: Snapshot) -> bool:
    """Replace the KV cache by ``snap``'s state (the cache is cleared first). False when
    llama.cpp refuses it (the cache is then empty: the caller evaluates everything)."""
    ll.llama_memory_clear(memory, True)
    data, size = snap.data, snap.size
    # a ctypes array as taken, or a bytearray read from a file (no copy)
    buf: Any = data if isinstance(data, ctypes.Array) else (ctypes.c_uint8 * size).from_buffer(data)
    got = int(ll.llama_state_seq_set_data(ctx, buf, size, SEQ))
    if got != size:
        log.warning(
            "KV snapshot of %d tokens not used: llama.cpp read %d of its %d bytes; "
            "evaluating the prompt",
            snap.n_tokens,
            got,
            size,
        )
        ll.llama_memory_clear(memory, True)
        return False
    return True
