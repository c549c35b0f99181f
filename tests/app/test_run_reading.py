"""``vibechat run --stats`` says how far a long prompt's reading came (issue 46, point 5): on
a terminal's stderr, one line rewritten in place and cleared before the reply's text; nothing
when stderr is no terminal (scripts) or with ``--json``. The run's output goes to a real pty;
the backend is a scripted double that reads its prompt at length (``PromptProgress``)."""

from __future__ import annotations

import io
import json
import os
import select

import pytest

from fakes import RecordingBackend
from vibechat.app.commands.run import execute
from vibechat.app.commands.run_request import RunRequest
from vibechat.app.progress import ReadingLine
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import PromptProgress

REPLY = "The answer is here."


class ReadsAtLength(RecordingBackend):
    def stream_chat(self, messages, params, tools=(), tool_choice="auto"):
        yield PromptProgress(1200, 2700)
        yield PromptProgress(2700, 2700)
        yield from super().stream_chat(messages, params)


def screen_lines(data: str) -> list[str]:
    """What a terminal shows of ``data``: each line as its carriage returns left it."""
    lines = []
    for raw in data.replace("\r\n", "\n").split("\n"):
        cells: list[str] = []
        cursor = 0
        for ch in raw:
            if ch == "\r":
                cursor = 0
                continue
            if cursor < len(cells):
                cells[cursor] = ch
            else:
                cells.append(ch)
            cursor += 1
        lines.append("".join(cells).rstrip())
    return lines


def read_until(master: int, ending: str) -> str:
    """What the terminal got until it ends with ``ending`` (bounded: 30 s)."""
    data = b""
    while not data.decode("utf-8", errors="replace").endswith(ending):
        assert select.select([master], [], [], 30)[0], f"waited 30 s for {ending!r}: {data!r}"
        data += os.read(master, 65536)
    return data.decode("utf-8")


def run_on_a_terminal(request: RunRequest) -> tuple[int, str]:
    """``execute`` with stdout and stderr on one pty; its exit status and what the terminal got."""
    master, slave = os.openpty()
    try:
        with (
            open(slave, "w", encoding="utf-8", closefd=False) as out,
            open(slave, "w", encoding="utf-8", closefd=False) as err,
        ):
            assert err.isatty()
            code = execute(ReadsAtLength(REPLY), request, out, err)
        chunks = []
        while select.select([master], [], [], 0.5)[0]:
            chunk = os.read(master, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        return code, b"".join(chunks).decode("utf-8")
    finally:
        os.close(master)
        os.close(slave)


def test_on_a_terminal_the_reading_is_one_line_rewritten_and_gone_before_the_reply():
    code, data = run_on_a_terminal(
        RunRequest("Sum this up.", None, SamplingParams(), show_stats=True)
    )
    assert code == 0
    assert "\rreading the prompt · 1,200 / 2,700 tokens" in data
    assert "\rreading the prompt · 2,700 / 2,700 tokens" in data
    assert data.index("2,700 / 2,700") < data.index(REPLY)
    shown = [line for line in screen_lines(data) if line]
    assert shown[0] == REPLY  # the reading's line was cleared: the reply starts its line
    assert not any("reading" in line for line in shown)
    assert shown[1].startswith("prompt ")  # --stats' own line follows


@pytest.mark.parametrize("json_output", [False, True])
def test_no_reading_line_for_scripts_or_json(json_output):
    out, err = io.StringIO(), io.StringIO()  # not terminals
    request = RunRequest(
        "Sum this up.", None, SamplingParams(), show_stats=True, json_output=json_output
    )
    assert execute(ReadsAtLength(REPLY), request, out, err) == 0
    assert "reading" not in err.getvalue() + out.getvalue()
    if json_output:  # not even on a terminal: stdout is the JSON object, stderr stays quiet
        code, data = run_on_a_terminal(request)
        assert code == 0 and "reading" not in data
        assert json.loads(data.replace("\r\n", "\n").strip().splitlines()[0])["text"] == REPLY


def test_a_shorter_figure_overwrites_a_longer_one_whole():
    master, slave = os.openpty()
    try:
        with open(slave, "w", encoding="utf-8", closefd=False) as err:
            line = ReadingLine.for_stream(err)
            assert line is not None and ReadingLine.for_stream(io.StringIO()) is None
            line.show(PromptProgress(12000, 27000))
            line.show(PromptProgress(900, 27000))  # e.g. a second prompt of a tool round
            line.clear()
            err.write("after\n")
            err.flush()
            data = read_until(master, "after\r\n")
    finally:
        os.close(master)
        os.close(slave)
    shown = (
        data[: data.index("after")].rstrip("\r").rstrip(" ")[:-1]
    )  # before the clear ("\r", spaces, "\r")
    assert screen_lines(shown) == [
        "reading the prompt · 900 / 27,000 tokens"
    ]  # nothing left of the longer
    assert screen_lines(data)[0] == "after"
