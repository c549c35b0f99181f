"""What the KV cache of ``LlamaCppBackend`` (engine/llama/llamacpp.py) holds, and how a new
prompt reuses it: the tokens of sequence 0, cut back to their common prefix with the prompt
(prompt_eval.py), or a KV snapshot restored when it shares more (kv_snapshots.py, kv_state.py);
and the state a reply leaves, kept as a snapshot once it is due.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import llama_cpp as ll

from . import kv_snapshots
from .draft_model import DraftModel
from .kv_snapshots import RESTORE_MARGIN, SnapshotStore
from .kv_state import restore_state, take_state, trim_allowed
from .prompt_eval import trim_cache
from .prompt_parts import common_prefix
from .vision import has_images

log = logging.getLogger("vibechat.llama_cpp")


class KVCache:
    """Sequence 0 of a loaded model's context: the tokens it holds (``tokens``: the decode
    loops append what they decode), its KV snapshots (``snapshots``: None when off), and
    whether the state it holds now is worth keeping (``snapshot_due``). The draft model's
    cache (``draft``) is emptied whenever this one is replaced."""

    def __init__(self, ctx: Any, mem: Any, model: Any, snapshots: SnapshotStore | None) -> None:
        self.ctx = ctx
        self.mem = mem
        self.model = model
        self.snapshots = snapshots
        self.draft: DraftModel | None = None
        self.tokens: list[int] = []
        # A reply ended: its state is worth keeping (keep_snapshot()).
        self.snapshot_due = False

    def reset(self) -> None:
        """Empty the cache (and the draft model's) so the next turn evaluates everything."""
        ll.llama_memory_clear(self.mem, True)
        self.tokens = []
        self.snapshot_due = False
        if self.draft is not None:
            self.draft.reset()

    def restore_snapshot(self, tokens: Sequence[int], at_most: int) -> tuple[int, float]:
        """Restore the KV snapshot that shares the most of ``tokens`` (up to ``at_most``) when it
        shares ``RESTORE_MARGIN`` more than the live cache: the tokens it holds, and the restore's
        milliseconds ((0, 0.0): nothing restored, the cache as it was, or emptied when a
        restore failed)."""
        store = self.snapshots
        if store is None:
            return 0, 0.0
        t0 = time.perf_counter()
        live = min(common_prefix(self.tokens, tokens), at_most)
        if live < len(self.tokens) and not trim_allowed(self.mem, self.model, live):
            # The cache cannot be cut back there (a restored sliding window): a snapshot may.
            live = 0
        if at_most - live < RESTORE_MARGIN:
            # The cache has (nearly) all of it: no snapshot can do better.
            return 0, 0.0
        match = store.best(tokens, at_most)
        if match is None or match.common < live + RESTORE_MARGIN:
            if at_most - live >= max(kv_snapshots.MIN_TOKENS, RESTORE_MARGIN):
                # A long evaluation ahead: say why.
                log.info(
                    "no KV snapshot shares more of this prompt than the cache "
                    "(%d of %d tokens%s): evaluating the rest",
                    live,
                    len(tokens),
                    f"; the best shares {match.common}" if match is not None else "",
                )
            return 0, 0.0
        snap = store.load(match)
        if snap is None:
            return 0, 0.0
        if self.draft is not None:
            self.draft.reset()
        if not restore_state(self.ctx, self.mem, snap):
            self.tokens[:] = []
            return 0, 0.0
        self.tokens[:] = snap.tokens_list()
        ms = (time.perf_counter() - t0) * 1000
        log.info(
            "restored %d tokens from a KV snapshot (%s) in %.0f ms",
            match.common,
            match.source,
            ms,
        )
        return match.common, ms

    def trim_to(self, tokens: Sequence[int], at_most: int) -> int:
        """Cut the cache back to its common prefix with ``tokens`` (prompt_eval.py): the tokens
        kept."""
        return trim_cache(self.mem, self.model, self.tokens, tokens, at_most)

    def reuse(self, tokens: Sequence[int], at_most: int) -> tuple[int, int, float]:
        """Make the cache hold as much of ``tokens`` (up to ``at_most``) as it or a snapshot
        can: the tokens kept, of those the ones restored from a snapshot, and the restore's
        milliseconds. Nothing held is due to be kept any more."""
        self.snapshot_due = False
        restored, restore_ms = self.restore_snapshot(tokens, at_most)
        keep = self.trim_to(tokens, at_most)
        return keep, min(restored, keep), restore_ms

    def keep_snapshot(self) -> None:
        """Keep the KV state the last reply (or prefill) left, if it is due: off the reply's
        critical path (after its end went out); the disk write runs in a background thread."""
        store, due, self.snapshot_due = self.snapshots, self.snapshot_due, False
        if not due or store is None or not store.worth(len(self.tokens)):
            return
        if has_images(self.tokens):
            # A snapshot's key does not name the projector that made the image.
            return
        data = take_state(self.ctx)
        if data is not None:
            store.keep(self.tokens, data)

    def close(self) -> None:
        """Keep the snapshot that is due, and let the store's disk writes finish (``vibechat
        run`` leaves its snapshot behind)."""
        if self.snapshots is not None:
            self.keep_snapshot()
            self.snapshots.close()
            self.snapshots = None
