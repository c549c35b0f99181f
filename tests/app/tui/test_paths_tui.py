"""Another path from a token in the chat (issue 43, point 3), the way the lens's ``PathChosen``
calls it: ``app.paths.take_path(message_id, index, token_id, data)`` continues the reply from
that token as a new sibling version (‹ 2/2 ›), the original kept as it was, and only the new
token evaluated (the real starter); what cannot be done is one line and changes nothing (the
recording backend, whose lens and context are scripted)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from fakes import INFO, LensBackend, send, settle
from helpers import notices, was_notified
from vibechat.app.tui import create_app
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    ReplyPrefix,
)
from vibechat.engine.turns.lens_steps import saved_steps

SIZE = (110, 36)
LENS = SamplingParams(temperature=0, repeat_penalty=1, max_tokens=10, logprobs=5, seed=3)


def label(widget) -> str:
    return str(widget.label_shown)


def saved_reply(history: History):
    """The newest conversation's last message, as saved."""
    return history.get(history.latest().id).messages[-1]


@pytest.mark.model
async def test_a_path_from_another_candidate_is_a_new_version_that_evaluates_only_the_tail(
    backend, tmp_path: Path
):
    history = History(tmp_path / "history.db")
    app = create_app(backend, params=LENS, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "Write three sentences about the sea.")
        original = saved_reply(history)
        steps = saved_steps(original.logprobs)
        assert len(steps) >= 3
        index, token = next(
            (s.index, c)
            for s in steps[1:]
            for c in s.top
            if c.token_id != s.chosen.token_id and c.data.strip()
        )
        assert await app.paths.take_path(original.id, index, token.token_id, b"")
        await settle(pilot)
        new = saved_reply(history)
        reply = app.chat.messages()[-1]
        assert reply.message_id == new.id and reply.branch == (2, 2)
        assert "‹ 2/2 ›" in label(reply)
    # The tree: two versions of the reply under the same prompt, the original as it was.
    stored = history.get(history.latest().id)
    assert history.siblings(original.id) == [original.id, new.id]
    assert new.parent_id == original.parent_id and stored.leaf_id == new.id
    assert history.message(original.id) == original
    said = b"".join(s.chosen.data for s in steps[:index]) + token.data
    assert new.content.startswith(said.decode("utf-8", "ignore").lstrip()[:-1])
    kept = saved_steps(new.logprobs)
    assert [s.chosen.token_id for s in kept[: index + 1]] == [
        *(s.chosen.token_id for s in steps[:index]),
        token.token_id,
    ]
    assert kept[index].forced
    # Only the new token was evaluated: the prompt and the prefix came from the KV cache.
    assert 1 <= new.stats["prompt_tokens_evaluated"] <= 2


async def refused(pilot, *args) -> bool:
    """``take_path(*args)``, once its notice is in (False: refused)."""
    taken = await pilot.app.paths.take_path(*args)
    await pilot.pause()
    return taken


def lens_backend(**kwargs) -> LensBackend:
    """The shared lens backend with token ids: step i's chosen word is id 1000 × i, its other
    candidates 1000 × i + 1, + 2, … (``fakes.lens_step``)."""
    return LensBackend(reply="one two three", ids=True, **kwargs)


async def test_a_path_asks_the_backend_to_go_on_from_the_prefix_as_a_sibling(tmp_path: Path):
    history = History(tmp_path / "history.db")
    backend = lens_backend()
    app = create_app(backend, params=LENS, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "count")
        original = saved_reply(history)
        backend.reply = "other"
        assert await app.paths.take_path(original.id, 1, 1001, b"")
        await settle(pilot)
        assert [w.text for w in app.chat.messages()] == ["count", "other"]
        assert app.chat.messages()[-1].branch == (2, 2)
    prefix = backend.prefixes[-1]
    assert isinstance(prefix, ReplyPrefix) and prefix.token_ids == (0, 1001)
    assert [s.forced for s in prefix.steps] == [False, True]
    # The model is sent the prompt, not the reply the path leaves.
    assert [m.content for m in backend.requests[-1][0]] == ["count"]
    assert history.siblings(original.id) == [original.id, saved_reply(history).id]


async def test_what_cannot_be_taken_is_one_line_and_changes_nothing(tmp_path: Path):
    history = History(tmp_path / "history.db")
    backend = lens_backend()
    app = create_app(backend, params=LENS, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "count")
        reply = saved_reply(history)
        shown = [w.text for w in app.chat.messages()]
        tries = [
            ((reply.id, 7, 99, b""), "Step 8 is not one of this reply's (it has 3)"),
            ((reply.id, 1, 42, b""), "Token 42 is not a candidate of step 2"),
            ((reply.id, 1, 1000, b""), "That is the token the reply took there"),
            ((reply.id + 100, 0, 99, b""), "That reply is not on the branch on screen"),
            # The fake's context holds 4,096 tokens.
            ((reply.id, 1, -1, b"x" * 5000), "fill the 4,096-token context"),
        ]
        for args, says in tries:
            assert not await refused(pilot, *args)
            assert was_notified(app, says), notices(app)
        # A lens cut before the step (lens_history_bytes).
        lens = dict(reply.logprobs or {})
        history.update_message(reply.id, reply.content, logprobs={**lens, "truncated": 5})
        assert not await refused(pilot, reply.id, 3, 99, b"")
        assert was_notified(app, "kept only for its first 3 tokens")
        # A reply written with the lens off.
        app.set_params(dataclasses.replace(LENS, logprobs=0))
        await send(pilot, "again")
        plain = saved_reply(history)
        assert not await refused(pilot, plain.id, 0, 99, b"")
        assert was_notified(app, "no saved token lens")
        shown += ["again", backend.reply]
        # A reply still streaming.
        backend.gate = threading.Event()
        await send(pilot, "more", wait=False)
        assert not await refused(pilot, plain.id, 0, 99, b"")
        assert was_notified(app, "Still answering")
        backend.gate.set()
        await settle(pilot)
        assert all("\n" not in note for note in notices(app))
        assert [w.text for w in app.chat.messages()][:4] == shown
    assert history.siblings(reply.id) == [reply.id]
    assert history.siblings(plain.id) == [plain.id]
    assert all(p is None for p in backend.prefixes)


async def test_a_servers_reply_is_refused_in_one_line(tmp_path: Path):
    history = History(tmp_path / "history.db")
    server = dataclasses.replace(INFO, backend="openai", server="http://127.0.0.1:9/v1")
    backend = lens_backend(info=server)
    app = create_app(backend, params=LENS, blink=False, history=history)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await send(pilot, "count")
        reply = saved_reply(history)
        assert not await refused(pilot, reply.id, 1, 99, b"")
        assert was_notified(app, "Another path from a token needs the local engine")
    assert history.siblings(reply.id) == [reply.id]
