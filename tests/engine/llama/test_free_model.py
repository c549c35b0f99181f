"""Freeing llama.cpp's objects has one home (engine/llama/loading.free_model): the main
model's context and model, and a draft model's, are freed the same way, once."""

from __future__ import annotations

from pathlib import Path

import llama_cpp as ll
import pytest

from vibechat.engine.llama.draft_model import DraftModel
from vibechat.engine.llama.loading import free_model
from vibechat.engine.llama.native import ensure_llama_initialised


def test_nothing_made_is_nothing_to_free():
    free_model(None, None)  # a close before a load, or a second close


@pytest.mark.model
def test_a_draft_model_frees_its_context_and_model_once(starter_path: Path):
    ensure_llama_initialised()
    target = ll.llama_model_load_from_file(
        str(starter_path).encode(), ll.llama_model_default_params()
    )
    try:
        draft = DraftModel(
            starter_path,
            n_ctx=256,
            n_threads=1,
            n_gpu_layers=0,
            extra_buffers=False,
            target_vocab=ll.llama_model_get_vocab(target),
            name="starter",
        )
        assert draft._ctx and draft._model
        draft.close()
        assert draft._ctx is None and draft._model is None
        draft.close()  # a second close frees nothing twice
    finally:
        free_model(None, target)
