"""Prompts files for ``vibechat run --prompts-file``: JSON Lines in, validated requests out.

Each non-blank line is one JSON object: ``prompt`` (required, non-empty text), and
optionally ``system`` (text; ``""`` means no system prompt), ``id`` (text or a whole
number, echoed back with the result) and sampling parameters, named as in
``PARAM_SPECS`` plus ``stop`` (text or a list of texts). Blank lines are skipped;
JSON Lines has no comments, so a ``#`` line is an invalid line like any other.

A bad line becomes a :class:`BatchLineError` carrying its 1-based line number; the
lines after it are read as usual. Pure: no model, no terminal, no I/O of its own.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidParameterError, VibechatError
from ..json_bounds import MAX_JSON_DEPTH, json_depth
from ..settings.params import PARAM_SPECS, SamplingParams
from ..settings.think_switch import check_thinking

PARAM_KEYS = (*PARAM_SPECS, "stop", "thinking")
KEYS = ("prompt", "system", "id", *PARAM_KEYS)
# Keys that belong to the command line, for a better message.
_WHOLE_FILE = {
    "model": "the model is loaded once for the whole file: pass --model",
    "ctx": "the context size is set for the whole file: pass --ctx",
    "context_size": "the context size is set for the whole file: pass --ctx",
    "n_gpu_layers": "GPU layers are set for the whole file: pass --n-gpu-layers",
    "threads": "threads are set for the whole file: pass --threads",
}


class BatchLineError(VibechatError):
    """One line of a prompts file that cannot run; ``str()`` is the reason, without the line."""

    def __init__(self, line: int, message: str, id: str | int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.id = id


@dataclass(frozen=True)
class BatchRequest:
    """One valid line: what to ask, and the parameters it sets (the rest come from the
    command)."""

    line: int
    prompt: str
    # None: the command's system prompt; "": none.
    system: str | None = None
    # None: not given (no "id" in the result).
    id: str | int | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def params(self, base: SamplingParams) -> SamplingParams:
        """``base`` (the command's flags, environment, config) with this line's parameters on
        top."""
        return base.replace(**self.overrides)


BatchItem = BatchRequest | BatchLineError


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {key!r} appears twice")
        data[key] = value
    return data


def _unknown_key(key: str) -> str:
    if key in _WHOLE_FILE:
        return f"unknown key {key!r} ({_WHOLE_FILE[key]})"
    close = difflib.get_close_matches(key.lower().replace("-", "_"), KEYS, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key {key!r}{hint}; known: {', '.join(KEYS)}"


def _param(name: str, value: Any) -> Any:
    if name == "stop":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise InvalidParameterError(
                f"stop must be a string or a list of strings (got {_kind(value)})."
            )
        # Checks the count and that none is empty.
        SamplingParams(stop=tuple(value))
        return tuple(value)
    if name == "thinking":
        return check_thinking(value)
    spec = PARAM_SPECS[name]
    if isinstance(value, bool) or not (value is None or isinstance(value, (int, float))):
        kind = "a whole number" if spec.kind is int else "a number"
        raise InvalidParameterError(
            f"{name} must be {kind} {spec.range_text()} (got {_kind(value)})."
        )
    if value is None and spec.optional:
        return None
    return spec.check(value)


def parse_line(text: str, line: int) -> BatchRequest:
    """The request on line ``line`` (1-based), or :class:`BatchLineError` saying what is wrong."""
    # Checked before the parser recurses: this line fails, not the batch.
    if json_depth(text) > MAX_JSON_DEPTH:
        raise BatchLineError(line, "not a valid request: JSON nested too deeply")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        hint = " (JSON Lines has no comments)" if text.lstrip().startswith(("#", "//")) else ""
        raise BatchLineError(
            line, f"not valid JSON: {exc.msg} (column {exc.colno}){hint}"
        ) from None
    except ValueError as exc:  # a duplicate key
        raise BatchLineError(line, f"not a valid request: {exc}") from None
    if not isinstance(data, dict):
        raise BatchLineError(
            line, f'expected a JSON object like {{"prompt": "..."}}, got {_kind(data)}'
        )

    request_id = data.get("id")
    if "id" in data and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
        raise BatchLineError(
            line, f"id must be a string or a whole number (got {_kind(request_id)})"
        )

    def fail(message: str) -> BatchLineError:
        return BatchLineError(line, message, request_id)

    for key in data:
        if key not in KEYS:
            raise fail(_unknown_key(key))
    if "prompt" not in data:
        raise fail('no "prompt": each line needs {"prompt": "..."}')
    prompt = data["prompt"]
    if not isinstance(prompt, str):
        raise fail(f"prompt must be a string (got {_kind(prompt)})")
    if not prompt.strip():
        raise fail("the prompt is empty")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise fail(f"system must be a string (got {_kind(system)})")
    if "system" in data and system is None:
        raise fail('system must be a string (got null); "" means no system prompt')

    overrides: dict[str, Any] = {}
    for name in PARAM_KEYS:
        if name in data:
            try:
                overrides[name] = _param(name, data[name])
            except InvalidParameterError as exc:
                # JSON says null where a flag says 'none'.
                raise fail(str(exc).rstrip(".").replace("(or 'none')", "(or null)")) from None
    return BatchRequest(line=line, prompt=prompt, system=system, id=request_id, overrides=overrides)


def read_requests(lines: Iterable[bytes | str]) -> Iterator[BatchItem]:
    """Each non-blank line of a prompts file, in order, as a request or the error it makes.
    Lazy, so prompts piped on stdin run as they arrive."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield BatchLineError(number, f"not valid UTF-8 (byte {exc.start + 1})")
                continue
        else:
            text = raw
        if number == 1:
            # A byte-order mark some editors write.
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue
        try:
            yield parse_line(text, number)
        except BatchLineError as exc:
            yield exc
