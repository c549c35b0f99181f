"""KV snapshots (issue 27): reopening a long conversation, switching branches, and what taking
snapshots costs, as ratios measured in one run on the bundled starter model.

Everything runs in this process, each "engine" a fresh ``LlamaCppBackend`` (its memory empty:
a restore comes from the snapshot file, as in a new process), snapshots written to a temporary
cache folder. With an 8,192-token context and 2 threads (``--threads``):

* reopen -- a conversation of >= 6,000 tokens (``--conversation-tokens``), saved with its
  snapshot by one engine; a new engine answers one more user message. Time to first token and
  tokens evaluated, with the snapshot against an engine with snapshots off (evaluating it all).
  Target: <= 1/50, and only the new turn evaluated.
* branch -- after that reply, a sibling of the last user message (forked there): tokens
  evaluated against the tokens after the fork, in the same engine (its live cache) and in a
  new engine (the snapshot of the first branch).
* cost -- replies one after another (each a short new turn) with snapshots on and off, in
  alternating rounds: decode tokens/s and the time to first token of each next reply (the
  previous reply's snapshot is written meanwhile, in the background). Target: decode <= 2 %
  slower, the next reply's first token no later.
* size -- a snapshot file of the conversation against the KV cache's memory for those tokens,
  for f16 and q8_0.

    .venv/bin/python bench/bench_snapshots.py [--quick] [--threads 2] [--rounds 3] [--tokens 64]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from _common import (
    add_common_args,
    alternating_rounds,
    calibration,
    describe_machine,
    disturbed_warning,
    quiet_logs,
    with_other_load,
)

N_CTX = 8192
WORDS = (
    "harbour",
    "lantern",
    "meadow",
    "granite",
    "orchard",
    "compass",
    "ember",
    "willow",
    "quarry",
    "saddle",
    "thistle",
    "beacon",
    "cinder",
    "falcon",
    "glacier",
    "hazel",
    "juniper",
    "kestrel",
    "marble",
    "nettle",
)


@dataclass
class Sample:
    mode: str  # "on" or "off"
    round: int
    ttft_ms: float
    decode_tps: float
    other_load: float | None = None


def turn_text(i: int, words: int) -> str:
    return " ".join(
        f"{WORDS[(i * 7 + k * 3) % len(WORDS)]}{'.' if k % 12 == 11 else ''}" for k in range(words)
    )


def conversation(backend, target: int):
    """Alternating user/assistant turns (as a saved chat) of at least ``target`` tokens."""
    from vibechat.engine.turns.backend import ChatMessage

    messages = [ChatMessage("system", "You are a helpful assistant who keeps notes.")]
    i = 0
    while backend.count_tokens(messages) < target:
        i += 1
        messages.append(ChatMessage("user", f"Note {i}: " + turn_text(i, 120)))
        messages.append(ChatMessage("assistant", f"Noted {i}: " + turn_text(i + 50, 140)))
    return messages


def reply(backend, messages, n_tokens: int):
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import GenerationDone

    done = None
    for event in backend.stream_chat(
        messages, SamplingParams(temperature=0, max_tokens=n_tokens, seed=1)
    ):
        if isinstance(event, GenerationDone):
            done = event
    assert done is not None
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, rounds=3, tokens=64)
    parser.add_argument(
        "--conversation-tokens", type=int, default=6000, help="the conversation (default 6000)"
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=20.0,
        help="seconds to wait for a quiet machine before each sample (default 20)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small run: a 1,500-token conversation, 1 round"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.conversation_tokens, args.rounds = 1500, 1
    threads = args.threads or 2

    from vibechat.engine.llama import kv_files
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.models.starter import starter_model_path
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.turns.backend import ChatMessage

    quiet_logs()
    model = starter_model_path()  # (from the usual cache) before the snapshots' folder moves
    snapshots_home = tempfile.mkdtemp(prefix="vibechat-bench-snapshots-")
    atexit.register(
        shutil.rmtree, snapshots_home, ignore_errors=True
    )  # GBs of snapshots, not left behind
    os.environ["VIBECHAT_CACHE_DIR"] = snapshots_home

    def engine(snapshots: bool = True, kv_type: str = "f16") -> LlamaCppBackend:
        backend = LlamaCppBackend(
            LlamaCppOptions(
                model_path=model,
                context_size=N_CTX,
                threads=threads,
                kv_cache_type=kv_type,
                kv_snapshot_cache_mib=8192 if snapshots else 0,
            )
        )
        backend.load()
        return backend

    print(calibration(), file=sys.stderr)
    print(
        f"machine: {describe_machine()}\nmodel: {model}, context {N_CTX}, {threads} threads",
        file=sys.stderr,
    )

    # ------------------------------------------------------------ reopen
    writer = engine()
    saved = conversation(writer, args.conversation_tokens)
    n_saved = writer.prefill(
        saved
    )  # the chat keeps a snapshot of what it evaluated (as after a reply)
    kv_bytes = {"f16": writer.describe().kv_cache_bytes or 0}
    writer.close()
    folder = kv_files.snapshot_folder()
    (snapshot_file,) = folder.glob("*" + kv_files.SUFFIX)
    sizes = {
        "f16": (snapshot_file.stat().st_size, len(kv_files.read_header(snapshot_file).tokens) // 4)
    }
    asked = [*saved, ChatMessage("user", "Which note mentioned the glacier first? Answer briefly.")]

    snapshot_bytes = snapshot_file.read_bytes()
    scratch = engine(snapshots=False)
    engines: dict[str, LlamaCppBackend] = {}

    def reopen(mode: str) -> _Timed:
        """One reopening: from scratch (an engine with snapshots off, its cache emptied), or in a
        new engine from the saved snapshot (put back as it was: a reply replaces it)."""
        if mode == "scratch":
            scratch.reset()
            return with_other_load(lambda: _Timed(reply(scratch, asked, args.tokens), mode))
        kv_files.clear(folder)
        snapshot_file.write_bytes(snapshot_bytes)
        os.chmod(snapshot_file, 0o600)
        if "reopened" in engines:
            engines.pop("reopened").close()
        backend = engines["reopened"] = engine()
        return with_other_load(lambda: _Timed(reply(backend, asked, args.tokens), mode))

    reopens = alternating_rounds(
        args.rounds,
        ("scratch", "snapshot"),
        reopen,
        lambda mode, s: (
            f"reopen {mode:8} first token {s.done.stats.ttft_ms / 1000:7.3f} s  "
            f"evaluated {s.done.stats.prompt_tokens_evaluated:,}"
        ),
        retries=args.retries,
        quiet_wait_s=args.quiet_wait,
    )
    reopened_engine = engines["reopened"]
    cold = next(s for s in reopens if s.mode == "scratch")
    warm = [s for s in reopens if s.mode == "snapshot"][-1]
    c, w = cold.done.stats, warm.done.stats

    def ttft(mode: str) -> float:
        return statistics.median(s.done.stats.ttft_ms for s in reopens if s.mode == mode)

    print(f"\nconversation {n_saved:,} tokens; snapshot {len(snapshot_bytes) / (1 << 20):.1f} MiB")
    print("| reopen (median of rounds) | first token | evaluated | restored |")
    print("|---|---|---|---|")
    print(f"| from scratch | {ttft('scratch') / 1000:.2f} s | {c.prompt_tokens_evaluated:,} | 0 |")
    print(
        f"| from the snapshot, a new engine | {ttft('snapshot') / 1000:.3f} s (restore "
        f"{w.restore_ms:.0f} ms) | "
        f"{w.prompt_tokens_evaluated:,} | {w.restored_tokens:,} |"
    )
    ratio = ttft("snapshot") / ttft("scratch")
    print(
        f"ratio {ratio:.4f} (1/{1 / ratio:.0f}): target <= 1/50 "
        f"{'met' if ratio <= 1 / 50 else 'NOT met'}; "
        f"new turn {w.prompt_tokens - n_saved} tokens, evaluated {w.prompt_tokens_evaluated}"
    )
    if warning := disturbed_warning(reopens):
        print(warning)

    # ------------------------------------------------------------ branch
    sibling = [*saved, ChatMessage("user", "Which note mentioned the falcon last? One line.")]
    n_fork = n_saved  # the fork is at the last user message: everything before it is shared
    branch_one = [*asked, ChatMessage("assistant", warm.done.text)]
    same = reply(reopened_engine, sibling, args.tokens).stats
    reopened_engine.close()  # its snapshots: branch one's reply, then the sibling's
    rows = [("same engine: to the sibling (its cache)", same, n_fork)]
    other = engine()
    onward = [*branch_one, ChatMessage("user", "And the harbour? One line.")]
    rows.append(
        (
            "new engine: branch one continued (snapshot)",
            reply(other, onward, args.tokens).stats,
            n_fork,
        )
    )
    other.close()
    other = engine()
    rows.append(
        ("new engine: to the sibling of branch one", reply(other, asked, args.tokens).stats, n_fork)
    )
    other.close()
    print(
        "\n| branch (forked at the last user message) | prompt | after the fork | "
        "evaluated | restored |"
    )
    print("|---|---|---|---|---|")
    for name, stats, at in rows:
        print(
            f"| {name} | {stats.prompt_tokens:,} | {stats.prompt_tokens - at} | "
            f"{stats.prompt_tokens_evaluated:,} | "
            f"{stats.restored_tokens:,} |"
        )

    # ------------------------------------------------------------ cost
    engines = {"on": engine(), "off": scratch}
    turns = {mode: list(asked) for mode in engines}
    for mode, backend in engines.items():  # each engine holds the conversation in its cache
        first = reply(backend, turns[mode], args.tokens)
        turns[mode] += [ChatMessage("assistant", first.text)]

    def sample(mode: str) -> Sample:
        def run() -> Sample:
            messages = turns[mode] + [ChatMessage("user", f"And note {len(turns[mode])}? Briefly.")]
            done = reply(engines[mode], messages, args.tokens)
            turns[mode][:] = messages + [ChatMessage("assistant", done.text)]
            return Sample(mode, 0, done.stats.ttft_ms, done.stats.decode_tokens_per_s)

        return with_other_load(run)

    samples = alternating_rounds(
        args.rounds * 2,
        ("on", "off"),
        sample,
        lambda mode, s: (
            f"snapshots {mode:3} first token {s.ttft_ms:6.0f} ms  decode {s.decode_tps:5.1f} tok/s"
        ),
        retries=args.retries,
        quiet_wait_s=args.quiet_wait,
    )
    for backend in engines.values():
        backend.close()

    def med(mode: str, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in samples if s.mode == mode)

    print("\n| snapshots | decode tok/s (median) | next reply's first token (median) |")
    print("|---|---|---|")
    for mode in ("off", "on"):
        print(f"| {mode} | {med(mode, 'decode_tps'):.1f} | {med(mode, 'ttft_ms'):.0f} ms |")
    cost = 1 - med("on", "decode_tps") / med("off", "decode_tps")
    print(
        f"decode cost {cost:+.1%} (target <= 2 %); first token on/off "
        f"{med('on', 'ttft_ms') / med('off', 'ttft_ms'):.2f}"
    )
    if warning := disturbed_warning(samples):
        print(warning)

    # ------------------------------------------------------------ size
    print(
        "\n| KV cache | snapshot on disk | KV cache in memory for those tokens | ratio | "
        "whole cache |"
    )
    print("|---|---|---|---|---|")
    kv_files.clear(folder)
    backend = engine(kv_type="q8_0")  # the conversation again, with a q8_0 cache
    backend.prefill(saved)
    kv_bytes["q8_0"] = backend.describe().kv_cache_bytes or 0
    backend.close()
    (path,) = folder.glob("*" + kv_files.SUFFIX)
    sizes["q8_0"] = (path.stat().st_size, len(kv_files.read_header(path).tokens) // 4)
    for kv_type, (size, held) in sizes.items():
        in_memory = kv_bytes[kv_type] * held / N_CTX
        print(
            f"| {kv_type} | {size / (1 << 20):.1f} MiB ({held:,} tokens) | "
            f"{in_memory / (1 << 20):.1f} MiB | "
            f"{size / in_memory:.2f} | {kv_bytes[kv_type] / (1 << 20):.0f} MiB at {N_CTX:,} |"
        )
    kv_files.clear(folder)
    return 0


@dataclass
class _Timed:
    done: Any
    mode: str = ""
    other_load: float | None = None
    round: int = 0


if __name__ == "__main__":
    sys.exit(main())
