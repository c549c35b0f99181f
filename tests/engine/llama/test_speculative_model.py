"""Adaptive speculative decoding (``speculative = "auto"``) on the real starter model: replies
complete, the statistics are consistent, the draft length stays in its bounds, and the policy
keeps what it measured from one reply to the next. No timing is asserted (shared, noisy CPUs),
and drafted text is not compared bit for bit with plain decoding on long contexts (batched
kernels round differently: docs/PERFORMANCE.md)."""

from __future__ import annotations

import pytest

from conftest import collect, same_start, worker_threads
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.llama.speculative import AdaptiveDraft, make_policy
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationStats

CODE = "\n".join(
    f"def scale_{i}(value):\n    total = value * {i}\n    return total + {i}" for i in range(8)
)
REWRITE = [
    ChatMessage(
        "user", "Rewrite this code with value renamed to amount:\n\n```python\n" + CODE + "\n```"
    )
]
WORDS = [ChatMessage("user", "Write a list of 50 random words, never repeating one.")]
RANDOM = SamplingParams(
    temperature=1.2, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=7, max_tokens=120
)


# Every model here is the starter prompted in Gemma's turn format (prompt_format gemma): there
# it copies code back and lists words for as long as it is let, which drafting needs to be
# measured. In its own format, the completion frame, it answers the rewrite with "Hello!".
GEMMA = "gemma"


@pytest.fixture
def plain_backend(gemma_backend):
    """Plain decoding to compare drafting with, in Gemma's turn format too: conftest's
    ``gemma_backend`` (the session's starter loaded once with these settings, KV cache empty)."""
    yield gemma_backend


@pytest.fixture(scope="module")
def auto(starter_path):
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=4096,
            speculative="auto",
            draft_tokens=8,
            repack="off",
            prompt_format=GEMMA,
        )
    )
    info = backend.load()
    assert info.speculative == "auto" and info.draft_tokens == 8
    yield backend
    backend.close()


def consistent(stats: GenerationStats, max_k: int) -> None:
    assert 0 <= stats.accepted_draft_tokens <= stats.drafted_tokens
    assert 0 <= stats.draft_k <= max_k
    assert not stats.drafting_turned_off or stats.draft_k == 0  # off: no draft length
    assert stats.accepted_draft_tokens < stats.completion_tokens or stats.completion_tokens == 0


@pytest.mark.model
def test_auto_drafting_completes_replies_with_consistent_statistics(auto, plain_backend):
    auto.reset()
    params = SamplingParams(temperature=0, max_tokens=120)
    deltas, reply = collect(auto, REWRITE, params)
    assert reply.stats.completion_tokens == 120 and reply.stats.finish_reason == "length"
    assert "".join(deltas) == reply.text
    consistent(reply.stats, 8)
    # It probed: the reply copies the prompt's code, so the lookup found drafts and tried them.
    assert reply.stats.drafted_tokens > 0
    # Which batches verify the drafts depends on measured times, and batched kernels round
    # differently (docs/PERFORMANCE.md): only the reply's opening is compared with plain decoding,
    # so plain decoding writes only an opening (40 tokens: some fifteen words of code; a greedy
    # reply's first tokens do not depend on its limit).
    _, plain = collect(plain_backend, REWRITE, params.replace(max_tokens=40))
    assert "def scale_" in reply.text and same_start(reply.text, plain.text, 5)

    policy = auto._policy
    assert isinstance(policy, AdaptiveDraft) and policy.c1 and policy.costs and policy.probes >= 1
    measured = dict(policy.costs)

    # Seeded sampling where the lookup's drafts fail: still complete, still consistent, and
    # the costs measured before are kept (they are the machine's, not the text's).
    auto.reset()
    deltas, sampled = collect(auto, WORDS, RANDOM)
    assert sampled.stats.completion_tokens == 120 and "".join(deltas) == sampled.text
    consistent(sampled.stats, 8)
    assert set(measured) <= set(policy.costs)


@pytest.mark.model
def test_auto_drafting_keeps_seeded_sampling_reproducible(auto, plain_backend):
    auto.reset()
    _, first = collect(auto, WORDS, RANDOM.replace(max_tokens=40))
    auto.reset()
    _, again = collect(auto, WORDS, RANDOM.replace(max_tokens=40))
    _, plain = collect(plain_backend, WORDS, RANDOM.replace(max_tokens=40))
    # every token is drawn from the target's logits with the same chain: the same words
    assert same_start(first.text, plain.text, 5) and same_start(again.text, plain.text, 5)


@pytest.mark.model
def test_drafting_reports_its_progress_while_the_reply_streams(auto, monkeypatch):
    from vibechat.engine.llama import replying
    from vibechat.engine.turns.backend import DraftProgress, GenerationDone

    monkeypatch.setattr(
        replying, "DRAFT_PROGRESS_S", 0.0
    )  # after every piece (else twice a second)
    # The module's backend keeps what its policy measured from reply to reply: after other
    # tests' replies (which ones depends on the order, and pytest-xdist's workers split a module)
    # it may judge drafting hopeless on this machine and not probe at all. This test is about the
    # progress reports: it starts from a fresh policy, as a newly loaded backend does.
    monkeypatch.setattr(auto, "_policy", make_policy("auto", 8))
    auto.reset()
    events = list(auto.stream_chat(REWRITE, SamplingParams(temperature=0, max_tokens=60)))
    progress = [e for e in events if isinstance(e, DraftProgress)]
    done = events[-1]
    assert isinstance(done, GenerationDone) and len(progress) >= 10
    assert not any(isinstance(e, DraftProgress) for e in events[events.index(done) :][1:])
    drafted = [p.drafted for p in progress]
    assert drafted == sorted(drafted) and drafted[-1] > 0  # counts so far, growing
    for p in progress:
        assert 0 <= p.accepted <= p.drafted <= done.stats.drafted_tokens and 0 <= p.k <= 8
        assert not p.turned_off or p.k == 0
    assert progress[-1].accepted <= done.stats.accepted_draft_tokens


@pytest.mark.model
def test_stats_of_a_reply_without_drafting_say_nothing_of_drafts(plain_backend):
    _, plain = collect(plain_backend, REWRITE, SamplingParams(temperature=0, max_tokens=10))
    assert (
        plain.stats.drafted_tokens == plain.stats.draft_k == 0
        and not plain.stats.drafting_turned_off
    )


# ------------------------------------------------------------------ a draft model
@pytest.fixture(scope="module")
def self_drafted_loaded(starter_path):
    """The starter drafting for itself (prompt lookup, 4 drafts), loaded once for the module's
    tests that use these settings (two models loaded: the target and its draft), and the load's
    ModelInfo. ``prompt-lookup`` keeps no measured policy from reply to reply."""
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=2048,
            repack="off",
            prompt_format=GEMMA,
            speculative="prompt-lookup",
            draft_tokens=4,
            draft_model_path=starter_path,
        )
    )
    try:
        yield backend, backend.load()
    finally:
        backend.close()


@pytest.fixture
def self_drafted(self_drafted_loaded):
    """The module's self-drafting backend with both KV caches emptied (``reset`` clears the
    target's and the draft's: kv_cache.py; test_llamacpp_backend.py's
    test_turn_two_evaluates_only_new_tokens_and_reset_evaluates_all proves a reset turn evaluates
    its whole prompt), so each test starts from a fresh context as a new load would."""
    backend, _info = self_drafted_loaded
    backend.reset()
    return backend


@pytest.mark.model
def test_the_starter_as_its_own_draft_model_is_accepted_nearly_always(
    self_drafted_loaded, self_drafted, plain_backend
):
    backend = self_drafted
    info = self_drafted_loaded[1]
    assert info.speculative == "prompt-lookup" and info.draft_model and info.draft_model_bytes
    # greedy, a short context: the same reply as plain decoding, every draft kept
    short = [ChatMessage("user", "List three colours.")]
    _, first = collect(backend, short, SamplingParams(temperature=0, max_tokens=30))
    assert first.stats.prompt_tokens_evaluated == first.stats.prompt_tokens  # a fresh context
    plain_backend.reset()
    _, plain = collect(plain_backend, short, SamplingParams(temperature=0, max_tokens=30))
    assert first.text == plain.text and first.stats.drafted_tokens > 0
    # the same model drafts the same tokens: all kept, but for a draft the reply's end cut short
    assert first.stats.accepted_draft_tokens >= first.stats.drafted_tokens - 4
    backend.reset()
    deltas, reply = collect(backend, REWRITE, SamplingParams(temperature=0, max_tokens=60))
    st = reply.stats
    assert st.completion_tokens == 60 and "".join(deltas) == reply.text
    assert st.drafted_tokens > 20 and st.accepted_draft_tokens > st.drafted_tokens // 2
    # a second turn: the draft's KV cache follows the conversation (rejected drafts dropped)
    turn2 = [
        *REWRITE,
        ChatMessage("assistant", reply.text),
        ChatMessage("user", "Now rename total to result."),
    ]
    _, second = collect(backend, turn2, SamplingParams(temperature=0, max_tokens=30))
    assert second.stats.completion_tokens == 30 and second.stats.accepted_draft_tokens > 0


@pytest.mark.model
def test_a_verification_whose_drafts_are_all_kept_yields_one_token_more(self_drafted, monkeypatch):
    import types

    import llama_cpp

    from vibechat.engine.llama import drafting

    decodes = []  # the model's decodes while it generates: each one a new token and its drafts

    def decode(ctx, batch):
        decodes.append(batch.n_tokens)
        return llama_cpp.llama_decode(ctx, batch)

    proxy = types.SimpleNamespace(
        **{name: getattr(llama_cpp, name) for name in dir(llama_cpp) if name.startswith("llama_")}
    )
    proxy.llama_decode = decode
    monkeypatch.setattr(drafting, "ll", proxy)
    short = [ChatMessage("user", "List three colours.")]
    _, reply = collect(self_drafted, short, SamplingParams(temperature=0, max_tokens=30))
    st = reply.stats
    assert st.prompt_tokens_evaluated == st.prompt_tokens  # a fresh context: all evaluated
    assert st.accepted_draft_tokens >= st.drafted_tokens - 4 > 0  # the same model: its drafts kept
    assert sum(decodes) == len(decodes) + st.drafted_tokens
    # every token but the last was decoded once, in the batch it came from: after k kept drafts the
    # token at the batch's last position is sampled from its logits (the extra token), not decoded
    # again on its own
    assert st.completion_tokens - st.accepted_draft_tokens - len(decodes) in (0, 1)
    assert (
        len(decodes) <= (st.completion_tokens - 1) // 5 + 2
    )  # ~k + 1 = 5 tokens a decode (k: 4 drafts)


@pytest.mark.model
def test_a_draft_model_turns_auto_drafting_on(starter_path):
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=2048,
            repack="off",
            prompt_format=GEMMA,
            draft_model_path=starter_path,
        )
    )
    try:
        info = backend.load()
        assert info.speculative == "auto" and info.draft_tokens == 10
        _, reply = collect(backend, REWRITE, SamplingParams(temperature=0, max_tokens=30))
        consistent(reply.stats, 10)
    finally:
        backend.close()


@pytest.mark.model
def test_a_draft_model_with_another_vocabulary_is_refused_in_one_line(starter_path, tmp_path):
    from ggufgen import copy_with_metadata
    from vibechat.engine.errors import ModelLoadError

    other = copy_with_metadata(
        starter_path, tmp_path / "other-vocab.gguf", {"tokenizer.ggml.bos_token_id": 7}
    )
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=2048,
            repack="off",
            prompt_format=GEMMA,
            draft_model_path=other,
        )
    )
    with pytest.raises(ModelLoadError) as caught:
        backend.load()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "the draft model other-vocab.gguf does not share the model's vocabulary (BOS/EOS ids 7/"
    )
    assert message.endswith("or drop --draft-model.")
    assert backend._model is None and backend._ctx is None and backend._draft is None


@pytest.mark.model
def test_the_draft_models_kv_cache_counts_in_the_memory_check(starter_path, monkeypatch, tmp_path):
    from vibechat.engine.errors import ModelLoadError
    from vibechat.engine.llama import memory_checks
    from vibechat.engine.models.fit import weights_to_load

    size = starter_path.stat().st_size
    options = LlamaCppOptions(
        threads=worker_threads(),
        model_path=starter_path,
        context_size=4096,
        repack="off",
        gpu_layers=0,
        draft_model_path=starter_path,
    )
    assert (
        weights_to_load(LlamaCppBackend(options)) == 2 * size
    )  # what a model switch must find room for
    backend = LlamaCppBackend(options)
    try:
        info = backend.load()
        assert (
            info.draft_model_bytes and info.draft_model_bytes > size
        )  # its weights and its KV cache
        assert info.memory_bytes == info.file_size + info.kv_cache_bytes + info.draft_model_bytes
    finally:
        backend.close()
    # Room for both models' weights and the model's KV cache, not for the draft's as well.
    checks = iter([10**12, 10**12, 2 * size + 1000])
    monkeypatch.setattr(memory_checks, "available_memory", lambda: next(checks))
    backend = LlamaCppBackend(options)
    with pytest.raises(ModelLoadError) as caught:
        backend.load()
    message = str(caught.value)
    assert (
        message.startswith("the draft model's 4,096-token KV cache needs about")
        and "\n" not in message
    )
    assert message.endswith("drop --draft-model.")
    assert backend._model is None and backend._draft is None
