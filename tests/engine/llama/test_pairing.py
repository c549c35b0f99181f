"""Two replies at once (engine/llama/pairing.py) on the real starter model: two sequences of
one context, one batch per step, the prompt's shared prefix evaluated once, each side with its
own settings and its own end; through the engine process too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import collect, loaded_starter, same_start, worker_threads
from ggufgen import copy_with_metadata
from test_local_tools import TEMPLATES, WEATHER
from test_think_budget import PROMPTS, closing_count, think_frame_model
from vibechat.engine.errors import GenerationError
from vibechat.engine.llama.pairing import side_limits
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.settings.think_switch import DEFAULT_THINK_BUDGET_MESSAGE
from vibechat.engine.turns.backend import (
    ChatMessage,
    GenerationDone,
    PairedReplies,
    SideEvent,
    SideRequest,
    TextDelta,
    ThinkingDelta,
)

STORY = (ChatMessage("user", "Write a long story about a dragon who learns to sing."),)
CAPITAL = (ChatMessage("user", "What is the capital of France?"),)
# A JSON object the grammar bounds (an enum, little whitespace): the reply completes well within
# its limit, whatever the model would write.
YES_NO = OutputFormat(
    "schema",
    json.dumps(
        {
            "type": "object",
            "properties": {"answer": {"enum": ["yes", "no"]}},
            "required": ["answer"],
            "additionalProperties": False,
        }
    ),
    "yes-no.json",
)
ZEBRA = OutputFormat("grammar", 'root ::= "Zebra-" [0-9] [0-9] [0-9]', "zebra.gbnf")


def pair(backend, a: SideRequest, b: SideRequest, on_text=None):
    """Both sides' ``GenerationDone`` and the text their deltas carried; ``on_text(side)`` is
    called on each side's text as it comes."""
    done: dict[str, GenerationDone] = {}
    texts = {"A": "", "B": ""}
    for item in backend.stream_pair(a, b):
        assert isinstance(item, SideEvent)
        assert item.side not in done, "nothing comes for a side after its end"
        if isinstance(item.event, TextDelta):
            texts[item.side] += item.event.text
            if on_text is not None:
                on_text(item.side)
        elif isinstance(item.event, GenerationDone):
            done[item.side] = item.event
    assert set(done) == {"A", "B"}
    return done, texts


def test_side_limits_share_the_context_between_the_two_replies():
    prompt = list(range(100))
    assert side_limits(1000, prompt, prompt, 4, 12) == (4, 12)
    # The prompts take 101 cells (the last token on each side's sequence): 899 are left. Both
    # ask for more: the smaller ask is kept up to half, the other gets the rest.
    assert side_limits(1000, prompt, prompt, None, 300) == (599, 300)
    assert side_limits(1000, prompt, prompt, None, None) == (449, 450)
    # Prompts that part early take more cells.
    assert side_limits(1000, prompt, [0, *range(500, 599)], None, None) == (400, 401)
    with pytest.raises(GenerationError, match="no room for two replies"):
        side_limits(102, prompt, prompt, None, None)


@pytest.mark.model
def test_the_llama_backend_offers_paired_replies(backend):
    assert isinstance(backend, PairedReplies)


@pytest.mark.model
def test_each_side_stops_at_its_own_limit_while_the_other_goes_on(gemma_backend):
    a = SideRequest(STORY, SamplingParams(temperature=0.8, max_tokens=4, seed=1))
    b = SideRequest(STORY, SamplingParams(temperature=0.8, max_tokens=12, seed=2))
    done, texts = pair(gemma_backend, a, b)
    # Each side ends at its own limit, unless the model ended it first (tokens differ by CPU).
    for side, limit in (("A", 4), ("B", 12)):
        assert done[side].finish_reason in ("length", "stop")
        assert done[side].stats.completion_tokens <= limit
        if done[side].finish_reason == "length":
            assert done[side].stats.completion_tokens == limit
    for side in "AB":
        assert texts[side] == done[side].text and texts[side].strip()
        assert done[side].params is not None
    assert done["A"].params.max_tokens == 4 and done["B"].params.max_tokens == 12
    assert (done["A"].params.seed, done["B"].params.seed) == (1, 2)


@pytest.mark.model
def test_a_greedy_side_starts_as_a_plain_greedy_reply(gemma_backend):
    greedy = SamplingParams(temperature=0, max_tokens=24)
    _deltas, plain = collect(gemma_backend, list(STORY), greedy)
    gemma_backend.reset()
    a = SideRequest(STORY, greedy)
    b = SideRequest(STORY, SamplingParams(temperature=1.5, max_tokens=24, seed=5))
    done, _texts = pair(gemma_backend, a, b)
    assert same_start(done["A"].text, plain.text, words=5)


@pytest.mark.model
def test_the_shared_prompt_is_evaluated_once(backend):
    _deltas, plain = collect(backend, list(CAPITAL), SamplingParams(temperature=0, max_tokens=8))
    n_prompt = plain.stats.prompt_tokens
    assert plain.stats.prompt_tokens_evaluated == n_prompt
    backend.reset()
    a = SideRequest(CAPITAL, SamplingParams(temperature=0, max_tokens=8))
    b = SideRequest(CAPITAL, SamplingParams(temperature=1.0, max_tokens=8, seed=3))
    done, _texts = pair(backend, a, b)
    a_stats, b_stats = done["A"].stats, done["B"].stats
    assert a_stats.prompt_tokens == b_stats.prompt_tokens == n_prompt
    # One prompt's tokens, and the last token once more for the second sequence's logits.
    assert a_stats.prompt_tokens_evaluated + b_stats.prompt_tokens_evaluated == n_prompt + 1
    assert b_stats.prompt_tokens_evaluated == 1


@pytest.mark.model
def test_sides_with_other_system_prompts_share_what_they_have_in_common(backend):
    system_a = (ChatMessage("system", "You answer in one word."), *CAPITAL)
    system_b = (ChatMessage("system", "You answer in one long sentence."), *CAPITAL)
    a_alone = backend.count_tokens(list(system_a))
    b_alone = backend.count_tokens(list(system_b))
    a = SideRequest(system_a, SamplingParams(temperature=0, max_tokens=8))
    b = SideRequest(system_b, SamplingParams(temperature=0, max_tokens=8))
    done, _texts = pair(backend, a, b)
    evaluated = sum(done[side].stats.prompt_tokens_evaluated for side in "AB")
    assert evaluated < a_alone + b_alone
    assert (done["A"].stats.prompt_tokens, done["B"].stats.prompt_tokens) == (a_alone, b_alone)


@pytest.mark.model
def test_one_side_stopped_alone_the_other_goes_on(gemma_backend):
    def on_text(side):
        if side == "A":
            gemma_backend.cancel_side("A")

    a = SideRequest(STORY, SamplingParams(temperature=0.8, max_tokens=40, seed=1))
    b = SideRequest(STORY, SamplingParams(temperature=0.8, max_tokens=16, seed=2))
    done, _texts = pair(gemma_backend, a, b, on_text)
    assert done["A"].finish_reason == "cancelled"
    assert done["A"].stats.completion_tokens < 40
    assert done["B"].finish_reason in ("length", "stop")
    if done["B"].finish_reason == "length":
        assert done["B"].stats.completion_tokens == 16


@pytest.mark.model
def test_the_next_plain_reply_continues_side_a_from_the_cache(backend):
    greedy = SamplingParams(temperature=0, max_tokens=16)
    _deltas, fresh = collect(backend, list(CAPITAL), greedy)
    backend.reset()
    a = SideRequest(CAPITAL, greedy)
    b = SideRequest(CAPITAL, SamplingParams(temperature=1.2, max_tokens=16, seed=9))
    pair(backend, a, b)
    _deltas, after = collect(backend, list(CAPITAL), greedy)
    # The prompt came from the cache side A left, and the reply is the model's own.
    assert after.stats.prompt_tokens_evaluated < after.stats.prompt_tokens
    assert same_start(after.text, fresh.text, words=5)


@pytest.mark.model
def test_each_side_follows_its_own_output_format_and_the_other_none(backend):
    question = (ChatMessage("user", "Is Paris the capital of France?"),)
    a = SideRequest(
        question, SamplingParams(temperature=0.8, seed=4, max_tokens=200, output_format=YES_NO)
    )
    b = SideRequest(question, SamplingParams(temperature=0, max_tokens=12))
    done, _texts = pair(backend, a, b)
    assert done["A"].finish_reason == "stop", done["A"].text
    assert json.loads(done["A"].text)["answer"] in ("yes", "no")
    assert done["A"].params.output_format == YES_NO and done["B"].params.output_format is None
    # The other way round, a grammar on side B, side A free.
    backend.reset()
    a = SideRequest(question, SamplingParams(temperature=0, max_tokens=12))
    b = SideRequest(
        question, SamplingParams(temperature=0.8, seed=5, max_tokens=32, output_format=ZEBRA)
    )
    done, _texts = pair(backend, a, b)
    assert re.fullmatch(r"Zebra-[0-9]{3}", done["B"].text), done["B"].text
    assert not re.fullmatch(r"Zebra-[0-9]{3}", done["A"].text)


@pytest.mark.model
def test_each_side_thinks_and_keeps_its_own_thinking_budget(starter_path, tmp_path):
    """The forced `<think>` frame (test_think_budget.py): both replies start inside the
    thinking; side A's budget closes A's thinking, side B (none) thinks on. As there, the
    starter's greedy tokens differ by CPU: the prompts are tried in turn until side A's thinking
    reaches the budget; a side that closed or ended first shows nothing of the engine's."""
    with loaded_starter(
        think_frame_model(starter_path, tmp_path), prompt_format="template", context_size=1024
    ) as thinker:
        for asked in PROMPTS:
            a = SideRequest(
                tuple(asked), SamplingParams(temperature=0, max_tokens=48, think_budget=8)
            )
            b = SideRequest(tuple(asked), SamplingParams(temperature=0, max_tokens=48))
            kinds: dict[str, list[type]] = {"A": [], "B": []}
            done: dict[str, GenerationDone] = {}
            for item in thinker.stream_pair(a, b):
                kinds[item.side].append(type(item.event))
                if isinstance(item.event, GenerationDone):
                    done[item.side] = item.event
            stats_a, stats_b = done["A"].stats, done["B"].stats
            # Side B has no budget: the engine puts nothing into its thinking.
            assert stats_b.think_budget is None and stats_b.think_budget_reached is False
            assert DEFAULT_THINK_BUDGET_MESSAGE.strip() not in done["B"].thinking
            assert (ThinkingDelta in kinds["B"]) == bool(done["B"].thinking)
            assert stats_a.think_budget == 8
            if not stats_a.think_budget_reached:
                assert DEFAULT_THINK_BUDGET_MESSAGE.strip() not in done["A"].thinking
                continue
            assert ThinkingDelta in kinds["A"] and done["A"].thinking
            assert 8 <= stats_a.thinking_tokens <= 8 + closing_count(thinker)
            assert done["A"].thinking.rstrip().endswith(DEFAULT_THINK_BUDGET_MESSAGE.strip())
            assert "</think>" not in done["A"].thinking
            return
        raise AssertionError("no prompt's side A thinking reached a budget of 8")


@pytest.mark.model
def test_a_side_offered_tools_ends_asking_for_its_call_and_the_other_answers(
    starter_path, tmp_path
):
    """The starter under Qwen 2.5's template (test_local_tools.py), tool choice ``required``
    on side A: A ends with one call whose arguments parse, its text held back; B, offered no
    tools, answers as text. What the model says is not judged."""
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    path = copy_with_metadata(
        starter_path, tmp_path / "qwen-tools-like.gguf", {"tokenizer.chat_template": source}
    )
    asked = (ChatMessage("user", "What will the weather be in Paris for the next 3 days?"),)
    with loaded_starter(path, prompt_format="template", context_size=2048) as backend:
        a = SideRequest(
            asked,
            SamplingParams(temperature=0, max_tokens=80, seed=1),
            tools=(WEATHER,),
            tool_choice="required",
        )
        b = SideRequest(asked, SamplingParams(temperature=0, max_tokens=16, seed=1))
        done, texts = pair(backend, a, b)
    call_side, plain_side = done["A"], done["B"]
    assert call_side.finish_reason == "tool_calls" and len(call_side.tool_calls) == 1
    call = call_side.tool_calls[0]
    arguments = call.parsed_arguments()
    assert call.name == "get_weather" and isinstance(arguments["city"], str)
    assert "<tool_call>" not in texts["A"]
    assert plain_side.finish_reason in ("stop", "length") and plain_side.tool_calls == ()


@pytest.mark.model
def test_the_engine_process_decodes_a_pair(starter_path: Path):
    worker = WorkerBackend(
        LlamaCppOptions(
            model_path=starter_path,
            context_size=4096,
            repack="off",
            threads=worker_threads(),
            # Gemma's turns: the story goes on, so only the cancel ends side A.
            prompt_format="gemma",
        )
    )
    try:
        assert isinstance(worker, PairedReplies)
        a = SideRequest(CAPITAL, SamplingParams(temperature=0, max_tokens=8))
        b = SideRequest(CAPITAL, SamplingParams(temperature=1.0, max_tokens=8, seed=4))
        done, texts = pair(worker, a, b)
        for side in "AB":
            assert texts[side] == done[side].text
        evaluated = sum(done[side].stats.prompt_tokens_evaluated for side in "AB")
        assert evaluated == done["A"].stats.prompt_tokens + 1
        # One side stopped alone through the process: the other goes on to its end.
        story_a = SideRequest(STORY, SamplingParams(temperature=0.8, max_tokens=400, seed=1))
        story_b = SideRequest(STORY, SamplingParams(temperature=0.8, max_tokens=6, seed=2))
        done, _texts = pair(worker, story_a, story_b, lambda side: worker.cancel_side("A"))
        assert done["A"].finish_reason == "cancelled"
        assert done["A"].stats.completion_tokens < 400
        assert done["B"].finish_reason in ("length", "stop")
        # The engine goes on answering plain replies.
        _deltas, after = collect(worker, list(CAPITAL), SamplingParams(temperature=0, max_tokens=8))
        assert after.text.strip()
    finally:
        worker.close()
