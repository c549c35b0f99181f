"""The chat request's body: vibechat's sampling parameters in OpenAI's terms.

``temperature``, ``top_p``, ``max_tokens``, ``seed`` and ``stop`` are standard fields;
``top_k``, ``min_p`` and ``repeat_penalty`` are the extra fields llama.cpp-family servers
accept (and ``repetition_penalty``, vLLM's name). A server that rejects them (HTTP 400
naming one) gets the request again without them (``send_optional`` False: the backend
remembers). "auto" (``max_tokens`` and ``repeat_penalty`` None: engine/settings/params.py)
sends nothing: the server's own default (which knows the model); ``max_tokens`` 0 (no
limit) sends nothing either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..settings.params import SamplingParams
from ..settings.think_switch import remote_kwargs
from ..turns.backend import ChatMessage

EXTRA_FIELDS = ("top_k", "min_p", "repeat_penalty", "repetition_penalty")
OPTIONAL_FIELDS = (*EXTRA_FIELDS, "stream_options")  # what a strict server may refuse


def chat_body(model: str, messages: Sequence[ChatMessage], params: SamplingParams,
              send_optional: bool) -> dict[str, Any]:
    """``POST /chat/completions``'s JSON body for a streamed reply. A structured output
    that a server cannot take (a grammar) is a one-line error here, before anything is sent."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [m.to_dict() for m in messages],
        "stream": True,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "seed": params.seed,
    }
    if params.max_tokens:  # None ("auto": the server's default) and 0 (no limit) send nothing
        body["max_tokens"] = params.max_tokens
    if params.stop:
        body["stop"] = list(params.stop)
    if params.output_format is not None:
        params.output_format.check_remote()  # a grammar: a one-line error, nothing sent
        body["response_format"] = params.output_format.response_format()
    switch = remote_kwargs(params.thinking)
    if switch is not None:  # asked for: llama-server and vLLM pass these to the template
        body["chat_template_kwargs"] = switch
    if send_optional:
        body["stream_options"] = {"include_usage": True}
        body.update(top_k=params.top_k, min_p=params.min_p)
        if params.repeat_penalty is not None:  # None, "auto": the server's default
            body.update(repeat_penalty=params.repeat_penalty, repetition_penalty=params.repeat_penalty)
    return body
