"""Images on the local engine (issue 29): the starter model with the tiny test projector
(tests/projector.py, ``starter_projector``), through the engine process as the chat uses it
(``WorkerBackend``), and in process where a test counts the projector's encodes. The projector's
weights are random: the tests judge that a reply came and what was evaluated, never its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import collect, worker_threads
from projector import IMAGE_TOKENS, write_projector, write_test_image
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.llama.vision_errors import ImagesNotSupported, ProjectorError
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, SideRequest

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0, max_tokens=12)
MARKERS = 2  # <start_of_image> and <end_of_image> around Gemma 3's image tokens
NO_PROJECTOR = "this model takes no images: load a vision model with its projector (--mmproj FILE)"


def options(model: Path, **changes) -> LlamaCppOptions:
    return LlamaCppOptions(
        **{
            "model_path": model,
            "context_size": 4096,
            "repack": "off",
            "threads": worker_threads(),
            **changes,
        }
    )


def picture(folder: Path, seed: int = 0) -> Attachment:
    """A picture as engine/attach keeps one: a PNG and its digest (here a made-up one per seed)."""
    path = write_test_image(folder / f"picture-{seed}.png", seed=seed)
    return Attachment(
        kind="image",
        name=path.name,
        digest=f"{seed + 1:064x}",
        mime="image/png",
        size=path.stat().st_size,
        path=str(path),
        width=48,
        height=40,
    )


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> list[Attachment]:
    folder = tmp_path_factory.mktemp("pictures")
    return [picture(folder, seed) for seed in range(3)]


@pytest.fixture(scope="module")
def vision_worker(starter_path: Path, starter_projector: Path):
    """The engine process with the starter and the test projector, loaded once for the module."""
    backend = WorkerBackend(options(starter_path, mmproj_path=starter_projector))
    backend.load()
    yield backend
    backend.close()


@pytest.fixture
def worker(vision_worker):
    vision_worker.reset()
    return vision_worker


@pytest.fixture(scope="module")
def vision_backend(starter_path: Path, starter_projector: Path):
    """The same in this process: its projector's ``encodes`` can be read."""
    backend = LlamaCppBackend(options(starter_path, mmproj_path=starter_projector))
    backend.load()
    yield backend
    backend.close()


@pytest.fixture
def local(vision_backend):
    """The in-process backend with an empty KV cache and its encodes counted from 0."""
    vision_backend.reset()
    vision_backend._vision.encodes = 0
    return vision_backend


def asking(image: Attachment, text: str = "What is in this picture?") -> list[ChatMessage]:
    return [ChatMessage("user", text, attachments=(image,))]


def test_a_turn_with_an_image_replies_through_the_engine_process(
    worker, pictures, starter_projector
):
    assert worker.describe().projector == starter_projector.name
    assert worker.describe().takes_images
    messages = asking(pictures[0])
    deltas, done = collect(worker, messages, GREEDY)
    assert done.stats.finish_reason in ("stop", "length")
    assert done.stats.completion_tokens > 0 and done.text == "".join(deltas)
    # The prompt's tokens (and the chat's context meter) count the image's.
    assert done.stats.prompt_tokens == worker.count_tokens(messages)
    text_only = worker.count_tokens([ChatMessage("user", "What is in this picture?")])
    assert done.stats.prompt_tokens == text_only + IMAGE_TOKENS + MARKERS


def test_the_next_turn_evaluates_only_itself_not_the_image_again(worker, pictures):
    first = asking(pictures[0])
    _, done = collect(worker, first, GREEDY)
    assert (
        done.stats.prompt_tokens_evaluated == done.stats.prompt_tokens
    )  # a fresh cache: all of it
    second = [*first, ChatMessage("assistant", done.text), ChatMessage("user", "And its colours?")]
    _, again = collect(worker, second, GREEDY)
    assert again.stats.finish_reason in ("stop", "length") and again.stats.completion_tokens > 0
    # Only what follows the first turn's prompt (its reply, the new turn) is evaluated: the image,
    # inside the first turn's tokens, is not encoded again.
    first_prompt = worker.count_tokens(first)
    assert again.stats.prompt_tokens_evaluated <= again.stats.prompt_tokens - first_prompt + 2
    assert again.stats.prompt_tokens_evaluated < again.stats.prompt_tokens - IMAGE_TOKENS


def test_the_image_is_encoded_once_while_its_turn_is_in_the_cache(local, pictures):
    first = asking(pictures[0])
    _, done = collect(local, first, GREEDY)
    assert local._vision.encodes == 1
    second = [*first, ChatMessage("assistant", done.text), ChatMessage("user", "And its colours?")]
    collect(local, second, GREEDY)
    assert local._vision.encodes == 1
    # Counting a conversation's tokens (the context meter) never encodes.
    assert local.count_tokens(second) > IMAGE_TOKENS and local._vision.encodes == 1


def test_an_image_out_of_the_cache_is_encoded_again(local, pictures):
    """An earlier turn's image that the KV cache no longer holds (a new engine, another
    conversation in between) is encoded again and the turn replies."""
    first = asking(pictures[0])
    _, done = collect(local, first, GREEDY)
    local.reset()  # the cache forgets it
    later = [*first, ChatMessage("assistant", done.text), ChatMessage("user", "Tell me more.")]
    _, again = collect(local, later, GREEDY)
    assert again.stats.finish_reason in ("stop", "length") and again.stats.completion_tokens > 0
    assert again.stats.prompt_tokens_evaluated == again.stats.prompt_tokens
    assert local._vision.encodes == 2


def test_another_picture_in_the_same_place_is_evaluated_from_its_start(local, pictures):
    _, done = collect(local, asking(pictures[0]), GREEDY)
    _, other = collect(local, asking(pictures[1]), GREEDY)
    # The cache is cut where the pictures differ: the image's start, never inside it.
    assert other.stats.prompt_tokens == done.stats.prompt_tokens
    before_image = other.stats.prompt_tokens - other.stats.prompt_tokens_evaluated
    tokens = local._kv.tokens
    assert (
        tokens[before_image - 1] >= 0 and tokens[before_image] < 0
    )  # ... the marker, then the image
    assert other.stats.prompt_tokens_evaluated >= IMAGE_TOKENS + MARKERS - 1
    assert local._vision.encodes == 2


def test_images_in_earlier_turns_and_several_in_one(local, pictures):
    messages = [
        ChatMessage("user", "Look.", attachments=(pictures[0],)),
        ChatMessage("assistant", "I see."),
        ChatMessage("user", "And these two?", attachments=(pictures[1], pictures[2])),
    ]
    _, done = collect(local, messages, GREEDY)
    assert done.stats.finish_reason in ("stop", "length") and done.stats.completion_tokens > 0
    assert local._vision.encodes == 3
    assert sum(1 for t in local._kv.tokens if t < 0) == 3 * IMAGE_TOKENS


def test_prefill_with_an_image_leaves_it_in_the_cache(local, pictures):
    first = asking(pictures[0])
    _, done = collect(local, first, GREEDY)
    history = [*first, ChatMessage("assistant", done.text)]
    local.reset()
    assert local.prefill(history) > IMAGE_TOKENS
    assert local._vision.encodes == 2
    _, again = collect(local, [*history, ChatMessage("user", "More?")], GREEDY)
    assert local._vision.encodes == 2  # the prefilled image is reused
    assert again.stats.prompt_tokens_evaluated < again.stats.prompt_tokens - IMAGE_TOKENS


def test_an_image_to_a_model_without_a_projector_is_one_line(starter_path, pictures):
    worker = WorkerBackend(options(starter_path))
    try:
        assert worker.load().projector is None and not worker.describe().takes_images
        with pytest.raises(ImagesNotSupported) as caught:
            collect(worker, asking(pictures[0]), GREEDY)
        assert str(caught.value) == NO_PROJECTOR
        # ... raised before anything was evaluated; the engine answers the next turn.
        _, done = collect(worker, [ChatMessage("user", "Hello")], GREEDY)
        assert done.stats.completion_tokens > 0
        # An image in an earlier turn is left out for a text model: the conversation goes on.
        history = [
            *asking(pictures[0]),
            ChatMessage("assistant", "A picture."),
            ChatMessage("user", "Thanks."),
        ]
        _, done = collect(worker, history, GREEDY)
        assert done.stats.completion_tokens > 0
    finally:
        worker.close()


def test_a_projector_for_another_model_fails_the_load_in_one_line(starter_path, tmp_path):
    """The load fails (the model is not kept half-loaded without the images the user asked for):
    the one line says why and what to do."""
    wide = write_projector(tmp_path / "mmproj-other.gguf", 1024)
    worker = WorkerBackend(options(starter_path, mmproj_path=wide))
    try:
        with pytest.raises(ProjectorError) as caught:
            worker.load()
        assert str(caught.value) == (
            "the projector mmproj-other.gguf does not fit this model (it projects to "
            "1024, the model takes 640): use the mmproj file made for this model."
        )
    finally:
        worker.close()


def test_a_corrupt_projector_file_is_one_line(starter_path, starter_projector, tmp_path):
    cut = tmp_path / "mmproj-cut.gguf"
    cut.write_bytes(starter_projector.read_bytes()[:5000])  # a download that stopped
    backend = LlamaCppBackend(options(starter_path, mmproj_path=cut))
    with pytest.raises(ProjectorError) as caught:
        backend.load()
    message = str(caught.value)
    assert message.startswith("the projector (--mmproj): ") and "\n" not in message
    not_one = tmp_path / "mmproj-model.gguf"
    not_one.write_bytes(starter_path.read_bytes()[: 1 << 20])
    with pytest.raises(ProjectorError):
        LlamaCppBackend(options(starter_path, mmproj_path=not_one)).load()


def test_a_projector_llama_cpp_refuses_is_one_line(backend, tmp_path):
    """A projector whose header claims the model's width but whose projection is another:
    mtmd refuses it and its reason comes out in the one line."""
    from projector import projector_metadata, projector_tensors, write_gguf_tensors
    from vibechat.engine.llama.vision import Vision

    lying = write_gguf_tensors(
        tmp_path / "mmproj-lying.gguf", projector_metadata(640), projector_tensors(1024)
    )
    with pytest.raises(ProjectorError) as caught:
        Vision(lying, backend._model, n_threads=1, use_gpu=False)
    message = str(caught.value)
    assert message.startswith("llama.cpp could not load the projector mmproj-lying.gguf")
    assert message.endswith("use the mmproj file made for this model.") and "\n" not in message


def test_a_missing_picture_is_one_line(local, pictures, tmp_path):
    from vibechat.engine.llama.vision_errors import ImageUnreadable

    gone = picture(tmp_path, seed=7)
    Path(gone.path).unlink()
    with pytest.raises(ImageUnreadable) as caught:
        collect(local, asking(gone), GREEDY)
    assert (
        str(caught.value)
        == "the image picture-7.png is missing (its kept copy is gone): attach it again."
    )
    _, done = collect(local, asking(pictures[0]), GREEDY)  # the engine goes on
    assert done.stats.completion_tokens > 0
    # In an earlier turn (a reopened conversation whose copy went), it is left out: the chat goes
    # on.
    history = [
        *asking(gone),
        ChatMessage("assistant", "A picture."),
        ChatMessage("user", "Thanks."),
    ]
    assert local.count_tokens(history) == local.count_tokens(
        [ChatMessage("user", "What is in this picture?"), *history[1:]]
    )
    _, done = collect(local, history, GREEDY)
    assert done.stats.completion_tokens > 0


def test_a_cancel_during_an_image_ends_the_turn_and_keeps_no_half_image(
    local, pictures, monkeypatch
):
    """Esc while the picture is being encoded (here: the moment its pixels are read): the encode
    stops at its next look at the flag, the turn ends cancelled, the cache keeps nothing of the
    image, and the next turn encodes it again and replies."""
    vision = local._vision
    read = vision._bitmap

    def read_then_cancel(image):
        bitmap = read(image)
        local.cancel()
        return bitmap

    monkeypatch.setattr(vision, "_bitmap", read_then_cancel)
    _, done = collect(local, asking(pictures[0]), GREEDY)
    assert done.stats.finish_reason == "cancelled" and done.stats.completion_tokens == 0
    assert not any(t < 0 for t in local._kv.tokens)
    monkeypatch.undo()
    _, again = collect(local, asking(pictures[0]), GREEDY)
    assert again.stats.finish_reason in ("stop", "length") and again.stats.completion_tokens > 0
    assert sum(1 for t in local._kv.tokens if t < 0) == IMAGE_TOKENS


def test_drafting_never_sees_an_image_turn(starter_path, starter_projector, pictures):
    """With prompt-lookup drafting on, a turn whose prompt holds an image decodes plainly (no
    draft can be a placeholder id); a text turn after it is answered as before."""
    backend = LlamaCppBackend(
        options(starter_path, mmproj_path=starter_projector, speculative="prompt-lookup")
    )
    try:
        backend.load()
        echo = "Repeat after me: the quick brown fox jumps over the lazy dog. " * 3
        _, done = collect(
            backend, asking(pictures[0], echo), SamplingParams(temperature=0, max_tokens=32)
        )
        assert done.stats.finish_reason in ("stop", "length") and done.stats.completion_tokens > 0
        assert done.stats.drafted_tokens == 0
        _, text = collect(
            backend, [ChatMessage("user", echo)], SamplingParams(temperature=0, max_tokens=32)
        )
        assert text.stats.completion_tokens > 0
    finally:
        backend.close()


def test_no_kv_snapshot_is_kept_of_a_prompt_with_an_image(local, pictures):
    """A snapshot's key does not name the projector, so one holding an image's placeholder ids
    could be restored under another projector: none is kept; a text prompt as long is."""
    assert local._kv.snapshots is not None and local._kv.snapshots.enabled
    long_text = "Here is a long note about harbours, lanterns and meadows. " * 30  # > 256 tokens
    _, done = collect(local, asking(pictures[0], long_text), GREEDY)
    assert done.stats.prompt_tokens > 256 and any(t < 0 for t in local._kv.tokens)
    assert local._kv.snapshots.best(local._kv.tokens) is None
    _, done = collect(local, [ChatMessage("user", long_text)], GREEDY)
    assert local._kv.snapshots.best(local._kv.tokens) is not None


def paired(backend, a: SideRequest, b: SideRequest) -> dict[str, GenerationDone]:
    """Both sides' ends of a pair (engine/llama/pairing.py)."""
    done = {}
    for item in backend.stream_pair(a, b):
        if isinstance(item.event, GenerationDone):
            done[item.side] = item.event
    return done


def test_an_image_both_sides_share_is_encoded_once_for_the_pair(local, pictures):
    messages = tuple(asking(pictures[0]))
    a = SideRequest(messages, GREEDY)
    b = SideRequest(messages, SamplingParams(temperature=1.0, seed=3, max_tokens=12))
    done = paired(local, a, b)
    assert local._vision.encodes == 1
    n_prompt = local.count_tokens(list(messages))
    for side in "AB":
        assert done[side].stats.prompt_tokens == n_prompt > IMAGE_TOKENS
        assert done[side].finish_reason in ("stop", "length") and done[side].stats.completion_tokens
    # The prompt, image included, once (what a snapshot of the frame's text restored aside); its
    # last token again for side B's logits.
    evaluated = sum(done[side].stats.prompt_tokens_evaluated for side in "AB")
    assert evaluated + done["A"].stats.restored_tokens == n_prompt + 1
    # Side A's conversation stays in the cache: its next turn encodes nothing again.
    second = [*messages, ChatMessage("assistant", done["A"].text), ChatMessage("user", "Why?")]
    collect(local, second, GREEDY)
    assert local._vision.encodes == 1


def test_sides_that_part_before_the_image_each_evaluate_it_in_their_own_sequence(local, pictures):
    """The system prompts differ before the image: each side's image is encoded and evaluated
    into its own sequence (the random projector's replies are near ties: their words are not
    compared with a plain reply's, whose batches differ)."""
    image = pictures[1]
    a = SideRequest((ChatMessage("system", "Answer in one word."), *asking(image)), GREEDY)
    b = SideRequest((ChatMessage("system", "Answer in a long sentence."), *asking(image)), GREEDY)
    done = paired(local, a, b)
    assert local._vision.encodes == 2
    n_a, n_b = local.count_tokens(list(a.messages)), local.count_tokens(list(b.messages))
    for side, n in (("A", n_a), ("B", n_b)):
        assert done[side].stats.prompt_tokens == n
        assert done[side].finish_reason in ("stop", "length") and done[side].stats.completion_tokens
    # Only the few tokens before the system prompts part are shared.
    evaluated = sum(done[side].stats.prompt_tokens_evaluated for side in "AB")
    evaluated += done["A"].stats.restored_tokens
    assert n_a + n_b - 2 * IMAGE_TOKENS < evaluated < n_a + n_b
    # Side A's conversation, its image included, stays in the cache.
    second = [*a.messages, ChatMessage("assistant", done["A"].text), ChatMessage("user", "Why?")]
    _deltas, after = collect(local, second, GREEDY)
    assert local._vision.encodes == 2
    assert after.stats.prompt_tokens_evaluated < after.stats.prompt_tokens - IMAGE_TOKENS
