"""A reasoning model's thinking, kept apart from the answer on every path except the
chat's display: the streaming splitter (engine/turns/thinking.py: tags split at every position,
a block that never closes, a block the template opened), the template probe, the session
and its history (own column, migration of an old file, exports, search), ``vibechat
run`` (``--json``, ``--show-thinking``) and ``--prompts-file`` on a fake backend, and the
remote backend against the stub server (inline tags, ``reasoning_content``, cancel)."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from pathlib import Path

import pytest

from conftest import worker_threads
from fakes import RecordingBackend, split_stream
from vibechat.app.commands.batch import BatchOptions, run_batch
from vibechat.app.commands.run import execute
from vibechat.app.commands.run_request import RunRequest
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.schema import MIGRATIONS, statements
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.remote.openai_backend import OpenAICompatibleBackend
from vibechat.engine.remote.options import OpenAIOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta, ThinkingDelta
from vibechat.engine.turns.chat_template import ChatTemplate
from vibechat.engine.turns.thinking import (
    CLOSE_TAG,
    MAX_LEADING,
    ThinkingSplitter,
    split_text,
    template_opens_thinking,
)

GREEDY = SamplingParams(temperature=0.0, max_tokens=64, seed=1)
THOUGHT = "Let me see: 2 < 3 and <b> is bold."
ANSWER = "The answer is </think> <think> literally."
REPLY = f"\n <think>{THOUGHT}</think>\n\n{ANSWER}"


def run_pieces(pieces: list[str], inside: bool = False) -> tuple[str, str, int]:
    return split_stream(ThinkingSplitter(inside), pieces)


# ------------------------------------------------------------------ splitter
def test_tags_split_at_every_position_give_the_same_thinking_and_answer():
    n = len(REPLY)
    for i in range(n + 1):
        for j in range(i, n + 1):
            thinking, answer, _ = run_pieces([REPLY[:i], REPLY[i:j], REPLY[j:]])
            assert (thinking, answer) == (THOUGHT, ANSWER), (i, j)


def test_one_character_at_a_time_holds_back_at_most_a_partial_tag():
    long_thought = "x<" * 500 + "</thin" + "k" * 10
    thinking, answer, most_held = run_pieces(list(f"<think>{long_thought}</think>ok"))
    assert (thinking, answer) == (long_thought, "ok")
    assert most_held <= len("<think>") + 1  # the start: "<think" seen so far, else < len(CLOSE_TAG)


def test_held_back_text_while_thinking_is_shorter_than_the_closing_tag():
    splitter = ThinkingSplitter(inside=True)
    for piece in ["a" * 100, "</", "th", "in", "k"]:
        splitter.feed(piece)
        assert len(splitter._held) < len(CLOSE_TAG)


def test_a_block_that_never_closes_is_all_thinking_and_the_answer_is_empty():
    assert split_text("<think>still going and </thi") == ("still going and </thi", "")
    assert split_text("<think>") == ("", "")


def test_think_later_in_the_reply_is_answer_text():
    assert split_text("Use <think>tags</think> like this.") == (
        "",
        "Use <think>tags</think> like this.",
    )
    assert split_text("a\n<think>b</think>") == ("", "a\n<think>b</think>")


def test_a_reply_that_starts_inside_the_block():
    assert split_text("reasoning here</think>\n\nDone.", inside=True) == ("reasoning here", "Done.")
    thinking, answer, _ = run_pieces(
        ["reason", "ing</th", "ink>", "\n", "\n", "Done."], inside=True
    )
    assert (thinking, answer) == ("reasoning", "Done.")


def test_no_thinking_and_unbounded_leading_whitespace_is_answer():
    assert split_text("Hello there") == ("", "Hello there")
    assert split_text("<thin") == ("", "<thin")  # an unfinished tag at the end is text
    spaces = " " * (MAX_LEADING + 1)
    assert split_text(spaces + "<think>x</think>y") == ("", spaces + "<think>x</think>y")


def test_the_template_probe_finds_a_generation_prompt_that_opens_thinking():
    deepseek = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}"
    )
    qwen3 = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if enable_thinking is defined and not enable_thinking "
        "%}<think>\n\n</think>\n\n{% endif %}"
        "{% endif %}"
    )
    broken = "{{ raise_exception('no') }}"
    assert template_opens_thinking(ChatTemplate("gguf", deepseek).render)
    assert not template_opens_thinking(ChatTemplate("gguf", qwen3).render)
    assert not template_opens_thinking(ChatTemplate("gguf", broken).render)


# ------------------------------------------------------------------- session
def thinking_backend(
    thinking: str = "I think \x1b[31mred\x1b[0m thoughts", reply: str = "Forty two."
) -> RecordingBackend:
    backend = RecordingBackend(reply)
    backend.thinking = thinking
    return backend


def test_the_session_keeps_thinking_apart_saves_it_and_never_sends_it_back(history):
    backend = thinking_backend()
    session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
    session.load()
    seen: list[object] = []
    session.chat.add_user("What is the answer?")
    result = session.answer(on_text=seen.append, on_event=seen.append)
    assert result.text == result.done.text == "Forty two."
    assert result.done.thinking == backend.thinking
    assert [e for e in seen if isinstance(e, str)] == ["Forty", " two."]  # on_text: the answer only
    assert "".join(e.text for e in seen if isinstance(e, ThinkingDelta)) == backend.thinking
    assert session.conversation.turns[-1] == ChatMessage("assistant", "Forty two.")
    session.chat.add_user("And again?")
    session.answer()
    sent = backend.requests[-1][0]
    assert all("thoughts" not in m.content for m in sent)  # earlier thinking is not sent back
    stored = history.get(session.chat.conversation_id)
    reply = stored.messages[1]
    assert (reply.content, reply.thinking, reply.status) == (
        "Forty two.",
        backend.thinking,
        "complete",
    )
    assert stored.to_dict()["messages"][1]["thinking"] == backend.thinking
    assert "thinking" not in stored.to_dict()["messages"][0]
    markdown = stored.to_markdown()
    assert (
        "<details><summary>Thinking</summary>" in markdown
        and "</details>\n\nForty two." in markdown
    )
    # Search looks at what was said, not at the thinking.
    assert history.search("Forty") and not history.search("thoughts")
    reopened = ChatLog.open(history, stored.id)
    assert [m.content for m in reopened.conversation.turns if m.role == "assistant"] == [
        "Forty two.",
        "Forty two.",
    ]


def test_the_markdown_export_cannot_be_broken_out_of_by_the_thinking(history):
    backend = thinking_backend("a </details> <script> & b")
    session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
    session.load()
    session.chat.add_user("hi")
    session.answer()
    markdown = history.get(session.chat.conversation_id).to_markdown()
    assert (
        "a &lt;/details&gt; &lt;script&gt; &amp; b" in markdown
        and markdown.count("</details>") == 1
    )


def test_cancel_during_thinking_keeps_the_thinking_so_far_and_an_empty_answer(history):
    backend = thinking_backend("one two three four five")
    session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
    session.load()
    session.chat.add_user("hi")
    events: list[object] = []
    result = session.answer(on_event=events.append, stop_requested=lambda: len(events) >= 2)
    assert result.text == "" and result.done.finish_reason == "cancelled"
    assert result.done.thinking.startswith("one two")
    reply = history.get(session.chat.conversation_id).messages[1]
    assert (reply.status, reply.content) == ("stopped", "")
    assert reply.thinking == result.done.thinking


def test_abandoning_a_reply_while_it_thinks_saves_the_thinking(history):
    backend = thinking_backend("one two three four")
    session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
    session.load()
    session.chat.add_user("hi")
    turn = session.begin_reply()
    thinking, left = threading.Event(), threading.Event()

    def on_event(event: object) -> None:
        if isinstance(event, ThinkingDelta):
            thinking.set()
            left.wait(30)  # the reply is left while it thinks

    worker = threading.Thread(
        target=lambda: session.stream(turn, lambda _t: None, on_event=on_event)
    )
    worker.start()
    assert thinking.wait(30)
    assert session.abandon()
    left.set()
    worker.join(30)
    reply = history.get(session.chat.conversation_id).messages[1]
    assert reply.status == "stopped" and reply.content == "" and reply.thinking.startswith("one")


def test_an_old_history_file_is_migrated_and_keeps_working(tmp_path: Path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)"
    )
    for statement in statements(MIGRATIONS[0]):
        conn.execute(statement)
    conn.execute("INSERT INTO schema_migrations VALUES (1, '2026-01-01')")
    conn.execute("INSERT INTO conversations(title, created, updated) VALUES ('old', 'x', 'x')")
    conn.execute(
        "INSERT INTO messages(conversation_id, role, content, status, created, updated) "
        "VALUES (1, 'assistant', 'an old reply', 'complete', 'x', 'x')"
    )
    conn.commit()
    conn.close()
    with History(path).open() as db:
        assert db.schema_version == len(MIGRATIONS)
        old = db.get(1).messages[0]
        assert (old.content, old.thinking) == ("an old reply", "")
        assert db.search("old")
        row = db.add_message(1, "assistant", "", "streaming")
        db.update_message(row, "new", "complete", thinking="hmm")
        assert db.get(1).messages[1].thinking == "hmm"


# ----------------------------------------------------------------- run, batch
def run(backend: RecordingBackend, **kw) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = execute(backend, RunRequest(prompt="hi", system=None, params=GREEDY, **kw), out, err)
    return code, out.getvalue(), err.getvalue()


def test_run_prints_the_answer_only_and_json_has_the_thinking_sanitised():
    code, out, err = run(thinking_backend())
    assert (code, out, err) == (0, "Forty two.\n", "")
    code, out, _ = run(thinking_backend(), json_output=True)
    obj = json.loads(out)
    assert obj["text"] == "Forty two." and obj["thinking"] == "I think red thoughts"
    assert obj["stats"]["completion_tokens"] == 6  # 4 of the thinking's tokens count too
    _, out, _ = run(thinking_backend(), json_output=True, raw=True)
    assert json.loads(out)["thinking"] == "I think \x1b[31mred\x1b[0m thoughts"
    _, out, _ = run(RecordingBackend("Plain."), json_output=True)
    assert json.loads(out)["thinking"] == ""


def test_show_thinking_writes_it_sanitised_on_stderr_apart_from_the_answer():
    code, out, err = run(thinking_backend(), show_thinking=True)
    assert code == 0 and out == "Forty two.\n"
    assert err == "[thinking]\nI think red thoughts\n[end of thinking]\n"
    _, out, err = run(thinking_backend(), show_thinking=True, raw=True)  # --raw is about stdout
    assert "\x1b" not in err
    _, _, err = run(RecordingBackend("Plain."), show_thinking=True)
    assert err == ""  # no thinking, no markers


def test_prompts_file_results_have_the_thinking_in_their_own_field():
    prompts = io.BytesIO(b'{"prompt": "one"}\n{"prompt": "two"}\n')
    out, err = io.StringIO(), io.StringIO()
    options = BatchOptions(system=None, params=GREEDY, show_thinking=True)
    assert run_batch(thinking_backend(), prompts, "p.jsonl", options, None, out, err) == 0
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["text"], r["thinking"]) for r in results] == [
        ("Forty two.", "I think red thoughts")
    ] * 2
    assert "[thinking line 1]\nI think red thoughts\n[end of thinking line 1]\n" in err.getvalue()
    assert "[end of thinking line 2]" in err.getvalue()


# -------------------------------------------------------------- remote backend
def collect(backend, params=GREEDY) -> tuple[str, str, GenerationDone]:
    answer, thinking, done = [], [], None
    for event in backend.stream_chat([ChatMessage("user", "hi")], params):
        if isinstance(event, TextDelta):
            answer.append(event.text)
        elif isinstance(event, ThinkingDelta):
            thinking.append(event.text)
        elif isinstance(event, GenerationDone):
            done = event
    assert done is not None
    return "".join(thinking), "".join(answer), done


def test_inline_tags_split_at_every_position_by_the_server(stub):
    backend = stub.backend()
    for i in range(1, len(REPLY)):
        stub.pieces = [REPLY[:i], REPLY[i:]]
        thinking, answer, done = collect(backend)
        assert (thinking, answer) == (done.thinking, done.text) == (THOUGHT, ANSWER), i


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_content_is_the_thinking(stub, field):
    stub.reasoning_field = field
    stub.reasoning = ["Hmm, ", "\x1b]0;title\x07let me think", "."]
    thinking, answer, done = collect(stub.backend())
    assert (
        thinking == done.thinking == "Hmm, \x1b]0;title\x07let me think."
    )  # sanitised by each front end
    assert answer == done.text == stub.reply


def test_stop_strings_apply_to_the_answer_only(stub):
    stub.reasoning = ["I could say there ", "but no."]
    thinking, answer, done = collect(stub.backend(), GREEDY.replace(stop=("there",)))
    assert thinking == "I could say there but no." and answer == "Hello "


def test_a_remote_reply_that_never_stops_thinking(stub):
    stub.pieces = ["<think>", "no end in sight"]
    thinking, answer, done = collect(stub.backend())
    assert (thinking, answer, done.finish_reason) == ("no end in sight", "", "stop")


def test_cancel_during_remote_thinking(stub):
    stub.reasoning = ["thinking hard"]
    stub.mode, stub.cut_after = "stall", 0  # the answer never comes
    backend = stub.backend()
    events = backend.stream_chat([ChatMessage("user", "hi")], GREEDY)
    first = next(e for e in events if isinstance(e, ThinkingDelta))
    assert first.text == "thinking hard"
    backend.cancel()
    done = [e for e in events if isinstance(e, GenerationDone)][0]
    assert (
        done.finish_reason == "cancelled" and done.thinking == "thinking hard" and done.text == ""
    )


# --------------------------------------------------------------- local engine
def emitted(
    table: dict[int, bytes], tokens: list[int], stop: tuple[str, ...] = (), inside: bool = False
):
    from vibechat.engine.llama.decoding import Emitter

    # a token table instead of a model: token 0 ends the reply (a turn token)
    out = Emitter(table.__getitem__, None, frozenset({0}), threading.Event(), 1000, stop, inside)
    thinking, answer = [], []
    for token in tokens:
        for is_thinking, text in out.emit(token):
            (thinking if is_thinking else answer).append(text)
        if out.done:
            break
    for is_thinking, text in out.tail():
        (thinking if is_thinking else answer).append(text)
    return "".join(thinking), "".join(answer), out


def test_the_local_emitter_splits_bytes_and_applies_stops_to_the_answer_only(monkeypatch):
    from vibechat.engine.llama import llamacpp

    monkeypatch.setattr(llamacpp.ll, "llama_vocab_is_eog", lambda _vocab, token: token == 0)
    raw = "<think>café STOP here</think>\n\nBon STOP appétit".encode()
    table = {i + 1: raw[i : i + 1] for i in range(len(raw))}  # one byte a token: UTF-8 split too
    tokens = list(table)
    assert emitted(table, tokens)[:2] == ("café STOP here", "Bon STOP appétit")
    thinking, answer, out = emitted(table, tokens, stop=("STOP",))
    assert (thinking, answer, out.done) == ("café STOP here", "Bon ", True)
    # The template opened the block: the reply starts inside it.
    inner = b"reasoning</think>Done"
    table = {i + 1: inner[i : i + 1] for i in range(len(inner))}
    assert emitted(table, [*table, 0], inside=True)[:2] == ("reasoning", "Done")


@pytest.mark.model
def test_a_local_reply_that_starts_inside_a_block_that_never_closes(starter_path):
    """The starter model does not think: a template that opened <think> (poked here) makes
    its whole reply thinking, and a stop string in it does not end the reply. In Gemma's turn
    format (prompt_format gemma), where the starter writes on to the limit: the completion
    frame's own stops would end the free reply sooner than the thinking."""
    from vibechat.engine.llama.llamacpp import LlamaCppBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions

    llama_backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=1024,
            repack="off",
            prompt_format="gemma",
        )
    )
    llama_backend.load()
    messages = [ChatMessage("user", "Write a list of three fruits.")]
    _, _, free = collect_local(
        llama_backend, messages, SamplingParams(temperature=0, max_tokens=12)
    )
    word = free.text.strip().split()[1]
    llama_backend._prompt.reply_thinks = True
    try:
        llama_backend.reset()
        thinking, answer, done = collect_local(
            llama_backend, messages, SamplingParams(temperature=0, max_tokens=12, stop=[word])
        )
    finally:
        llama_backend.close()
    assert answer == done.text == "" and thinking == done.thinking == free.text
    assert done.stats.completion_tokens == 12 and done.finish_reason == "length"


def collect_local(backend, messages, params):
    thinking, answer, done = [], [], None
    for event in backend.stream_chat(messages, params):
        if isinstance(event, ThinkingDelta):
            thinking.append(event.text)
        elif isinstance(event, TextDelta):
            answer.append(event.text)
        elif isinstance(event, GenerationDone):
            done = event
    assert done is not None
    return "".join(thinking), "".join(answer), done


# -------------------------------------------------------- end to end (the CLI)
def vibechat(*args: str):
    import os
    import subprocess

    from conftest import VIBECHAT_BIN

    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def test_run_show_thinking_json_and_the_history_exports_end_to_end(stub):
    stub.reasoning = ["Weighing \x1b[2J", "the options."]
    server = ["--base-url", stub.url, "--model", "stub-small"]
    out = vibechat("run", *server, "-p", "Say hello.", "--show-thinking")
    assert out.returncode == 0, out.stderr
    assert out.stdout == stub.reply + "\n"
    assert "[thinking]\nWeighing the options.\n[end of thinking]\n" in out.stderr
    out = vibechat("run", *server, "-p", "Again.", "--json")
    obj = json.loads(out.stdout)
    assert (obj["text"], obj["thinking"]) == (stub.reply, "Weighing the options.")
    cid = obj["conversation_id"]
    exported = json.loads(vibechat("history", "export", str(cid), "--format", "json").stdout)
    assert exported["messages"][1]["thinking"] == "Weighing \x1b[2Jthe options."  # JSON escapes it
    markdown = vibechat("history", "export", str(cid), "--format", "md").stdout
    assert "<details><summary>Thinking</summary>\n\nWeighing the options.\n\n</details>" in markdown
    # Continuing sends the answer back, never the thinking.
    out = vibechat("run", *server, "--continue", "-p", "More.")
    assert out.returncode == 0, out.stderr
    assert stub.last_body["messages"][-2] == {"role": "assistant", "content": stub.reply}
    searched = json.loads(vibechat("history", "search", "Weighing", "--json").stdout)
    assert searched == []


def test_the_engine_process_sends_thinking_and_text_as_their_own_kinds():
    from vibechat.engine.llama import worker_child

    sent: list[tuple] = []
    worker_child._stream(
        thinking_backend("a b c", "x y"), [ChatMessage("user", "hi")], GREEDY, sent.append
    )
    kinds = [m[0] for m in sent]
    assert kinds[-1] == "event" and isinstance(sent[-1][1], GenerationDone)
    assert "".join(m[1] for m in sent if m[0] == "thinking") == "a b c"
    assert "".join(m[1] for m in sent if m[0] == "delta") == "x y"
    assert kinds.index("delta") > max(i for i, k in enumerate(kinds) if k == "thinking")


# ------------------------------------------------------------------ the chat
async def test_the_chat_does_not_show_thinking_as_answer_text():
    from fakes import settle
    from vibechat.app.tui import create_app

    backend = thinking_backend("secret musings here", "Forty two.")
    app = create_app(backend, blink=False)
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("What is it?")
        await pilot.press("enter")
        await settle(pilot)
        assert [(w.role, w.text) for w in app.chat.messages()] == [
            ("user", "What is it?"),
            ("assistant", "Forty two."),
        ]


# ------------------------------------------------------- thinking token counts
def test_the_local_emitter_counts_the_thinking_tokens_tags_included(monkeypatch):
    from vibechat.engine.llama import llamacpp

    monkeypatch.setattr(llamacpp.ll, "llama_vocab_is_eog", lambda _vocab, token: token == 0)
    table = {1: b"<think>", 2: b"Hmm", 3: b", yes", 4: b"</th", 5: b"ink>", 6: b"\n\nYes", 7: b"."}
    thinking, answer, out = emitted(table, [1, 2, 3, 4, 5, 6, 7, 0])
    assert (thinking, answer) == ("Hmm, yes", "Yes.")
    assert (out.generated, out.thinking_tokens) == (7, 5)  # <think>, Hmm, ", yes", "</th", "ink>"
    _, _, plain = emitted({1: b"Just", 2: b" text"}, [1, 2, 0])
    assert plain.thinking_tokens == 0


def test_the_engine_process_forwards_the_thinking_token_count():
    from vibechat.engine.llama import worker_child

    class Counting(RecordingBackend):
        def stream_chat(self, messages, params):
            for n, event in enumerate(super().stream_chat(messages, params), 1):
                yield ThinkingDelta(event.text, n) if isinstance(event, ThinkingDelta) else event

    backend = Counting("x y")
    backend.thinking = "a b c"
    sent: list[tuple] = []
    worker_child._stream(backend, [ChatMessage("user", "hi")], GREEDY, sent.append)
    thinking = [m for m in sent if m[0] == "thinking"]
    assert thinking and thinking[-1][3] == 3  # the last thinking piece's count of generated tokens


def test_a_server_that_reports_reasoning_tokens_and_one_that_does_not(stub):
    stub.reasoning = ["Let me ", "see."]
    stub.final_fields = {
        "usage": {
            "prompt_tokens": 21,
            "completion_tokens": 9,
            "completion_tokens_details": {"reasoning_tokens": 4},
        }
    }
    backend = OpenAICompatibleBackend(OpenAIOptions(base_url=stub.url, model="stub-small"))
    done = [
        e
        for e in backend.stream_chat([ChatMessage("user", "hi")], GREEDY)
        if isinstance(e, GenerationDone)
    ][0]
    assert (done.stats.completion_tokens, done.stats.thinking_tokens) == (9, 4)
    stub.final_fields = {}
    done = [
        e
        for e in backend.stream_chat([ChatMessage("user", "hi")], GREEDY)
        if isinstance(e, GenerationDone)
    ][0]
    assert (
        done.thinking == "Let me see." and done.stats.thinking_tokens == 0
    )  # not known: not made up
