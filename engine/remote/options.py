"""Where an OpenAI-compatible server is, and the API key it gets.

The options a backend is made with (``OpenAIOptions``), the server's URL as the user sees
it (no credentials, no query: ``display_url``), a server model's ``ModelInfo.path``
(``model_url`` / ``api_root``), and the key from the environment (``resolve_api_key``):
OPENAI_API_KEY, a key most users keep for OpenAI itself, goes to a plain-http server only
when named. The key is never shown: not in a message, a log line or a ``repr``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from ..errors import InvalidParameterError
from ..settings.server_url import normalize_base_url
from ..turns.backend import ModelInfo

log = logging.getLogger("vibechat.openai")

BACKEND_NAME = "openai"
# Seconds without an event from the server (comments do not count) before giving up.
DEFAULT_TIMEOUT = 300.0
# Seconds for a whole request, the reply included, whatever arrives meanwhile.
DEFAULT_DEADLINE = 3600.0
CONNECT_TIMEOUT = 10.0
# Looked up in this order.
KEY_VARIABLES = ("VIBECHAT_API_KEY", "OPENAI_API_KEY")
# Unnamed (no --api-key-env), this one goes only to https servers.
IMPLICIT_ONLY_OVER_HTTPS = "OPENAI_API_KEY"


def model_url(root: str, model: str) -> str:
    """A server's model as ``ModelInfo.path`` names it: its URL under the API root."""
    return f"{root}/models/{quote(model, safe='/:@')}"


def api_root(info: ModelInfo) -> str | None:
    """The API root (``http://127.0.0.1:8080/v1``) of a server's ``ModelInfo``, whose ``path``
    is the model's URL under it (``model_url``); None for a local model."""
    suffix = model_url("", info.name)
    if not info.server or not info.path.endswith(suffix):
        return None
    return info.path[: -len(suffix)]


def display_url(base_url: str, keep_v1: bool = False) -> str:
    """The server as shown to the user: no credentials, no query, no ``/v1`` (unless
    ``keep_v1``: the API root)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    path = parts.path.rstrip("/")
    if path.endswith("/v1") and not keep_v1:
        path = path[:-3]
    return f"{parts.scheme}://{host}{port}{path}"


def resolve_api_key(
    variable: str | None, environ: Mapping[str, str] | None = None, base_url: str | None = None
) -> tuple[str | None, str]:
    """The API key and the variable it came from: ``variable`` when named (it must be
    set), else VIBECHAT_API_KEY, else OPENAI_API_KEY -- but that last one, a key most
    users keep for OpenAI itself, only for an https ``base_url``: it is not sent in
    clear text to a plain-http server unless named. (None, the variable to suggest)
    when there is none."""
    environ = os.environ if environ is None else environ
    if variable:
        value = environ.get(variable, "").strip()
        if not value:
            raise InvalidParameterError(
                f"the API key variable {variable} (api_key_env / --api-key-env) is not set: "
                f"export {variable}=..., or name another variable."
            )
        return value, variable
    for name in KEY_VARIABLES:
        value = environ.get(name, "").strip()
        if value and name == IMPLICIT_ONLY_OVER_HTTPS and not _is_https(base_url):
            log.info(
                "%s is set but not sent to a plain-http server; --api-key-env %s sends it",
                name,
                name,
            )
            continue
        if value:
            return value, name
    return None, KEY_VARIABLES[0]


def withheld_key(key: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable whose key was set but not sent (OPENAI_API_KEY to a plain-http server),
    for the message when the server asks for one; None when a key is sent or none is set."""
    env = os.environ if environ is None else environ
    return (
        None
        if key or not env.get(IMPLICIT_ONLY_OVER_HTTPS, "").strip()
        else IMPLICIT_ONLY_OVER_HTTPS
    )


def _is_https(base_url: str | None) -> bool:
    return base_url is None or urlsplit(base_url.strip()).scheme.lower() == "https"


@dataclass
class OpenAIOptions:
    """Where the server is and which of its models to use."""

    base_url: str
    # None: the server's only model.
    model: str | None = None
    # Never shown, never logged.
    api_key: str | None = None
    # Where the key comes from, for messages.
    api_key_variable: str = KEY_VARIABLES[0]
    # Set, but not sent to this plain-http server.
    withheld_key_variable: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    # Seconds for a whole request, the streamed reply included.
    deadline: float = DEFAULT_DEADLINE

    def __post_init__(self) -> None:
        self.base_url = normalize_base_url(self.base_url)

    def __repr__(self) -> str:
        """Keeps the key out of tracebacks and debug output."""
        return (
            f"OpenAIOptions(base_url={display_url(self.base_url)!r}, model={self.model!r}, "
            f"api_key={'<set>' if self.api_key else None}, timeout={self.timeout}, "
            f"deadline={self.deadline})"
        )
