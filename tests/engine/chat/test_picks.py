"""The picks of comparisons (engine/chat/picks.py) in a real SQLite file: recorded by the named
migration's table, tallied per model, preset and setting value, kept when their conversation
is deleted, and `vibechat history compare-stats` (text and --json) in a subprocess."""

from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest

from conftest import VIBECHAT_BIN
from vibechat.engine.chat.history import History
from vibechat.engine.chat.schema import MIGRATIONS, compare_picks


def two_replies(history: History) -> tuple[int, int, int]:
    """A conversation with a prompt and two sibling replies: its id and the replies' ids."""
    cid = history.create(title="Capital?", source="run")
    user = history.add_message(cid, "user", "Capital of France?", parent_id=None)
    a = history.add_message(cid, "assistant", "Paris.", parent_id=user)
    b = history.add_message(cid, "assistant", "Paris, the city of light.", parent_id=user)
    return cid, a, b


def pick(history: History, winner: str, differs: dict, **sides) -> int:
    cid, a, b = two_replies(history)
    return history.record_pick(
        conversation_id=cid,
        a_message_id=a,
        b_message_id=b,
        winner=winner,  # type: ignore[arg-type]
        differs=differs,
        **sides,
    )


def test_the_picks_table_is_a_named_migration_of_its_own():
    assert MIGRATIONS[-1] is compare_picks


def test_a_pick_is_kept_with_what_it_was_run_with(history: History):
    cid, a, b = two_replies(history)
    differs = {"temperature": {"a": 0.2, "b": 1.2}}
    history.record_pick(
        conversation_id=cid,
        a_message_id=a,
        b_message_id=b,
        winner="B",
        differs=differs,
        a_model="gemma",
        b_model="qwen",
        blind=True,
    )
    rows = sqlite3.connect(history.path).execute("SELECT * FROM picks").fetchall()
    assert len(rows) == 1
    row = rows[0]
    assert row[1:5] == (cid, a, b, "B")
    assert json.loads(row[9]) == differs and row[10] == 1
    assert history.pick_count() == 1


def test_the_tally_counts_wins_per_model_preset_and_setting_value(history: History):
    warm = {"temperature": {"a": 0.2, "b": 1.2}}
    pick(history, "A", warm, a_model="gemma", b_model="gemma")
    pick(history, "A", warm, a_model="gemma", b_model="gemma")
    pick(history, "B", warm, a_model="gemma", b_model="gemma")
    pick(history, "B", {"model": {"a": "gemma", "b": "qwen"}}, a_model="gemma", b_model="qwen")
    pick(history, "A", {}, a_preset="precise", b_preset="creative")
    tally = {(t.kind, t.name, t.value): (t.wins, t.picks) for t in history.pick_tally()}
    assert tally[("setting", "temperature", "0.2")] == (2, 3)
    assert tally[("setting", "temperature", "1.2")] == (1, 3)
    # Models only where the sides differed in them; "model" in differs is not a setting too.
    assert tally[("model", "qwen", None)] == (1, 1)
    assert tally[("model", "gemma", None)] == (0, 1)
    assert tally[("preset", "precise", None)] == (1, 1)
    assert tally[("preset", "creative", None)] == (0, 1)
    assert ("setting", "model", '"gemma"') not in tally


def test_a_deleted_conversation_leaves_its_pick_in_the_tally(history: History):
    pick(history, "B", {"top_k": {"a": 40, "b": 10}})
    conversation = history.conversations()[0].id
    history.delete(conversation)
    assert history.pick_count() == 1
    assert {t.value: t.wins for t in history.pick_tally()} == {"40": 0, "10": 1}


def test_a_pick_names_side_a_or_b(history: History):
    with pytest.raises(ValueError, match="side A or B"):
        pick(history, "C", {})


def test_compare_stats_tallies_the_picks(user_dirs):
    with History() as history:
        pick(history, "A", {"temperature": {"a": 0.2, "b": 1.2}})
        pick(history, "A", {"temperature": {"a": 0.2, "b": 1.2}})

    def run(*args):
        return subprocess.run(
            [str(VIBECHAT_BIN), "history", "compare-stats", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = run("--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["picks"] == 2
    assert {"kind": "setting", "name": "temperature", "value": "0.2", "wins": 2, "picks": 2} in (
        data["tally"]
    )
    text = run()
    assert text.returncode == 0 and text.stdout.startswith("2 picks")
    assert "temperature" in text.stdout and "0.2" in text.stdout


def test_compare_stats_with_no_picks_says_so(user_dirs):
    out = subprocess.run(
        [str(VIBECHAT_BIN), "history", "compare-stats"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr.startswith("No picks yet")
