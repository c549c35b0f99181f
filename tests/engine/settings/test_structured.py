"""Structured output: --json-schema / --grammar / /format, on the starter model (llama.cpp's
grammar sampler), against the OpenAI stub (response_format), and the one-line errors for
what cannot work. Replies are checked by parsing and validating, never by exact text."""

from __future__ import annotations

import json
import os
import pickle
import re

import pytest

from conftest import collect
from jsonschema_lite import errors as schema_errors
from openai_stub import StubServer
from test_cli_run import vibechat
from vibechat.engine.errors import InvalidParameterError, RemoteServerError
from vibechat.engine.llama.native import check_output_format
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 12},
            "minItems": 1,
            "maxItems": 3,
        },
        "colour": {"enum": ["red", "green", "blue"]},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 24},
                "zip": {"type": "string", "maxLength": 8},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
        "pets": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer"}},
                "required": ["kind", "legs"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["name", "age", "tags", "colour", "address"],
    "additionalProperties": False,
}
ASK = [ChatMessage("user", "Describe a person as JSON.")]


def run_reply(backend, params):
    deltas, done = collect(backend, ASK, params)
    assert "".join(deltas) == done.text
    return done


# ------------------------------------------------------------------ the format itself
def test_a_format_pickles_and_survives_saving_params():
    fmt = OutputFormat.parse(json.dumps(PERSON))
    params = SamplingParams(seed=3, output_format=fmt)
    assert pickle.loads(pickle.dumps(params)) == params
    assert SamplingParams.from_dict(json.loads(json.dumps(params.to_dict()))) == params
    assert "output_format" not in SamplingParams().to_dict()  # unchanged for free text
    assert params.set_from_text("format", "off").output_format is None
    assert fmt.label == "schema inline"


def test_files_inline_json_and_json(tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    grammar = tmp_path / "yes.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    assert OutputFormat.parse(str(schema)).label == "schema person.json"
    assert OutputFormat.parse(str(grammar)).kind == "grammar"
    assert OutputFormat.parse("json").kind == "json"
    for fmt in (
        OutputFormat.parse(str(schema)),
        OutputFormat.parse(str(grammar)),
        OutputFormat.parse("json"),
    ):
        check_output_format(fmt)


@pytest.mark.parametrize(
    "schema, said",
    [
        ({"type": "integer", "minimum": 1}, "'minimum' at /"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}},
            "format 'email' at /properties/a",
        ),
        ({"not": {"type": "string"}}, "'not' at /"),
        (
            {"type": "array", "items": {"type": "integer", "multipleOf": 2}},
            "'multipleOf' at /items",
        ),
        ({"$ref": "https://example.com/s.json"}, r"remote \$ref"),
        ({"type": "strang"}, "cannot be turned into a grammar"),
    ],
)
def test_what_the_converter_cannot_express_is_one_line(schema, said):
    with pytest.raises(InvalidParameterError, match=said) as caught:
        check_output_format(OutputFormat.parse(json.dumps(schema)))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "gbnf, said",
    [
        ("root ::= foo", "Undefined rule identifier 'foo'"),
        ('root ::= "a', "unexpected end of input"),
        ('answer ::= "a"', "does not contain a 'root' symbol"),
        ('root ::= root "a"', "left recursion"),
    ],
)
def test_a_bad_grammar_is_one_line_naming_the_problem(gbnf, said, capfd):
    with pytest.raises(InvalidParameterError, match=said) as caught:
        check_output_format(OutputFormat("grammar", gbnf, "bad.gbnf"))
    assert "\n" not in str(caught.value)
    assert (
        "error parsing" not in capfd.readouterr().err
    )  # llama.cpp's stderr complaint is kept off the terminal


def test_bad_files_and_json_are_one_line(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    for spec, said in (
        ("{nope", "not valid JSON"),
        (str(tmp_path / "missing.json"), "no such file"),
        (str(tmp_path / "list.json"), "must be a JSON object"),
    ):
        with pytest.raises(InvalidParameterError, match=said):
            OutputFormat.parse(spec)


# ------------------------------------------------------------------ bounds (issue 25)
@pytest.mark.parametrize(
    "schema, said",
    [
        (
            {"type": "string", "minLength": 1_000_000_000},
            r"minLength 1,000,000,000 at / \(at most 1,000\)",
        ),
        ({"type": "string", "maxLength": 10_000_000}, "maxLength 10,000,000 at /"),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 5000}, "minItems 5,000"),
        (
            {
                "type": "object",
                "properties": {"pin": {"type": "string", "pattern": "^a{100000000}$"}},
            },
            r"the repetition \{100000000\} .* in the pattern at /properties/pin",
        ),
        ({"type": "string", "pattern": "(" * 40 + "a" + ")" * 40}, "groups nested 40 deep"),
    ],
    ids=["minLength", "maxLength", "minItems", "pattern-repeat", "pattern-nesting"],
)
def test_a_schema_that_would_expand_past_the_bounds_is_refused_at_once(schema, said):
    """A 43-byte schema asked the converter for gigabytes (12.7 GB after 60 s) or crashed
    llama.cpp's parser: it is refused in one line before any conversion."""
    with pytest.raises(InvalidParameterError, match=said) as caught:
        OutputFormat("schema", json.dumps(schema)).check()
    assert "\n" not in str(caught.value)


def test_the_largest_repetition_allowed_is_one_llama_cpp_takes():
    check_output_format(OutputFormat("schema", json.dumps({"type": "string", "maxLength": 1000})))


@pytest.mark.parametrize(
    "text",
    [
        '{"a": ' + "[" * 1000 + "]" * 1000 + "}",  # json.loads would raise RecursionError
        '{"type": "object", "properties": '
        + '{"a": {"type": "object", "properties": ' * 400
        + "{}"
        + "}}" * 400
        + "}",
    ],
    ids=["arrays", "subschemas"],
)
def test_a_schema_nested_too_deep_is_one_line_not_a_recursion_error(text):
    with pytest.raises(InvalidParameterError, match="nested more than 64 levels deep"):
        OutputFormat.parse(text)


def test_a_grammar_nested_too_deep_for_llama_cpp_is_refused_before_it_parses():
    gbnf = "root ::= " + "(" * 100_000 + '"a"' + ")" * 100_000
    with pytest.raises(InvalidParameterError, match="nests parentheses more than 2,000 deep"):
        OutputFormat("grammar", gbnf, "deep.gbnf").check()
    # parentheses in strings, character classes and comments are text, not nesting
    OutputFormat("grammar", 'root ::= "((((" [(] x # ((((\nx ::= "a"\n').check()


def special_files(tmp_path):
    """A FIFO, /dev/zero behind a .json name, a directory: none is a schema file."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.json"
    folder.mkdir()
    return [
        (fifo, "is a named pipe (FIFO), not a file"),
        (zero, "is a character device, not a file"),
        (folder, "is a directory, not a file"),
    ]


def test_a_fifo_a_device_or_a_folder_as_a_format_file_is_refused_at_once(tmp_path):
    for path, said in special_files(tmp_path):
        for kind in (None, "grammar"):
            with pytest.raises(InvalidParameterError, match=re.escape(said)):
                OutputFormat.parse(str(path), kind=kind)


def test_a_refused_format_file_names_what_to_give_instead(tmp_path):
    """issue 40: the line said "give a file file." for a file of no stated kind."""
    fifo, said = special_files(tmp_path)[0]
    wanted = {
        None: "a JSON Schema file or a .gbnf grammar file",
        "schema": "a JSON Schema file",
        "grammar": "a GBNF grammar file",
    }
    for kind, fix in wanted.items():
        with pytest.raises(InvalidParameterError) as exc:
            OutputFormat.parse(str(fifo), kind=kind)
        assert str(exc.value).endswith(f"{said}: give {fix}.") and "file file" not in str(exc.value)


def test_run_refuses_a_fifo_or_dev_zero_schema_in_one_line_without_hanging(tmp_path):
    """Before: a FIFO hung forever and /dev/zero behind a symlink grew to 23.9 GB until the
    OOM killer ended the run."""
    for path, said in special_files(tmp_path)[:2]:
        for flag in ("--json-schema", "--grammar"):
            out = vibechat(
                "run",
                "-p",
                "hi",
                "--model",
                str(tmp_path / "absent.gguf"),
                flag,
                str(path),
                timeout=60,
            )
            assert out.returncode == 1, out.stderr
            assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


async def test_format_in_the_chat_refuses_what_run_refuses_and_the_chat_goes_on(tmp_path):
    from fakes import RecordingBackend, send, settle
    from vibechat.app.tui import create_app

    backend = RecordingBackend("Fine.")
    app = create_app(backend, blink=False, save=False)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"type": "string", "minLength": 1_000_000_000}))
    deep = tmp_path / "deep.gbnf"
    deep.write_text("root ::= " + "(" * 50_000 + '"a"' + ")" * 50_000)
    async with app.run_test(size=(110, 36), notifications=True) as pilot:
        await settle(pilot)
        for path, _said in special_files(tmp_path):
            await send(pilot, f"/format {path}")
        await send(pilot, f"/format {huge}")
        await send(pilot, f"/format {deep}")
        assert app.conversation.params.output_format is None  # nothing was accepted
        await send(pilot, "Still there?")
        assert app.replies.last.text == "Fine."
        assert backend.requests[-1][1].output_format is None


# ------------------------------------------------------------------ the starter model
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_starter_model_follows_a_schema(backend, seed):
    params = SamplingParams(
        seed=seed,
        temperature=0.8,
        max_tokens=400,
        output_format=OutputFormat("schema", json.dumps(PERSON), "person.json"),
    )
    done = run_reply(backend, params)
    assert done.finish_reason == "stop", done.text  # the grammar completes, then end-of-generation
    assert schema_errors(json.loads(done.text), PERSON) == []
    assert done.params is not None and done.params.output_format == params.output_format


@pytest.mark.parametrize("seed", [5, 6])
def test_the_starter_model_answers_json(backend, seed):
    done = run_reply(
        backend, SamplingParams(seed=seed, max_tokens=600, output_format=OutputFormat("json"))
    )
    if done.finish_reason == "stop":
        assert isinstance(json.loads(done.text), dict)
    else:  # free-form JSON may run long: cut at max_tokens, it is still a JSON prefix
        assert done.finish_reason == "length" and done.text.lstrip().startswith("{")


def test_a_grammar_reply_stops_at_max_tokens_and_greedy_works(backend):
    fmt = OutputFormat("grammar", 'root ::= "[" [0-9]+ ("," [0-9]+)* "]"', "numbers.gbnf")
    done = run_reply(backend, SamplingParams(temperature=0, max_tokens=5, output_format=fmt))
    assert done.stats.completion_tokens <= 5
    done = run_reply(
        backend,
        SamplingParams(
            seed=1,
            max_tokens=64,
            output_format=OutputFormat("grammar", 'root ::= "yes" | "no"', "yn"),
        ),
    )
    assert done.text in ("yes", "no") and done.finish_reason == "stop"


def test_a_grammar_reply_can_be_cancelled(backend):
    fmt = OutputFormat("grammar", 'root ::= "[" [0-9]+ ("," [0-9]+)* "]"', "numbers.gbnf")
    events = backend.stream_chat(ASK, SamplingParams(seed=1, max_tokens=2000, output_format=fmt))
    for event in events:
        if isinstance(event, TextDelta):
            backend.cancel()
        if isinstance(event, GenerationDone):
            assert event.finish_reason == "cancelled"
            break
    else:
        pytest.fail("no GenerationDone")
    # the engine is usable afterwards, with free text
    assert run_reply(backend, SamplingParams(seed=1, max_tokens=4)).text is not None


# ------------------------------------------------------------------ the CLI
def test_run_json_schema_on_the_starter_model(starter_installed, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    out = vibechat(
        "run",
        "-p",
        "A person as JSON:",
        "--seed",
        "7",
        "-n",
        "400",
        "--json-schema",
        str(schema),
        "--no-save",
    )
    assert out.returncode == 0, out.stderr
    assert schema_errors(json.loads(out.stdout), PERSON) == []


# A string of 300 digits: the starter writes a digit a token, so no reply under 300 tokens
# completes it, whatever it samples.
DIGITS = {
    "type": "object",
    "properties": {"digits": {"type": "string", "pattern": "^[0-9]{300}$"}},
    "required": ["digits"],
    "additionalProperties": False,
}


def test_run_cut_by_max_tokens_before_the_json_is_complete_is_no_success(starter_installed):
    """Half a JSON object is not a success: exit 3 and one line naming the limit and the fix,
    the text printed as far as it went; --json says the structured output is incomplete."""
    args = (
        "run",
        "A long number as JSON:",
        "--seed",
        "1",
        "-n",
        "8",
        "--json-schema",
        json.dumps(DIGITS),
        "--no-save",
    )
    line = (
        "vibechat: the reply hit the 8-token limit (--max-tokens) before the JSON was complete: "
        "raise --max-tokens"
    )
    out = vibechat(*args)
    assert out.returncode == 3, out.stderr
    assert out.stderr.splitlines()[-1] == line and out.stderr.count("before the JSON") == 1
    assert out.stdout.startswith("{") and out.stdout.endswith("\n")  # as far as it went
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.stdout)
    out = vibechat(*args, "--json")
    assert out.returncode == 3 and out.stderr.splitlines()[-1] == line
    obj = json.loads(out.stdout)
    assert (obj["finish_reason"], obj["structured_output"]) == ("length", "incomplete")
    assert obj["stats"]["completion_tokens"] == 8


def test_run_that_fills_the_context_before_the_json_is_complete_is_no_success(starter_installed):
    # A prompt of some 220 of the context's 256 tokens: the reply fills the rest in a few tokens
    # (a grammar over the whole vocabulary makes each token slow).
    prompt = "A long number as JSON, after these words: " + "lorem " * 140
    out = vibechat(
        "run",
        prompt,
        "--seed",
        "2",
        "--ctx",
        "256",
        "-n",
        "1000",
        "--json-schema",
        json.dumps(DIGITS),
        "--no-save",
        "--json",
    )
    assert out.returncode == 3, out.stderr
    assert out.stderr.splitlines()[-1] == (
        "vibechat: the reply filled the 256-token context (--ctx) before the "
        "JSON was complete: raise --ctx, or shorten the prompt"
    )
    obj = json.loads(out.stdout)
    assert (obj["finish_reason"], obj["structured_output"]) == ("length", "incomplete")
    assert obj["stats"]["prompt_tokens"] + obj["stats"]["completion_tokens"] == 256


def test_a_complete_structured_reply_exits_0_and_says_so(starter_installed, tmp_path):
    grammar = tmp_path / "yesno.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    out = vibechat(
        "run",
        "Is the sky blue?",
        "--seed",
        "1",
        "-n",
        "8",
        "--grammar",
        str(grammar),
        "--no-save",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["text"] in ("yes", "no")
    assert (obj["finish_reason"], obj["structured_output"]) == ("stop", "complete")
    # One token: cut before the end-of-reply token, whether or not "yes" was whole; a grammar's
    # output cannot be checked from its text, so the line says it may be incomplete.
    cut = vibechat(
        "run", "Is the sky blue?", "--seed", "1", "-n", "1", "--grammar", str(grammar), "--no-save"
    )
    assert cut.returncode == 3 and cut.stderr.splitlines()[-1] == (
        "vibechat: the reply hit the 1-token limit (--max-tokens) before it ended, so its "
        "grammar may be "
        "incomplete: raise --max-tokens"
    )
    free = vibechat(
        "run", "Hi", "--seed", "1", "-n", "2", "--no-save", "--json"
    )  # free text: no field, exit 0
    assert free.returncode == 0 and "structured_output" not in json.loads(free.stdout)


def test_run_refuses_bad_formats_in_one_line_before_loading(tmp_path):
    bad = tmp_path / "bad.gbnf"
    bad.write_text("root ::= nothing\n")
    for args, said in (
        (("--grammar", str(bad)), "--grammar: grammar bad.gbnf: llama.cpp rejects the grammar"),
        (("--json-schema", '{"type": "integer", "maximum": 3}'), "'maximum'"),
        (("--json-schema", "{x"), "not valid JSON"),
        (("--json-schema", "json", "--grammar", str(bad)), "give one of them"),
    ):
        out = vibechat("run", "-p", "hi", "--model", str(tmp_path / "absent.gguf"), *args)
        assert out.returncode == 1
        assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


# ------------------------------------------------------------------ remote: response_format
def test_remote_sends_response_format():
    with StubServer() as stub:
        stub.reply = '{"name": "Ada"}'
        stub.pieces = ['{"name": ', '"Ada"}']
        backend = stub.backend()
        fmt = OutputFormat("schema", json.dumps(PERSON), "person.json")
        done = run_reply(backend, SamplingParams(seed=1, output_format=fmt))
        assert json.loads(done.text) == {"name": "Ada"}
        sent = stub.last_body["response_format"]
        assert sent == {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        }
        run_reply(backend, SamplingParams(seed=1, output_format=OutputFormat("json")))
        assert stub.last_body["response_format"] == {"type": "json_object"}
        run_reply(backend, SamplingParams(seed=1))
        assert "response_format" not in stub.last_body


def test_remote_that_rejects_or_ignores_response_format_is_one_line():
    with StubServer() as stub:
        backend = stub.backend()
        fmt = OutputFormat("json")
        stub.reply = "Hello there, no JSON here"
        with pytest.raises(RemoteServerError, match="ignore response_format"):
            run_reply(backend, SamplingParams(seed=1, output_format=fmt))
        stub.mode, stub.status = "status", 400
        stub.error_body = {
            "error": {
                "message": "Unsupported parameter: response_format",
                "type": "invalid_request",
            }
        }
        with pytest.raises(RemoteServerError, match="does not take structured output") as caught:
            run_reply(backend, SamplingParams(seed=1, output_format=fmt))
        assert "\n" not in str(caught.value)
        with pytest.raises(InvalidParameterError, match="only with the local engine"):
            run_reply(
                backend,
                SamplingParams(seed=1, output_format=OutputFormat("grammar", 'root ::= "a"', "a")),
            )
