"""The lazy grammar sampler (engine/llama/grammar_sampling.py): the chain draws first, the grammar
checks only that token, and a rejected token is resampled with the grammar over the whole
row. Unit tests drive it over hand-made logits rows with the starter model's real vocabulary
and llama.cpp's real samplers; the rest run the real starter model."""

from __future__ import annotations

import ctypes
import json
import logging
import re

import llama_cpp as ll
import numpy as np
import pytest

from conftest import worker_threads
from jsonschema_lite import errors as schema_errors
from test_structured import PERSON, run_reply
from vibechat.engine.llama.grammar_sampling import ChainSampler, GrammarSampler, accept_is_stateless
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.turns.backend import ChatMessage, GenerationDone


# ------------------------------------------------------------------ over a logits row
@pytest.fixture(scope="module")
def vocab(starter_path):
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(starter_path).encode(), params)
    assert model
    yield ll.llama_model_get_vocab(model)
    ll.llama_model_free(model)


def first_token(vocab, text: str) -> int:
    data = text.encode()
    buf = (ll.llama_token * 16)()
    n = ll.llama_tokenize(vocab, data, len(data), buf, 16, False, False)
    assert n > 0
    return buf[0]


def piece(vocab, token: int) -> str:
    buf = ctypes.create_string_buffer(64)
    n = ll.llama_token_to_piece(vocab, token, buf, 64, 0, False)
    return buf.raw[:n].decode()


def chain_of(*samplers):
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    for sampler in samplers:
        ll.llama_sampler_chain_add(chain, sampler)
    return chain


def yes_no(vocab, chain) -> GrammarSampler:
    grammar = ll.llama_sampler_init_grammar(vocab, b'root ::= "yes" | "no"', b"root")
    assert grammar
    return GrammarSampler(chain, grammar, ll.llama_vocab_n_tokens(vocab))


def row(vocab, **logits: float) -> np.ndarray:
    """A logits row: -10 everywhere, the given first tokens (``eog`` for end of generation)
    higher."""
    out = np.full(ll.llama_vocab_n_tokens(vocab), -10.0, dtype=np.float32)
    for text, value in logits.items():
        out[ll.llama_vocab_eos(vocab) if text == "eog" else first_token(vocab, text)] = value
    return out


def test_tokens_the_grammar_rejects_are_resampled_end_of_generation_included(vocab):
    yes, no, eog = first_token(vocab, "yes"), first_token(vocab, "no"), ll.llama_vocab_eos(vocab)
    assert piece(vocab, no) == "no" and piece(vocab, yes) == "yes"
    sampler = yes_no(vocab, chain_of(ll.llama_sampler_init_greedy()))
    try:
        # The model would end (or say "maybe"): the grammar is not complete, so "no" it is.
        assert sampler.sample_logits(row(vocab, eog=20, maybe=10, no=5, yes=1)) == no
        assert (sampler.sampled, sampler.resampled) == (1, 1)
        # Now it is complete: "yes" after "no" is rejected, end of generation is allowed.
        assert sampler.sample_logits(row(vocab, yes=20, eog=1)) == eog
        assert (sampler.sampled, sampler.resampled) == (2, 2)
    finally:
        sampler.free()


def test_a_token_the_grammar_allows_is_taken_as_drawn(vocab):
    sampler = yes_no(vocab, chain_of(ll.llama_sampler_init_greedy()))
    try:
        assert sampler.sample_logits(row(vocab, yes=3, no=2)) == first_token(vocab, "yes")
        assert sampler.resampled == 0
    finally:
        sampler.free()


def test_seeded_sampling_stays_within_the_grammar_and_repeats(vocab):
    allowed = {first_token(vocab, "yes"), first_token(vocab, "no")}
    logits = row(vocab, maybe=4, perhaps=4, yes=3, no=3, eog=4)

    def draw(seed: int) -> int:
        sampler = yes_no(
            vocab,
            chain_of(
                ll.llama_sampler_init_top_k(40),
                ll.llama_sampler_init_temp(1.0),
                ll.llama_sampler_init_dist(seed),
            ),
        )
        try:
            return sampler.sample_logits(logits)
        finally:
            sampler.free()

    tokens = [draw(seed) for seed in range(12)]
    assert set(tokens) <= allowed
    assert [draw(seed) for seed in range(12)] == tokens


def test_penalties_see_each_emitted_token_once_and_never_a_rejected_one(vocab):
    maybe, no = first_token(vocab, "maybe"), first_token(vocab, "no")
    # frequency penalty 1: a token's logit drops by how often the penalties sampler accepted it
    chain = chain_of(
        ll.llama_sampler_init_penalties(ll.llama_vocab_n_tokens(vocab), 64, 1.0, 1.0, 0.0),
        ll.llama_sampler_init_greedy(),
    )
    assert not accept_is_stateless(chain)
    sampler = yes_no(vocab, chain)
    try:
        assert sampler.sample_logits(row(vocab, maybe=10, no=5)) == no
        probe = (ll.llama_token_data * 2)(
            ll.llama_token_data(maybe, 3.0, 0.0), ll.llama_token_data(no, 3.0, 0.0)
        )
        arr = ll.llama_token_data_array(data=probe, size=2, selected=-1, sorted=False)
        ll.llama_sampler_apply(chain, ctypes.byref(arr))
        logits = {probe[i].id: probe[i].logit for i in range(2)}
        assert logits == {maybe: 3.0, no: 2.0}
    finally:
        sampler.free()


def test_only_chains_whose_accept_keeps_no_state_take_the_fast_first_draw():
    plain = chain_of(
        ll.llama_sampler_init_top_k(40),
        ll.llama_sampler_init_top_p(0.9, 1),
        ll.llama_sampler_init_min_p(0.05, 1),
        ll.llama_sampler_init_temp(0.8),
        ll.llama_sampler_init_dist(1),
    )
    greedy = chain_of(ll.llama_sampler_init_greedy())
    penalised = chain_of(
        ll.llama_sampler_init_penalties(1000, 64, 1.1, 0.0, 0.0), ll.llama_sampler_init_greedy()
    )
    try:
        assert accept_is_stateless(plain) and accept_is_stateless(greedy)
        assert not accept_is_stateless(penalised)
    finally:
        for chain in (plain, greedy, penalised):
            ll.llama_sampler_free(chain)


# ------------------------------------------------------------------ the starter model
def resample_counts(caplog) -> tuple[int, int]:
    records = [r for r in caplog.records if r.name == "vibechat.engine.llama.grammar_sampling"]
    assert records
    return int(records[-1].args[0]), int(records[-1].args[1])  # type: ignore[index]


def test_a_grammar_the_model_would_not_follow_is_resampled_and_followed(backend, caplog):
    free = run_reply(backend, SamplingParams(temperature=0, max_tokens=4))
    assert not free.text.startswith("Z")
    caplog.set_level(logging.DEBUG, logger="vibechat.engine.llama.grammar_sampling")
    fmt = OutputFormat("grammar", 'root ::= "Zebra-" [0-9] [0-9] [0-9]', "zebra.gbnf")
    for params in (
        SamplingParams(temperature=0, max_tokens=32, output_format=fmt),
        SamplingParams(seed=3, max_tokens=32, output_format=fmt),
    ):
        backend.reset()
        done = run_reply(backend, params)
        assert re.fullmatch(r"Zebra-[0-9]{3}", done.text), done.text
        assert done.finish_reason == "stop"
        resampled, sampled = resample_counts(caplog)
        assert resampled >= 1 and sampled >= done.stats.completion_tokens


def test_a_seeded_constrained_reply_is_reproducible(backend):
    params = SamplingParams(
        seed=11,
        temperature=0.9,
        max_tokens=400,
        output_format=OutputFormat("schema", json.dumps(PERSON), "person.json"),
    )
    first = run_reply(backend, params)
    backend.reset()
    again = run_reply(backend, params)
    assert again.text == first.text
    assert schema_errors(json.loads(first.text), PERSON) == []


def test_a_constrained_reply_with_speculative_decoding_follows_the_schema(starter_path):
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=4096,
            speculative="prompt-lookup",
            repack="off",
        )
    )
    try:
        backend.load()
        example = {
            "name": "Ada",
            "age": 36,
            "tags": ["maths"],
            "colour": "green",
            "address": {"city": "London"},
        }
        ask = [ChatMessage("user", f"Repeat this JSON exactly: {json.dumps(example)}")]
        params = SamplingParams(
            temperature=0,
            max_tokens=200,
            output_format=OutputFormat("schema", json.dumps(PERSON), "person.json"),
        )
        done = [e for e in backend.stream_chat(ask, params) if isinstance(e, GenerationDone)][0]
        assert done.finish_reason == "stop", done.text
        assert schema_errors(json.loads(done.text), PERSON) == []
        assert done.stats.drafted_tokens > 0  # the drafts were verified with the lazy sampler
    finally:
        backend.close()


def test_greedy_lazy_sampling_picks_what_grammar_first_sampling_picks(backend, monkeypatch):
    """Temperature 0: the argmax, if allowed, is the allowed argmax; so the lazy sampler's
    reply is the one the grammar-first chain (the engine's former sampler) gives."""
    params = SamplingParams(
        temperature=0,
        max_tokens=120,
        output_format=OutputFormat("schema", json.dumps(PERSON), "person.json"),
    )
    lazy = run_reply(backend, params)

    def grammar_first(p: SamplingParams) -> ChainSampler:
        rest = backend._chain(p)
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        gbnf = OutputFormat("schema", json.dumps(PERSON)).gbnf().encode()
        ll.llama_sampler_chain_add(
            chain, ll.llama_sampler_init_grammar(backend._vocab, gbnf, b"root")
        )
        while ll.llama_sampler_chain_n(rest):
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_chain_remove(rest, 0))
        ll.llama_sampler_free(rest)
        return ChainSampler(chain)

    monkeypatch.setattr(backend, "_sampler", grammar_first)
    backend.reset()
    first = run_reply(backend, params)
    assert lazy.text == first.text
    assert lazy.finish_reason == first.finish_reason
