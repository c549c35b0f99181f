"""``vibechat run``: one prompt, the reply streamed to stdout.

Exit codes: 0 success, 1 a user error (one line on stderr), 130 after Ctrl-C
(what was generated stays printed). A closed pipe (``| head``) ends quietly.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import TextIO

from vibechat.engine.backend import Backend, ChatMessage, ContextTrimmed, GenerationDone, TextDelta
from vibechat.engine.errors import VibechatError
from vibechat.engine.params import SamplingParams
from vibechat.engine.sanitize import sanitize


@dataclass
class RunRequest:
    prompt: str
    system: str | None
    params: SamplingParams
    json_output: bool = False
    show_stats: bool = False
    raw: bool = False


def read_prompt(prompt: str | None, stdin: TextIO) -> str:
    """The prompt from ``--prompt``, ``--prompt -`` or piped stdin."""
    if prompt == "-" or (prompt is None and not stdin.isatty()):
        text = stdin.read()
    elif prompt is None:
        raise VibechatError("no prompt: pass --prompt TEXT, or pipe text on stdin (--prompt - reads it).")
    else:
        text = prompt
    if not text.strip():
        raise VibechatError("the prompt is empty: pass some text with --prompt or on stdin.")
    return text


def format_stats(stats, info=None) -> str:
    text = (f"prompt {stats.prompt_tokens} tokens ({stats.prompt_tokens_evaluated} evaluated) "
            f"in {stats.prompt_eval_ms:.0f} ms · {stats.completion_tokens} tokens · "
            f"first token {stats.ttft_ms:.0f} ms · {stats.decode_tokens_per_s:.1f} tokens/s · "
            f"{stats.finish_reason} · seed {stats.seed}")
    if info is not None:
        text += f" · {info.device} · {info.n_threads} threads"
    return text


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so interpreter exit stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def execute(backend: Backend, request: RunRequest, out: TextIO, err: TextIO) -> int:
    clean = (lambda s: s) if request.raw else sanitize
    messages = []
    if request.system:
        messages.append(ChatMessage("system", request.system))
    messages.append(ChatMessage("user", request.prompt))
    info = backend.load()

    parts: list[str] = []
    done: GenerationDone | None = None
    stream = backend.stream_chat(messages, request.params)
    interrupted = False
    try:
        for event in stream:
            if isinstance(event, TextDelta):
                parts.append(event.text)
                if not request.json_output:
                    out.write(clean(event.text))
                    out.flush()
            elif isinstance(event, GenerationDone):
                done = event
            elif isinstance(event, ContextTrimmed):
                err.write(f"vibechat: left out {event.dropped_messages} old messages to fit the context\n")
    except KeyboardInterrupt:
        interrupted = True
        backend.cancel()
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    finally:
        stream.close()

    text = "".join(parts)
    try:
        if request.json_output:
            stats = done.stats if done else None
            params = done.params if done and done.params else request.params
            obj = {
                "text": text if request.raw else sanitize(text),
                "model": info.name,
                "model_path": info.path,
                "params": params.to_dict(),
                "finish_reason": "cancelled" if interrupted or stats is None else stats.finish_reason,
                "stats": _json_stats(stats),
            }
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        elif text and not text.endswith("\n"):
            out.write("\n")
        out.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    if request.show_stats and done is not None:
        err.write(format_stats(done.stats, info) + "\n")
        err.flush()
    return 130 if interrupted else 0


def _json_stats(stats) -> dict[str, object]:
    if stats is None:
        return {"prompt_tokens": 0, "prompt_tokens_evaluated": 0, "completion_tokens": 0,
                "ttft_ms": 0.0, "prompt_eval_ms": 0.0, "decode_tokens_per_s": 0.0}
    data = stats.to_dict()
    keys = ("prompt_tokens", "prompt_tokens_evaluated", "completion_tokens", "ttft_ms",
            "prompt_eval_ms", "decode_ms", "decode_tokens_per_s", "seed", "dropped_messages")
    return {k: data[k] for k in keys}
