"""ReplyStream's slices: a burst is drawn in slices sized by what rendering costs."""

from __future__ import annotations

from vibechat.app.tui import reply_stream
from vibechat.app.tui.reply_stream import APPEND_LIMIT, APPEND_MAX, FIRST_LIMIT, ReplyStream


def stream() -> ReplyStream:
    return ReplyStream(widget=None, generation=1)  # type: ignore[arg-type]  # limit() does not touch it


def test_first_render_is_small_then_slices_follow_the_measured_cost():
    s = stream()
    assert s.limit() == FIRST_LIMIT
    s.started = True
    assert s.limit() == APPEND_LIMIT  # nothing measured yet
    s.s_per_char = reply_stream.SLICE_BUDGET_S / 3000
    assert s.limit() == 3000
    s.s_per_char = 1.0  # a very slow render (a busy machine): never below the floor
    assert s.limit() == APPEND_LIMIT
    s.s_per_char = 1e-9  # a very fast one: never above the cap
    assert s.limit() == APPEND_MAX
