"""A server's models: its listing (``GET /v1/models``), the one the user asked for (or its
only one), and what the listing says about it as a ``ModelInfo``.

Model ids come from the server, so they are untrusted: ids that are not printable,
one-line and short are left out, and one listing keeps at most ``MAX_MODELS``. Context
sizes are used only when they are sane numbers (vLLM's ``max_model_len``, llama-server's
``meta.n_ctx``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import RemoteServerError
from ..turns.backend import ModelInfo
from .client import ServerClient, count
from .options import BACKEND_NAME, model_url

log = logging.getLogger("vibechat.openai")

# Characters of a model id the server lists (longer ones are left out).
MAX_MODEL_ID = 256
MAX_MODELS = 10_000  # model ids kept from one listing


class ServerModels:
    """The models one server offers, as last listed. ``fetch()`` may run beside a reply
    (the client opens a connection of its own for it)."""

    def __init__(self, client: ServerClient) -> None:
        self.client = client
        self.server = client.server
        self._models: dict[str, dict[str, Any]] = {}

    def fetch(self) -> list[str]:
        """The model ids the server offers (``GET /v1/models``), in its order."""
        data = self.client.get_json("/models")
        entries = data.get("data") if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise RemoteServerError(
                f"{self.server}/models did not list models; is --base-url an OpenAI-compatible API?"
            )
        models: dict[str, dict[str, Any]] = {}
        unusable = 0
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            model_id = entry.get("id")
            if not usable_id(model_id):
                unusable += 1
                continue
            assert isinstance(model_id, str)
            if len(models) < MAX_MODELS:
                models[model_id] = entry
        if unusable:
            log.info(
                "%s lists %d model ids that are not printable one-line text of at most %d "
                "characters; left out",
                self.server,
                unusable,
                MAX_MODEL_ID,
            )
        if len(entries) > MAX_MODELS:
            log.info("%s lists %d models; kept the first %d", self.server, len(entries), MAX_MODELS)
        self._models = models
        return list(models)

    def pick(self, wanted: str | None, ids: list[str]) -> str:
        if wanted is None:
            if len(ids) == 1:
                return ids[0]
            if not ids:
                raise RemoteServerError(
                    f"{self.server} lists no models; load one on the server first."
                )
            raise RemoteServerError(
                f"{self.server} offers several models: choose one with --model "
                f"({listing(ids, self.client.clean)})."
            )
        if wanted in ids:
            return wanted
        # Ollama lists "llama3.2:latest" and accepts "llama3.2".
        if f"{wanted}:latest" in ids:
            return wanted
        raise RemoteServerError(
            f"{self.server} has no model {self.client.clean(wanted, 120)!r}; it offers "
            f"{listing(ids, self.client.clean) or 'none'} (choose with --model)."
        )

    def describe(self, model: str) -> ModelInfo:
        entry = self._models.get(model) or self._models.get(f"{model}:latest") or {}
        # llama-server's; absent (or null) elsewhere.
        meta = entry.get("meta")
        if not isinstance(meta, dict):
            meta = {}
        # vLLM's max_model_len, else llama-server's n_ctx.
        context = count(entry.get("max_model_len")) or count(meta.get("n_ctx"))
        trained = count(meta.get("n_ctx_train")) or None
        return ModelInfo(
            name=model,
            path=model_url(self.client.root, model),
            architecture="",
            quantization="",
            trained_context=trained if isinstance(trained, int) else None,
            context_size=context if isinstance(context, int) else 0,  # 0: the server did not say
            n_layers=None,
            gpu_layers=0,
            gpu_offload_supported=False,
            # The server applies its own chat template, parses the model's tool calls itself
            # and decides whether its model takes images (a refusal: one line).
            chat_format="server",
            tool_calls="server",
            projector="server",
            file_size=0,
            backend=BACKEND_NAME,
            server=self.server,
        )


def usable_id(value: Any) -> bool:
    """A model id we can show, save and send back: printable one-line text, not too long."""
    return isinstance(value, str) and 0 < len(value) <= MAX_MODEL_ID and value.isprintable()


def listing(ids: list[str], clean: Callable[[str, int], str], most: int = 8) -> str:
    shown = ", ".join(clean(i, 80) for i in ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")
