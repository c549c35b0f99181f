"""The chat request's body: vibechat's sampling parameters in OpenAI's terms.

Each sampling parameter's fields are declared with it (``ParamSpec.remote`` in
engine/settings/params.py): ``temperature``, ``top_p``, ``max_tokens``, ``seed`` and ``stop``
are standard fields; ``top_k``, ``min_p`` and ``repeat_penalty`` are the extra fields
llama.cpp-family servers accept (and ``repetition_penalty``, vLLM's name), as are the
thinking budget's ``thinking_budget_tokens`` (llama-server) and ``thinking_token_budget``
(vLLM). A server that rejects them (HTTP 400 naming one) gets the request again without them
(``send_optional`` False: the backend remembers). "auto" (``max_tokens`` and
``repeat_penalty`` None) sends nothing: the server's own default (which knows the model);
``max_tokens`` 0 (no limit) and no thinking budget send nothing either.

Tools go as OpenAI's ``tools`` with ``tool_choice`` "auto" or "required" (llama-server with
``--jinja``, vLLM and Ollama take both; Ollama ignores ``tool_choice``); "none" sends no tools
at all, the one way every one of them honours (Ollama would still call tools it is given).
The messages go in the shape all three read (``wire_messages``); a message's images as
content parts with ``data:`` URIs (images.py), a message without images as plain text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidParameterError
from ..json_bounds import bounded_loads
from ..settings.params import PARAM_SPECS, SamplingParams
from ..settings.think_switch import remote_effort, remote_kwargs
from ..settings.tool_checks import TOOL_CHOICES
from ..turns.backend import ChatMessage
from ..turns.tool_calls import ToolSpec
from .images import content


def optional_fields() -> tuple[str, ...]:
    """What a strict server may refuse: the parameters' extra fields (``RemoteField.optional``,
    engine/settings/params.py) and ``stream_options``."""
    extra = (
        key
        for spec in PARAM_SPECS.values()
        if spec.remote and spec.remote.optional
        for key in spec.remote.keys
    )
    return (*extra, "stream_options")


def param_fields(params: SamplingParams, send_optional: bool) -> dict[str, Any]:
    """The sampling parameters' fields, as each one's declaration says (``ParamSpec.remote``):
    its keys with its value, nothing for a value the server's own default stands for, and the
    extras only while ``send_optional``."""
    body: dict[str, Any] = {}
    for name, spec in PARAM_SPECS.items():
        remote = spec.remote
        if remote is None or (remote.optional and not send_optional):
            continue
        value = getattr(params, name)
        if value in remote.unsent:
            continue
        body.update(dict.fromkeys(remote.keys, value))
    return body


def wire_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as OpenAI's API takes them, from ``ChatMessage.to_dict()``, made
    acceptable to llama-server, vLLM and Ollama alike:

    * an assistant message that only calls tools keeps ``content: ""``: llama-server, vLLM,
      Ollama and OpenAI take it as they take ``null``, and llama-cpp-python's server takes
      nothing else (it refuses ``null``, and its chat formats fail on a message without
      ``content``);
    * a call's arguments that are not a JSON object (the model wrote them wrong, and was told
      so as the call's result) go as ``{}``: Ollama refuses the whole request otherwise
      ("invalid tool call arguments"), and llama-server fails rendering a template that
      parses them;
    * a message with images carries them as content parts after its text (images.py: the
      kept copies read now, a missing one a one-line error); text files are inlined already
      (``ChatMessage.inlined``, done again here for a message that was not);
    * a ``tool`` message is named after the function the model called (the call it answers,
      by id), which a template may print, rather than the tool's name on its server."""
    called: dict[str, str] = {}
    wire: list[dict[str, Any]] = []
    for message in messages:
        message = message.inlined()
        data = message.to_dict()
        if message.images:
            data["content"] = content(message)
        if message.tool_calls:
            data["tool_calls"] = [
                {
                    **entry,
                    "function": {**entry["function"], "arguments": _object_text(call.arguments)},
                }
                for call, entry in zip(message.tool_calls, data["tool_calls"], strict=True)
            ]
            called.update((call.id, call.name) for call in message.tool_calls)
        if message.role == "tool" and message.tool_call_id in called:
            data["name"] = called[message.tool_call_id]
        wire.append(data)
    return wire


def _object_text(arguments: str) -> str:
    try:
        value = bounded_loads(arguments)
    except ValueError:
        # Not JSON, or nested too deeply (JsonTooDeep): sent as no arguments.
        return "{}"
    return arguments if isinstance(value, dict) else "{}"


def tool_fields(tools: Sequence[ToolSpec], tool_choice: str) -> dict[str, Any]:
    """The request's ``tools`` and ``tool_choice`` (nothing for no tools, or "none")."""
    if tool_choice not in TOOL_CHOICES:
        raise InvalidParameterError(
            f"tool_choice must be one of {', '.join(TOOL_CHOICES)}, not {tool_choice!r}."
        )
    if not tools or tool_choice == "none":
        return {}
    return {"tools": [spec.to_openai() for spec in tools], "tool_choice": tool_choice}


def chat_body(
    model: str,
    messages: Sequence[ChatMessage],
    params: SamplingParams,
    send_optional: bool,
    tools: Sequence[ToolSpec] = (),
    tool_choice: str = "auto",
) -> dict[str, Any]:
    """``POST /chat/completions``'s JSON body for a streamed reply. A structured output
    that a server cannot take (a grammar) is a one-line error here, before anything is sent;
    ``tools`` are offered as ``tool_choice`` says (see the module doc)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": wire_messages(messages),
        "stream": True,
        **param_fields(params, send_optional),
        **tool_fields(tools, tool_choice),
    }
    if params.stop:
        body["stop"] = list(params.stop)
    if params.logprobs:
        # The token lens: top_logprobs is the parameter's own field (ParamSpec.remote).
        body["logprobs"] = True
    if params.output_format is not None:
        # A grammar: a one-line error, nothing sent.
        params.output_format.check_remote()
        body["response_format"] = params.output_format.response_format()
    switch = remote_kwargs(params.thinking)
    # Asked for: llama-server and vLLM pass these to the template.
    if switch is not None:
        body["chat_template_kwargs"] = switch
    effort = remote_effort(params.thinking)
    # OpenAI's field, which llama-server, vLLM and Ollama take for gpt-oss (low, medium, high).
    if effort is not None:
        body["reasoning_effort"] = effort
    if send_optional:
        body["stream_options"] = {"include_usage": True}
    return body
