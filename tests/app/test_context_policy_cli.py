"""The context policy and compaction from a script (issue 45): `run --continue` with a
conversation that no longer fits a small context (--ctx 256), under each policy, and
`run --continue --compact`. A real `vibechat` subprocess on the real starter model, and a real
SQLite file. The starter cannot be trusted to summarise (it writes nothing useful): where its
words decide, the test accepts either outcome and checks the mechanism of each."""

from __future__ import annotations

import json

import pytest

from helpers import vibechat
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import GenerationDone

pytestmark = pytest.mark.model

FACT = "The lighthouse keeper's name is Ada and the boat leaves at nine. "


def saved_conversation(turns: list[tuple[str, str]]) -> int:
    """A saved conversation of ``turns`` (prompt, reply; a reply "" is left unanswered)."""
    with History() as history:
        chat = ChatLog(Conversation(), history)
        for prompt, reply in turns:
            chat.add_user(prompt)
            if reply:
                chat.finish_reply(chat.start_reply(), GenerationDone(reply))
        assert chat.conversation_id is not None
        return chat.conversation_id


def long_conversation() -> int:
    """Five long exchanges: far more than a 256-token context holds."""
    return saved_conversation([(f"Note {i}: {FACT * 3}", f"Noted {i}. {FACT}") for i in range(5)])


def tree(cid: int):
    with History() as history:
        return history.get(cid).tree


RUN = ("run", "--continue", "--ctx", "256", "-n", "8", "-t", "0", "--json", "-p", "Who keeps it?")


def test_stop_refuses_the_prompt_in_one_line(starter_installed):
    cid = long_conversation()
    out = vibechat(*RUN, "--context-policy", "stop")
    assert out.returncode == 1, out.stderr
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "/compact" in errors[0] and "context_policy" in errors[0]
    assert "Traceback" not in out.stderr
    assert json.loads(out.stdout)["error"]["message"]
    # Nothing was replaced or left out: the conversation's messages stay, the prompt saved.
    assert not any(m.is_summary for m in tree(cid))


def test_trim_names_what_was_left_out(starter_installed):
    cid = long_conversation()
    out = vibechat(*RUN, "--context-policy", "trim")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    left_out = obj["left_out_messages"]
    assert left_out and obj["compacted_from"] is None
    assert len(left_out) == obj["stats"]["dropped_messages"]
    saved = {m.id: m for m in tree(cid)}
    assert all(saved[item["id"]].role == item["role"] for item in left_out)
    # The oldest first, whole turns.
    assert [item["index"] for item in left_out] == list(range(len(left_out)))
    assert "left out" in out.stderr


def test_compact_policy_summarises_or_says_why_not(starter_installed):
    cid = long_conversation()
    before = [m.id for m in tree(cid)]
    out = vibechat(*RUN, "--context-policy", "compact")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    after = tree(cid)
    summaries = [m for m in after if m.is_summary]
    if obj["compacted_from"] is not None:
        # The notice and the summary on stderr; the reply went on in the new branch.
        assert "compacted 10 old messages into a summary" in out.stderr
        assert obj["compacted_from"]["message_id"] == before[-1]
        assert [m.id for m in summaries] == [obj["compacted_from"]["summary_id"]]
        assert summaries[0].content in out.stderr.replace("\n", " ") or summaries[0].content
    else:
        # The starter wrote nothing useful: one line, nothing replaced, the prompt trimmed.
        assert "nothing was replaced" in out.stderr and not summaries
        assert obj["left_out_messages"]
    # The original branch is untouched either way.
    assert [m.id for m in after[: len(before)]] == before


def test_run_compact_that_cannot_summarise_replaces_nothing(starter_installed):
    """A conversation of one character: whatever the starter writes is empty or not shorter."""
    cid = saved_conversation([("k", "")])
    before = tree(cid)
    out = vibechat("run", "--continue", "--compact", "--ctx", "512", "--json")
    assert out.returncode == 1, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nothing was replaced" in lines[0], out.stderr
    assert json.loads(out.stdout)["error"]["message"]
    assert tree(cid) == before


def test_run_compact_prints_the_summary_and_branches(starter_installed):
    cid = long_conversation()
    before = [m.id for m in tree(cid)]
    out = vibechat("run", "--continue", "--compact", "keep names", "--ctx", "512", "--json")
    after = tree(cid)
    if out.returncode == 0:
        obj = json.loads(out.stdout)
        summary = next(m for m in after if m.is_summary)
        assert obj["text"] == summary.content and obj["compacted_from"] == {
            "message_id": before[-1],
            "summary_id": summary.id,
            "replaced_messages": 10,
        }
        assert summary.parent_id is None and summary.summary_of == before[-1]
    else:
        assert "nothing was replaced" in out.stderr
    assert [m.id for m in after[: len(before)]] == before


def test_compact_needs_a_saved_conversation(starter_installed):
    out = vibechat("run", "--compact")
    assert out.returncode != 0 and "--continue" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("policy", ["stop", "compact"])
def test_prompts_file_honours_the_policy(starter_installed, tmp_path, policy):
    """Each line of a prompts file is a conversation of its own, under the policy as `run -p`
    is: a prompt that leaves no room for the reply in a 256-token context (about 209 tokens
    in the starter's frame, against 64 for the reply) is refused under ``stop`` (its result
    an error, the next line runs), and finds nothing to summarise under ``compact`` (said in
    one line; it runs trimmed, as under ``trim``)."""
    prompts = tmp_path / "prompts.jsonl"
    lines = [{"prompt": FACT * 9, "id": "long"}, {"prompt": "Hi", "id": "short"}]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = vibechat(
        "run", "--prompts-file", str(prompts), "--ctx", "256", "-n", "64", "-t", "0",
        "--context-policy", policy,
    )  # fmt: skip
    assert "Traceback" not in out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in results] == ["long", "short"]
    assert "error" not in results[1]
    said = [line for line in out.stderr.splitlines() if "line 1:" in line]
    if policy == "stop":
        assert out.returncode == 1, out.stderr
        assert "context_policy" in results[0]["error"] and "text" not in results[0]
        assert len(said) == 1 and "no longer fits the context" in said[0]
    else:
        assert out.returncode == 0, out.stderr
        assert "error" not in results[0]
        assert len(said) == 1 and "nothing to compact" in said[0]
