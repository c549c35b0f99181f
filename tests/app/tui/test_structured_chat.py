"""/format in the chat on the real starter model: a reply that the token limit cuts before its
JSON is complete is marked as incomplete under the reply, not only as cut."""

from __future__ import annotations

import json

import pytest

from fakes import send, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.chat_view import AssistantMessage
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat

pytestmark = pytest.mark.model

DIGITS = {"type": "object", "properties": {"digits": {"type": "string", "pattern": "^[0-9]{300}$"}},
          "required": ["digits"], "additionalProperties": False}


def status_line(app) -> str:
    return app.chat.query(AssistantMessage).last().query_one(".message--status").render().plain.strip()


async def test_a_structured_reply_cut_at_the_token_limit_says_its_json_is_incomplete(backend):
    fmt = OutputFormat("schema", json.dumps(DIGITS), "digits.json")
    app = create_app(backend, params=SamplingParams(seed=1, max_tokens=4, output_format=fmt), blink=False,
                     save=False)
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        await send(pilot, "A long number as JSON")
        assert app.replies.last.finish_reason == "length"
        assert status_line(app) == "… cut at the token limit: the JSON output is incomplete"
        await send(pilot, "/format off")
        await send(pilot, "And in words?")  # free text cut at the limit: just cut
        assert app.replies.last.finish_reason == "length"
        assert status_line(app) == "… cut at the token limit"
