"""`vibechat history ...` and the saving done by `vibechat run`, end to end: real
subprocesses, a real SQLite file under the (temporary) data dir, the real starter model."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, default_sigint, read_only_dir
from helpers import vibechat
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.database import default_path
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import GenerationDone


@pytest.fixture
def saved() -> dict[str, int]:
    """Two saved conversations, written the way the app writes them."""
    ids = {}
    with History() as history:
        for title, reply in (
            ("Colours", "Red, green and **blue**."),
            ("Fruit \x1b[2J", "Apples\x1b]0;pwned\x07!"),
        ):
            chat = ChatLog(
                Conversation(system="Be brief.", params=SamplingParams(temperature=0.2)),
                history,
                model="Gemma 3 270m",
                model_path="/m/gemma.gguf",
            )
            chat.add_user(f"{title}?")
            reply_row = chat.start_reply()
            chat.finish_reply(reply_row, GenerationDone(reply))
            ids[title.split()[0]] = chat.conversation_id
    return ids


def test_list_newest_first_as_table_and_json(saved):
    out = vibechat("history", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "title" in lines[0] and "Fruit" in lines[1] and "Colours" in lines[2]
    assert "\x1b" not in out.stdout
    data = json.loads(vibechat("history", "list", "--json").stdout)
    assert [c["id"] for c in data] == [saved["Fruit"], saved["Colours"]]
    assert set(data[0]) >= {"id", "title", "model", "updated"}
    assert data[0]["model"] == "Gemma 3 270m"
    assert len(json.loads(vibechat("history", "list", "--json", "-n", "1").stdout)) == 1


def test_an_empty_history_says_so():
    out = vibechat("history", "list")
    assert out.returncode == 0 and "No saved conversations" in out.stderr
    assert json.loads(vibechat("history", "list", "--json").stdout) == []


def test_show_as_text_and_json(saved):
    out = vibechat("history", "show", str(saved["Fruit"]))
    assert out.returncode == 0, out.stderr
    assert "## User" in out.stdout and "Apples" in out.stdout
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout  # model output is untrusted
    data = json.loads(vibechat("history", "show", str(saved["Colours"]), "--json").stdout)
    assert data["id"] == saved["Colours"] and data["system"] == "Be brief."
    assert data["params"]["temperature"] == 0.2
    assert [(m["role"], m["content"], m["status"]) for m in data["messages"]] == [
        ("user", "Colours?", "complete"),
        ("assistant", "Red, green and **blue**.", "complete"),
    ]


def test_search_finds_messages(saved):
    data = json.loads(vibechat("history", "search", "green", "--json").stdout)
    assert [(h["conversation_id"], h["role"]) for h in data] == [(saved["Colours"], "assistant")]
    out = vibechat("history", "search", "appl")
    assert out.returncode == 0 and "«Apples»" in out.stdout
    assert "No message matches" in vibechat("history", "search", "zebra").stderr


def test_export_markdown_and_json_to_stdout_and_file(saved, tmp_path: Path):
    md = vibechat("history", "export", str(saved["Colours"]), "--format", "md")
    assert md.returncode == 0 and md.stdout.startswith("# Colours?\n")
    assert "## Assistant\n\nRed, green and **blue**." in md.stdout
    target = tmp_path / "out.json"
    out = vibechat(
        "history", "export", str(saved["Colours"]), "--format", "json", "-o", str(target)
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(target.read_text())
    assert data["messages"][1]["content"] == "Red, green and **blue**."
    bad = vibechat("history", "export", str(saved["Colours"]), "--format", "pdf")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--format md" in bad.stderr


def test_export_picks_the_format_from_the_extension_and_never_overwrites_without_force(
    saved, tmp_path: Path
):
    cid = str(saved["Colours"])
    as_json = tmp_path / "c.json"
    out = vibechat("history", "export", cid, "-o", str(as_json))
    assert out.returncode == 0, out.stderr
    assert json.loads(as_json.read_text())["id"] == saved["Colours"]
    for name in ("c.md", "c.markdown", "c.txt"):  # anything but .json is Markdown
        assert vibechat("history", "export", cid, "-o", str(tmp_path / name)).returncode == 0
        assert (tmp_path / name).read_text().startswith("# Colours?\n")
    assert (
        vibechat("history", "export", cid, "-f", "md", "-o", str(tmp_path / "x.json")).returncode
        == 0
    )
    assert (
        (tmp_path / "x.json").read_text().startswith("# Colours?")
    )  # --format wins over the extension

    as_json.write_text("precious")
    refused = vibechat("history", "export", cid, "-o", str(as_json))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "already exists" in refused.stderr and "--force" in refused.stderr
    assert as_json.read_text() == "precious"
    forced = vibechat("history", "export", cid, "-o", str(as_json), "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(as_json.read_text())["id"] == saved["Colours"]


def test_rm_asks_unless_yes(saved):
    refused = vibechat("history", "rm", str(saved["Fruit"]))
    assert refused.returncode == 1 and "--yes" in refused.stderr
    piped = vibechat("history", "rm", str(saved["Fruit"]), input="y\n")  # no terminal to ask on
    assert piped.returncode == 1 and piped.stderr.count("\n") == 1
    assert "not a terminal" in piped.stderr and piped.stderr.rstrip().endswith("pass --yes.")
    out = vibechat("history", "rm", str(saved["Fruit"]), "--yes")
    assert out.returncode == 0 and "Deleted conversation" in out.stdout
    assert [c["id"] for c in json.loads(vibechat("history", "list", "--json").stdout)] == [
        saved["Colours"]
    ]


@pytest.mark.parametrize("command", [["show", "999"], ["export", "999"], ["rm", "999", "--yes"]])
def test_an_unknown_id_is_one_clear_line(saved, command):
    out = vibechat("history", *command)
    assert out.returncode == 1
    assert (
        out.stderr
        == "vibechat: error: no conversation 999: 'vibechat history list' shows the saved ones.\n"
    )


def test_a_damaged_database_is_one_clear_line_and_left_alone(user_dirs):
    path = default_path()
    path.parent.mkdir(parents=True)
    path.write_text("not a database at all " * 100)
    out = vibechat("history", "list")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "damaged" in out.stderr and out.stderr.count("\n") == 1
    assert path.read_text().startswith("not a database")


# ------------------------------------------------------------ run saves, continues
@pytest.mark.model
def test_every_run_is_saved_and_can_be_continued(starter_installed):
    first = vibechat(
        "run",
        "-p",
        "Name a colour.",
        "-t",
        "0",
        "-n",
        "6",
        "--json",
        "--system",
        "Be brief.",
        "--top-k",
        "7",
    )
    assert first.returncode == 0, first.stderr
    cid = json.loads(first.stdout)["conversation_id"]
    conversation = json.loads(vibechat("history", "show", str(cid), "--json").stdout)
    assert conversation["title"] == "Name a colour." and conversation["model"] == "Gemma 3 270m"
    assert conversation["system"] == "Be brief." and conversation["params"]["top_k"] == 7
    # Six tokens are seldom a whole reply: one cut by -n is saved as cut.
    cut = json.loads(first.stdout)["finish_reason"] == "length"
    assert [(m["role"], m["status"]) for m in conversation["messages"]] == [
        ("user", "complete"),
        ("assistant", "cut" if cut else "complete"),
    ]
    assert conversation["source"] == "run"

    # --continue adds a turn to the latest conversation, with its system prompt and parameters.
    again = vibechat("run", "--continue", "-p", "And another?", "-n", "6", "--json")
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["conversation_id"] == cid and result["params"]["top_k"] == 7
    assert result["stats"]["prompt_tokens"] > json.loads(first.stdout)["stats"]["prompt_tokens"]

    other = vibechat("run", "-p", "Unrelated.", "-n", "2", "--json")
    other_id = json.loads(other.stdout)["conversation_id"]
    assert other_id != cid
    # --conversation ID continues any saved one; flags still win over its saved parameters.
    third = vibechat(
        "run", "--conversation", str(cid), "-p", "Last one?", "-n", "4", "--top-k", "3", "--json"
    )
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["params"]["top_k"] == 3
    # One read of the conversation at the end (a process each costs a start-up): both added turns.
    messages = json.loads(vibechat("history", "show", str(cid), "--json").stdout)["messages"]
    assert [m["content"] for m in messages][2::2] == ["And another?", "Last one?"] and len(
        messages
    ) == 6


@pytest.mark.model
def test_no_save_leaves_no_trace_and_bad_continue_is_explained(starter_installed):
    out = vibechat("run", "-p", "Secret.", "-n", "2", "--no-save", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["conversation_id"] is None
    assert json.loads(vibechat("history", "list", "--json").stdout) == []
    nothing = vibechat("run", "--continue", "-p", "Hi", "-n", "2")
    assert nothing.returncode == 1 and "no saved conversation" in nothing.stderr
    missing = vibechat("run", "--conversation", "42", "-p", "Hi", "-n", "2")
    assert missing.returncode == 1 and "no conversation 42" in missing.stderr
    both = vibechat("run", "--conversation", "1", "--no-save", "-p", "Hi")
    assert both.returncode == 1 and both.stderr.count("\n") == 1


@pytest.mark.model
def test_a_read_only_data_dir_is_a_clear_error_and_no_save_still_works(
    starter_installed, tmp_path: Path
):
    with read_only_dir(tmp_path / "ro-data") as ro:
        env = {"VIBECHAT_DATA_DIR": str(ro)}
        out = vibechat("run", "-p", "Hi", "-n", "2", env=env)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert (
            out.stderr.count("\n") == 1 and "writable" in out.stderr and "--no-save" in out.stderr
        )
        ok = vibechat("run", "-p", "Hi", "-n", "2", "--no-save", env=env)
        assert ok.returncode == 0, ok.stderr


@pytest.mark.model
def test_sigkill_mid_stream_leaves_the_prompt_and_the_partial_reply_marked_interrupted(
    starter_installed, monkeypatch
):
    # Gemma's turn format, where the starter writes on: its own completion frame ends the story in a
    # line
    monkeypatch.setenv("VIBECHAT_PROMPT_FORMAT", "gemma")
    proc = subprocess.Popen(
        [
            str(VIBECHAT_BIN),
            "run",
            "-p",
            "Write a long story about a dragon.",
            "-t",
            "0.8",
            "--seed",
            "3",
            "-n",
            "100000",
            "--ctx",
            "8192",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )
    path = default_path()
    try:
        # Kill it once the database holds part of the reply (saved while streaming).
        partial = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not partial:
            time.sleep(0.2)
            if path.exists():
                try:
                    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
                    row = conn.execute(
                        "SELECT content FROM messages WHERE role = 'assistant'"
                    ).fetchone()
                    conn.close()
                except sqlite3.OperationalError:
                    continue
                partial = row[0] if row else ""
        assert partial, "the reply was never saved while streaming"
        assert proc.poll() is None, "the reply ended before the test could kill it"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with History() as history:  # opening repairs what the crash left
        assert history.repaired == 1
        conversation = history.get(history.latest().id)
    user, reply = conversation.messages
    assert (user.role, user.content, user.status) == (
        "user",
        "Write a long story about a dragon.",
        "complete",
    )
    assert reply.status == "interrupted" and reply.content.startswith(partial)
    listed = vibechat("history", "show", str(conversation.id), "--json")
    assert json.loads(listed.stdout)["messages"][1]["status"] == "interrupted"


@pytest.mark.model
def test_two_runs_at_once_both_save_without_lock_errors(starter_installed):
    procs = [
        subprocess.Popen(
            [
                str(VIBECHAT_BIN),
                "run",
                "-p",
                f"Count to {n}.",
                "-n",
                "24",
                "--json",
                "--threads",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for n in (3, 4)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for (_out, err), proc in zip(results, procs, strict=True):
        assert proc.returncode == 0, err
        assert "locked" not in err
    ids = {json.loads(out)["conversation_id"] for out, _ in results}
    listed = json.loads(vibechat("history", "list", "--json").stdout)
    assert {c["id"] for c in listed} == ids and len(ids) == 2
    for cid in ids:
        messages = json.loads(vibechat("history", "show", str(cid), "--json").stdout)["messages"]
        # the reply complete, or cut at -n 24: where the starter ends its count is its own choice
        assert messages[0]["status"] == "complete" and messages[1]["status"] in ("complete", "cut")


# ------------------------------------------------ issue 30: where conversations came from
@pytest.fixture
def from_everywhere() -> dict[str, int]:
    """One conversation from each source, oldest first: chat, run, batch."""
    ids = {}
    with History() as history:
        for source in ("chat", "run", "batch"):
            chat = ChatLog(Conversation(), history, model="Gemma 3 270m", source=source)
            chat.add_user(f"asked from {source}")
            ids[source] = chat.conversation_id
    return ids


def test_list_shows_the_source_and_filters_by_it(from_everywhere):
    out = vibechat("history", "list")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split() == ["id", "updated", "source", "model", "title"]
    assert [row.split()[3] for row in rows] == ["batch", "run", "chat"]  # id, day, time, source
    for source, cid in from_everywhere.items():
        only = vibechat("history", "list", "--source", source)
        assert only.returncode == 0, only.stderr
        assert [line.split()[0] for line in only.stdout.splitlines()[1:]] == [str(cid)]
        data = json.loads(vibechat("history", "list", "-s", source, "--json").stdout)
        assert [(c["id"], c["source"]) for c in data] == [(cid, source)]
    assert len(json.loads(vibechat("history", "list", "--source", "ALL", "--json").stdout)) == 3


def test_an_unknown_source_is_a_usage_error_and_an_empty_filter_says_so(from_everywhere):
    bad = vibechat("history", "list", "--source", "web")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "unknown source 'web'" in bad.stderr and "chat, run, batch, all" in bad.stderr
    with History() as history:
        history.delete(from_everywhere["batch"])
    none = vibechat("history", "list", "--source", "batch")
    assert (
        none.returncode == 0
        and none.stdout == ""
        and "No saved conversations from batch" in none.stderr
    )


def test_a_cut_reply_is_exported_as_cut(tmp_path: Path):
    with History() as history:
        chat = ChatLog(Conversation(), history)
        chat.add_user("Count to a hundred.")
        from vibechat.engine.turns.backend import GenerationStats

        chat.finish_reply(
            chat.start_reply(), GenerationDone("1, 2, 3", GenerationStats(finish_reason="length"))
        )
        cid = chat.conversation_id
    data = json.loads(vibechat("history", "show", str(cid), "--json").stdout)
    assert data["messages"][1]["status"] == "cut"
    md = vibechat("history", "export", str(cid))
    assert (
        "## Assistant (cut: it reached the token limit or the end of the context)\n\n1, 2, 3"
        in md.stdout
    )
    target = tmp_path / "c.json"
    assert vibechat("history", "export", str(cid), "-o", str(target)).returncode == 0
    assert json.loads(target.read_text())["messages"][1]["status"] == "cut"


@pytest.mark.model
def test_runs_and_prompts_files_are_saved_by_source_and_save_runs_false_keeps_them_out(
    starter_installed, user_dirs
):
    run = vibechat("run", "-p", "Name a colour.", "-n", "2", "--json")
    assert run.returncode == 0, run.stderr
    batch = vibechat("run", "--prompts-file", "-", "-n", "2", input='{"prompt": "Name a fruit."}\n')
    assert batch.returncode == 0, batch.stderr
    listed = json.loads(vibechat("history", "list", "--json").stdout)
    assert [(c["source"], c["title"]) for c in listed] == [
        ("batch", "Name a fruit."),
        ("run", "Name a colour."),
    ]

    # save_runs = false (config file or variable): runs and prompt files leave nothing behind ...
    off = vibechat("run", "-p", "Secret.", "-n", "2", "--json", env={"VIBECHAT_SAVE_RUNS": "0"})
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout)["conversation_id"] is None
    config = user_dirs["config"] / "vibechat" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("save_runs = false\n")
    quiet = vibechat("run", "--prompts-file", "-", "-n", "2", input='{"prompt": "Also secret."}\n')
    assert quiet.returncode == 0, quiet.stderr
    assert len(json.loads(vibechat("history", "list", "--json").stdout)) == 2
    # ... but adding to a saved conversation, asked for by name, still saves.
    more = vibechat(
        "run", "--conversation", str(listed[1]["id"]), "-p", "Another?", "-n", "2", "--json"
    )
    assert more.returncode == 0, more.stderr
    assert json.loads(more.stdout)["conversation_id"] == listed[1]["id"]
    assert (
        len(
            json.loads(vibechat("history", "show", str(listed[1]["id"]), "--json").stdout)[
                "messages"
            ]
        )
        == 4
    )
