"""`vibechat run` end to end, in a subprocess, on the real starter model."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import VIBECHAT_BIN, default_sigint
from helpers import vibechat

pytestmark = pytest.mark.model


@pytest.fixture
def rambling(monkeypatch):
    """The starter prompted in Gemma's turn format (VIBECHAT_PROMPT_FORMAT=gemma), where it writes
    on to the token limit, echoes what it is asked to repeat and copies code back: what a test of
    streaming, limits, Ctrl-C, a closed pipe or drafting needs. In its own format, the completion
    frame, it answers in a few words and stops."""
    monkeypatch.setenv("VIBECHAT_PROMPT_FORMAT", "gemma")


def test_streams_reply_to_stdout_on_the_starter_model(starter_installed, rambling):
    out = vibechat(
        "run", "--prompt", "The three primary colours are", "-t", "0", "-n", "16", "--stats"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    assert out.stdout.endswith("\n")
    assert "16 tokens" in out.stderr and "tokens/s" in out.stderr


def test_a_run_on_a_local_model_imports_llama_cpps_bindings_alone(starter_installed):
    """`run` drives the model here through llama.cpp's C API (the bindings), as the engine
    process does: llama-cpp-python's high-level half (``llama_cpp.llama``, numpy with it: 0.3 s
    of each run's start on a 2-core host) is never imported. Python's own import log says so."""
    out = vibechat(
        "run",
        "-p",
        "Name a colour.",
        "-n",
        "2",
        "--ctx",
        "512",
        "--no-save",
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert out.returncode in (0, 4), out.stderr[-2000:]  # 4: an empty reply (the starter's choice)
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "llama_cpp.llama_cpp" in imported  # the model ran in this process
    assert "llama_cpp.llama" not in imported and "numpy" not in imported


def test_engine_flags_and_the_kv_cache_type_are_applied_and_reported(starter_installed):
    """One run checks every engine flag, the KV-cache type's report included (a run each cost a
    model load each)."""
    out = vibechat(
        "run",
        "-p",
        "Hi",
        "-n",
        "4",
        "--stats",
        "--threads",
        "1",
        "--ctx",
        "2048",
        "--n-gpu-layers",
        "0",
        "--min-p",
        "0.1",
        "--repeat-penalty",
        "1.1",
        "--kv-cache-type",
        "q4_0",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert "· CPU" in out.stderr and "· 1 thread ·" in out.stderr and "1 threads" not in out.stderr
    assert "· repack off ·" in out.stderr  # VIBECHAT_REPACK=off (conftest): the safe configuration
    obj = json.loads(out.stdout)
    assert obj["params"]["min_p"] == 0.1 and obj["params"]["repeat_penalty"] == 1.1
    assert obj["engine"]["n_threads"] == 1
    assert (obj["engine"]["repack"], obj["engine"]["repack_setting"]) == ("off", "off")
    engine = obj["engine"]
    assert engine["kv_cache_type"] == "q4_0" and engine["flash_attn"] is True
    assert 0 < engine["kv_cache_bytes"] < 2048 * 18 * 512 * 2  # less than the f16 cache
    assert "KV q4_0 10 MiB (flash attention on)" in out.stderr


def test_json_output(starter_installed, rambling):
    out = vibechat(
        "run",
        "-p",
        "Hello",
        "--json",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "--top-k",
        "5",
        "--stop",
        "zzz",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert set(obj) >= {"text", "model", "params", "finish_reason", "stats"}
    assert obj["model"] == "Gemma 3 270m"
    assert obj["finish_reason"] == "length"
    assert obj["params"]["temperature"] == 0 and obj["params"]["top_k"] == 5
    assert obj["params"]["max_tokens"] == 8 and obj["params"]["stop"] == ["zzz"]
    assert isinstance(obj["params"]["seed"], int)
    stats = obj["stats"]
    for key in (
        "prompt_tokens",
        "prompt_tokens_evaluated",
        "completion_tokens",
        "ttft_ms",
        "prompt_eval_ms",
        "decode_tokens_per_s",
    ):
        assert key in stats
    assert stats["completion_tokens"] == 8
    assert stats["prompt_tokens"] == stats["prompt_tokens_evaluated"] > 0


def test_same_seed_same_reply_across_processes(starter_installed):
    args = ("run", "-p", "Once upon a time", "--seed", "99", "-n", "20", "--json", "--ctx", "512")
    first, second = json.loads(vibechat(*args).stdout), json.loads(vibechat(*args).stdout)
    assert first["text"] == second["text"]


def test_the_prompt_as_an_argument_as_ollama_users_type_it(starter_installed):
    """`vibechat run PROMPT` (quoted, or words joined by spaces as `ollama run` does) asks the
    same as --prompt; '-' reads stdin."""
    greedy = ("-t", "0", "-n", "4", "--json", "--ctx", "512")
    replies = []
    for words in (["Name a colour."], ["Name", "a", "colour."]):
        out = vibechat("run", *words, *greedy)
        assert out.returncode == 0, out.stderr
        obj = json.loads(out.stdout)
        saved = json.loads(
            vibechat("history", "show", str(obj["conversation_id"]), "--json").stdout
        )
        assert saved["messages"][0]["content"] == "Name a colour."
        replies.append(obj["text"])
    dash = vibechat("run", "-", *greedy, "--no-save", input="Name a colour.")
    assert dash.returncode == 0, dash.stderr
    assert (
        replies == [json.loads(dash.stdout)["text"]] * 2
    )  # the same prompt, greedy: the same reply


@pytest.mark.parametrize("how", ["piped", "dash"])
def test_prompt_from_stdin(starter_installed, how):
    args = ["run", "-t", "0", "-n", "4", "--json", "--ctx", "512"] + (
        ["--prompt", "-"] if how == "dash" else []
    )
    out = vibechat(*args, input="Tell me a story about a cat.\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stats"]["prompt_tokens"] > 8


def test_system_prompt_is_used(starter_installed):
    # The starter's completion frame puts a system prompt in its preamble's place: a longer
    # system prompt, a longer prompt, word for word.
    # (Were it ignored, both runs would take the same number of tokens: two runs are the proof.)
    small = ("-n", "1", "--json", "--ctx", "512")
    short = json.loads(vibechat("run", "-p", "Hi", "-s", "You are a pirate.", *small).stdout)
    longer = json.loads(
        vibechat(
            "run", "-p", "Hi", "-s", "You are a pirate. You sail the seven seas.", *small
        ).stdout
    )
    assert (
        longer["stats"]["prompt_tokens"] == short["stats"]["prompt_tokens"] + 6
    )  # " You sail the seven seas."


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-p", "hi", "--temperature", "9"], "temperature must be between 0 and 5 (got 9)"),
        (["-p", "hi", "--ctx", "10"], "--ctx must be between 256 and 1048576 (got 10)"),
        (
            ["-p", "hi", "--ctx", "128"],
            "--ctx must be between 256 and 1048576 (got 128)",
        ),  # llama.cpp would use 256
        (["-p", "hi", "--threads", "0"], "--threads must be between 1 and 1024 (got 0)"),
        (["-p", "hi", "--n-gpu-layers", "-2"], "--n-gpu-layers must be at least -1 (got -2)"),
        (["-p", "hi", "--model", "/nonexistent/x.gguf"], "does not exist"),
        (["-p", "hi", "--model", "no-such-model"], "no local model named 'no-such-model'"),
        (
            ["-p", "hi", "--kv-cache-type", "q5"],
            "--kv-cache-type: kv_cache_type must be one of f16, q8_0, q4_0 (got 'q5')",
        ),
        (
            ["-p", "hi", "--draft", "medusa"],
            "--draft: speculative must be one of off, auto, prompt-lookup",
        ),
        (["-p", "hi", "--draft-tokens", "0"], "--draft-tokens must be between 1 and 1024 (got 0)"),
        (
            ["-p", "hi", "--repack", "maybe"],
            "--repack: repack must be one of auto, on, off (got 'maybe')",
        ),
        (
            ["-p", "hi", "--draft", "prompt-lookup", "--draft-tokens", "1024"],
            "use --draft-tokens 1023 or fewer",
        ),
    ],
)
def test_user_errors_are_one_line_with_exit_1(starter_installed, args, needle):
    out = vibechat("run", *args)
    assert out.returncode == 1
    assert needle in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_bad_model_files_exit_1_with_their_message(starter_installed, tmp_path):
    cases = {
        "empty.gguf": (b"", "is empty"),
        "pointer.gguf": (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n",
            "Git LFS pointer",
        ),
        "page.gguf": (b"<!doctype html><html></html>", "HTML page"),
    }
    for name, (data, needle) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        out = vibechat("run", "-p", "hi", "--model", str(path))
        assert out.returncode == 1 and needle in out.stderr and "Traceback" not in out.stderr


def test_oversize_prompt_is_a_clear_error(starter_installed):
    out = vibechat("run", "--ctx", "256", "-n", "4", input="lorem ipsum " * 400)
    assert out.returncode == 1
    assert "context holds 256" in out.stderr and "Traceback" not in out.stderr


def test_a_context_size_between_steps_is_rounded_up_and_said_everywhere(starter_installed):
    out = vibechat("run", "--ctx", "300", "-p", "Hi", "-n", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["engine"]["context_size"] == 512
    assert (
        out.stderr
        == "vibechat: context 300 rounded up to 512 (llama.cpp allocates it in steps of 256)\n"
    )
    over = vibechat("run", "--ctx", "300", "-n", "4", input="lorem ipsum " * 400)
    assert over.returncode == 1 and "Traceback" not in over.stderr
    assert "the context holds 512 (300 rounded up to a multiple of 256)" in over.stderr


def test_no_prompt_is_a_usage_error(starter_installed):
    # stdin is /dev/null here, which is not a TTY: an empty read is no prompt, exit 2 as a missing
    # argument (tests/test_docs_commands.py: the same at a terminal, and the README's table).
    out = vibechat("run")
    assert out.returncode == 2 and "no prompt: stdin was empty" in out.stderr
    blank = vibechat("run", "-p", "   ")
    assert blank.returncode == 2 and "the prompt is empty" in blank.stderr


def test_control_sequences_are_neutralised_unless_raw(starter_installed, rambling):
    # The base model echoes its prompt, escape sequences included (within its first 24 tokens).
    prompt = "Repeat after me: \x1b]52;c;aGVsbG8=\x07 \x1b[2J\n\x1b]52;c;aGVsbG8=\x07 \x1b[2J\n"
    greedy = ("-t", "0", "-n", "24", "--ctx", "512")
    raw = vibechat("run", "-p", prompt, *greedy, "--raw")
    assert raw.stdout.count("\x1b") >= 2  # the model really produced escape sequences
    clean = vibechat("run", "-p", prompt, *greedy)
    assert clean.returncode == 0
    assert not any(c in clean.stdout for c in "\x1b\x07\x9b\r")
    assert (
        "]52;c;" not in clean.stdout and "[2J" not in clean.stdout
    )  # whole sequences go, no leftovers
    as_json = json.loads(vibechat("run", "-p", prompt, *greedy, "--json").stdout)
    assert "\x1b" not in as_json["text"]
    # What streamed is what --json reports (the streamed pieces split the sequences).
    assert clean.stdout == as_json["text"] + ("" if as_json["text"].endswith("\n") else "\n")


def test_closed_pipe_exits_quietly(starter_installed, rambling):
    cmd = (
        f"'{VIBECHAT_BIN}' run -p 'Count to one hundred: 1, 2, 3,' -t 0 -n 300 < /dev/null | "
        "head -c 20"
    )
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=180
    )
    assert len(out.stdout) == 20
    assert out.stderr == ""
    assert out.returncode == 0


def test_stop_flag_escapes_stand_for_newlines_and_tabs():
    from vibechat.app.options import SamplingChoice, unescape

    assert unescape("a\\nb\\tc\\\\n\\q\\") == "a\nb\tc\\n\\q\\"  # other backslashes stay
    assert SamplingChoice(stop=["\\n\\n", "END"]).to_params().stop == ("\n\n", "END")


def test_stop_at_a_newline_typed_as_backslash_n(starter_installed):
    out = vibechat(
        "run",
        "-p",
        "Count from one to twenty, one number per line:\n1\n2\n3",
        "-t",
        "0",
        "-n",
        "60",
        "--stop",
        "\\n",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    # Without the stop, this prompt gets "1\n2\n3\n4..." up to the token limit here; whether this
    # CPU's reply reaches a line break is the model's choice, but none is ever in the text.
    assert obj["params"]["stop"] == ["\n"] and "\n" not in obj["text"]
    assert obj["finish_reason"] in ("stop", "length")


def test_ctrl_c_keeps_output_and_exits_130(starter_installed, rambling):
    proc = subprocess.Popen(
        [
            str(VIBECHAT_BIN),
            "run",
            "-p",
            "Count to one thousand: 1, 2, 3,",
            "-t",
            "0",
            "-n",
            "3000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )
    assert proc.stdout is not None
    first = os.read(proc.stdout.fileno(), 64)  # wait until the reply is streaming
    assert first
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert b"Traceback" not in err
    assert (first + rest).strip()


def _cpu_only_build() -> bool:
    import llama_cpp

    return not llama_cpp.llama_supports_gpu_offload()


@pytest.mark.skipif(
    not _cpu_only_build(), reason="this llama-cpp-python build can offload to a GPU"
)
def test_gpu_layers_on_a_cpu_only_build_are_an_error_with_the_rebuild_command(
    starter_installed, monkeypatch
):
    """`run` fails (exit 1, one line) rather than silently running on the CPU; the chat warns."""
    for layers, needle in (
        (
            "5",
            'CPU-only: rebuild it for CUDA with CMAKE_ARGS="-DGGML_CUDA=on" pip install '
            "--force-reinstall --no-cache-dir llama-cpp-python==",
        ),
        ("-1", 'CMAKE_ARGS="-DGGML_CUDA=on" python3 dev.py chat'),
    ):
        out = vibechat("run", "-p", "hi", "-n", "2", "--n-gpu-layers", layers)
        assert out.returncode == 1 and needle in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and out.stdout == ""
    monkeypatch.setenv("VIBECHAT_GPU_LAYERS", "-1")
    out = vibechat("run", "-p", "hi", "-n", "2")
    assert out.returncode == 1 and "GPU offload of all layers was asked for" in out.stderr
    assert "-DGGML_METAL=on" in out.stderr and out.stderr.count("\n") == 1
    out = vibechat(
        "run", "-p", "hi", "-n", "2", "--n-gpu-layers", "0", "--ctx", "512"
    )  # the flag wins: CPU only
    assert out.returncode == 0, out.stderr
    # Not asking (the default: all if possible) never fails: every other run in this file
    # (test_streams_reply_to_stdout_on_the_starter_model first) runs with the default.


def test_prompt_lookup_drafting_gives_the_same_greedy_reply_and_auto_reports_its_drafts(
    starter_installed, rambling
):
    """One plain greedy run is the reference for both kinds of drafting: prompt lookup gives the
    same text; auto reports its drafts, its final draft length and whether it turned off (in the
    JSON and in --stats)."""
    code = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(6))
    args = (
        "run",
        "-p",
        f"Rewrite this code with x renamed to y:\n{code}",
        "-t",
        "0",
        "-n",
        "24",
        "--json",
        "--ctx",
        "512",
    )
    plain = json.loads(vibechat(*args).stdout)
    assert plain["stats"]["drafted_tokens"] == 0 and plain["engine"]["speculative"] == "off"
    assert plain["stats"]["draft_k"] == 0 and plain["stats"]["drafting_turned_off"] is False

    out = vibechat(*args, "--draft", "prompt-lookup", "--draft-tokens", "6", "--stats")
    assert out.returncode == 0, out.stderr
    drafted = json.loads(out.stdout)
    assert drafted["text"] == plain["text"]
    assert (
        drafted["engine"]["speculative"] == "prompt-lookup"
        and drafted["engine"]["draft_tokens"] == 6
    )
    assert drafted["stats"]["drafted_tokens"] >= drafted["stats"]["accepted_draft_tokens"] > 0
    assert "· drafted " in out.stderr and "accepted" in out.stderr

    out = vibechat(*args, "--draft", "auto", "--draft-tokens", "6", "--stats")
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    stats = reply["stats"]
    assert reply["engine"]["speculative"] == "auto" and reply["engine"]["draft_tokens"] == 6
    assert (
        stats["drafted_tokens"] >= stats["accepted_draft_tokens"] >= 0
        and stats["drafted_tokens"] > 0
    )
    assert 0 <= stats["draft_k"] <= 6 and isinstance(stats["drafting_turned_off"], bool)
    said = (
        "drafting off (did not pay)"
        if stats["drafting_turned_off"]
        else f"draft k {stats['draft_k']}"
    )
    assert (
        f"· drafted {stats['drafted_tokens']}, accepted {stats['accepted_draft_tokens']}"
        in out.stderr
    )
    assert said in out.stderr


def test_a_draft_model_reference_drafts_and_shows_in_json_and_stats(starter_installed, rambling):
    code = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(6))
    out = vibechat(
        "run",
        "-p",
        f"Rewrite this code with x renamed to y:\n{code}",
        "-t",
        "0",
        "-n",
        "16",
        "--json",
        "--stats",
        "--draft-model",
        "starter",
        "--draft-tokens",
        "4",
        "--ctx",
        "512",
    )
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    engine, stats = reply["engine"], reply["stats"]
    assert engine["speculative"] == "auto" and engine["draft_tokens"] == 4
    assert engine["draft_model"] and engine["draft_model_bytes"] > 100_000_000
    assert stats["drafted_tokens"] >= stats["accepted_draft_tokens"] and stats["drafted_tokens"] > 0
    assert f"draft model {engine['draft_model']}" in out.stderr


def test_the_draft_model_from_the_environment_and_from_the_config_file(
    starter_installed, monkeypatch, tmp_path
):
    """The variable drafts in a real run; the config file's key is the same setting (one table,
    one Config: engine/settings), so `config show` proves the file gives it, without loading two
    models a second time."""
    args = (
        "run",
        "-p",
        "Say hi.",
        "-t",
        "0",
        "-n",
        "8",
        "--json",
        "--draft-tokens",
        "3",
        "--ctx",
        "512",
    )
    monkeypatch.setenv("VIBECHAT_DRAFT_MODEL", "starter")
    out = vibechat(*args)
    assert out.returncode == 0, out.stderr
    engine = json.loads(out.stdout)["engine"]
    assert engine["draft_model"] and engine["speculative"] == "auto" and engine["draft_tokens"] == 3
    monkeypatch.delenv("VIBECHAT_DRAFT_MODEL")
    config = tmp_path / "draft.toml"
    config.write_text('draft_model = "starter"\n', encoding="utf-8")
    monkeypatch.setenv("VIBECHAT_CONFIG", str(config))
    shown = vibechat("config", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["settings"]["draft_model"]["value"] == "starter"
    assert json.loads(shown.stdout)["settings"]["draft_model"]["source"].startswith("file")


def test_help_lists_every_flag():
    out = vibechat("run", "--help")
    assert out.returncode == 0
    for flag in (
        "--prompt",
        "--model",
        "--system",
        "--temperature",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "--max-tokens",
        "--seed",
        "--stop",
        "--ctx",
        "--n-gpu-layers",
        "--threads",
        "--kv-cache-type",
        "--draft",
        "--draft-tokens",
        "--draft-model",
        "--repack",
        "--json",
        "--stats",
        "--raw",
    ):
        assert flag in out.stdout


def test_a_run_is_titled_by_its_prompt_never_by_the_starters_reply(starter_installed):
    """Issue 46 point 7: the starter is a base model; its reply ("How can I help you?" after
    "Hello", "I like apples." after a piped "hi") continues the text and is no title. A run's
    conversation is titled by its prompt, whatever the model answered."""
    said = vibechat("run", "-n", "24", "Hello")
    piped = vibechat("run", "-n", "24", input="hi\n")
    assert said.returncode == 0 and piped.returncode == 0, said.stderr + piped.stderr
    listed = json.loads(vibechat("history", "list", "--json").stdout)
    assert [c["title"] for c in listed] == ["hi", "Hello"]  # newest first
