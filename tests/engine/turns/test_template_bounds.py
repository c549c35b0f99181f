"""Issue 13: a GGUF's chat template is code from outside. With the real starter model
carrying a hostile template (tests/ggufgen.py's ``copy_with_metadata``): the backend's
cancel() (Ctrl-C in `vibechat run`) stops a render that loops, and what a template says
reaches the terminal as one clean line."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, default_sigint, worker_threads
from ggufgen import copy_with_metadata
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone

pytestmark = pytest.mark.model

# ~3x10^8 loop iterations: tens of seconds when nothing checks a cancel; a render that runs
# to its end raises (so a cancel that only took effect after the render shows as a failure).
SLOW = (
    "{% for i in range(100000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}"
    "{{ raise_exception('the loops ran to their end') }}"
    "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] "
    "}}<end_of_turn>\n{% endfor %}"
    "<start_of_turn>model\n"
)


@pytest.fixture(scope="module")
def slow_template_model(starter_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_with_metadata(
        starter_path,
        tmp_path_factory.mktemp("evil") / "slow-template.gguf",
        {"tokenizer.chat_template": SLOW},
    )


def test_cancel_stops_a_gguf_template_that_loops(slow_template_model):
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=slow_template_model,
            context_size=1024,
            repack="off",
        )
    )
    try:
        assert backend.load().chat_format == "gguf"
        timer = threading.Timer(0.5, backend.cancel)
        timer.start()
        events = list(
            backend.stream_chat([ChatMessage("user", "Say hi.")], SamplingParams(max_tokens=8))
        )
        timer.join()
        assert len(events) == 1 and isinstance(events[0], GenerationDone)
        assert events[0].stats.finish_reason == "cancelled" and events[0].text == ""
        timer = threading.Timer(0.5, backend.cancel)
        timer.start()
        assert backend.prefill([ChatMessage("user", "Say hi.")]) == 0  # prefill stops the same way
        timer.join()
    finally:
        backend.close()


def test_ctrl_c_stops_vibechat_run_while_the_template_renders(slow_template_model, user_dirs):
    """QA: the first Ctrl-C was ignored while nested loops ran; `run` had to be killed."""
    proc = subprocess.Popen(
        [
            str(VIBECHAT_BIN),
            "--verbose",
            "run",
            "--model",
            str(slow_template_model),
            "-p",
            "Say hi.",
            "-n",
            "8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None and proc.stdout is not None
    err: list[str] = []
    sent = False
    try:
        for line in proc.stderr:
            err.append(line)
            if not sent and "rendering the model's chat template" in line:
                proc.send_signal(signal.SIGINT)
                sent = True
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "".join(err)
    assert sent, stderr[-2000:]
    assert code == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


def test_what_a_template_raises_reaches_the_terminal_clean(starter_path, tmp_path, user_dirs):
    evil = copy_with_metadata(
        starter_path,
        tmp_path / "refusing.gguf",
        {
            "tokenizer.chat_template": "{{ raise_exception('No\\x1b]0;pwned\\x07 "
            "system\\x1b[2J role') }}"
        },
    )
    out = subprocess.run(
        [str(VIBECHAT_BIN), "run", "--model", str(evil), "-p", "Say hi."],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert "the model's chat template refused the conversation: No system role" in out.stderr
