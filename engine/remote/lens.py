"""The token lens on a server (issue 43): a streamed chunk's ``choices[0].logprobs.content`` (asked
for with ``logprobs: true, top_logprobs: N``, engine/remote/request.py) as ``TokenCandidates``
events (engine/turns/backend.py).

What a server sends is untrusted and bounded here: at most ``MAX_ITEMS`` items a chunk and
``MAX_LOGPROBS`` candidates an item (the rest ignored), a token's text at most ``MAX_TOKEN_CHARS``
characters and its ``bytes`` at most ``MAX_TOKEN_BYTES`` values in 0-255 (else its text's UTF-8),
a logprob a finite number ≤ 0; a malformed item is skipped. Its text is shown escaped
(``escaped_token``).

A server says each candidate's log probability in its model's distribution; it does not say what
its sampler cut. The cut marks and the probabilities after the chain are computed here from the
reply's slider values over the candidates the server returned, in llama.cpp's order: top-k
(rank), top-p (the smallest set whose probability reaches p), min-p (below min-p times the best),
then temperature (a softmax of logprob / temperature over the survivors; at temperature 0 only
the best survives). The repeat penalty is not known: nothing is marked penalised. ``logprob`` is
the server's value (the before-the-chain probability at the server's own temperature handling).
"""

from __future__ import annotations

import math
from typing import Any

from ..sanitize import escaped_token
from ..settings.params import MAX_LOGPROBS, PARAM_SPECS, SamplingParams
from ..turns.backend import Candidate, LensNotice, TokenCandidates
from ..turns.lens_steps import chain_cuts

MAX_ITEMS = 64
MAX_TOKEN_CHARS = 256
MAX_TOKEN_BYTES = 256

NO_LOGPROBS = (
    "the server sent no logprobs for this reply (it does not support them): the token lens has "
    "nothing to show; llama-server, vLLM and recent Ollama send them."
)


class RemoteLens:
    """One reply's lens on a server: ``feed`` each chunk's choice, ``notice`` at the end."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.steps = 0
        self._sliders = tuple(
            (name, getattr(params, name))
            for name, spec in PARAM_SPECS.items()
            if spec.llama is not None
        )

    def feed(self, choice: dict[str, Any]) -> list[TokenCandidates]:
        """The steps a chunk's choice carries (none when it carries no logprobs)."""
        logprobs = choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if not isinstance(content, list):
            return []
        out: list[TokenCandidates] = []
        for item in content[:MAX_ITEMS]:
            step = self._step(item)
            if step is not None:
                out.append(step)
                self.steps += 1
        return out

    def notice(self, pieces: int) -> LensNotice | None:
        """The line for a reply of ``pieces`` pieces that came without any logprobs."""
        return LensNotice(NO_LOGPROBS) if pieces and not self.steps else None

    def _step(self, item: Any) -> TokenCandidates | None:
        chosen = _token(item)
        if chosen is None:
            return None
        tops = item.get("top_logprobs")
        found = [t for t in (tops if isinstance(tops, list) else [])[:MAX_LOGPROBS]]
        top = sorted((c for c in map(_token, found) if c is not None), key=lambda c: -c[2])
        top = top[: self.params.logprobs]
        cuts, after = chain_cuts([lp for _, _, lp in top], self.params)
        candidates = tuple(
            Candidate(-1, data, escaped_token(data), lp, p, cut)
            for (data, _, lp), cut, p in zip(top, cuts, after, strict=True)
        )
        data, _, lp = chosen
        picked = next((c for c in candidates if c.data == data), None)
        if picked is None:
            picked = Candidate(-1, data, escaped_token(data), lp, 0.0)
        return TokenCandidates(
            index=self.steps, chosen=picked, top=candidates, sliders=self._sliders
        )


def _token(item: Any) -> tuple[bytes, str, float] | None:
    """A ``{token, logprob, bytes}`` entry, checked: its bytes, its text and its logprob."""
    if not isinstance(item, dict):
        return None
    token, logprob = item.get("token"), item.get("logprob")
    if not isinstance(token, str) or isinstance(logprob, bool):
        return None
    if not isinstance(logprob, (int, float)) or not math.isfinite(logprob) or logprob > 0:
        return None
    token = token[:MAX_TOKEN_CHARS]
    raw = item.get("bytes")
    if (
        isinstance(raw, list)
        and len(raw) <= MAX_TOKEN_BYTES
        and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw)
    ):
        data = bytes(raw)
    else:
        data = token.encode("utf-8", "replace")
    return data, token, float(logprob)
