"""/format in the chat: a reply that is not complete (cut by the token limit, or ended before its
JSON was whole) is marked as incomplete under the reply, not only as cut; free text is just cut.
The real starter where the grammar makes the cut certain on any CPU (it forbids the end until 300
digits are written); a fake backend where the model's own choice of end would decide the test."""

from __future__ import annotations

import json

import pytest

from fakes import RecordingBackend, send, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.turns.backend import GenerationDone, GenerationStats, TextDelta

DIGITS = {
    "type": "object",
    "properties": {"digits": {"type": "string", "pattern": "^[0-9]{300}$"}},
    "required": ["digits"],
    "additionalProperties": False,
}


def status_line(app) -> str:
    return app.chat.query(AssistantMessage).last().status_shown.plain.strip()


@pytest.mark.model
async def test_a_structured_reply_cut_at_the_token_limit_says_its_json_is_incomplete(backend):
    fmt = OutputFormat("schema", json.dumps(DIGITS), "digits.json")
    app = create_app(
        backend,
        params=SamplingParams(seed=1, max_tokens=4, output_format=fmt),
        blink=False,
        save=False,
    )
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        await send(pilot, "A long number as JSON")
        assert app.replies.last.finish_reason == "length"
        assert status_line(app) == "… cut at the token limit: the JSON output is incomplete"


class CutAtTheLimit(RecordingBackend):
    """Writes its scripted reply a word a token and ends at ``max_tokens`` (finish_reason
    length) or after its last word (stop): where it ends is the script's, not a model's."""

    def stream_chat(self, messages, params, tools=(), tool_choice="auto"):
        words = self.reply.split(" ")
        limit = params.max_tokens or len(words)
        text = " ".join(words[:limit])
        yield TextDelta(text)
        stats = GenerationStats(
            completion_tokens=min(limit, len(words)),
            seed=1,
            finish_reason="length" if limit < len(words) else "stop",
        )
        yield GenerationDone(text=text, stats=stats, params=params.with_seed())


async def test_free_text_cut_at_the_token_limit_is_only_cut():
    fake = CutAtTheLimit("Paris is the capital of France and its largest city.")
    fmt = OutputFormat("schema", json.dumps(DIGITS), "digits.json")
    app = create_app(
        fake,
        params=SamplingParams(seed=1, max_tokens=4, output_format=fmt),
        blink=False,
        save=False,
    )
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        await send(pilot, "/format off")
        await send(pilot, "And in words?")
        assert app.replies.last.finish_reason == "length"
        assert status_line(app) == "… cut at the token limit"


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (
            '{"name":"a person you can imagine.',
            "… ended: the JSON output is incomplete",
        ),  # a stop string cut it
        ('{"digits": 12}', "… ended: the JSON does not match the schema"),
        ('{"digits": "' + "7" * 300 + '"}', ""),  # whole and matching: nothing to say
    ],
)
async def test_a_structured_reply_that_ends_says_whether_it_is_whole(reply, status):
    fmt = OutputFormat("schema", json.dumps(DIGITS), "digits.json")
    app = create_app(
        CutAtTheLimit(reply),
        params=SamplingParams(seed=1, max_tokens=400, output_format=fmt),
        blink=False,
        save=False,
    )
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        await send(pilot, "A long number as JSON")
        assert app.replies.last.finish_reason == "stop"
        assert status_line(app) == status
