"""The token lens in the chat on the real starter model (issue 43 point 2): turned on, a reply
looked at token by token, its steps' candidates compared with the events the engine sent (never
with particular tokens), the cut lines moved by the slider keys while the lens is open."""

from __future__ import annotations

import pytest

from fakes import send, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.widgets.token_lens import TokenLens
from vibechat.engine.settings.params import LENS_DEFAULT, SamplingParams
from vibechat.engine.turns.backend import TokenCandidates

pytestmark = pytest.mark.model

SIZE = (80, 24)


def datas(step: TokenCandidates) -> list[bytes]:
    return [c.data for c in step.top]


async def test_the_lens_follows_a_real_reply_and_the_sliders_move_its_cut_lines(
    backend, monkeypatch
):
    seen: list[TokenCandidates] = []
    stream_chat = backend.stream_chat

    def recording(*args, **kwargs):
        for event in stream_chat(*args, **kwargs):
            if isinstance(event, TokenCandidates):
                seen.append(event)
            yield event

    monkeypatch.setattr(backend, "stream_chat", recording)
    params = SamplingParams(temperature=0.8, top_k=5, top_p=1.0, min_p=0.0, max_tokens=12, seed=7)
    app = create_app(backend, params=params, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f11")  # the lens on, for the conversation
        assert app.conversation.params.logprobs == LENS_DEFAULT
        await send(pilot, "The capital of France is")
        assert seen, "the engine sent the lens's steps"
        await pilot.press("f12")
        await pilot.pause()
        view = app.query_one(TokenLens)
        assert view.has_class("-open") and view.has_focus and not app.chat.display
        # The reply's steps are the events', in order; the panel shows the cursor's step.
        assert [datas(s) for s in view.steps] == [datas(s) for s in seen]
        assert view.rows is not None
        assert [r.candidate.data for r in view.rows.rows] == datas(seen[0])
        last = len(seen) - 1
        await pilot.press("right", "right")
        assert view.cursor == min(2, last)
        assert [r.candidate.data for r in view.rows.rows] == datas(seen[view.cursor])
        await pilot.press("left")
        assert view.cursor == min(1, last)
        await pilot.press("down")  # the next line, or the last token on the last line
        below = view.cursor
        assert below >= min(1, last)
        assert [r.candidate.data for r in view.rows.rows] == datas(seen[below])
        await pilot.press("up")
        assert view.cursor <= below
        # The sliders move under the open lens: top-k's line follows k.
        assert view.rows.line_at("top-k") == 5
        await pilot.press("f8")
        await pilot.pause()
        assert app.conversation.params.top_k == 6 and view.rows.line_at("top-k") == 6
        await pilot.press("f7", "f7", "f7")
        await pilot.pause()
        assert view.rows.line_at("top-k") == 3
        # The temperature's slider in the panel (F2): hotter spreads the draw.
        before = [row.after for row in view.rows.rows]
        await pilot.press("f2", "right", "right")
        await pilot.pause()
        assert app.conversation.params.temperature > 0.8
        assert view.has_class("-open")
        after = [row.after for row in view.rows.rows]
        assert after[0] <= before[0] + 1e-9
        await pilot.press("f2")
        assert view.has_focus
        await pilot.press("escape")
        assert not view.has_class("-open") and app.chat.display
        assert app.prompt_input.has_focus
