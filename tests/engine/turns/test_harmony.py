"""gpt-oss's harmony channels on the local engine (engine/turns/harmony.py): ``analysis`` is
thinking, ``final`` the answer, split at every position (one cut and two), bounded buffering,
commentary / tool calls / unknown channels, a reply that ignores the format, an unfinished
header or body; detection from the template and the vocabulary; the local emitter (stop
strings on the answer only); the real engine with a gpt-oss-style template."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import worker_threads
from fakes import split_stream
from ggufgen import copy_with_metadata
from vibechat.engine.turns.chat_template import ChatTemplate
from vibechat.engine.turns.harmony import (
    MAX_HEADER,
    HarmonySplitter,
    channel_is_answer,
    uses_harmony,
)
from vibechat.engine.turns.prompt_format import GEMMA
from vibechat.engine.turns.thinking import ThinkingSplitter

THOUGHT = "User asks 2+2. <b>Easy</b>: 4."
ANSWER = "2 + 2 = **4**. (Not <|end of story>.)"
REPLY = (
    f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"
    f"<|start|>assistant<|channel|>final<|message|>{ANSWER}"
)
# gpt-oss's template, cut to its shape: a system message with the reasoning effort, the
# turns, and the generation prompt <|start|>assistant.
GPT_OSS = (
    "{{- '<|start|>system<|message|>Reasoning: ' + (reasoning_effort or 'medium') + '<|end|>' }}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|end|>' }}"
    "{%- else %}{{- '<|start|>' + message.role + '<|message|>' + message.content + "
    "'<|end|>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)


def split(pieces: list[str]) -> tuple[str, str, int]:
    return split_stream(HarmonySplitter(), pieces)


def test_channels_split_at_every_position_give_the_same_thinking_and_answer():
    for i in range(len(REPLY) + 1):
        assert split([REPLY[:i], REPLY[i:]])[:2] == (THOUGHT, ANSWER), i


def test_two_cuts_at_every_pair_of_positions():
    reply = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>ok"
    n = len(reply)
    for i in range(n + 1):
        for j in range(i, n + 1):
            assert split([reply[:i], reply[i:j], reply[j:]])[:2] == ("hm", "ok"), (i, j)


def test_one_character_at_a_time_holds_back_little_in_a_body():
    splitter = HarmonySplitter()
    for ch in REPLY:
        splitter.feed(ch)
        if splitter._state == 2:  # in a body: at most a marker's length less one
            assert len(splitter._held) < len("<|channel|>")
        assert len(splitter._held) <= MAX_HEADER
    assert split(list(REPLY))[:2] == (THOUGHT, ANSWER)


def test_commentary_tool_calls_and_unknown_channels_are_thinking():
    reply = (
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
        "<|start|>assistant<|channel|>musings<|message|>odd<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Sunny."
    )
    assert split([reply])[:2] == ('Need weather.{"city": "Paris"}odd', "Sunny.")
    assert channel_is_answer("assistant<|channel|>final") and channel_is_answer("assistant")
    assert not channel_is_answer("<|channel|>final to=functions.x")
    assert not channel_is_answer("<|channel|>commentary") and not channel_is_answer("<|channel|> ")


def test_a_reply_that_ignores_the_format_is_all_answer():
    assert split(["Just an answer <|channel|> here."])[:2] == ("", "Just an answer ")
    assert split(["  \n", "Hello"])[:2] == ("", "  \nHello")
    assert split(["<|chan", "nel of the sea"])[:2] == ("", "<|channel of the sea")
    assert split(["<|cha"])[:2] == ("", "<|cha")


def test_a_reply_cut_while_thinking_has_an_empty_answer():
    assert split(["<|channel|>analysis<|message|>still thinking <|e"])[:2] == (
        "still thinking <|e",
        "",
    )
    # Cut inside the next header: the header is protocol, dropped; nothing is invented.
    assert split(["<|channel|>analysis<|message|>done<|end|><|start|>assistant<|chan"])[:2] == (
        "done",
        "",
    )


def test_a_header_that_never_ends_is_text_and_buffering_stays_bounded():
    junk = "<|channel|>" + "x" * (3 * MAX_HEADER)
    thinking, answer, most_held = split([junk[i : i + 7] for i in range(0, len(junk), 7)])
    assert thinking == "" and answer == junk
    assert most_held <= MAX_HEADER + 7


def test_detection_from_the_template_and_the_vocabulary():
    assert uses_harmony(GPT_OSS)
    assert not uses_harmony(GEMMA) and not uses_harmony(GEMMA, lambda text: False)
    assert uses_harmony(GEMMA, lambda text: text in ("<|channel|>", "<|message|>"))
    prompt = ChatTemplate("gguf", GPT_OSS).render([])
    assert prompt.endswith("<|start|>assistant")


# --------------------------------------------------------------- local engine
def test_the_local_emitter_routes_channels_and_applies_stops_to_the_answer_only(monkeypatch):
    from vibechat.engine.llama import llamacpp
    from vibechat.engine.llama.decoding import Emitter

    monkeypatch.setattr(llamacpp.ll, "llama_vocab_is_eog", lambda _vocab, token: token == 0)
    raw = (
        "<|channel|>analysis<|message|>café "
        "STOP<|end|><|start|>assistant<|channel|>final<|message|>Bon STOP"
    ).encode()
    table = {i + 1: raw[i : i + 1] for i in range(len(raw))}  # one byte a token

    def run(stop: tuple[str, ...]):
        # a token table instead of a model: token 0 ends the reply (a turn token)
        out = Emitter(
            table.__getitem__, None, frozenset({0}), threading.Event(), 1000, stop, False, True
        )
        pieces = [p for token in [*table, 0] if not out.done for p in out.emit(token)] + out.tail()
        return ("".join(t for th, t in pieces if th), "".join(t for th, t in pieces if not th))

    assert run(()) == ("café STOP", "Bon STOP")
    assert run(("STOP",)) == ("café STOP", "Bon ")


@pytest.mark.model
def test_the_real_engine_finds_harmony_and_a_reply_without_channels_is_answer(
    starter_path: Path, tmp_path: Path, llama_backend
):
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import ChatMessage, GenerationDone

    assert llama_backend._prompt.harmony is False  # the starter: <think> family splitter
    path = copy_with_metadata(
        starter_path, tmp_path / "gpt-oss-style.gguf", {"tokenizer.chat_template": GPT_OSS}
    )
    backend = LlamaCppBackend(
        LlamaCppOptions(threads=worker_threads(), model_path=path, context_size=512, repack="off")
    )
    try:
        info = backend.load()
        assert backend._prompt.harmony is True and info.thinking_switch == "reasoning_effort"
        params = SamplingParams(temperature=0.0, max_tokens=8, seed=1)
        done = list(backend.stream_chat([ChatMessage("user", "Name a colour.")], params))[-1]
        assert isinstance(done, GenerationDone)
        # The starter writes no channels: all of it is the answer, none is lost.
        assert done.text and done.thinking == ""
        hi = [ChatMessage("user", "Hi")]
        assert backend._prompt.tokens(hi, "off") != backend._prompt.tokens(
            hi
        )  # reasoning_effort low, medium
    finally:
        backend.close()


def test_the_splitter_says_when_the_stream_is_inside_a_call_so_a_budget_waits():
    """The thinking budget never closes the thinking inside a tool call (issue 45): a message
    addressed to a tool is thinking, and ``in_call`` while its body streams."""
    splitter = HarmonySplitter()
    seen = []
    for piece in (
        "<|channel|>analysis<|message|>Let me look",
        " it up.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather",
        ' <|constrain|>json<|message|>{"city":',
        '"Paris"}<|call|>',
    ):
        splitter.feed(piece)
        seen.append((splitter.thinking, splitter.in_call))
    assert seen == [(True, False), (False, False), (True, True), (False, False)]
    assert not ThinkingSplitter(inside=True).in_call
