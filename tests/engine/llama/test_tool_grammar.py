"""The tool-call grammar (engine/llama/tool_grammar.py): llama.cpp's parser takes it for every
family and tool_choice; with the real starter model and the official Qwen 2.5 template,
``required`` makes the reply a call whose arguments parse and match the tool's schema."""

from __future__ import annotations

import ctypes
import dataclasses
import json
from pathlib import Path

import llama_cpp as ll
import pytest

from vibechat.engine.llama.grammar_sampling import ChainSampler, GrammarSampler
from vibechat.engine.llama.native import ensure_llama_initialised, grammar_error
from vibechat.engine.llama.tool_grammar import _prefixed, tool_gbnf, tool_sampler, trigger_patterns
from vibechat.engine.turns.backend import ChatMessage
from vibechat.engine.turns.chat_template import ChatTemplate
from vibechat.engine.turns.tool_calls import ToolSpec
from vibechat.engine.turns.tool_formats import tool_format

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
WEATHER = ToolSpec(
    "get_weather",
    "The weather forecast for a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
)
# An MCP-style schema with keywords the converter ignores, and one it cannot take at all.
LOOSE = ToolSpec(
    "search",
    "",
    {"type": "object", "properties": {"q": {"type": "string", "minLength": 1, "maximum": 3}}},
)
ODD = ToolSpec(
    "odd", "", {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}
)
SOURCES = {
    "hermes": "<tool_call>",
    "llama3": "<|python_tag|>",
    "mistral": "[TOOL_CALLS]",
    "mistral-args": "[TOOL_CALLS] [ARGS]",
    "harmony": "<|channel|><|message|>functions.",
}


@pytest.mark.parametrize("source", sorted(SOURCES.values()))
@pytest.mark.parametrize("lazy", [True, False])
def test_llama_cpp_parses_the_grammar_of_every_family(source, lazy):
    ensure_llama_initialised()
    fmt = tool_format(source)
    assert fmt is not None
    gbnf = tool_gbnf(fmt, [WEATHER, LOOSE, ODD], lazy)
    assert grammar_error(gbnf) is None
    assert "get_weather" in gbnf and "search" in gbnf and "odd" in gbnf
    assert trigger_patterns(fmt, [WEATHER, LOOSE, ODD])


@pytest.mark.parametrize(
    ("source", "fires", "holds"),
    [
        (
            "<tool_call>",
            [
                "Sure <tool_call>",
                "<tool_call>\n",
                '<tool_call>\n{"na',
                '<tool_call>{"name": "get_w',
            ],
            [
                "<tool_call>.",
                '<tool_call>{"name": "zzz',
                "<tool_call",
                '<tool_call>{"name": "get_weather"',
                "Sure",
            ],
        ),
        (
            "<|python_tag|>",
            ["{", ' {"name": "get', '<|python_tag|>{"', "\n{"],
            ['Hi {"name"', "{x", '{"city"', '{"name": "nope'],
        ),
        (
            "[TOOL_CALLS]",
            ["[TOOL_CALLS]", '[TOOL_CALLS][{"name": "se', "x [TOOL_CALLS] ["],
            ["[TOOL_CALLS]x"],
        ),
        (
            "[TOOL_CALLS] [ARGS]",
            ["[TOOL_CALLS]", "[TOOL_CALLS]get"],
            ["[TOOL_CALLS]{", "[TOOL_CALLS]get_weather["],
        ),
        (
            "<|channel|><|message|>functions.",
            ["<|channel|>commentary to=functions.", " to=functions.sea"],
            [" to=functions.zz", " to=functions", " to=functions.get_weather<|channel|>"],
        ),
    ],
)
def test_a_lazy_grammar_starts_only_where_what_it_is_given_fits_it(source, fires, holds):
    """llama.cpp gives the grammar the text from the trigger's match (or first group) to the end,
    the rest of the token that completed it included, and aborts the process when that does not
    fit: a trigger matches only the opening marker and a beginning of what the grammar takes."""
    import re

    fmt = tool_format(source)
    assert fmt is not None
    (pattern,) = trigger_patterns(fmt, [WEATHER, LOOSE])
    regex = re.compile(pattern)  # the constructs used read the same in ECMAScript (std::regex)
    marker = {
        "hermes": "<tool_call>",
        "llama3": "{",
        "mistral": "[TOOL_CALLS]",
        "harmony": " to=functions.",
    }
    for text in fires:
        found = regex.search(text)
        assert found, text
        start = next(
            (found.start(i) for i in range(1, (regex.groups or 0) + 1) if found.group(i)),
            found.start(),
        )
        assert text[start:].startswith(marker[fmt.family]), text
    for text in holds:
        assert not regex.search(text), text


def test_each_tools_rules_keep_to_themselves():
    rules = _prefixed(
        'root ::= "{" space x "}"\nx ::= [a-z]{1,3} "x" # a comment\nspace ::= " "?', "t7-"
    )
    assert rules == [
        't7-root ::= "{" t7-space t7-x "}"',
        't7-x ::= [a-z]{1,3} "x"',
        't7-space ::= " "?',
    ]


@pytest.fixture(scope="module")
def vocab(starter_path):
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(starter_path).encode(), params)
    assert model
    yield ll.llama_model_get_vocab(model)
    ll.llama_model_free(model)


def greedy():
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    return chain


@pytest.mark.model
@pytest.mark.parametrize("source", sorted(SOURCES.values()))
def test_the_sampler_for_each_choice(vocab, source):
    fmt = tool_format(source)
    none = tool_sampler(greedy(), vocab, fmt, [WEATHER], "none")
    assert isinstance(none, ChainSampler)
    none.free()
    for choice in ("auto", "required"):
        sampler = tool_sampler(greedy(), vocab, fmt, [WEATHER], choice)
        assert isinstance(sampler, GrammarSampler) and sampler.grammar
        sampler.free()
        assert sampler.grammar is None and sampler.chain is None


@pytest.mark.model
def test_required_makes_the_starter_write_a_call_that_parses(starter_path):
    """The starter is a tiny base model: what it says is not judged, only that the grammar
    makes its call well-formed and the recogniser finds it."""
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    fmt = tool_format(source)
    assert fmt is not None and fmt.family == "hermes"
    fmt = dataclasses.replace(fmt, max_calls=1)  # one call, then the grammar ends the reply
    prompt = ChatTemplate("gguf", source).render(
        [ChatMessage("user", "What will the weather be in Paris for the next 3 days?")],
        tools=[WEATHER],
    )
    assert "get_weather" in prompt

    ensure_llama_initialised()
    mparams = ll.llama_model_default_params()
    mparams.use_extra_bufts = False  # no CPU repacking: runs on every CPU (see NOTES.md, AMX)
    model = ll.llama_model_load_from_file(str(starter_path).encode(), mparams)
    assert model
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = 1024
    cparams.n_threads = cparams.n_threads_batch = (
        1  # no spinning threads fighting other work for 2 cores
    )
    ctx = ll.llama_init_from_model(model, cparams)
    vocab = ll.llama_model_get_vocab(model)
    sampler = tool_sampler(greedy(), vocab, fmt, [WEATHER], "required")
    try:
        data = prompt.encode()
        tokens = (ll.llama_token * 1024)()
        n = ll.llama_tokenize(vocab, data, len(data), tokens, 1024, True, True)
        assert 0 < n < 900
        assert ll.llama_decode(ctx, ll.llama_batch_get_one(tokens, n)) == 0
        recogniser = fmt.recogniser()
        passed, one, buf = [], (ll.llama_token * 1)(), ctypes.create_string_buffer(256)
        raw = b""
        for _ in range(80):
            token = sampler.sample(ctx, -1)
            if ll.llama_vocab_is_eog(vocab, token):
                break
            size = ll.llama_token_to_piece(vocab, token, buf, 256, 0, True)
            raw += buf.raw[:size]
            passed.append(recogniser.feed(buf.raw[:size].decode("utf-8", "replace")))
            one[0] = token
            assert ll.llama_decode(ctx, ll.llama_batch_get_one(one, 1)) == 0
        else:
            pytest.fail(f"no end within 80 tokens: {raw[:300]!r}")
        rest, calls = recogniser.finish()
    finally:
        sampler.free()
        ll.llama_free(ctx)
        ll.llama_model_free(model)
    assert raw.decode().startswith("<tool_call>")
    assert "".join(passed) + rest == ""  # nothing but the call
    assert len(calls) == 1 and calls[0].name == "get_weather"
    arguments = calls[0].parsed_arguments()
    assert set(arguments) == {"city", "days"}
    assert isinstance(arguments["city"], str) and type(arguments["days"]) is int
    assert json.loads(calls[0].arguments) == arguments


def tokens_of(vocab, text: str) -> list[int]:
    data = text.encode()
    buf = (ll.llama_token * 64)()
    n = ll.llama_tokenize(vocab, data, len(data), buf, 64, False, False)
    assert n > 0
    return list(buf[:n])


def piece(vocab, token: int) -> str:
    buf = ctypes.create_string_buffer(64)
    n = ll.llama_token_to_piece(vocab, token, buf, 64, 0, True)
    return buf.raw[:n].decode("utf-8", "replace")


def favouring(vocab, token: int):
    import numpy as np

    logits = np.full(ll.llama_vocab_n_tokens(vocab), -10.0, dtype=np.float32)
    logits[token] = 5.0
    return logits


@pytest.mark.model
@pytest.mark.parametrize(
    ("source", "before", "marker", "next_fits"),
    [
        (
            "<tool_call>",
            "Sure, let me look that up.\n",
            "<tool_call>",
            lambda p: p.strip() == "" or p.lstrip()[:1] == "{",
        ),
        ("<|python_tag|>", "", "{", lambda p: p.strip() == "" or p.lstrip()[:1] == '"'),
        (
            "[TOOL_CALLS]",
            "Let me see. ",
            "[TOOL_CALLS]",
            lambda p: p.strip() == "" or p.lstrip()[:1] == "[",
        ),
        (
            "<|channel|><|message|>functions.",
            "<|channel|>commentary",
            " to=functions.",
            lambda p: "get_weather".startswith(p),
        ),
    ],
)
def test_auto_lets_the_model_write_freely_until_the_marker_then_holds_the_call_to_the_grammar(
    vocab, source, before, marker, next_fits
):
    sampler = tool_sampler(greedy(), vocab, tool_format(source), [WEATHER], "auto")
    assert isinstance(sampler, GrammarSampler)
    try:
        sure = tokens_of(vocab, "Sure")[0]
        for token in tokens_of(vocab, before) if before else []:  # before the marker: anything
            assert sampler.sample_logits(favouring(vocab, token)) == token
        assert sampler.resampled == 0
        for token in tokens_of(vocab, marker):
            assert sampler.sample_logits(favouring(vocab, token)) == token
        # Inside the call now: prose is refused, and what comes instead fits a call.
        got = sampler.sample_logits(favouring(vocab, sure))
        assert got != sure and sampler.resampled == 1
        assert next_fits(piece(vocab, got)), piece(vocab, got)
    finally:
        sampler.free()


def test_the_markers_that_are_whole_tokens_are_known(vocab, monkeypatch):
    """A marker that is one token is found (the decode loop renders it as text); one spelled
    in several tokens (the starter has no tool markers of its own) is text already."""
    from vibechat.engine.llama.tool_grammar import marker_tokens
    from vibechat.engine.turns import tool_formats

    fmt = tool_format("<tool_call>")
    assert fmt is not None and marker_tokens(vocab, fmt) == frozenset()
    monkeypatch.setitem(tool_formats._MARKERS, "hermes", ("<start_of_turn>", "<tool_call>"))
    assert marker_tokens(vocab, fmt) == frozenset(tokens_of_special(vocab, "<start_of_turn>"))


def tokens_of_special(vocab, text: str) -> list[int]:
    data = text.encode()
    buf = (ll.llama_token * 8)()
    n = ll.llama_tokenize(vocab, data, len(data), buf, 8, False, True)
    assert n == 1
    return list(buf[:n])
