"""The Markdown export of a conversation whose prompt has two compared replies (issue 44 point 5,
engine/chat/compared.py with records.py), in a real SQLite file: both replies shown, each
headed by its side and the settings it was run with where the other's differ, the one on the
branch marked, and the pick where one was kept; `vibechat history export` in a subprocess."""

from __future__ import annotations

import subprocess

from conftest import VIBECHAT_BIN
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import SamplingParams

COOL = SamplingParams(temperature=0.2, seed=1)
HOT = SamplingParams(temperature=1.2, top_k=7, seed=1)


def compared(history: History, source: str) -> tuple[int, int, int]:
    """A prompt and its two replies, saved as `run --compare` saves them (A first, each with
    its parameters, the conversation on A's): the conversation's and the replies' ids."""
    cid = history.create(title="Capital?", source=source, params=COOL)
    user = history.add_message(cid, "user", "Capital of France?", parent_id=None)
    a = history.add_message(cid, "assistant", "Paris.", params=COOL, parent_id=user)
    b = history.add_message(cid, "assistant", "Lyon, maybe.", params=HOT, parent_id=user)
    history.set_leaf(cid, a)
    return cid, a, b


def test_a_run_compare_conversation_exports_both_sides_with_what_differed(history: History):
    cid, _a, _b = compared(history, "run")
    text = history.get(cid).to_markdown()
    head_a = "## Assistant · side A (temperature 0.2, top-k 40) · on the branch"
    head_b = "## Assistant · side B (temperature 1.2, top-k 7)"
    assert head_a in text and head_b in text, text
    assert text.index(head_a) < text.index("Paris.") < text.index(head_b)
    assert text.index(head_b) < text.index("Lyon, maybe.")
    assert "version 1 of 2" not in text and "picked" not in text


def test_the_pick_and_the_branch_are_marked(history: History):
    cid, a, b = compared(history, "chat")
    differs = {"temperature": {"a": 0.2, "b": 1.2}, "top_k": {"a": 40, "b": 7}}
    history.record_pick(
        conversation_id=cid, a_message_id=a, b_message_id=b, winner="B", differs=differs
    )
    history.set_leaf(cid, b)
    text = history.get(cid).to_markdown()
    assert "## Assistant · side A (temperature 0.2, top-k 40)\n" in text, text
    assert "## Assistant · side B (temperature 1.2, top-k 7) · on the branch · picked" in text
    assert text.index("Paris.") < text.index("Lyon, maybe.")


def test_a_regenerated_reply_in_the_chat_is_no_comparison(history: History):
    cid, _a, b = compared(history, "chat")
    history.set_leaf(cid, b)
    text = history.get(cid).to_markdown()
    assert "side A" not in text and "## Assistant · version 2 of 2" in text
    assert "Paris." not in text


def test_history_export_shows_both_sides(tmp_path):
    with History() as history:
        cid, _a, _b = compared(history, "run")
    out = subprocess.run(
        [str(VIBECHAT_BIN), "history", "export", str(cid), "--format", "md"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "side A (temperature 0.2, top-k 40) · on the branch" in out.stdout
    assert "Lyon, maybe." in out.stdout


def test_the_json_export_carries_the_picks(history: History):
    cid, a, b = compared(history, "chat")
    assert history.get(cid).to_dict()["picks"] == []
    history.record_pick(
        conversation_id=cid,
        a_message_id=a,
        b_message_id=b,
        winner="B",
        differs={"temperature": {"a": 0.2, "b": 1.2}},
    )
    picks = history.get(cid).to_dict()["picks"]
    assert picks == [{"a_message_id": a, "b_message_id": b, "winner": "B"}]
