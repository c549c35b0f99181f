"""How a local model writes tool calls: which family its chat template speaks, and the
recogniser that finds the calls in its streamed reply.

The families that ship tool templates (llama.cpp keeps official copies under
``models/templates/``; ours are in tests/templates/):

* ``hermes``: Hermes, Qwen 2.5, Qwen 3: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``,
  one block per call, several per reply;
* ``llama3``: Llama 3.1 / 3.2 / 3.3: the reply *is* the call, ``{"name": …, "parameters": {…}}``
  (``<|python_tag|>`` before it at times), one call per reply;
* ``mistral``: Mistral Nemo and its kin: ``[TOOL_CALLS][{"name": …, "arguments": {…}}, …]``, or
  the newer ``[TOOL_CALLS]name[ARGS]{…}`` (a template that writes ``[ARGS]``);
* ``harmony``: gpt-oss: a message addressed to the tool,
  ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}`` (``<|call|>`` ends
  the generation), one call per reply.

A template that speaks none of these gets no tools (:func:`tool_format` returns None).

:class:`ToolCallRecogniser` is fed the reply's text as it streams (``feed`` returns the text to
pass on) and holds back a call from its opening marker on; ``finish`` returns what is still to
pass on and the calls, as :class:`ToolCall`\\ s with made-up ids. A block that turns out not to
be a call (an opening marker in prose, no JSON after it) comes back as text; a call whose JSON
does not parse becomes a call with its raw arguments (whoever runs it tells the model they are
not valid JSON). Bounded: at most ``MAX_CALLS`` calls (more are dropped, ``dropped`` counts
them), each at most ``MAX_CALL_CHARS`` characters (the rest of an oversized call is dropped, and
its arguments then fail to parse), and at most the longest marker less one held back between
pieces. Where it is fed: the tag families (hermes, llama3, mistral) on the *answer* text
(after the thinking splitter: a call inside ``<think>`` is thinking); harmony on the raw
text, *before* the harmony splitter (which drops headers, where harmony names the tool): the
recogniser passes every other message through untouched, headers included.

Nothing here sanitises: calls and text are model output; front ends sanitise what they show.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from ..json_bounds import bounded_loads
from .thinking import partial_suffix
from .tool_calls import MAX_ARGUMENTS_CHARS, ToolCall

# Calls kept from one reply (a grammar allows no more either).
MAX_CALLS = 16
# One call as written: its name, its JSON, its markup.
MAX_CALL_CHARS = MAX_ARGUMENTS_CHARS + 4096
# Whitespace before a llama3 call that is still "the start of the reply".
MAX_LEADING = 256
MAX_HEADER = 256  # characters of a harmony header
# Characters of a tool name taken from a malformed call.
MAX_NAME = 256

HERMES, LLAMA3, MISTRAL, HARMONY = "hermes", "llama3", "mistral", "harmony"
FAMILIES: tuple[str, ...] = (HERMES, LLAMA3, MISTRAL, HARMONY)

# Harmony's markers (engine/turns/harmony.py has the same; kept here so this module stands alone).
_START, _CHANNEL, _MESSAGE, _END, _RETURN, _CALL = (
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
)
_PYTHON_TAG = "<|python_tag|>"

_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.){1,256})"')
_ARGS_KEY = re.compile(r'"(?:arguments|parameters)"\s*:\s*')
_RECIPIENT = re.compile(r"to=functions\.([A-Za-z0-9_.\-]{1,256})")


@dataclass(frozen=True)
class ToolFormat:
    """A family's call syntax: ``family`` (one of ``FAMILIES``), how many calls one reply may
    make (the official templates of llama3 and harmony render one per message), the text that
    opens a call (what a lazy grammar waits for), and ``args_marker`` (Mistral's newer
    ``name[ARGS]{…}`` form)."""

    family: str
    max_calls: int
    openers: tuple[str, ...]
    args_marker: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        """The family's markup: whole tokens in many vocabularies (control tokens, which a
        decode loop renders as nothing unless it asks for special pieces: it must render these
        as text for the recogniser to see them)."""
        return _MARKERS[self.family]

    def recogniser(self, make_id: Callable[[int], str] | None = None) -> ToolCallRecogniser:
        """A fresh recogniser for one reply (``make_id(n)``: the n-th call's id, from 1)."""
        if self.family == HERMES:
            return _MarkedCalls(self, "<tool_call>", "</tool_call>", make_id)
        if self.family == MISTRAL:
            return _MarkedCalls(self, "[TOOL_CALLS]", None, make_id)
        if self.family == LLAMA3:
            return _LeadingCall(self, make_id)
        return _HarmonyCalls(self, make_id)


_MARKERS = {
    HERMES: ("<tool_call>", "</tool_call>"),
    LLAMA3: (_PYTHON_TAG,),
    MISTRAL: ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    HARMONY: (_START, _CHANNEL, _MESSAGE, _END, "<|constrain|>"),
}
_FORMATS = {
    HERMES: ToolFormat(HERMES, MAX_CALLS, ("<tool_call>",)),
    LLAMA3: ToolFormat(LLAMA3, 1, (_PYTHON_TAG, "{")),
    MISTRAL: ToolFormat(MISTRAL, MAX_CALLS, ("[TOOL_CALLS]",)),
    HARMONY: ToolFormat(HARMONY, 1, (" to=functions.",)),
}


def tool_family(template_source: str) -> str | None:
    """The family a chat template's source writes tool calls in, or None (no tools for it)."""
    src = template_source
    if _CHANNEL in src and _MESSAGE in src and "functions." in src:
        return HARMONY
    if "[TOOL_CALLS]" in src:
        return MISTRAL
    if "<tool_call>" in src:
        return HERMES
    if _PYTHON_TAG in src or (
        "<|start_header_id|>" in src and '"parameters"' in src and "tools" in src
    ):
        return LLAMA3
    return None


def tool_format(template_source: str) -> ToolFormat | None:
    """The call syntax of a chat template's family (None: it has no tool support we know)."""
    family = tool_family(template_source)
    if family is None:
        return None
    fmt = _FORMATS[family]
    if family == MISTRAL and "[ARGS]" in template_source:
        return ToolFormat(MISTRAL, MAX_CALLS, fmt.openers, args_marker=True)
    return fmt


def _random_id(n: int) -> str:
    return f"call_{secrets.token_hex(4)}{n}"


class ToolCallRecogniser:
    """Finds one reply's tool calls in its streamed text (see the module doc)."""

    def __init__(self, fmt: ToolFormat, make_id: Callable[[int], str] | None) -> None:
        self.format = fmt
        self.calls: list[ToolCall] = []
        # Calls past the format's bound, left out.
        self.dropped = 0
        self._make_id = make_id or _random_id
        self._held = ""
        self._body: list[str] = []
        self._body_len = 0
        self._in_call = False

    @property
    def in_call(self) -> bool:
        """Whether a call is being written now (its text is held back)."""
        return self._in_call

    def feed(self, text: str) -> str:
        """The text to pass on from ``text`` (the rest is held back)."""
        out: list[str] = []
        if text:
            self._step(self._held + text, out, final=False)
        return "".join(out)

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The end of the reply: the text still to pass on, and the calls found."""
        out: list[str] = []
        held, self._held = self._held, ""
        self._step(held, out, final=True)
        return "".join(out), list(self.calls)

    # ---------------------------------------------------------------- shared parts
    def _start_call(self) -> None:
        self._in_call, self._body, self._body_len = True, [], 0

    def _add_body(self, text: str) -> str:
        """Keep ``text`` as the call's, up to the bound; what did not fit."""
        room = max(0, MAX_CALL_CHARS - self._body_len)
        if room and text:
            self._body.append(text[:room])
            self._body_len += min(len(text), room)
        return text[room:]

    def _take_body(self) -> str:
        body = "".join(self._body)
        self._in_call, self._body, self._body_len = False, [], 0
        return body

    def _new_id(self) -> str:
        return self._make_id(len(self.calls) + 1)

    def _keep(self, call: ToolCall) -> None:
        if len(self.calls) < self.format.max_calls:
            self.calls.append(call)
        else:
            self.dropped += 1

    def _json_call(self, text: str) -> ToolCall | None:
        """A call from ``{"name": …, "arguments"|"parameters": …}``; a malformed one with its
        raw arguments; None when the text is not a call at all."""
        s = text.strip()
        if s.startswith(_PYTHON_TAG):
            s = s[len(_PYTHON_TAG) :].strip()
        value = _loads(s)
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            return self._made(
                value.get("name", ""),
                value.get("arguments", value.get("parameters", {})),
                value.get("id"),
            )
        if not s.startswith("{"):
            return None
        found = _NAME.search(s[: MAX_NAME * 2])
        if found is None:
            return None
        key = _ARGS_KEY.search(s, found.end())
        raw = s[key.end() :].rstrip() if key else ""
        if raw.endswith("}") and raw.count("}") > raw.count("{"):
            # The call object's own brace.
            raw = raw[:-1].rstrip()
        return ToolCall(self._new_id(), _unescape(found.group(1)), raw)

    def _made(self, name: object, arguments: object, given_id: object = None) -> ToolCall:
        args = (
            arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        )
        call_id = (
            given_id
            if isinstance(given_id, str) and given_id.isalnum() and len(given_id) <= 64
            else self._new_id()
        )
        return ToolCall(call_id, str(name)[:MAX_NAME], args)

    def _step(self, text: str, out: list[str], final: bool) -> None:
        raise NotImplementedError


def _loads(text: str) -> object:
    try:
        return bounded_loads(text)
    except ValueError:
        # Not JSON, or nested too deeply (JsonTooDeep).
        return None


def _unescape(name: str) -> str:
    value = _loads(f'"{name}"')
    return value if isinstance(value, str) else name


class _MarkedCalls(ToolCallRecogniser):
    """Calls that open with a marker (hermes ``<tool_call>``, mistral ``[TOOL_CALLS]``) and end
    at a closing marker (hermes), at the next opening marker, or at the end of the reply."""

    def __init__(
        self, fmt: ToolFormat, opener: str, closer: str | None, make_id: Callable[[int], str] | None
    ) -> None:
        super().__init__(fmt, make_id)
        self._opener, self._closer = opener, closer
        self._ends = (opener,) if closer is None else (closer, opener)
        # Whitespace between and after calls is not the answer's.
        self._after_call = False

    def _step(self, text: str, out: list[str], final: bool) -> None:
        self._held = ""
        # Each pass consumes a marker or returns: bounded by the text.
        while True:
            if not self._in_call:
                at = text.find(self._opener)
                if at >= 0:
                    self._pass(text[:at], out)
                    text = text[at + len(self._opener) :]
                    self._start_call()
                    continue
                keep = 0 if final else partial_suffix(text, (self._opener,))
                self._pass(text[: len(text) - keep], out)
                self._held = text[len(text) - keep :]
                return
            hits = [(at, m) for m in self._ends if (at := text.find(m)) >= 0]
            if hits:
                at, marker = min(hits)
                if self._overflow(self._add_body(text[:at]), out):
                    text = text[at:]
                    continue
                self._end_call(out, closed=marker == self._closer)
                text = text[at + len(marker) :] if marker == self._closer else text[at:]
                continue
            keep = 0 if final else partial_suffix(text, self._ends)
            if self._overflow(self._add_body(text[: len(text) - keep]), out):
                text = text[len(text) - keep :]
                continue
            if final:
                if self._in_call:
                    self._end_call(out, closed=False)
                return
            self._held = text[len(text) - keep :]
            return

    def _overflow(self, rest: str, out: list[str]) -> bool:
        """Past the bound: a block not shaped like a call was text all along (passed on, and
        the stream goes on as text); a call's excess is dropped (its arguments will not parse)."""
        if self._body_len < MAX_CALL_CHARS:
            return False
        head = "".join(self._body)[: MAX_NAME * 2].lstrip()
        if head.startswith(("{", "[")) or "[ARGS]" in head:
            return False
        out.append(self._opener + self._take_body() + rest)
        return True

    def _pass(self, text: str, out: list[str]) -> None:
        if self._after_call:
            text = text.lstrip()
            if not text:
                return
            self._after_call = False
        if text:
            out.append(text)

    def _end_call(self, out: list[str], closed: bool) -> None:
        body = self._take_body()
        calls = self._mistral_calls(body) if self._closer is None else _one(self._json_call(body))
        # Not a call: it was text all along.
        if calls is None:
            out.append(self._opener + body + ((self._closer or "") if closed else ""))
            return
        for call in calls:
            self._keep(call)
        self._after_call = True

    def _mistral_calls(self, body: str) -> list[ToolCall] | None:
        s = body.strip()
        if s.startswith("["):
            value = _loads(s)
            if isinstance(value, list):
                items = [
                    v
                    for v in value[: MAX_CALLS + 1]
                    if isinstance(v, dict) and isinstance(v.get("name"), str)
                ]
                if items:
                    return [
                        self._made(
                            v["name"], v.get("arguments", v.get("parameters", {})), v.get("id")
                        )
                        for v in items
                    ]
            inner = s[1:].lstrip()
            call = (
                self._json_call(inner.rstrip().removesuffix("]")) if inner.startswith("{") else None
            )
            return _one(call)
        if "[ARGS]" in s:
            name, _, args = s.partition("[ARGS]")
            name = name.split("[CALL_ID]", 1)[0].strip()
            if name and len(name) <= MAX_NAME:
                return [ToolCall(self._new_id(), name, args.strip())]
        return _one(self._json_call(s))


def _one(call: ToolCall | None) -> list[ToolCall] | None:
    return None if call is None else [call]


_LEAD, _CAPTURE, _PASS = range(3)


class _LeadingCall(ToolCallRecogniser):
    """Llama 3: a call is the whole reply, ``{…}`` or ``<|python_tag|>{…}`` at its start."""

    def __init__(self, fmt: ToolFormat, make_id: Callable[[int], str] | None) -> None:
        super().__init__(fmt, make_id)
        self._state = _LEAD

    def _step(self, text: str, out: list[str], final: bool) -> None:
        self._held = ""
        if self._state == _LEAD:
            stripped = text.lstrip()
            if stripped.startswith(("{", _PYTHON_TAG)):
                self._state = _CAPTURE
                self._start_call()
                self._add_body(stripped)
                text = ""
            elif (
                not final
                and len(text) - len(stripped) <= MAX_LEADING
                and _PYTHON_TAG.startswith(stripped)
            ):
                # Whitespace, maybe the start of the tag: wait.
                self._held = text
                return
            else:
                self._state = _PASS
        if self._state == _CAPTURE:
            self._add_body(text)
            if self._body_len >= MAX_CALL_CHARS and not _NAME.search(
                "".join(self._body)[: MAX_NAME * 2]
            ):
                # Too long to be a call and not shaped like one: text.
                self._state = _PASS
                out.append(self._take_body())
                return
            if final:
                body = self._take_body()
                call = self._json_call(body)
                if call is None:
                    out.append(body)
                else:
                    self._keep(call)
            return
        out.append(text)


_TEXT, _HEADER, _BODY = range(3)
_HARMONY_OPENERS = (_START, _CHANNEL)
_HARMONY_BODY_ENDS = (_END, _RETURN, _CALL, _START, _CHANNEL)


class _HarmonyCalls(ToolCallRecogniser):
    """gpt-oss: a message whose header names ``to=functions.NAME`` is a call, its body the
    arguments; every other message passes through as it came (headers included)."""

    def __init__(self, fmt: ToolFormat, make_id: Callable[[int], str] | None) -> None:
        super().__init__(fmt, make_id)
        self._state = _TEXT
        self._name = ""
        # The generation prompt ends "<|start|>assistant": the reply may open with the
        # recipient (" to=functions.x<|channel|>…"), a header with no opener of its own.
        self._first = True

    def _step(self, text: str, out: list[str], final: bool) -> None:
        self._held = ""
        while text:
            if self._state == _TEXT:
                if self._first and text.lstrip().startswith("to="):
                    self._first, self._state = False, _HEADER
                    continue
                if self._first and not final and "to=".startswith(text.lstrip()):
                    self._held = text
                    return
                self._first = False
                hits = [at for m in _HARMONY_OPENERS if (at := text.find(m)) >= 0]
                if hits:
                    at = min(hits)
                    out.append(text[:at])
                    self._state, text = _HEADER, text[at:]
                    continue
                keep = 0 if final else partial_suffix(text, _HARMONY_OPENERS)
                out.append(text[: len(text) - keep])
                self._held = text[len(text) - keep :]
                return
            if self._state == _HEADER:
                at = text.find(_MESSAGE)
                if 0 <= at <= MAX_HEADER:
                    header = text[:at]
                    found = _RECIPIENT.search(header)
                    # Not a call: the message goes on as it came.
                    if found is None:
                        out.append(text[: at + len(_MESSAGE)])
                        self._state = _TEXT
                    else:
                        self._name, self._state = found.group(1), _BODY
                        self._start_call()
                    text = text[at + len(_MESSAGE) :]
                    continue
                if len(text) > MAX_HEADER + len(_MESSAGE) or final:
                    # No header is this long (or the reply ended in one): text.
                    out.append(text)
                    self._state = _TEXT
                    return
                self._held = text
                return
            # _BODY: a call's arguments, up to the end of its message
            hits2 = [(at, m) for m in _HARMONY_BODY_ENDS if (at := text.find(m)) >= 0]
            if hits2:
                at, marker = min(hits2)
                self._add_body(text[:at])
                self._end_call()
                text = text[at:] if marker in _HARMONY_OPENERS else text[at + len(marker) :]
                continue
            keep = 0 if final else partial_suffix(text, _HARMONY_BODY_ENDS)
            self._add_body(text[: len(text) - keep])
            self._held = text[len(text) - keep :]
            break
        if final and self._state == _BODY:
            self._end_call()

    def _end_call(self) -> None:
        body = self._take_body().strip()
        self._state = _TEXT
        value = _loads(body)
        if isinstance(value, dict):
            body = json.dumps(value, ensure_ascii=False)
        self._keep(ToolCall(self._new_id(), self._name[:MAX_NAME], body))
