"""What the command line says is for people: no Python repr (``None``, ``False``, ``'quoted'``)
in a statistics line or a question, without loading a model."""

from __future__ import annotations

import os
import pty
import subprocess

from conftest import VIBECHAT_BIN
from vibechat.app.report import format_stats
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import GenerationStats


def test_the_stats_line_leaves_out_a_seed_it_does_not_know():
    unknown = format_stats(GenerationStats(completion_tokens=3, finish_reason="length", seed=None))
    assert "None" not in unknown and "seed" not in unknown
    assert unknown.endswith("· 3 tokens · first token 0 ms · 0.0 tokens/s · length")
    assert format_stats(GenerationStats(seed=7)).endswith("· stop · seed 7")


def test_history_rm_asks_about_the_title_in_quotes_not_as_a_repr():
    """On a terminal, `history rm` names the conversation by its title, quoted for people
    (a title with an apostrophe is no Python repr with its quotes switched)."""
    with History() as history:
        cid = history.create(title="Don't forget the milk")
        history.add_message(cid, "user", "Don't forget the milk")
    main, child = pty.openpty()  # stdin a terminal, so the command asks
    try:
        proc = subprocess.Popen(
            [str(VIBECHAT_BIN), "history", "rm", str(cid)],
            stdin=child,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.close(child)
        os.write(main, b"n\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main)
    assert proc.returncode == 0, err
    assert (
        "Delete conversation " + str(cid) + " (\u201cDon't forget the milk\u201d, 1 message)? [y/N]"
        in out
    )
    assert "Kept." in err
    with History() as history:
        assert history.get(cid).title == "Don't forget the milk"  # kept
