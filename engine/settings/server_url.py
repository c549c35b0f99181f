"""A server's base URL in its normal form (the API root), checked where the setting is read:
the config, the flags and the remote backend all pass it through ``normalize_base_url``."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import InvalidParameterError


def normalize_base_url(url: str) -> str:
    """``url`` as the API root: http(s) only, no trailing slash, ``/v1`` added when the
    URL names only a host (``http://127.0.0.1:8080`` → ``http://127.0.0.1:8080/v1``)."""
    text = (url or "").strip()
    # Spaces and control characters are refused here: urllib.parse keeps them, and
    # http.client then raises its own traceback-shaped error on the first request.
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise InvalidParameterError(
            f"the base URL is not a URL: it contains a space or a control character (got {text!r})."
        )
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        # "http://[::1": an unclosed IPv6 bracket.
        raise InvalidParameterError(f"the base URL is not a URL: {exc} (got {text!r}).") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidParameterError(
            "the base URL must be an http:// or https:// URL such as "
            f"http://127.0.0.1:8080/v1 (got {text!r})."
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise InvalidParameterError(f"the base URL has an invalid port (got {text!r}).") from None
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1"
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{parts.netloc}{path}{query}"
