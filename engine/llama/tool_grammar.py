"""Tool calls that always parse: a GBNF grammar for one family's call syntax
(engine/turns/tool_formats.py) with each tool's arguments constrained by its JSON schema, and
the grammar sampler for a ``tool_choice``, as llama-server does it:

* ``none`` (or no tools): no grammar; the tools are not offered either;
* ``auto``: a *lazy* grammar (``llama_sampler_init_grammar_lazy_patterns``): the model writes
  freely until the family's opening marker appears (``<tool_call>``, ``[TOOL_CALLS]``,
  `` to=functions.``, a reply that opens with ``{"name"``), and from there on the call must
  follow the grammar: a union over the tools, each ``{"name": "<that tool>", "arguments":
  <its schema>}`` or the family's own shape. Past the calls, only the end of the reply;
* ``required``: the same grammar from the first token (a call is forced).

Each tool's schema goes through llama-cpp-python's converter (``json_schema_to_gbnf``) on its
own, its rules renamed ``t<i>-…`` so that tools cannot clash; a schema the converter cannot
take, or one past the structured-output bounds (engine/settings/structured.py), constrains
that tool's arguments to any JSON object instead (the tool checks them; nothing is refused).
Keywords the converter ignores (``minimum``, ``pattern`` on properties …: common in MCP
servers' schemas) are left to the tool, unlike ``--format``, which refuses them.

The sampler is engine/llama/grammar_sampling.py's ``GrammarSampler``: the chain draws, the
grammar checks only the token drawn (a lazy grammar awaiting its trigger allows every token
and only watches). It owns the chain and the grammar: ``free()`` frees both.
"""

from __future__ import annotations

import ctypes
import functools
import json
import re
from collections.abc import Sequence
from typing import Any

import llama_cpp as ll
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from ..errors import GenerationError
from ..settings.structured import check_grammar_bounds, too_large
from ..turns.tool_calls import ToolChoice, ToolSpec
from ..turns.tool_formats import HARMONY, HERMES, LLAMA3, MISTRAL, ToolFormat
from .grammar_sampling import ChainSampler, GrammarSampler, Sampler
from .native import grammar_error

# Tools in one grammar (engine/tools/ bounds a server's list before this).
MAX_TOOLS = 128
_IDENT = re.compile(r"[a-zA-Z0-9-]+")


def trigger_patterns(fmt: ToolFormat, tools: Sequence[ToolSpec]) -> list[str]:
    """The regular expressions (ECMAScript, as llama.cpp's ``std::regex`` reads them) whose match
    in the reply so far starts a lazy grammar; the grammar is given the text from the match (or
    from its first group) on, the rest of the token that completed it included.

    That text must fit the grammar: llama.cpp throws where it does not, through its C API, and
    the process aborts. So each pattern matches only at the end of the reply so far (``$``), and
    only the opening marker followed by a beginning of what the grammar takes next (whitespace,
    ``{"name": "``, a prefix of a tool's name): a token that runs past that (an unknown tool's
    name) does not trigger, and that call goes unconstrained (the recogniser still finds it;
    its arguments may not parse) instead of aborting."""
    names = _alternatives(
        [
            json.dumps(t.name, ensure_ascii=False)[1:-1] if fmt.family != HARMONY else t.name
            for t in tools[:MAX_TOOLS]
        ]
    )
    ws = "[ \\t\\n]{0,8}"
    # What follows the brace: {"name": "NAME…
    key = [ws, '"name"', ws, ":", ws, '"', names]
    if fmt.family == HERMES:
        return ["<tool_call>" + _prefix_of([ws, "{", *key]) + "$"]
    if fmt.family == MISTRAL:
        if fmt.args_marker:
            return ["\\[TOOL_CALLS\\]" + _prefix_of([names]) + "$"]
        return ["\\[TOOL_CALLS\\]" + _prefix_of([ws, "[", ws, "{", *key]) + "$"]
    if fmt.family == LLAMA3:
        # The call is the whole reply: only at its start.
        return ["^[ \\t\\n]*(?:<\\|python_tag\\|>)?[ \\t\\n]*(\\{" + _prefix_of(key) + ")$"]
    return [" to=functions\\." + _prefix_of([names]) + "$"]


def _escape(text: str) -> str:
    """``text`` as an ECMAScript regex literal (only syntax characters escaped: an escaped
    letter, digit or ``_`` means something else there)."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}/" else c for c in text)


def _prefix_of(items: list[str]) -> str:
    """A regex matching any beginning of ``items`` in turn, the empty one included: each item a
    literal (matched a character at a time) or a ready-made piece (starting with ``[`` or
    ``(?:``: whitespace, the names' alternation), which is whole or absent. No capturing
    group: llama.cpp starts the grammar at the first group that matched."""
    out = ""
    for item in reversed(items):
        if item.startswith(("[", "(?:")) and len(item) > 1:
            out = f"(?:{item}{out})?"
        else:
            for c in reversed(item):
                out = f"(?:{_escape(c)}{out})?"
    return out


def _alternatives(names: list[str]) -> str:
    """A regex for any beginning of any of ``names`` (a piece for :func:`_prefix_of`)."""
    return "(?:" + "|".join(_prefix_of([n]) for n in names if n) + ")"


def tool_gbnf(fmt: ToolFormat, tools: Sequence[ToolSpec], lazy: bool) -> str:
    """The grammar (root ``root``) for ``fmt``'s calls to ``tools``; ``lazy``: it starts at the
    trigger (:func:`trigger_patterns`) rather than at the reply's first token."""
    if not tools:
        raise ValueError("no tools to call")
    lines: list[str] = []
    alternatives: list[str] = []
    for i, tool in enumerate(tools[:MAX_TOOLS]):
        args = _arguments_rules(tool, f"t{i}-", lines)
        name = json.dumps(tool.name, ensure_ascii=False)
        if fmt.family == HARMONY:
            alternatives.append(f"{_lit(tool.name)} header {args}")
        elif fmt.family == MISTRAL and fmt.args_marker:
            alternatives.append(f'{_lit(tool.name)} "[ARGS]" {args}')
        else:
            key = "parameters" if fmt.family == LLAMA3 else "arguments"
            alternatives.append(f'{_lit(name)} ws "," ws {_lit(json.dumps(key))} ws ":" ws {args}')
    lines.append("call ::= " + " | ".join(f"( {a} )" for a in alternatives))
    lines.append("ws ::= [ \\t\\n]{0,8}")
    more = max(0, fmt.max_calls - 1)
    obj = 'obj ::= "{" ws "\\"name\\"" ws ":" ws call ws "}"'
    if fmt.family == HERMES:
        lines += [
            f"root ::= tc ( ws tc ){{0,{more}}} ws",
            'tc ::= "<tool_call>" ws obj ws "</tool_call>"',
            obj,
        ]
    elif fmt.family == LLAMA3:
        lines += ['root ::= "<|python_tag|>"? ws obj ws', obj]
    elif fmt.family == MISTRAL and fmt.args_marker:
        lines += [f'root ::= ( "[TOOL_CALLS]" call ){{1,{fmt.max_calls}}} ws']
    elif fmt.family == MISTRAL:
        lines += [
            f'root ::= "[TOOL_CALLS]" ws "[" ws item ( ws "," ws item ){{0,{more}}} ws "]" ws',
            'item ::= "{" ws "\\"name\\"" ws ":" ws call ( ws "," ws "\\"id\\"" ws ":" ws "\\"" '
            '[a-zA-Z0-9]{9} "\\"" )? ws "}"',
        ]
    else:
        # Harmony: " to=functions.NAME" then the rest of the header, then the arguments.
        lines += [
            'tocall ::= " to=functions." call',
            'header ::= ( "<|channel|>" ( "commentary" | "analysis" ) )? '
            '( " "? "<|constrain|>"? "json" )? "<|message|>"',
            'free ::= ( [^<] | "<" [^|] )*',
        ]
        lines.append(
            "root ::= tocall"
            if lazy
            else 'root ::= ( "<|channel|>analysis<|message|>" free "<|end|><|start|>assistant" )? '
            '( "<|channel|>commentary" )? tocall'
        )
    gbnf = "\n".join(lines)
    check_grammar_bounds(gbnf)
    return gbnf


def tool_sampler(
    chain: Any, vocab: Any, fmt: ToolFormat | None, tools: Sequence[ToolSpec], choice: ToolChoice
) -> Sampler:
    """The sampler a reply that may call ``tools`` draws with: ``chain`` alone for ``none``
    (or no tools, or no format), else ``chain`` with the tool grammar, lazy for ``auto``, from
    the first token for ``required``. Takes ownership of ``chain`` (freed when the grammar is
    refused, with a ``GenerationError`` naming why)."""
    if choice == "none" or not tools or fmt is None:
        return ChainSampler(chain)
    lazy = choice == "auto"
    try:
        gbnf = tool_gbnf(fmt, tools, lazy)
    except Exception as exc:  # noqa: BLE001 - a bound, or a schema the converter chokes on
        ll.llama_sampler_free(chain)
        raise GenerationError(
            f"the tools' grammar cannot be built ({' '.join(str(exc).split())[:200]})."
        ) from None
    reason = grammar_error(gbnf)
    grammar = None
    if not reason:
        if lazy:
            patterns = [p.encode("utf-8") for p in trigger_patterns(fmt, tools)]
            words = (ctypes.c_char_p * len(patterns))(*patterns)
            no_tokens = (ll.llama_token * 1)()
            grammar = ll.llama_sampler_init_grammar_lazy_patterns(
                vocab, gbnf.encode("utf-8"), b"root", words, len(patterns), no_tokens, 0
            )
        else:
            grammar = ll.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if not grammar:
        ll.llama_sampler_free(chain)
        raise GenerationError(
            f"llama.cpp rejects the tools' grammar: {reason or 'it does not parse'}."
        )
    return GrammarSampler(chain, grammar, ll.llama_vocab_n_tokens(vocab))


def marker_tokens(vocab: Any, fmt: ToolFormat) -> frozenset[int]:
    """The tokens that are one of ``fmt``'s markers whole (``[TOOL_CALLS]``, ``<|python_tag|>``:
    control tokens, which ``llama_token_to_piece`` renders as nothing unless ``special``): the
    decode loop renders these with ``special=True`` so the recogniser sees the markers, as the
    grammar does (llama.cpp matches a grammar against special pieces)."""
    found: set[int] = set()
    buf = (ll.llama_token * 4)()
    for marker in fmt.markers:
        data = marker.encode("utf-8")
        if ll.llama_tokenize(vocab, data, len(data), buf, 4, False, True) == 1:
            found.add(int(buf[0]))
    return frozenset(found)


def _arguments_rules(tool: ToolSpec, prefix: str, lines: list[str]) -> str:
    """Add the rules for ``tool``'s arguments (renamed with ``prefix``) to ``lines``; the name
    of their root rule."""
    try:
        key = json.dumps(tool.parameters, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        # Parameters that are not JSON: any object.
        key = "null"
    lines.extend(_prefixed(_schema_gbnf(key), prefix))
    return f"{prefix}root"


# The same tools are offered reply after reply.
@functools.lru_cache(maxsize=256)
def _schema_gbnf(key: str) -> str:
    schema = json.loads(key)
    if (
        not isinstance(schema, dict)
        or schema.get("type", "object") != "object"
        or too_large(schema)
    ):
        # Any JSON object.
        return JSON_GBNF

    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
        check_grammar_bounds(gbnf)
    except Exception:  # noqa: BLE001 - the converter asserts and raises on what it cannot express
        return JSON_GBNF
    if grammar_error(gbnf):
        return JSON_GBNF
    return gbnf


def _prefixed(gbnf: str, prefix: str) -> list[str]:
    """``gbnf``'s rules with every rule name (defined and referenced) prefixed; literals,
    character classes and repetition counts are left alone."""
    rules: dict[str, str] = {}
    last = ""
    # A rule may go on over several lines.
    for line in gbnf.splitlines():
        head = line.split("::=", 1)
        if len(head) == 2 and _IDENT.fullmatch(head[0].strip()):
            last = head[0].strip()
            rules[last] = head[1]
        elif last:
            rules[last] += "\n" + line
    names = set(rules)
    out = []
    for name, body in rules.items():
        parts: list[str] = []
        i, n = 0, len(body)
        while i < n:
            c = body[i]
            if c in '"[':
                close = '"' if c == '"' else "]"
                j = i + 1
                while j < n and body[j] != close:
                    j += 2 if body[j] == "\\" else 1
                parts.append(body[i : j + 1])
                i = j + 1
            elif c == "#":
                # A comment, to the end of its line.
                j = body.find("\n", i)
                i = n if j < 0 else j
            elif c == "\n":
                parts.append(" ")
                i += 1
            elif c == "{":
                j = body.find("}", i)
                j = n - 1 if j < 0 else j
                parts.append(body[i : j + 1])
                i = j + 1
            else:
                m = _IDENT.match(body, i)
                if m:
                    word = m.group(0)
                    parts.append(prefix + word if word in names else word)
                    i = m.end()
                else:
                    parts.append(c)
                    i += 1
        out.append(f"{prefix}{name} ::= {' '.join(''.join(parts).split())}")
    return out


def _lit(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'
