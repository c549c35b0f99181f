"""The message tree from the command line: `run --continue` goes on with the branch last on
screen, `history show` writes that branch (saying which version each message is) and --json
every branch, `history fork` copies a branch. A real `vibechat` subprocess, a real SQLite
file, and the OpenAI stub server on 127.0.0.1 as the model."""

from __future__ import annotations

import json

from helpers import vibechat
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import GenerationDone


def two_replies() -> tuple[int, int]:
    """A conversation whose reply was regenerated, left on the first reply's branch."""
    with History() as history:
        chat = ChatLog(Conversation(), history)
        chat.add_user("Where is the lighthouse?")
        chat.finish_reply(chat.start_reply(), GenerationDone("On the northern cape."))
        first = chat.leaf
        chat.drop_last_reply()
        chat.finish_reply(chat.start_reply(), GenerationDone("By the southern harbour."))
        assert chat.conversation_id is not None and first is not None
        history.set_leaf(chat.conversation_id, first)
        return chat.conversation_id, first


def test_run_continue_goes_on_with_the_branch_on_screen_and_show_says_which_version(stub):
    cid, first = two_replies()
    out = vibechat(
        "run", "--base-url", stub.url, "--model", "stub-small", "--continue", "-p", "And then?"
    )
    assert out.returncode == 0, out.stderr
    sent = [m["content"] for m in stub.last_body["messages"] if m["role"] != "system"]
    assert sent == ["Where is the lighthouse?", "On the northern cape.", "And then?"]

    shown = vibechat("history", "show", str(cid))
    assert shown.returncode == 0, shown.stderr
    assert "## Assistant · version 1 of 2" in shown.stdout and "southern" not in shown.stdout
    data = json.loads(vibechat("history", "show", str(cid), "--json").stdout)
    assert [m["content"] for m in data["messages"]][:3] == sent
    assert len(data["tree"]) == 5 and any(
        m["content"] == "By the southern harbour." for m in data["tree"]
    )
    by_id = {m["id"]: m for m in data["tree"]}
    assert (
        by_id[data["messages"][2]["id"]]["parent_id"] == first
    )  # the new turn follows the first reply

    forked = vibechat("history", "fork", str(cid), "--json")
    assert forked.returncode == 0, forked.stderr
    copy = json.loads(
        vibechat("history", "show", str(json.loads(forked.stdout)["id"]), "--json").stdout
    )
    assert [m["content"] for m in copy["tree"]] == [m["content"] for m in data["messages"]]
