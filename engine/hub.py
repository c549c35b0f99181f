"""The Hugging Face Hub, or the mirror ``HF_ENDPOINT`` names: search GGUF repos,
list a repo's model files, build download URLs.

Every setting Hugging Face tools honour is read at call time, never at import:
``HF_ENDPOINT``, ``HF_TOKEN`` (else the token file that ``hf auth login`` writes
under ``HF_HOME``), ``HF_HUB_OFFLINE``. Failures become a ``HubError`` whose
message names the problem and the fix; server errors and timeouts are retried a
few times first.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .errors import HubError
from .refs import HubRef, QuantOption, RepoFile, group_quants, pick_file, pick_quant

log = logging.getLogger("vibechat.hub")

DEFAULT_ENDPOINT = "https://huggingface.co"
RETRIES = 3  # attempts for a request that failed with a 5xx, a 429 or a stalled/dropped answer
BACKOFF = 0.5  # seconds before the second attempt; doubles after each
TIMEOUT = 20.0  # seconds without an answer before a request counts as failed
CONNECT_TIMEOUT = 10.0  # seconds to reach the server (an unreachable one is not retried)

T = TypeVar("T")


def import_hf():
    """``huggingface_hub``, imported with its logging tamed: on import it attaches its own
    stderr handler (which would scribble over the TUI, e.g. "Retrying in 8s"). Its records
    go nowhere unless vibechat's own handler (``--verbose``) is attached to it."""
    import huggingface_hub

    logger = logging.getLogger("huggingface_hub")
    logger.handlers = [h for h in logger.handlers if getattr(h, "vibechat", False)] or [logging.NullHandler()]
    logger.propagate = False
    return huggingface_hub


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """``HF_TOKEN`` (or the older ``HUGGING_FACE_HUB_TOKEN``), else the saved login token."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    path = os.environ.get("HF_TOKEN_PATH")
    if not path:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
        path = os.path.join(home, "token")
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class HubModel:
    """A search result."""

    id: str
    downloads: int = 0
    likes: int = 0
    updated: str | None = None
    gated: bool = False


@dataclass(frozen=True)
class RepoListing:
    """A repo's model files at one commit."""

    repo: str
    revision: str  # the commit sha the listing was made at
    files: tuple[RepoFile, ...]
    gated: bool = False

    @property
    def options(self) -> list[QuantOption]:
        return group_quants(list(self.files))

    def choose(self, ref: HubRef) -> QuantOption:
        """The files ``ref`` asks for (default quantization when it names none)."""
        options = self.options
        if ref.file:
            return pick_file(options, ref.file, self.repo)
        return pick_quant(options, ref.quant, self.repo)


class Hub:
    """A client for one endpoint and token (both read from the environment by default)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None, *,
                 retries: int = RETRIES, backoff: float = BACKOFF,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        self.token = token if token is not None else hub_token()
        self.retries = max(1, retries)
        self.backoff = backoff
        self._sleep = sleep

    def _timeout(self):
        import httpx2

        return httpx2.Timeout(TIMEOUT, connect=CONNECT_TIMEOUT)

    # ------------------------------------------------------------------ calls
    # Plain requests through huggingface_hub's session, not HfApi's helpers: some of those
    # retry on their own (up to a minute of sleeps before an error shows) and log to stderr.
    def search(self, query: str, limit: int = 20) -> list[HubModel]:
        """GGUF repos matching ``query``, most downloaded first."""
        def go() -> list[HubModel]:
            import_hf()
            from huggingface_hub.utils import get_session, hf_raise_for_status

            params: dict[str, str | int] = {"filter": "gguf", "sort": "downloads", "direction": -1,
                                            "limit": limit}
            if query.strip():
                params["search"] = query.strip()
            response = get_session().get(f"{self.endpoint}/api/models", params=params, headers=self.headers(),
                                         timeout=self._timeout())
            hf_raise_for_status(response)
            return [HubModel(id=m["id"], downloads=int(m.get("downloads") or 0), likes=int(m.get("likes") or 0),
                             updated=m.get("lastModified"), gated=bool(m.get("gated")))
                    for m in response.json() if isinstance(m, dict) and m.get("id")]

        return self._retrying(go, f"search for {query!r}")

    def listing(self, repo: str, revision: str | None = None) -> RepoListing:
        """Every file of ``repo`` with its size and LFS sha256, at ``revision`` (default: main),
        in one request."""
        def go() -> RepoListing:
            hf = import_hf()
            info = hf.HfApi(endpoint=self.endpoint, token=self.token or False).model_info(
                repo, revision=revision, files_metadata=True, timeout=TIMEOUT)
            files = tuple(RepoFile(path=f.rfilename, size=int(f.size or 0), sha256=f.lfs.sha256 if f.lfs else None)
                          for f in info.siblings or ())
            return RepoListing(repo=repo, revision=info.sha or revision or "main", files=files,
                               gated=bool(info.gated))

        return self._retrying(go, repo, revision=revision)

    def file_url(self, repo: str, path: str, revision: str) -> str:
        return import_hf().hf_hub_url(repo, path, revision=revision, endpoint=self.endpoint)

    def headers(self) -> dict[str, str]:
        import_hf()
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self.token or False, library_name="vibechat")

    # ----------------------------------------------------------- error model
    def _retrying(self, call: Callable[[], T], what: str, revision: str | None = None) -> T:
        """Run ``call``; retry server errors and timeouts; explain the final failure."""
        if hub_offline():
            raise HubError("HF_HUB_OFFLINE is set, so vibechat does not contact the Hub: unset it to "
                           "search or download, or use a local model (vibechat models list).")
        delay = self.backoff
        attempt = 1
        while True:
            try:
                return call()
            except Exception as exc:
                if attempt < self.retries and is_transient(exc):
                    log.info("%s failed (%s); retrying in %.1fs", what, exc, delay)
                    self._sleep(delay)
                    delay *= 2
                    attempt += 1
                    continue
                message = explain(exc, what, self.endpoint, bool(self.token), revision)
                if message is None:
                    raise
                raise HubError(message) from None


def status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def is_transient(exc: BaseException) -> bool:
    """Worth another try: a 5xx, a 429, or an answer that stalled or broke off. A server
    that cannot be reached at all (DNS, refused, connect timeout) is reported at once."""
    import httpx2

    status = status_of(exc)
    if status is not None:
        return status >= 500 or status == 429
    return isinstance(exc, (httpx2.ReadTimeout, httpx2.WriteTimeout, httpx2.ReadError, httpx2.WriteError,
                            httpx2.RemoteProtocolError))


def explain(exc: BaseException, what: str, endpoint: str, has_token: bool,
            revision: str | None = None) -> str | None:
    """A one-line message for a failed Hub request about ``what`` (a repo id or a search);
    None for errors that are not about the Hub (bugs must surface)."""
    import httpx2

    hf = import_hf().errors
    where = endpoint if endpoint != DEFAULT_ENDPOINT else "the Hugging Face Hub"
    page = f"{endpoint}/{what}"
    token_hint = ("HF_TOKEN is set but that account has no access" if has_token
                  else "set HF_TOKEN to a token of an account that has access (https://huggingface.co/settings/tokens)")
    if isinstance(exc, hf.GatedRepoError):  # before RepositoryNotFoundError: it is a subclass
        return (f"{what} is gated: accept its license at {page} while logged in, then "
                f"{'make sure HF_TOKEN belongs to that account' if has_token else 'set HF_TOKEN to a token of that account'}.")
    if isinstance(exc, hf.RevisionNotFoundError):
        return f"{what} has no revision {revision!r} on {where}: leave the revision out to use main."
    if isinstance(exc, hf.RepositoryNotFoundError):
        return (f"{what} was not found on {where} (or it is private: {token_hint}); "
                "search with 'vibechat models search NAME'.")
    if isinstance(exc, (hf.RemoteEntryNotFoundError, hf.EntryNotFoundError)):
        return f"a file of {what} was not found on {where}: it may have been renamed; list the repo again."
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set: unset it to search or download."
    status = status_of(exc)
    if status == 401:
        return f"{where} refused the token in HF_TOKEN (401): create a new one at https://huggingface.co/settings/tokens."
    if status == 403:
        return f"{where} refused access to {what} (403): {token_hint}."
    if status == 429:
        return f"{where} is rate-limiting requests (429): wait a minute and try again, or set HF_TOKEN."
    if status is not None and status >= 500:
        return f"{where} failed with HTTP {status} while fetching {what}, several times: try again later."
    if isinstance(exc, httpx2.TimeoutException):
        return f"{where} did not answer in time while fetching {what}: check your connection and try again."
    if isinstance(exc, (httpx2.NetworkError, httpx2.RemoteProtocolError, ConnectionError)):
        return (f"could not reach {endpoint} ({exc.__class__.__name__}): check your connection, a proxy, "
                "or the HF_ENDPOINT variable.")
    if status is not None:
        return f"{where} answered HTTP {status} while fetching {what}: try again later."
    return None
