"""Another path taken from one of a reply's tokens (issue 43): the reply goes on from a prefix
(``ReplyPrefix``: the original's first tokens, then the candidate picked, or the text typed) as
if the model had written it. ``LlamaCppBackend`` (llamacpp.py) appends the prefix's tokens to the
prompt's, so its KV cache keeps what it holds of them (the original reply's tokens, when it was
the last request) and only the rest is evaluated; the prefix's tokens then go through the reply's
``Emitter`` as the decode loop's would (the thinking splitter, the stop strings and the limit see
them), before the model writes on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

from ..errors import ContextOverflowError, GenerationError
from ..turns.backend import ChatEvent, ReplyPrefix, TokenCandidates
from ..turns.lens_steps import path_overflow
from .decoding import Emitter
from .lens import LensSampler
from .prompting import Prompter
from .replying import Reply


def path_tokens(prompt: Prompter, n_vocab: int, prefix: ReplyPrefix) -> list[int]:
    """The prefix's tokens: its ids, checked against the model's vocabulary (a reply written by
    another model names other ids), then its typed text tokenized as plain text."""
    ids = list(prefix.token_ids)
    wrong = next((t for t in ids if not 0 <= t < n_vocab), None)
    if wrong is not None:
        raise GenerationError(
            f"the reply's token {wrong} is not in this model's vocabulary: another path can be "
            "taken only with the model that wrote the reply."
        )
    if prefix.data:
        text = prefix.data.decode("utf-8", "replace")
        ids += prompt.tokenize(text, add_special=False, parse_special=False)
    return ids


def check_fits(n_prompt: int, n_path: int, context_size: int) -> None:
    """A one-line ``ContextOverflowError`` unless the prompt and the path leave room for a token."""
    overflow = path_overflow(n_prompt, n_path, context_size)
    if overflow:
        raise ContextOverflowError(overflow)


def path_events(
    path: Sequence[int],
    steps: Sequence[TokenCandidates],
    out: Emitter,
    reply: Reply,
    lens: LensSampler | None,
) -> Iterator[ChatEvent]:
    """The prefix's tokens through ``out`` as the reply's first events (kept in ``reply``), each
    one's lens step first when the lens is on (``steps``: the prefix's; a typed token's is made
    here, forced). A token that ends the reply (an end of turn picked) ends it there."""
    for k, token in enumerate(path):
        pieces = out.emit(token)
        if out.generated <= k:
            # Not the reply's: it ended the turn.
            return
        reply.forced += 1
        if lens is not None:
            yield replace(steps[k], index=k) if k < len(steps) else lens.forced_step(token, k)
        yield from reply.events(pieces, out.generated)
        if out.done:
            return
