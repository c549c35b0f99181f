"""``vibechat run --logprobs N --json`` (issue 43, points 4 and 6) in subprocesses: the reply's
candidates in OpenAI's ``logprobs.content`` shape, from the stub server on 127.0.0.1 and from the
real starter, per line of ``--prompts-file`` too; a server without logprobs and N out of range are
one line each."""

from __future__ import annotations

import json
import math

import pytest

from helpers import vibechat


def remote(stub) -> tuple[str, ...]:
    return ("--base-url", stub.url, "--model", "stub-small")


def check_shape(content: list, n: int) -> None:
    """Each item as OpenAI's: token, logprob, bytes, top_logprobs (at most ``n``), plus
    vibechat's p_after and cut (and the local engine's token ids, and ``after_stop`` on a token
    held back for a stop string that matched: the reply's last items only)."""
    cut = [item.get("after_stop", False) for item in content]
    if True in cut:
        # Once a token is cut, every later one is.
        assert all(c is True for c in cut[cut.index(True) :])
    for item in content:
        assert set(item) - {"id", "after_stop"} == {
            "token",
            "logprob",
            "bytes",
            "top_logprobs",
            "p_after",
            "cut",
        }
        assert isinstance(item["token"], str) and item["logprob"] <= 0
        assert all(isinstance(b, int) and 0 <= b < 256 for b in item["bytes"])
        assert 0 < len(item["top_logprobs"]) <= n
        for top in item["top_logprobs"]:
            assert set(top) - {"id"} == {"token", "logprob", "bytes", "p_after", "cut"}
        assert sum(math.exp(t["logprob"]) for t in item["top_logprobs"]) <= 1 + 1e-6


def test_run_json_carries_the_servers_candidates(stub):
    out = vibechat("run", "--logprobs", "4", "--json", "-p", "Say hello.", *remote(stub))
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    content = obj["logprobs"]["content"]
    assert len(content) == len(stub.reply.split(" ")) and obj["params"]["logprobs"] == 4
    check_shape(content, 4)
    assert "".join(item["token"] for item in content) == stub.reply
    # An escape sequence and half a character: escaped, their bytes kept.
    tops = content[0]["top_logprobs"]
    assert tops[2]["token"] == "\\x1b[2J" and tops[3] == {
        "token": "\\xe2\\x82",
        "logprob": round(math.log(0.05), 6),
        "bytes": [0xE2, 0x82],
        "p_after": tops[3]["p_after"],
        "cut": tops[3]["cut"],
    }
    assert "\x1b" not in out.stdout


def test_run_without_the_flag_has_no_logprobs(stub):
    out = vibechat("run", "--json", "-p", "Say hello.", *remote(stub))
    assert out.returncode == 0, out.stderr
    assert "logprobs" not in json.loads(out.stdout)
    assert "logprobs" not in stub.last_body


def test_a_server_without_logprobs_is_one_line(stub):
    stub.logprobs = False
    out = vibechat("run", "--logprobs", "4", "--json", "-p", "Say hello.", *remote(stub))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["logprobs"] == {"content": []}
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: the server sent no logprobs")


@pytest.mark.parametrize("value", ["21", "-1", "lots"])
def test_n_out_of_range_is_one_line(stub, value):
    out = vibechat("run", "--logprobs", value, "-p", "Say hello.", *remote(stub))
    assert out.returncode in (1, 2)
    assert out.stderr.count("\n") == 1 and "logprobs" in out.stderr and "0 and 20" in out.stderr
    assert "Traceback" not in out.stderr and stub.requests == []


def test_prompts_file_lines_carry_their_candidates(stub):
    lines = "\n".join(json.dumps({"prompt": p}) for p in ("Say hello.", "Again.")) + "\n"
    out = vibechat("run", "--logprobs", "2", "--prompts-file", "-", *remote(stub), input=lines)
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["line"] for r in results] == [1, 2]
    for result in results:
        check_shape(result["logprobs"]["content"], 2)
        assert len(result["logprobs"]["content"]) == len(stub.reply.split(" "))


@pytest.mark.model
def test_run_json_carries_the_starters_candidates(starter_installed):
    out = vibechat(
        "run",
        "--logprobs",
        "3",
        "--json",
        "-n",
        "8",
        "-t",
        "0.7",
        "-p",
        "Say hello.",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    content = obj["logprobs"]["content"]
    assert 0 < len(content) == obj["stats"]["completion_tokens"]
    check_shape(content, 3)
    for item in content:
        assert len(item["top_logprobs"]) == 3
        # The chosen token was never cut; it is drawn from what the chain kept.
        assert item["cut"] is None and item["p_after"] > 0
        kept = [t for t in item["top_logprobs"] if t["cut"] is None]
        assert sum(t["p_after"] for t in kept) <= 1 + 1e-6


def saved_reply(cid: int) -> dict:
    out = vibechat("history", "show", str(cid), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["messages"][-1]


def test_history_keeps_a_replys_candidates_when_the_lens_was_on(stub):
    on = json.loads(
        vibechat("run", "--logprobs", "3", "--json", "-p", "Say hello.", *remote(stub)).stdout
    )
    off = json.loads(vibechat("run", "--json", "-p", "Say hello.", *remote(stub)).stdout)
    saved = saved_reply(on["conversation_id"])
    assert saved["role"] == "assistant" and saved["logprobs"] == on["logprobs"]
    assert "truncated" not in saved["logprobs"]
    assert "logprobs" not in saved_reply(off["conversation_id"])


def test_the_setting_bounds_the_candidates_kept(stub):
    out = vibechat(
        "run",
        "--logprobs",
        "5",
        "--json",
        "-p",
        "Say hello.",
        *remote(stub),
        env={"VIBECHAT_LENS_HISTORY_BYTES": "1200"},
    )
    printed = json.loads(out.stdout)["logprobs"]["content"]
    saved = saved_reply(json.loads(out.stdout)["conversation_id"])["logprobs"]
    assert 0 < len(saved["content"]) < len(printed)
    assert saved["content"] == printed[: len(saved["content"])]
    assert saved["truncated"] == len(printed) - len(saved["content"])
    assert len(json.dumps(saved["content"])) <= 1200
