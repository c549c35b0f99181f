"""A structured reply (--json-schema, --grammar, /format) is complete, or says it is not
(issue 39, point 5): the grammar decides where it ends (a prompt format's stop strings do not cut
it), ``structured_output: complete`` only for JSON that parses and matches its schema or a grammar
the sampler accepted, and anything else is exit status 3 with one line. On the real starter in
both of its prompt formats, across seeds: only what holds on any CPU is asserted (whatever the
model writes, a reply said to be complete parses and validates)."""

from __future__ import annotations

import json
import threading

import llama_cpp as ll
import numpy as np
import pytest

from jsonschema_lite import errors as schema_errors
from test_cli_run import vibechat

# vocab: the starter's vocabulary, a fixture
from test_grammar_sampling import chain_of, vocab  # noqa: F401
from vibechat.app.commands.run_result import incomplete_line
from vibechat.app.report import structured_state
from vibechat.engine.llama.decoding import Emitter, reply_stops
from vibechat.engine.llama.grammar_sampling import GrammarSampler
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.turns.backend import GenerationStats, ModelInfo
from vibechat.engine.turns.prompt_format import COMPLETION_STOPS

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "occupation": {"type": "string"},
    },
    "required": ["name", "age", "occupation"],
}
# A string of 300 digits is required: the starter writes a digit a token (or a few), so no reply
# of 8 tokens can complete it, whatever it samples on whatever CPU.
DIGITS = {
    "type": "object",
    "properties": {"digits": {"type": "string", "pattern": "^[0-9]{300}$"}},
    "required": ["digits"],
    "additionalProperties": False,
}
SCHEMA = OutputFormat("schema", json.dumps(PERSON), "person.json")
INFO = ModelInfo(
    name="m",
    path="/m.gguf",
    architecture="gemma3",
    quantization="Q4_K_M",
    trained_context=8192,
    context_size=8192,
    n_layers=18,
    gpu_layers=0,
    gpu_offload_supported=False,
    chat_format="completion",
    file_size=1,
    n_threads=2,
    kv_cache_bytes=1,
)


# ------------------------------------------------------------------ judging a reply
def test_a_json_reply_is_complete_only_when_it_parses_and_matches_its_schema():
    assert SCHEMA.judge('{"name": "Ada", "age": 36, "occupation": "engineer"}') == ("complete", "")
    assert SCHEMA.judge('{"name":"a person you can imagine.')[0] == "incomplete"  # cut short
    state, why = SCHEMA.judge('{"name": "Ada", "age": "old"}')
    assert state == "invalid" and ("/age" in why or "occupation" in why), why
    # The grammar accepted it, yet it is no JSON (a raw line break in a string): not cut, not
    # complete.
    assert (
        SCHEMA.judge('{"name": "A\nB", "age": 1, "occupation": "x"}', accepted=True)[0] == "invalid"
    )
    assert (
        OutputFormat("json").judge("[1, 2]")[0] == "invalid"
    )  # JSON, but not the object asked for
    assert OutputFormat("json").judge('{"a": [1, {"b": null}]}')[0] == "complete"
    assert OutputFormat("json").judge("[" * 100_000)[0] == "invalid"  # bounded: never parsed
    grammar = OutputFormat("grammar", 'root ::= "yes" | "no"', "yesno.gbnf")
    assert grammar.judge("yes", accepted=True)[0] == "complete"
    assert (
        grammar.judge("yes")[0] == "incomplete"
    )  # its end was not the grammar's: cannot be told from text


def test_a_reply_that_stopped_mid_json_is_incomplete_and_says_so_in_one_line():
    """What the starter did in its completion frame: the frame's "\\nUser:" ended the reply inside
    a JSON string; finish_reason stop is no proof of a whole reply."""
    params = SamplingParams(seed=1, max_tokens=200, output_format=SCHEMA)
    stopped = GenerationStats(finish_reason="stop", completion_tokens=12)
    text = '{"name":"a person you can imagine.'
    assert structured_state(params, text, stopped) == "incomplete"
    assert incomplete_line(params, stopped, INFO, text) == (
        "the reply ended before the JSON was complete: try again, or another --seed"
    )
    with_stop = SamplingParams(seed=1, stop=("imagine",), output_format=SCHEMA)
    assert incomplete_line(with_stop, stopped, INFO, text).endswith(
        ": remove --stop, or try another --seed"
    )
    mismatch = '{"name": "Ada", "age": "\\u001b[2J", "occupation": "x"}'
    line = incomplete_line(params, stopped, INFO, mismatch)
    assert line.startswith(
        "the reply is not what was asked: its JSON does not match the schema (at /age: "
    )
    assert "\x1b" not in line and "\n" not in line
    whole = '{"name": "Ada", "age": 36, "occupation": "engineer"}'
    assert (
        structured_state(params, whole, stopped) == "complete"
        and incomplete_line(params, stopped, INFO, whole) is None
    )
    grammar = SamplingParams(
        output_format=OutputFormat("grammar", 'root ::= "yes" | "no"', "yesno.gbnf")
    )
    accepted = GenerationStats(finish_reason="stop", grammar_accepted=True)
    assert structured_state(grammar, "yes", accepted) == "complete"
    assert structured_state(grammar, "yes", stopped) == "incomplete"
    assert structured_state(SamplingParams(), "free text", stopped) is None


@pytest.fixture
def eog_is_token_0(monkeypatch):
    """A token table instead of a model: token 0 is end-of-generation."""
    from vibechat.engine.llama import decoding

    monkeypatch.setattr(decoding.ll, "llama_vocab_is_eog", lambda _vocab, token: token == 0)


def test_the_frames_stop_strings_never_end_a_structured_reply(eog_is_token_0):
    """Under an output format only the user's stop strings apply: the grammar decides the end.
    Free text still ends at the completion frame's "\\nUser:"."""
    structured = SamplingParams(
        stop=("STOP",), output_format=OutputFormat("grammar", 'root ::= [^!]* "!"', "g")
    )
    assert reply_stops(structured, COMPLETION_STOPS) == ("STOP",)
    assert reply_stops(SamplingParams(stop=("STOP",)), COMPLETION_STOPS) == (
        "STOP",
        *COMPLETION_STOPS,
    )
    raw = b"Ada said:\nUser: hello!"
    table = {
        i + 1: raw[i : i + 1] for i in range(len(raw))
    }  # one byte a token; token 0 ends the reply

    def emitted(params: SamplingParams) -> str:
        out = Emitter(
            table.__getitem__,
            None,
            frozenset({0}),
            threading.Event(),
            1000,
            reply_stops(params, COMPLETION_STOPS),
            lstrip=True,
        )
        pieces = [p for token in [*table, 0] if not out.done for p in out.emit(token)] + out.tail()
        return "".join(text for _, text in pieces)

    assert emitted(structured) == "Ada said:\nUser: hello!"
    assert emitted(SamplingParams()) == "Ada said:"


def test_only_an_end_of_generation_token_says_the_grammar_accepted_the_reply(eog_is_token_0):
    """llama.cpp's grammar sampler allows end-of-generation only once the grammar is complete; a
    turn token or a stop string ends a reply without its word."""
    fmt = SamplingParams(output_format=OutputFormat("grammar", 'root ::= "yes"', "g"))
    table = {1: b"yes"}

    def accepted(end: int, params: SamplingParams = fmt) -> bool:
        out = Emitter(table.__getitem__, None, frozenset({9}), threading.Event(), 1000, ())
        out.emit(1)
        out.emit(end)
        stats = GenerationStats()
        out.count_into(stats, params)
        return out.done and stats.grammar_accepted

    assert accepted(0) and not accepted(9) and not accepted(0, SamplingParams())


def test_a_schema_string_holds_no_raw_line_break(vocab):  # noqa: F811 - the fixture imported above
    """JSON forbids raw control characters in a string (json.loads and jq refuse them), and a raw
    line break would let a frame's "\\nUser:" into the reply: the schema's grammar rejects it where
    the model prefers it, and takes the model's next choice."""
    grammar = ll.llama_sampler_init_grammar(vocab, SCHEMA.gbnf().encode(), b"root")
    assert grammar
    sampler = GrammarSampler(
        chain_of(ll.llama_sampler_init_greedy()), grammar, ll.llama_vocab_n_tokens(vocab)
    )
    try:
        for token in tokens(
            vocab, '{"name": "Ada'
        ):  # into the string: each token allowed, taken as drawn
            assert sampler.sample_logits(row(vocab, {token: 20.0})) == token
        newline, letter = tokens(vocab, "\n")[0], tokens(vocab, "x")[0]
        assert sampler.sample_logits(row(vocab, {newline: 20.0, letter: 5.0})) == letter
    finally:
        sampler.free()


def tokens(vocab, text: str) -> list[int]:  # noqa: F811 - the fixture's value, passed in
    data = text.encode()
    buf = (ll.llama_token * 64)()
    n = ll.llama_tokenize(vocab, data, len(data), buf, 64, False, False)
    assert n > 0
    return list(buf[:n])


# vocab: the fixture's value, passed in
def row(vocab, logits: dict[int, float]) -> np.ndarray:  # noqa: F811
    out = np.full(ll.llama_vocab_n_tokens(vocab), -10.0, dtype=np.float32)
    for token, value in logits.items():
        out[token] = value
    return out


# ------------------------------------------------------------------ the real starter, both formats
def one_run(fmt_args: tuple[str, ...], *args: str):
    out = vibechat("run", *fmt_args, *args, "--no-save", "--json")
    obj = json.loads(out.stdout)
    return out, obj


SEEDS = range(1, 7)


@pytest.mark.parametrize("prompt_format", ["completion", "gemma"])
def test_a_reply_said_complete_parses_and_validates_on_every_seed(
    starter_installed, tmp_path, prompt_format
):
    """The issue's command on seeds 1-6: whatever the starter writes on this CPU, a reply said to
    be complete parses and matches the schema; one that is not says so in one line, and the run
    exits 3. The six seeds are the lines of one prompts file (one process, one model load, not
    six): each line is a conversation of its own with its own seed, evaluated from an empty
    cache (--no-prefix-cache: the same reply as a run of its own), judged as `run` judges its
    reply, its line on stderr named by its line number (tests/engine/chat/test_batch.py). A
    single run's exit statuses, 0 complete and 3 with one line: the test below, and
    tests/engine/settings/test_structured.py's test_a_complete_structured_reply_exits_0_and_says_so
    and test_run_cut_by_max_tokens_before_the_json_is_complete_is_no_success."""
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    prompts = tmp_path / "seeds.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": "Describe a fictional person.", "seed": seed}) + "\n"
            for seed in SEEDS
        )
    )
    out = vibechat(
        "run",
        "--prompt-format",
        prompt_format,
        "--json-schema",
        str(schema),
        "--prompts-file",
        str(prompts),
        "-n",
        "200",
        "--no-save",
        "--no-prefix-cache",
    )
    replies = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["line"], r["params"]["seed"]) for r in replies] == [
        (i, seed) for i, seed in enumerate(SEEDS, 1)
    ], out.stderr
    said_lines = out.stderr.splitlines()
    for obj in replies:
        seed = obj["params"]["seed"]
        said = (seed, obj["text"], obj["finish_reason"], obj["structured_output"], out.stderr)
        its_lines = [line for line in said_lines if f" line {obj['line']}: " in line]
        if obj["structured_output"] == "complete":
            assert its_lines == [], said
            assert schema_errors(json.loads(obj["text"]), PERSON) == [], said
        else:
            assert len(its_lines) == 1, said
            assert obj["structured_output"] in ("incomplete", "invalid"), said
    whole = all(obj["structured_output"] == "complete" for obj in replies)
    assert out.returncode == (0 if whole else 3), out.stderr
    assert len(said_lines) == sum(obj["structured_output"] != "complete" for obj in replies)


@pytest.mark.parametrize("prompt_format", ["completion", "gemma"])
def test_a_reply_cut_before_its_json_is_whole_exits_3_in_one_line(starter_installed, prompt_format):
    for seed in (1, 2):
        out, obj = one_run(
            ("--prompt-format", prompt_format),
            "--json-schema",
            json.dumps(DIGITS),
            "-p",
            "A long number as JSON:",
            "-n",
            "8",
            "--seed",
            str(seed),
        )
        assert out.returncode == 3, out.stderr
        assert out.stderr.strip().splitlines() == [
            "vibechat: the reply hit the 8-token limit (--max-tokens) "
            "before the JSON was complete: raise --max-tokens"
        ]
        assert (obj["finish_reason"], obj["structured_output"]) == ("length", "incomplete")


# ----------------------------------------------------------------- a server that ignores the schema
def test_json_from_a_server_that_does_not_match_the_schema_is_invalid_not_complete(stub):
    """A server may take ``response_format`` and answer JSON of another shape: it parses, so it
    is no cut reply, but it is not what was asked: exit 3, one line naming where it differs."""
    stub.reply = '{"name": "Ada", "age": "thirty-six", "occupation": "engineer"}'
    out, obj = one_run(
        ("--base-url", stub.url, "--model", "stub-small"),
        "--json-schema",
        json.dumps(PERSON),
        "-p",
        "Describe a fictional person.",
    )
    assert out.returncode == 3, out.stderr
    assert (obj["finish_reason"], obj["structured_output"]) == ("stop", "invalid")
    assert out.stderr.strip().splitlines() == [
        "vibechat: the reply is not what was asked: its JSON does not match the schema "
        "(at /age: 'thirty-six' is "
        "not of type 'integer')"
    ]
    stub.reply = '{"name": "Ada", "age": 36, "occupation": "engineer"}'
    out, obj = one_run(
        ("--base-url", stub.url, "--model", "stub-small"),
        "--json-schema",
        json.dumps(PERSON),
        "-p",
        "Describe a fictional person.",
    )
    assert out.returncode == 0 and obj["structured_output"] == "complete", out.stderr


def test_the_users_pattern_is_not_run_over_the_reply():
    """Python's re has no time bound: a pattern like ^(a+)+$ takes exponential time on text it
    does not match. The grammar (or a server's strict response_format) enforced the pattern; the
    judge checks the rest of the schema without it, and a property named "pattern" still counts."""
    schema = {
        "type": "object",
        "required": ["word", "pattern"],
        "properties": {
            "word": {"type": "string", "pattern": "^(a+)+$"},
            "pattern": {"type": "integer"},
        },
    }
    fmt = OutputFormat("schema", json.dumps(schema), "s.json")
    assert fmt.judge(json.dumps({"word": "a" * 64 + "!", "pattern": 1}))[0] == "complete"
    state, why = fmt.judge(json.dumps({"word": "a", "pattern": "x"}))
    assert state == "invalid" and "/pattern" in why
