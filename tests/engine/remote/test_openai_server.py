"""OpenAICompatibleBackend against a real server: llama-cpp-python's OpenAI-compatible
server (``python -m llama_cpp.server``) on 127.0.0.1 with the starter model, started once
per session (the ``llama_server`` fixture). The same kinds of checks as
test_llamacpp_backend.py runs on the local backend, and ``vibechat run --backend openai``
end to end."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from conftest import VIBECHAT_BIN
from conftest import collect as collect_reply
from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
from vibechat.engine.remote.options import OpenAIOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta

pytestmark = pytest.mark.model

HELLO = [ChatMessage("user", "Write a list of three fruits.")]
GREEDY = SamplingParams(temperature=0, max_tokens=24, seed=1)


@pytest.fixture
def remote(llama_server) -> OpenAICompatibleBackend:
    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=llama_server, model="starter"))
    backend.load()
    return backend


def collect(backend, messages=HELLO, params=GREEDY):
    return collect_reply(backend, messages, params)


def test_the_server_and_its_model_are_described(remote, llama_server):
    info = remote.describe()
    assert info.name == "starter" and info.backend == "openai"
    assert info.device == "openai · " + llama_server.removesuffix("/v1")
    assert remote.list_models() == ["starter"]


def test_streaming_yields_many_deltas_that_join_to_the_text(remote):
    deltas, done = collect(remote, params=SamplingParams(temperature=0, max_tokens=40, seed=1))
    assert len(deltas) > 10
    assert "".join(deltas) == done.text and done.text.strip()
    assert done.stats.finish_reason == "length"
    # llama-cpp-python's server sends no usage while streaming: measured here.
    assert 10 < done.stats.completion_tokens <= 40
    assert done.stats.ttft_ms > 0 and done.stats.decode_tokens_per_s > 0


def test_greedy_is_deterministic(remote):
    _, first = collect(remote)
    _, second = collect(remote)
    assert first.text == second.text and first.text.strip()


def test_same_seed_reproduces_a_sampled_reply(remote):
    params = SamplingParams(
        temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234, max_tokens=24
    )
    _, first = collect(remote, params=params)
    _, second = collect(remote, params=params)
    assert first.text == second.text and first.stats.seed == 1234
    others = {collect(remote, params=params.replace(seed=seed))[1].text for seed in (1, 2, 3)}
    assert len(others | {first.text}) > 1  # the seed really reaches the server's sampler


def test_the_extra_sampling_fields_reach_the_server(remote):
    _, greedy = collect(remote)
    # top_k 1 (or min_p 1) leaves only the most likely token: greedy, however hot the sampling.
    hot = SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=24, seed=7)
    assert collect(remote, params=hot.replace(top_k=1))[1].text == greedy.text
    assert collect(remote, params=hot.replace(min_p=1.0))[1].text == greedy.text
    assert collect(remote, params=hot)[1].text != greedy.text  # ... which plain hot sampling is not
    _, long_plain = collect(remote, params=GREEDY.replace(max_tokens=40))
    _, penalised = collect(remote, params=GREEDY.replace(max_tokens=40, repeat_penalty=1.8))
    assert penalised.text != long_plain.text


def test_max_tokens_is_honoured(remote):
    _, long = collect(remote, params=GREEDY.replace(max_tokens=40))
    _, short = collect(remote, params=GREEDY.replace(max_tokens=7))
    assert short.stats.finish_reason == "length" and 0 < short.stats.completion_tokens <= 7
    assert long.text.startswith(short.text) and len(short.text) < len(long.text)


def test_stop_string_is_honoured(remote):
    _, free = collect(remote, params=GREEDY.replace(max_tokens=40))
    word = free.text.strip().split()[1]
    cut = free.text.index(word)
    _, done = collect(remote, params=GREEDY.replace(max_tokens=40, stop=(word,)))
    assert done.text == free.text[:cut]
    assert done.stats.finish_reason == "stop"


def test_cancel_mid_stream_then_a_new_request_works(remote):
    seen = 0
    done = None
    for event in remote.stream_chat(HELLO, SamplingParams(temperature=0, max_tokens=500, seed=1)):
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 5:
                threading.Thread(target=remote.cancel).start()
        elif isinstance(event, GenerationDone):
            done = event
    assert done.stats.finish_reason == "cancelled"
    assert 5 <= done.stats.completion_tokens < 100
    _, after = collect(remote)
    assert after.stats.finish_reason == "length" and after.text


def test_a_conversation_continues_over_several_turns(remote):
    _, first = collect(remote)
    turn2 = HELLO + [
        ChatMessage("assistant", first.text),
        ChatMessage("user", "And three vegetables?"),
    ]
    _, second = collect(remote, turn2)
    assert second.text.strip() and second.stats.finish_reason in ("stop", "length")


def vibechat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def test_vibechat_run_with_the_openai_backend_end_to_end(llama_server):
    out = vibechat(
        "run",
        "--backend",
        "openai",
        "--base-url",
        llama_server,
        "--model",
        "starter",
        "-p",
        "Write a list of three fruits.",
        "-t",
        "0",
        "--seed",
        "1",
        "-n",
        "8",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["model"] == "starter" and obj["text"].strip() and obj["finish_reason"] == "length"
    assert obj["params"]["seed"] == 1
    saved = json.loads(vibechat("history", "show", str(obj["conversation_id"]), "--json").stdout)
    assert saved["model"] == "starter"
    statuses = [(m["role"], m["status"]) for m in saved["messages"]]
    assert statuses == [("user", "complete"), ("assistant", "cut")]  # -n 8 cut it
    assert saved["messages"][1]["content"] == obj["text"]
    # Streaming to stdout, with the server named in the stats.
    out = vibechat(
        "run", "--base-url", llama_server, "--model", "starter", "-p", "Hi", "-n", "4", "--stats"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "openai · http://127.0.0.1:" in out.stderr
