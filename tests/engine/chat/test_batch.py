"""`vibechat run --prompts-file`: line parsing (engine/chat/batch.py), the batch loop on a recording
backend, and end to end in subprocesses on the real starter model."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import VIBECHAT_BIN, default_sigint, same_start
from fakes import RecordingBackend
from helpers import vibechat
from test_cli_run import rambling  # noqa: F401 - a fixture: the starter in Gemma's turn format
from vibechat.app.commands.batch import BatchOptions, run_batch
from vibechat.engine.chat.batch import BatchLineError, BatchRequest, parse_line, read_requests
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat


def jsonl(*objects: object) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects)


def results(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def saved_count() -> int:
    with History() as history:
        return history.count()


# ------------------------------------------------------------------ parsing
def test_a_full_line_parses_into_a_request():
    request = parse_line(
        json.dumps(
            {
                "prompt": "Hi",
                "system": "Be brief.",
                "id": "q1",
                "temperature": 0,
                "top_k": 5,
                "top_p": 0.5,
                "min_p": 0.1,
                "repeat_penalty": 1.1,
                "max_tokens": 8.0,
                "seed": 3,
                "stop": "END",
            }
        ),
        7,
    )
    assert (request.line, request.prompt, request.system, request.id) == (
        7,
        "Hi",
        "Be brief.",
        "q1",
    )
    assert request.overrides == {
        "temperature": 0.0,
        "top_k": 5,
        "top_p": 0.5,
        "min_p": 0.1,
        "repeat_penalty": 1.1,
        "max_tokens": 8,
        "seed": 3,
        "stop": ("END",),
    }
    assert parse_line(
        '{"prompt": "x", "max_tokens": null, "seed": null, "id": 4}', 1
    ).overrides == {"max_tokens": None, "seed": None}


def test_line_parameters_sit_on_top_of_the_command():
    base = SamplingParams(temperature=0.2, top_k=7, max_tokens=64, stop=("a", "b"))
    params = parse_line('{"prompt": "x", "top_k": 3, "stop": ["c"], "max_tokens": null}', 1).params(
        base
    )
    assert (params.temperature, params.top_k, params.max_tokens, params.stop) == (
        0.2,
        3,
        None,
        ("c",),
    )
    assert parse_line('{"prompt": "x"}', 1).params(base) == base


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"prompt": "x",}', "not valid JSON"),
        ("# a comment", "JSON Lines has no comments"),
        ('["prompt"]', "expected a JSON object"),
        ('"just text"', "expected a JSON object"),
        ('{"system": "Be brief."}', 'no "prompt"'),
        ('{"prompt": "   "}', "the prompt is empty"),
        ('{"prompt": 42}', "prompt must be a string"),
        (
            '{"prompt": "x", "temprature": 0}',
            "unknown key 'temprature' (did you mean 'temperature'?)",
        ),
        ('{"prompt": "x", "model": "m.gguf"}', "pass --model"),
        ('{"prompt": "x", "temperature": 9}', "temperature must be between 0 and 5 (got 9)"),
        ('{"prompt": "x", "temperature": "hot"}', "temperature must be a number"),
        ('{"prompt": "x", "top_k": true}', "top_k must be a whole number"),
        ('{"prompt": "x", "temperature": null}', "temperature needs a value"),
        ('{"prompt": "x", "max_tokens": 2.5}', "max_tokens must be a whole number between"),
        ('{"prompt": "x", "seed": -1}', "seed must be between 0 and"),
        ('{"prompt": "x", "stop": [1]}', "stop must be a string or a list of strings"),
        ('{"prompt": "x", "stop": [""]}', "stop strings must be non-empty"),
        ('{"prompt": "x", "system": null}', "system must be a string"),
        ('{"prompt": "x", "id": [1]}', "id must be a string or a whole number"),
        ('{"prompt": "x", "prompt": "y"}', "key 'prompt' appears twice"),
    ],
)
def test_each_bad_line_names_its_problem_and_line(text, needle):
    with pytest.raises(BatchLineError) as caught:
        parse_line(text, 12)
    assert caught.value.line == 12
    assert needle in str(caught.value)


def test_a_bad_line_keeps_its_id_when_it_has_one():
    with pytest.raises(BatchLineError) as caught:
        parse_line('{"prompt": "x", "id": "q9", "top_p": 2}', 1)
    assert caught.value.id == "q9"


def test_reading_numbers_physical_lines_and_skips_blank_ones():
    lines = [
        b'\xef\xbb\xbf{"prompt": "a"}\n',
        b"\n",
        b"   \r\n",
        b'{"prompt": \xff}\n',
        b"# note\n",
        b'{"prompt": "b"}\r\n',
        b'{"prompt": "c"}',
    ]
    items = list(read_requests(lines))
    assert [(type(i).__name__, i.line) for i in items] == [
        ("BatchRequest", 1),
        ("BatchLineError", 4),
        ("BatchLineError", 5),
        ("BatchRequest", 6),
        ("BatchRequest", 7),
    ]
    assert "not valid UTF-8" in str(items[1])
    assert [i.prompt for i in items if isinstance(i, BatchRequest)] == ["a", "b", "c"]


# ------------------------------------------------------------- the batch loop
def test_each_prompt_is_a_fresh_conversation_with_its_own_settings():
    backend = RecordingBackend(reply="Fine thanks")
    prompts = io.BytesIO(
        jsonl(
            {"prompt": "one"},
            {"prompt": "two", "system": "", "id": 2, "top_k": 3},
            "{oops",
            {"prompt": "three", "system": "Pirate.", "temperature": 0},
        ).encode()
    )
    out, err = io.StringIO(), io.StringIO()
    options = BatchOptions(system="Be brief.", params=SamplingParams(top_k=9, seed=1))
    code = run_batch(backend, prompts, "p.jsonl", options, None, out, err)
    assert code == 1
    got = results(out.getvalue())
    assert [r["line"] for r in got] == [1, 2, 3, 4]
    assert got[1]["id"] == 2 and "id" not in got[0] and got[2]["error"].startswith("not valid JSON")
    assert all(
        r["text"] == "Fine thanks" and r["conversation_id"] is None for r in got if "error" not in r
    )
    assert err.getvalue().count("\n") == 1 and "p.jsonl line 3: not valid JSON" in err.getvalue()
    # Every prompt its own conversation, with the command's settings under the line's; the KV
    # cache is kept, so a prefix shared with the previous prompt is not evaluated again.
    assert backend.resets == 0
    assert [[(m.role, m.content) for m in messages] for messages, _ in backend.requests] == [
        [("system", "Be brief."), ("user", "one")],
        [("user", "two")],
        [("system", "Pirate."), ("user", "three")],
    ]
    assert [(p.top_k, p.temperature, p.seed) for _, p in backend.requests] == [
        (9, 0.8, 1),
        (3, 0.8, 1),
        (9, 0.0, 1),
    ]


def test_no_prefix_cache_starts_every_prompt_from_an_empty_cache():
    backend = RecordingBackend(reply="ok")
    prompts = io.BytesIO(jsonl({"prompt": "one"}, {"prompt": "two"}).encode())
    options = BatchOptions(system=None, params=SamplingParams(), reuse_prefix=False)
    assert run_batch(backend, prompts, "p.jsonl", options, None, io.StringIO(), io.StringIO()) == 0
    assert backend.resets == 2


@pytest.mark.model
def test_a_structured_line_cut_by_its_limit_is_marked_and_sets_the_exit_status(backend):
    """Under --json-schema a line cut by its token limit is no success: its result says the
    structured output is incomplete, stderr names the line and the limit, and the batch exits
    3 (1 still wins when a line failed); a whole one says complete."""
    digits = {
        "type": "object",
        "properties": {"digits": {"type": "string", "pattern": "^[0-9]{8}$"}},
        "required": ["digits"],
        "additionalProperties": False,
    }
    fmt = OutputFormat("schema", json.dumps(digits), "digits.json")
    options = BatchOptions(
        system=None, params=SamplingParams(seed=1, max_tokens=64, output_format=fmt)
    )
    ask = "A number as JSON"
    out, err = io.StringIO(), io.StringIO()
    prompts = io.BytesIO(jsonl({"prompt": ask, "max_tokens": 3}, {"prompt": ask}).encode())
    assert run_batch(backend, prompts, "p.jsonl", options, None, out, err) == 3
    cut, whole = results(out.getvalue())
    assert (cut["finish_reason"], cut["structured_output"]) == ("length", "incomplete")
    assert (whole["finish_reason"], whole["structured_output"]) == ("stop", "complete")
    assert len(json.loads(whole["text"])["digits"]) == 8
    assert err.getvalue() == (
        "vibechat: p.jsonl line 1: the reply hit the 3-token limit (--max-tokens) before the "
        "JSON was complete: raise --max-tokens (or the line's max_tokens)\n"
    )
    prompts = io.BytesIO(
        jsonl({"prompt": ask, "max_tokens": 3}, {"prompt": ask, "temperature": 9}).encode()
    )
    assert run_batch(backend, prompts, "p.jsonl", options, None, io.StringIO(), io.StringIO()) == 1


# ----------------------------------------------------------- usage errors
def start_error(out: subprocess.CompletedProcess) -> dict:
    """The one JSON line a prompts file that could not start prints: its ``error``."""
    assert out.stdout.count("\n") == 1, out.stdout
    return json.loads(out.stdout)["error"]


@pytest.mark.parametrize("args", [["--prompt", "hi"], ["--continue"], ["--conversation", "3"]])
def test_single_prompt_options_do_not_mix(tmp_path, args):
    path = tmp_path / "p.jsonl"
    path.write_text(jsonl({"prompt": "hi"}))
    out = vibechat("run", "--prompts-file", str(path), *args)
    assert out.returncode == 1 and start_error(out)["kind"] == "error"
    assert (
        out.stderr.count("\n") == 1
        and "--prompts-file and " + args[0] + " do not mix" in out.stderr
    )


def test_no_prefix_cache_needs_a_prompts_file():
    out = vibechat("run", "--prompt", "hi", "--no-prefix-cache")
    assert out.returncode == 1 and out.stdout == ""
    assert (
        out.stderr.count("\n") == 1
        and "--no-prefix-cache applies only with --prompts-file" in out.stderr
    )


def test_a_missing_file_is_one_line(tmp_path):
    out = vibechat("run", "--prompts-file", str(tmp_path / "nope.jsonl"))
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "cannot read prompts file" in out.stderr and "No such file" in out.stderr


@pytest.mark.parametrize("text", ["", "\n  \n\n"])
def test_a_file_without_prompts_is_nothing_to_do_and_loads_no_model(tmp_path, user_dirs, text):
    """No prompt is nothing to do, not a failure (a script's generator found nothing): exit
    status 0, no result on stdout, one line on stderr; `run` with no prompt at all stays a
    usage error (2)."""
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    out = vibechat("run", "--prompts-file", str(path))
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr == f"vibechat: no prompts in {path} (it is empty or blank): nothing to do.\n"
    assert not (
        user_dirs["cache"] / "vibechat" / "starter"
    ).exists()  # nothing loaded (nor unpacked)
    assert vibechat("run").returncode == 2


@pytest.mark.parametrize("text", ["", "\n  \n\n"])
def test_no_prompts_on_stdin_is_said_before_any_model_loads(tmp_path, user_dirs, text):
    """Stdin that ends without a prompt: nothing to do, said before a model is looked for or
    loaded (a broken model file would fail its load; the starter is not unpacked)."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"")
    for model in (["--model", str(broken)], []):
        out = vibechat("run", "--prompts-file", "-", *model, input=text)
        assert out.returncode == 0 and out.stdout == "", out.stderr
        assert (
            out.stderr == "vibechat: no prompts in stdin (it is empty or blank): nothing to do.\n"
        )
    assert not (user_dirs["cache"] / "vibechat" / "starter").exists()


# -------------------------------------------------------- on the real model
@pytest.mark.model
@pytest.mark.parametrize("text", ["", "\n\n"])
def test_no_prompts_on_stdin_is_nothing_to_do(starter_installed, text):
    out = vibechat("run", "--prompts-file", "-", input=text)
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr == "vibechat: no prompts in stdin (it is empty or blank): nothing to do.\n"


@pytest.mark.model
def test_a_bad_line_is_reported_in_place_and_the_rest_run(starter_installed, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        jsonl(
            {"prompt": "Name a colour.", "id": "first"},
            {"prompt": "Hi", "temperature": 9},
            {"prompt": "Name a fruit.", "max_tokens": 3, "seed": 7},
            {"prompt": "Name a tree.", "id": 4, "temperature": 0, "top_k": 5},
        )
    )
    out = vibechat("run", "--prompts-file", str(path), "-n", "5", "--top-k", "9")
    assert out.returncode == 1
    got = results(out.stdout)
    assert [r["line"] for r in got] == [1, 2, 3, 4]
    assert "temperature must be between 0 and 5 (got 9)" in got[1]["error"] and set(got[1]) == {
        "line",
        "error",
    }
    assert out.stderr.count("\n") == 1 and "prompts.jsonl line 2: temperature" in out.stderr
    first, third, fourth = got[0], got[2], got[3]
    assert first["id"] == "first" and fourth["id"] == 4
    for r in (first, third, fourth):
        assert set(r) >= {"text", "model", "params", "finish_reason", "stats", "conversation_id"}
        assert r["model"] == "Gemma 3 270m" and isinstance(r["params"]["seed"], int)
    # The line's parameters win over the flags, which fill in the rest.
    assert first["params"]["max_tokens"] == 5 and first["params"]["top_k"] == 9
    # (the starter may answer "Apple." and stop within 3 tokens: how many it writes is its own
    # choice)
    assert third["params"]["max_tokens"] == 3 and third["stats"]["completion_tokens"] <= 3
    assert third["params"]["seed"] == third["stats"]["seed"] == 7 and third["finish_reason"] in (
        "length",
        "stop",
    )
    assert fourth["params"]["temperature"] == 0 and fourth["params"]["top_k"] == 5
    # Each prompt is a conversation of its own in the history; every prompt is evaluated from
    # scratch.
    ids = [r["conversation_id"] for r in (first, third, fourth)]
    assert len(set(ids)) == 3 and saved_count() == 3
    assert first["stats"]["prompt_tokens_evaluated"] == first["stats"]["prompt_tokens"]
    # the next prompts reuse the turn header they share with the one before
    assert all(
        r["stats"]["prompt_tokens_evaluated"] < r["stats"]["prompt_tokens"] for r in (third, fourth)
    )
    shown = json.loads(vibechat("history", "show", str(ids[1]), "--json").stdout)
    assert [m["content"] for m in shown["messages"]][0] == "Name a fruit." and shown["params"][
        "seed"
    ] == 7


@pytest.mark.model
def test_results_do_not_depend_on_the_position_in_the_file(starter_installed, tmp_path):
    greedy = {"prompt": "The capital of France is", "temperature": 0}
    seeded = {"prompt": "Once upon a time", "seed": 42, "temperature": 1.0}
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        jsonl(greedy, seeded, {"prompt": "Write a long list of animals: cat, dog,"}, seeded, greedy)
    )
    out = vibechat("run", "--prompts-file", str(path), "-n", "8", "--no-save")
    assert out.returncode == 0, out.stderr
    got = results(out.stdout)
    assert len(got) == 5 and got[0]["text"] and got[1]["text"]
    # Line 5 reuses the turn header line 4 left in the KV cache (other batches than line 1's)
    assert same_start(got[0]["text"], got[4]["text"])
    assert (
        same_start(got[1]["text"], got[3]["text"], 5)
        and got[1]["params"]["seed"] == got[3]["params"]["seed"]
    )


@pytest.mark.model
def test_a_shared_system_prompt_is_evaluated_once_and_replies_match_a_fresh_cache(
    starter_installed, tmp_path
):
    system = "You answer questions for a hardware store. " + " ".join(
        f"Rule {i}: be polite about item {i * 7}." for i in range(30)
    )
    lines = [
        {"prompt": p, "system": system, "temperature": 0}
        for p in ("The capital of France is", "List three tools:", "What is 2+2?")
    ]
    lines.append({"prompt": "Once upon a time", "system": system, "seed": 7, "temperature": 0.9})
    path = tmp_path / "prompts.jsonl"
    path.write_text(jsonl(*lines))
    reused = results(vibechat("run", "--prompts-file", str(path), "-n", "12", "--no-save").stdout)
    fresh_run = vibechat(
        "run", "--prompts-file", str(path), "-n", "12", "--no-save", "--no-prefix-cache"
    )
    assert fresh_run.returncode == 0, fresh_run.stderr
    fresh = results(fresh_run.stdout)
    assert all(r["text"] for r in reused) and all(r["text"] for r in fresh)
    # Reusing the cached system prompt evaluates the rest in other batches than a fresh cache
    # does (conftest.same_start); the sampled line may draw differently from its first token.
    # The first prompt is evaluated whole both times: its reply is the fresh one. The two that
    # reuse the cache begin as the fresh ones do (a wrong cache shows in the first tokens), and
    # at most one of them parts at a near-tie within its first words: "What is 2+2?" gave
    # "2+2=4." against "2+2." with one thread (pytest-xdist's workers share the cores out).
    pairs = [(got["text"], want["text"]) for got, want in zip(reused[:3], fresh[:3], strict=False)]
    assert same_start(*pairs[0]), pairs[0]
    assert all(os.path.commonprefix(pair).strip() for pair in pairs[1:]), pairs
    assert sum(same_start(*pair) for pair in pairs[1:]) >= 1, pairs
    assert reused[3]["params"]["seed"] == fresh[3]["params"]["seed"] == 7
    prompt_tokens = [r["stats"]["prompt_tokens"] for r in fresh]
    assert [r["stats"]["prompt_tokens_evaluated"] for r in fresh] == prompt_tokens
    evaluated = [r["stats"]["prompt_tokens_evaluated"] for r in reused]
    assert evaluated[0] == prompt_tokens[0] and prompt_tokens[0] > 300
    assert all(n < 30 for n in evaluated[1:]), (
        evaluated
    )  # only what follows the shared system prompt


@pytest.mark.model
def test_stdin_no_save_and_a_prompt_beyond_the_context(starter_installed):
    out = vibechat(
        "run",
        "--prompts-file",
        "-",
        "--no-save",
        "--ctx",
        "256",
        "-n",
        "2",
        input=jsonl(
            {"prompt": "Hi"}, "", {"prompt": "lorem ipsum " * 400, "id": "big"}, {"prompt": "Bye"}
        ),
    )
    assert out.returncode == 1
    got = results(out.stdout)
    assert [r["line"] for r in got] == [1, 3, 4]
    assert got[1]["id"] == "big" and "context holds 256" in got[1]["error"]
    assert "stdin line 3: the prompt takes" in out.stderr and "Traceback" not in out.stderr
    assert (
        got[0]["finish_reason"] in ("stop", "length") and got[2]["stats"]["completion_tokens"] <= 2
    )
    assert all(r.get("conversation_id") is None for r in got)
    assert saved_count() == 0


@pytest.mark.model
def test_results_stream_and_ctrl_c_reports_the_prompt_in_progress(
    starter_installed,
    tmp_path,
    rambling,  # noqa: F811 - the fixture imported above
):
    # Gemma's turn format (rambling): the long prompt must still run when Ctrl-C comes; in its own
    # completion frame the starter may end the count after a line, on its own choice.
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        jsonl(
            {"prompt": "Hi", "max_tokens": 2},
            {"prompt": "Count to one thousand: 1, 2, 3,", "temperature": 0, "max_tokens": 3000},
            {"prompt": "Never run."},
        )
    )
    proc = subprocess.Popen(
        [str(VIBECHAT_BIN), "run", "--prompts-file", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_sigint,
    )
    assert proc.stdout is not None
    try:
        first = json.loads(proc.stdout.readline())
        assert proc.poll() is None  # the first result came while the long prompt still runs
        assert first["line"] == 1 and first["stats"]["completion_tokens"] <= 2
        deadline = time.monotonic() + 120
        while saved_count() < 2 and time.monotonic() < deadline:  # the long prompt has started
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err
    got = results(rest)
    assert len(got) == 1 and got[0]["line"] == 2 and got[0]["finish_reason"] == "cancelled"
    assert got[0]["stats"]["completion_tokens"] < 3000 and isinstance(got[0]["params"]["seed"], int)
    shown = json.loads(vibechat("history", "show", str(got[0]["conversation_id"]), "--json").stdout)
    assert shown["messages"][-1]["status"] == "stopped"
    assert saved_count() == 2


def test_help_mentions_the_prompts_file():
    out = vibechat("run", "--help")
    assert out.returncode == 0 and "--prompts-file" in out.stdout
