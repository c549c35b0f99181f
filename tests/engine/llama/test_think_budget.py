"""The thinking budget on the local engine (issue 45, point 3): the starter's weights under a
forced `<think>` frame (a chat template whose generation prompt opens the thinking block, so the
reply starts inside it, as DeepSeek-R1's distills do). Here the starter does not close the block
by itself; with a budget the engine puts the closing phrase and `</think>` into the reply at the
budget and the reply goes on as an answer. What the model writes is not judged: only what the
engine did (the counts it reports, the phrase where it belongs, the switch to answering).

Which tokens the starter writes differs between CPUs: greedy, it might close the block or end
the reply itself before the budget on some CPU, and the engine then rightly puts nothing in. So
each check runs its prompts (``PROMPTS``) until one reaches the budget: every reply that reached
it must show the mechanism whole, every one that did not must show nothing of it, and at least
one must reach it (the starter would have to close or end within ``BUDGET`` tokens on every
prompt for that to fail)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, collect, loaded_starter
from ggufgen import copy_with_metadata
from vibechat.engine.errors import InvalidParameterError
from vibechat.engine.llama.think_budget import closing_tokens
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.think_switch import DEFAULT_THINK_BUDGET_MESSAGE
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta, ThinkingDelta

pytestmark = pytest.mark.model

# Gemma's turns, and a generation prompt that opens the thinking block.
THINK_FRAME = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n"
    "{{ m.content }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n<think>\n{% endif %}"
)
ASKED = [ChatMessage("user", "Think step by step: what is 17 times 23?")]
PROMPTS = [
    ASKED,
    [ChatMessage("user", "Think it through: which is heavier, a kilogram of iron or of wool?")],
    [ChatMessage("user", "Reason carefully about why the sky looks blue, then answer briefly.")],
    [ChatMessage("user", "Work out how many days there are in three weeks and four days.")],
]
BUDGET = 8


def think_frame_model(starter_path: Path, folder: Path) -> Path:
    """The starter's weights with the forced `<think>` frame as their chat template."""
    return copy_with_metadata(
        starter_path, folder / "starter-think-frame.gguf", {"tokenizer.chat_template": THINK_FRAME}
    )


@pytest.fixture(scope="module")
def thinker_path(starter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return think_frame_model(starter_path, tmp_path_factory.mktemp("think"))


@pytest.fixture(scope="module")
def thinker(thinker_path: Path):
    with loaded_starter(thinker_path, prompt_format="template", context_size=1024) as backend:
        yield backend


def events(backend, params, asked=ASKED):
    """A reply's events, in order, and its end."""
    seen = list(backend.stream_chat(asked, params))
    done = seen[-1]
    assert isinstance(done, GenerationDone)
    return seen, done


def until_reached(backend, params):
    """The replies to ``PROMPTS`` in turn, up to the first that reached the budget (its events
    and end last); a reply that did not (the model closed the block or ended first) shows
    nothing of the engine's. Fails when none reached it."""
    for asked in PROMPTS:
        seen, done = events(backend, params, asked)
        if done.stats.think_budget_reached:
            return seen, done
        assert done.stats.think_budget == params.think_budget
        assert DEFAULT_THINK_BUDGET_MESSAGE.strip() not in done.thinking
    raise AssertionError(f"no prompt's thinking reached a budget of {params.think_budget}")


def closing_count(backend) -> int:
    """The tokens the engine puts in at the budget: the phrase and the end of thinking."""
    return len(closing_tokens(backend._prompt.tokenize, DEFAULT_THINK_BUDGET_MESSAGE, False))


def test_the_thinking_ends_at_the_budget_and_the_reply_goes_on_to_answer(thinker):
    budget = BUDGET
    params = SamplingParams(temperature=0, max_tokens=64, think_budget=budget)
    seen, done = until_reached(thinker, params)
    stats = done.stats
    assert stats.think_budget == budget and stats.think_budget_reached is True
    # The engine's limit, not the model's choice: the budget, then only what it put in.
    assert budget <= stats.thinking_tokens <= budget + closing_count(thinker)
    # The phrase is the thinking's end; the answer is what came after the block closed.
    assert done.thinking.rstrip().endswith(DEFAULT_THINK_BUDGET_MESSAGE.strip())
    assert "</think>" not in done.thinking
    # The engine switched to answering: tokens came after the thinking (every token of a reply
    # still thinking counts as thinking), or the reply ended right after the block.
    assert stats.completion_tokens > stats.thinking_tokens or stats.finish_reason == "stop"
    kinds = [type(e) for e in seen if isinstance(e, (ThinkingDelta, TextDelta))]
    assert ThinkingDelta in kinds
    if TextDelta in kinds:
        # Never thinking again once the answer began.
        assert ThinkingDelta not in kinds[kinds.index(TextDelta) :]


def test_drafting_and_the_token_lens_keep_the_budget(thinker_path: Path):
    """Prompt-lookup drafting verifies drafts by sampling each position: a closing token stands
    in for the sample there (kept when the draft equals it); the token lens reads each step's
    candidates, the closing ones included. The same limit holds."""
    with loaded_starter(
        thinker_path,
        prompt_format="template",
        context_size=1024,
        speculative="prompt-lookup",
        draft_tokens=6,
    ) as drafted:
        params = SamplingParams(temperature=0, max_tokens=64, think_budget=BUDGET, logprobs=2)
        _seen, done = until_reached(drafted, params)
        stats = done.stats
        assert stats.drafted_tokens > 0, "the starter's repeated words give drafts"
        assert stats.think_budget_reached is True
        assert BUDGET <= stats.thinking_tokens <= BUDGET + closing_count(drafted)
        assert done.thinking.rstrip().endswith(DEFAULT_THINK_BUDGET_MESSAGE)
        assert stats.completion_tokens > stats.thinking_tokens or stats.finish_reason == "stop"


def test_without_a_budget_the_engine_puts_nothing_in(thinker):
    _seen, done = events(thinker, SamplingParams(temperature=0, max_tokens=48))
    stats = done.stats
    assert stats.think_budget is None and stats.think_budget_reached is False
    assert DEFAULT_THINK_BUDGET_MESSAGE.strip() not in done.thinking


def test_a_budget_beyond_the_context_is_refused_in_one_line(thinker):
    with pytest.raises(InvalidParameterError) as refused:
        collect(thinker, ASKED, SamplingParams(max_tokens=4, think_budget=5000))
    message = str(refused.value)
    assert "\n" not in message
    assert "beyond the model's context (1,024 tokens)" in message and "'off'" in message


def test_run_json_carries_the_thinking_tokens_the_budget_and_that_it_was_reached(
    starter_path: Path, tmp_path: Path
):
    path = think_frame_model(starter_path, tmp_path)
    args = ["run", "--model", str(path), "--prompt-format", "template", "--ctx", "1024"]
    args += ["-t", "0", "-n", "40", "--no-save", "--json", "--think-budget", str(BUDGET)]
    args += ["--think-budget-message", "Enough."]
    for asked in PROMPTS:
        out = subprocess.run(
            [str(VIBECHAT_BIN), *args, "-p", asked[0].content],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, out.stderr
        obj = json.loads(out.stdout)
        stats = obj["stats"]
        assert obj["params"]["think_budget"] == BUDGET and stats["think_budget"] == BUDGET
        if stats["think_budget_reached"] is True:
            break
        # The model closed the block or ended first: the engine put nothing in.
        assert not obj["thinking"].rstrip().endswith("Enough.")
    else:
        raise AssertionError(f"no prompt's thinking reached a budget of {BUDGET}")
    assert BUDGET <= stats["thinking_tokens"] < stats["completion_tokens"] or (
        obj["finish_reason"] == "stop"
    )
    assert obj["thinking"].rstrip().endswith("Enough.")
