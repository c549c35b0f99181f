"""The Hugging Face Hub, or the mirror ``HF_ENDPOINT`` names: search GGUF repos,
list a repo's model files, build download URLs.

Every setting Hugging Face tools honour is read at call time, never at import:
``HF_ENDPOINT``, ``HF_TOKEN`` (else the token file that ``hf auth login`` writes
under ``HF_HOME``), ``HF_HUB_OFFLINE``. Failures become a ``HubError`` whose
message names the problem and the fix; server errors and timeouts are retried a
few times first.

What the endpoint answers is untrusted (a mirror can send anything): an answer is read
up to ``MAX_ANSWER`` bytes within ``DEADLINE`` seconds (an error body up to
``MAX_ERROR_BODY``), JSON nested too deeply is no traceback, and only well-formed
entries are kept: repo ids of the Hub's shape, at most ``MAX_FILES`` files, sizes that
are whole numbers (a missing or bad size is 0: unknown, and the download learns it),
LFS sha256s of 64 hex digits, commit shas of 40. File names are checked where they
become paths (``refs.is_safe_repo_path``). The server's own words reach only the log,
cleaned.

Imports inside functions are deliberate: huggingface_hub and its HTTP client load only when the
Hub is asked (start-up time: they are heavy).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ..errors import HubError, ModelRefError
from ..files import UnreadableFile, read_file
from ..json_bounds import bounded_loads
from ..sanitize import sanitize
from ..settings.refs import (
    HubRef,
    QuantOption,
    RepoFile,
    group_quants,
    is_repo_id,
    is_safe_repo_path,
    pick_file,
    pick_quant,
    refused_files,
    show_name,
)

log = logging.getLogger("vibechat.hub")

DEFAULT_ENDPOINT = "https://huggingface.co"
# Attempts for a request that failed with a 5xx, a 429 or a stalled/dropped answer.
RETRIES = 3
# Seconds before the second attempt; doubles after each.
BACKOFF = 0.5
# Seconds without an answer before a request counts as failed.
TIMEOUT = 20.0
# Seconds to reach the server (an unreachable one is not retried).
CONNECT_TIMEOUT = 10.0
# Seconds for one answer, its body included, however slowly it trickles in.
DEADLINE = 120.0
# Bytes of a listing or search answer (a repo of 10,000 files is ~3 MB).
MAX_ANSWER = 32 << 20
# Bytes of an error answer read (for its message).
MAX_ERROR_BODY = 64 << 10
MAX_FILES = 100_000  # files kept from one repo listing
# Bytes: a file size above this (a petabyte) is no real size.
MAX_SIZE = 1 << 50
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_COMMIT = re.compile(r"[0-9a-fA-F]{40}")

T = TypeVar("T")


def import_hf():
    """``huggingface_hub``, imported with its logging tamed: on import it attaches its own
    stderr handler (which would scribble over the TUI, e.g. "Retrying in 8s"). Its records
    go nowhere unless vibechat's own handler (``--verbose``) is attached to it."""
    import huggingface_hub

    logger = logging.getLogger("huggingface_hub")
    logger.handlers = [h for h in logger.handlers if getattr(h, "vibechat", False)] or [
        logging.NullHandler()
    ]
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
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "huggingface",
        )
        path = os.path.join(home, "token")
    try:
        return read_file(Path(path).expanduser(), 1 << 16).decode("utf-8").strip() or None
    except (OSError, UnicodeDecodeError, UnreadableFile):
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
    # The commit sha the listing was made at.
    revision: str
    files: tuple[RepoFile, ...]
    gated: bool = False

    @property
    def options(self) -> list[QuantOption]:
        return group_quants(list(self.files))

    def projector_for(self, option: QuantOption) -> RepoFile | None:
        """The repo's multimodal projector for ``option`` (a vision model's ``mmproj*.gguf``,
        the best match for its name: ``projector.pick_projector``), fetched with it; None
        when the repo has none (a text model). Only a path safe to save is considered."""
        from .projector import is_projector_name, pick_projector

        candidates = {
            f.path: f for f in self.files if is_projector_name(f.path) and is_safe_repo_path(f.path)
        }
        chosen = pick_projector(option.first.path, candidates)
        return candidates[chosen] if chosen is not None else None

    def choose(self, ref: HubRef) -> QuantOption:
        """The files ``ref`` asks for (default quantization when it names none). When none
        fits, the message also names the model files left out for unsafe names."""
        options = self.options
        try:
            if ref.file:
                return pick_file(options, ref.file, self.repo)
            return pick_quant(options, ref.quant, self.repo)
        except ModelRefError as exc:
            refused = refused_files(list(self.files))
            if not refused:
                raise
            shown = ", ".join(show_name(name) for name in refused[:3])
            more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
            raise ModelRefError(
                f"{str(exc).rstrip('.')}; left out as unsafe to save: {shown}{more} (a name with "
                'control characters, any of [ ] \\ < > : " | ? *, or too long for a disk): ask the '
                "repo's owner to rename it, or download it by hand and pass its path."
            ) from None


class Hub:
    """A client for one endpoint and token (both read from the environment by default)."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        retries: int = RETRIES,
        backoff: float = BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
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

            params: dict[str, str | int] = {
                "filter": "gguf",
                "sort": "downloads",
                "direction": -1,
                "limit": limit,
            }
            if query.strip():
                params["search"] = query.strip()
            found = self._get_json("/api/models", params, what)
            if not isinstance(found, list):
                raise HubError(
                    f"{self._where()} answered the search with something other than a list of "
                    "repos: check HF_ENDPOINT."
                )
            models = [_hub_model(m) for m in found[: max(0, limit)]]
            return [m for m in models if m is not None]

        what = f"search for {query!r}"
        return self._retrying(go, what)

    def listing(self, repo: str, revision: str | None = None) -> RepoListing:
        """Every file of ``repo`` with its size and LFS sha256, at ``revision`` (default: main),
        in one request (what ``HfApi.model_info(files_metadata=True)`` asks, read within bounds)."""
        if not is_repo_id(repo):
            raise ModelRefError(
                f"{show_name(repo)} is not a Hub repo id: use owner/name, such as "
                "bartowski/Llama-3.2-1B-Instruct-GGUF."
            )

        def go() -> RepoListing:
            path = f"/api/models/{repo}" + (
                f"/revision/{quote(revision, safe='')}" if revision else ""
            )
            info = self._get_json(path, {"blobs": "true"}, repo)
            if not isinstance(info, dict):
                raise HubError(
                    f"{self._where()} answered the listing of {repo} with something other than a "
                    "repo description: check HF_ENDPOINT."
                )
            siblings = info.get("siblings")
            entries = siblings if isinstance(siblings, list) else []
            if len(entries) > MAX_FILES:
                log.info("%s lists %d files; kept the first %d", repo, len(entries), MAX_FILES)
            files = tuple(f for f in (_repo_file(e) for e in entries[:MAX_FILES]) if f is not None)
            sha = info.get("sha")
            commit = sha if isinstance(sha, str) and _COMMIT.fullmatch(sha) else revision or "main"
            return RepoListing(
                repo=repo,
                revision=commit,
                files=files,
                gated=info.get("gated") not in (None, False),
            )

        return self._retrying(go, repo, revision=revision)

    def file_url(self, repo: str, path: str, revision: str) -> str:
        return import_hf().hf_hub_url(repo, path, revision=revision, endpoint=self.endpoint)

    def headers(self) -> dict[str, str]:
        import_hf()
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self.token or False, library_name="vibechat")

    def _where(self) -> str:
        return self.endpoint if self.endpoint != DEFAULT_ENDPOINT else "the Hugging Face Hub"

    def _get_json(self, path: str, params: dict[str, str | int], what: str) -> Any:
        """GET ``path`` on the endpoint, its JSON answer read within ``MAX_ANSWER`` bytes and
        ``DEADLINE`` seconds. HTTP errors raise huggingface_hub's errors (from a bounded
        copy of the answer), as ``hf_raise_for_status`` does."""
        import_hf()
        from huggingface_hub.utils import get_session

        url = f"{self.endpoint}{path}"
        with get_session().stream(
            "GET", url, params=params, headers=self.headers(), timeout=self._timeout()
        ) as response:
            if response.status_code >= 400:
                raise_for_status(response)
            body = read_bounded(response, MAX_ANSWER, DEADLINE, what)
        if len(body) > MAX_ANSWER:
            raise HubError(
                f"{self._where()} answered {what} with more than {MAX_ANSWER >> 20} MB: check "
                "HF_ENDPOINT (a Hub mirror should answer like the Hub)."
            )
        try:
            return bounded_loads(body)
        except ValueError:
            # Not JSON, not UTF-8, or nested too deeply.
            raise HubError(
                f"{self._where()} answered {what} with something other than JSON: check "
                "HF_ENDPOINT (a Hub mirror should answer like the Hub)."
            ) from None

    # ----------------------------------------------------------- error model
    def _retrying(self, call: Callable[[], T], what: str, revision: str | None = None) -> T:
        """Run ``call``; retry server errors and timeouts; explain the final failure."""
        if hub_offline():
            raise HubError(
                "HF_HUB_OFFLINE is set, so vibechat does not contact the Hub: unset it to "
                "search or download, or use a local model (vibechat models list)."
            )
        delay = self.backoff
        attempt = 1
        while True:
            try:
                return call()
            except Exception as exc:
                if attempt < self.retries and is_transient(exc):
                    log.info("%s failed (%s); retrying in %.1fs", what, short(exc), delay)
                    self._sleep(delay)
                    delay *= 2
                    attempt += 1
                    continue
                message = explain(exc, what, self.endpoint, bool(self.token), revision)
                if message is None:
                    raise
                raise HubError(message) from None


def short(exc: BaseException, limit: int = 300) -> str:
    """An exception's text, which may quote the server, cleaned for a log line."""
    text = " ".join(sanitize(str(exc)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_bounded(response: Any, limit: int, seconds: float, what: str) -> bytes:
    """The body of a streamed ``httpx2`` response, at most ``limit`` + 1 bytes (more than
    ``limit`` tells the caller it was too long), within ``seconds`` however slowly it comes
    (each read is bounded by the read timeout)."""
    import httpx2

    deadline = time.monotonic() + seconds
    out = bytearray()
    for piece in response.iter_bytes():
        out += piece
        if len(out) > limit:
            break
        if time.monotonic() > deadline:
            raise httpx2.ReadTimeout(f"{what}: the answer took longer than {seconds:g} s")
    return bytes(out[: limit + 1])


def raise_for_status(response: Any) -> None:
    """``hf_raise_for_status`` for a streamed response with an error status: the error is
    built from at most ``MAX_ERROR_BODY`` bytes of its body, so an endless error page
    cannot exhaust memory."""
    import httpx2
    from huggingface_hub.utils import hf_raise_for_status

    body = read_bounded(response, MAX_ERROR_BODY, TIMEOUT, "an error answer")[:MAX_ERROR_BODY]
    hf_raise_for_status(
        httpx2.Response(
            response.status_code, headers=response.headers, content=body, request=response.request
        )
    )


def _hub_model(entry: Any) -> HubModel | None:
    """A search result from one entry of the answer; None when its id is not a repo id."""
    if not isinstance(entry, dict) or not is_repo_id(entry.get("id")):
        return None
    updated = entry.get("lastModified")
    return HubModel(
        id=entry["id"],
        downloads=_whole(entry.get("downloads")),
        likes=_whole(entry.get("likes")),
        updated=updated
        if isinstance(updated, str) and len(updated) <= 40 and updated.isprintable()
        else None,
        gated=entry.get("gated") not in (None, False),
    )


def _repo_file(entry: Any) -> RepoFile | None:
    """A listing entry (``siblings`` with ``blobs=true``): path, size (0: unknown), LFS sha256."""
    if not isinstance(entry, dict) or not isinstance(entry.get("rfilename"), str):
        return None
    lfs = entry.get("lfs")
    if not isinstance(lfs, dict):
        lfs = {}
    sha = lfs.get("sha256")
    size = _whole(entry.get("size")) or _whole(lfs.get("size"))
    return RepoFile(
        path=entry["rfilename"],
        size=size,
        sha256=sha.lower() if isinstance(sha, str) and _SHA256.fullmatch(sha) else None,
    )


def _whole(value: Any) -> int:
    """A count or size from the server: a whole number from 0 to ``MAX_SIZE``, else 0."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SIZE:
        return value
    return 0


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
    return isinstance(
        exc,
        (
            httpx2.ReadTimeout,
            httpx2.WriteTimeout,
            httpx2.ReadError,
            httpx2.WriteError,
            httpx2.RemoteProtocolError,
        ),
    )


def explain(
    exc: BaseException, what: str, endpoint: str, has_token: bool, revision: str | None = None
) -> str | None:
    """A one-line message for a failed Hub request about ``what`` (a repo id or a search);
    None for errors that are not about the Hub (bugs must surface)."""
    import httpx2

    hf = import_hf().errors
    where = endpoint if endpoint != DEFAULT_ENDPOINT else "the Hugging Face Hub"
    page = f"{endpoint}/{what}"
    token_hint = (
        "HF_TOKEN is set but that account has no access"
        if has_token
        else (
            "set HF_TOKEN to a token of an account that has access "
            "(https://huggingface.co/settings/tokens)"
        )
    )
    # Before RepositoryNotFoundError: GatedRepoError is a subclass of it.
    if isinstance(exc, hf.GatedRepoError):
        return f"{what} is gated: accept its license at {page} while logged in, then " + (
            "make sure HF_TOKEN belongs to that account."
            if has_token
            else "set HF_TOKEN to a token of that account."
        )
    if isinstance(exc, hf.RevisionNotFoundError):
        return (
            f"{what} has no revision {revision!r} on {where}: leave the revision out to use main."
        )
    if isinstance(exc, hf.RepositoryNotFoundError):
        return (
            f"{what} was not found on {where} (or it is private: {token_hint}); "
            "search with 'vibechat models search NAME'."
        )
    if isinstance(exc, (hf.RemoteEntryNotFoundError, hf.EntryNotFoundError)):
        return (
            f"a file of {what} was not found on {where}: it may have been renamed; "
            "list the repo again."
        )
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set: unset it to search or download."
    status = status_of(exc)
    if status == 401:
        return (
            f"{where} refused the token in HF_TOKEN (401): create a new one at "
            "https://huggingface.co/settings/tokens."
        )
    if status == 403:
        return f"{where} refused access to {what} (403): {token_hint}."
    if status == 429:
        return (
            f"{where} is rate-limiting requests (429): wait a minute and try again, "
            "or set HF_TOKEN."
        )
    if status is not None and status >= 500:
        return (
            f"{where} failed with HTTP {status} while fetching {what}, several times: "
            "try again later."
        )
    if isinstance(exc, httpx2.TimeoutException):
        return (
            f"{where} did not answer in time while fetching {what}: check your connection "
            "and try again."
        )
    if isinstance(exc, (httpx2.NetworkError, httpx2.RemoteProtocolError, ConnectionError)):
        return (
            f"could not reach {endpoint} ({exc.__class__.__name__}): check your connection, "
            "a proxy, or the HF_ENDPOINT variable."
        )
    if status is not None:
        return f"{where} answered HTTP {status} while fetching {what}: try again later."
    return None
