"""How long a stopped request gets before the watchdog takes its engine for a hung one
(engine/llama/worker_process.py, ``Heard.stop_grace``): the fixed grace for a model that steps
quickly, and more for one whose steps are slow here, since one llama_decode cannot be
interrupted. (tests/engine/llama/test_worker.py: the same through a real engine process.)"""

from __future__ import annotations

from vibechat.engine.llama.worker_process import SLOW_STEP_LIMIT_S, Heard


def pieces(heard: Heard, gaps: list[float], start: float = 100.0) -> None:
    now = start
    heard.note_piece(now)
    for gap in gaps:
        now += gap
        heard.note_piece(now)


def test_a_quick_model_gets_the_fixed_grace():
    heard = Heard()
    assert heard.stop_grace(1.5) == 1.5
    pieces(heard, [0.04] * 50 + [0.2])  # a stop string held back a few tokens
    assert heard.stop_grace(1.5) == 1.5


def test_a_slow_model_gets_twice_its_slowest_recent_step_more():
    heard = Heard()
    pieces(heard, [1.0, 2.0])
    assert heard.stop_grace(1.5) == 1.5 + 2 * 2.0
    pieces(heard, [3600.0])  # bounded
    assert heard.stop_grace(1.5) == 1.5 + SLOW_STEP_LIMIT_S


def test_a_past_slow_step_fades_and_the_wait_for_a_prompt_is_no_step():
    heard = Heard()
    pieces(heard, [2.0])
    pieces(heard, [0.04] * 60, start=200.0)  # the model is quick again
    assert heard.stop_grace(1.5) == 1.5
    heard.note(ended=1)  # a request ended: the next one's first piece waits for its prompt
    heard.note_piece(300.0)
    heard.note_piece(300.05)
    assert heard.stop_grace(1.5) == 1.5
