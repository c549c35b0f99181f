"""A fake Hugging Face Hub: a real HTTP server on 127.0.0.1 that answers the requests
huggingface_hub 2.4.0 makes for search, repo info, tree listing and file downloads.

Why a server and not a mock: huggingface_hub talks through ``httpx2``, which respx and
pytest-httpx cannot intercept, and a real socket is the only way to test what matters for
downloads (Range requests, connections that drop mid-body, timeouts).

The answers mirror the real Hub where huggingface_hub depends on them (checked against the
installed source): errors carry ``X-Error-Code``/``X-Error-Message`` headers and a JSON
``{"error": ...}`` body (over plain ``http://`` the client maps a 401 to
``RepositoryNotFoundError`` only through that header); ``/resolve`` answers carry
``X-Repo-Commit`` and ``ETag`` (``hf_hub_download`` refuses a file without them) and no
``X-Xet-Hash`` (so downloads stay on plain HTTP); listings are paginated with a GitHub-style
``Link: <url>; rel="next"`` header. Every file is served as an LFS file.

Standard library only, apart from the pytest fixture at the end.
"""

from __future__ import annotations

import hashlib
import json
import socket
import socketserver
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pytest

TOKEN = "hf_fake_token"
"""The one token the fake accepts (sent as ``Authorization: Bearer hf_fake_token``)."""

LAST_MODIFIED = "2024-05-01T12:00:00.000Z"
CREATED_AT = "2024-01-15T08:30:00.000Z"
PAGE_SIZE = 1000  # the real Hub's page size for model search and tree listings

INVALID_CREDENTIALS = (
    "Invalid credentials in Authorization header"  # the Hub's words for a bad token
)
# Errors a client causes by going away; the server stays quiet about them.
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


# ---------------------------------------------------------------------- content
@dataclass(frozen=True)
class HubFile:
    """One file of a repo, with the hashes the Hub reports for an LFS file."""

    path: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def pointer(self) -> bytes:
        """The git-lfs pointer committed in place of the file: its size and git oid are what
        the Hub reports as ``pointerSize`` and ``blobId``/``oid``."""
        return (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
            f"size {self.size}\n"
        ).encode()

    @property
    def git_oid(self) -> str:
        return _git_oid(b"blob", self.pointer)


@dataclass
class HubRepo:
    """A model repo with a single commit (reachable as ``main`` and by its sha)."""

    repo_id: str
    files: dict[str, HubFile]
    sha: str
    gated: bool = False
    private: bool = False
    downloads: int = 0
    likes: int = 0
    tags: list[str] = field(default_factory=lambda: ["gguf"])
    wrong_bytes: set[str] = field(default_factory=set)
    hide_sizes: bool = False  # listings leave sizes out (a mirror that does)
    hide_sha256: bool = False  # listings leave the LFS block out too
    serving: dict[str, _Serving] = field(default_factory=dict)

    def body(self, path: str) -> bytes:
        """The bytes served for ``path``: the real ones, or a corrupted copy of the same
        length after ``serve_wrong_bytes``."""
        data = self.files[path].data
        if path in self.wrong_bytes:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        return data


def _git_oid(kind: bytes, payload: bytes) -> str:
    return hashlib.sha1(kind + b" %d\0" % len(payload) + payload).hexdigest()


def _commit_sha(repo_id: str, files: Mapping[str, HubFile]) -> str:
    """Deterministic, and different when the content changes: the HF cache keys snapshots
    by commit, so replacing a repo's files must not reuse the old sha."""
    manifest = repo_id + "\n" + "\n".join(f"{p} {f.sha256}" for p, f in sorted(files.items()))
    return hashlib.sha1(manifest.encode()).hexdigest()


# ---------------------------------------------------------------- request log
class Headers(Mapping[str, str]):
    """Request headers with case-insensitive lookup (HTTP header names are)."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        self._lower = {k.lower(): v for k, v in items}

    def __getitem__(self, key: str) -> str:
        return self._lower[key.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({dict(self._items)!r})"


@dataclass(frozen=True)
class Request:
    """One request as the fake received it."""

    method: str
    path: str  # as sent, with the query string
    headers: Headers

    @property
    def route(self) -> str:
        """The path without query, URL-decoded."""
        return unquote(urlsplit(self.path).path)

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.path).query, keep_blank_values=True)


# ------------------------------------------------------------------- faults
@dataclass
class _Rule:
    """A fault that applies to the next ``times`` requests whose path contains ``needle``."""

    needle: str
    times: int
    method: str | None = None
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    nbytes: int = 0
    seconds: float = 0.0

    def matches(self, req: Request) -> bool:
        if self.times <= 0 or (self.method and self.method.upper() != req.method):
            return False
        return self.needle in req.path or self.needle in unquote(req.path)


@dataclass(frozen=True)
class _Serving:
    """How ``/resolve`` serves one file (``FakeHub.serve_file``)."""

    length: bool = True  # False: no Content-Length or X-Linked-Size, a chunked body
    extra: bytes = b""  # appended to the file's bytes (more than the listing says)
    truncate: int | None = None  # only this many bytes, then a clean end
    endless: bool = False  # the file's bytes, then zeros without end (chunked)


@dataclass
class _Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    drop_after: int | None = None  # send only this many body bytes, then close
    stall: tuple[int, float] | None = None  # (bytes, seconds): send that much, pause, send the rest
    chunked: bool = False  # Transfer-Encoding: chunked, no Content-Length
    stream: Iterator[bytes] | None = None  # the body, piece by piece (chunked), after ``body``


def _json(status: int, payload: object, headers: dict[str, str] | None = None) -> _Reply:
    body = json.dumps(payload).encode()
    return _Reply(
        status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body
    )


def _error(status: int, message: str, code: str | None = None, **extra: str) -> _Reply:
    """An error the way the Hub sends it: huggingface_hub picks the exception class from
    ``X-Error-Code`` and shows ``X-Error-Message`` and the body's ``error``."""
    headers = {
        "X-Error-Message": message.encode("ascii", "replace").decode(),
        **extra,
    }  # headers are latin-1
    if code:
        headers["X-Error-Code"] = code
    return _json(status, {"error": message}, headers)


# --------------------------------------------------------------------- hub
class FakeHub:
    """The fake Hub: content (``add_repo``), faults, and the log of requests received.

    ``page_size`` caps how many entries one listing page holds, as the real Hub does
    (1000); set it low to make the client follow ``Link`` headers."""

    def __init__(self, *, page_size: int = PAGE_SIZE) -> None:
        self.page_size = page_size
        self.requests: list[Request] = []
        self.server_errors: list[BaseException] = []  # bugs of the fake itself, for debugging
        self._repos: dict[str, HubRepo] = {}
        self._fails: list[_Rule] = []
        self._drops: list[_Rule] = []
        self._delays: list[_Rule] = []
        self._stalls: list[_Rule] = []
        self._raw: list[tuple[_Rule, Callable[[], _Reply]]] = []
        self.gone = threading.Event()  # a client closed a streamed (endless) answer before its end
        self.endless_max = 256 << 20  # bytes an endless answer sends at most
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeHub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fakehub",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut open connections (a pooled keep-alive connection would
        otherwise keep its handler thread alive), ending any ``delay`` early."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- content
    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        gated: bool = False,
        private: bool = False,
        downloads: int = 0,
        likes: int = 0,
        tags: list[str] | None = None,
    ) -> str:
        """Add (or replace) a model repo; returns its 40-hex commit sha."""
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise ValueError(f"repo id must be owner/name, not {repo_id!r}")
        hub_files = {path: HubFile(path, data) for path, data in files.items()}
        sha = _commit_sha(repo_id, hub_files)
        repo = HubRepo(
            repo_id,
            hub_files,
            sha,
            gated=gated,
            private=private,
            downloads=downloads,
            likes=likes,
            tags=list(tags) if tags is not None else ["gguf"],
        )
        with self._lock:
            self._repos[repo_id] = repo
        return sha

    def repo(self, repo_id: str) -> HubRepo:
        return self._repos[repo_id]

    # --------------------------------------------------------------- faults
    def fail_next(
        self,
        path_contains: str,
        status: int = 500,
        times: int = 1,
        *,
        method: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer ``status`` (JSON error body, plus ``headers``) to the next ``times``
        requests whose path contains ``path_contains`` (and of ``method``, if given)."""
        self._add(
            self._fails,
            _Rule(path_contains, times, method, status=status, headers=dict(headers or {})),
        )

    def drop_after(self, path_contains: str, nbytes: int, times: int = 1) -> None:
        """For the next ``times`` GETs of a file: full headers (Content-Length or
        Content-Range), then only ``nbytes`` bytes of the body (at most one short of it),
        then the connection closes, so the client sees a truncated body, not a clean end."""
        self._add(self._drops, _Rule(path_contains, times, "GET", nbytes=nbytes))

    def delay(
        self, path_contains: str, seconds: float, times: int = 1, *, method: str | None = None
    ) -> None:
        """Wait ``seconds`` before answering the next ``times`` matching requests."""
        self._add(self._delays, _Rule(path_contains, times, method, seconds=seconds))

    def stall_after(self, path_contains: str, nbytes: int, seconds: float, times: int = 1) -> None:
        """For the next ``times`` GETs of a file: send ``nbytes`` of the body, pause
        ``seconds``, then send the rest (time for a test to interrupt a download midway)."""
        self._add(self._stalls, _Rule(path_contains, times, "GET", nbytes=nbytes, seconds=seconds))

    def serve_wrong_bytes(self, repo_id: str, path: str) -> None:
        """From now on serve bytes of the same length but another sha256 for this file,
        while listings and the ETag keep the original sha256."""
        repo = self._repos[repo_id]
        if not repo.files[path].data:
            raise ValueError(f"{path} is empty: no wrong bytes of the same length exist")
        repo.wrong_bytes.add(path)

    def hide_sizes(self, repo_id: str, *, sha256: bool = True) -> None:
        """From now on listings of this repo give no file sizes (``sha256=False``: no LFS
        block either), as some mirrors do."""
        repo = self._repos[repo_id]
        repo.hide_sizes, repo.hide_sha256 = True, not sha256

    def serve_file(
        self,
        repo_id: str,
        path: str,
        *,
        length: bool = True,
        extra: bytes = b"",
        truncate: int | None = None,
        endless: bool = False,
    ) -> None:
        """From now on ``/resolve`` serves this file differently: without a length (chunked),
        with ``extra`` bytes after it, cut to ``truncate`` bytes with a clean end, or
        followed by zeros without end (up to ``endless_max`` bytes; ``gone`` is set when the
        client hangs up first)."""
        self._repos[repo_id].serving[path] = _Serving(length, extra, truncate, endless)

    def answer_next(
        self,
        path_contains: str,
        body: bytes = b"",
        *,
        status: int = 200,
        times: int = 1,
        endless: bytes | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path contains ``path_contains`` with
        ``body`` as it is (JSON or not); ``endless``: then that unit repeated without end
        (up to ``endless_max`` bytes, chunked)."""

        def reply() -> _Reply:
            headers = {"Content-Type": "application/json"}
            if endless is None:
                return _Reply(status, headers, body)
            return _Reply(status, headers, body, chunked=True, stream=self._endless(endless))

        with self._lock:
            self._raw.append((_Rule(path_contains, times), reply))

    def _endless(self, unit: bytes) -> Iterator[bytes]:
        piece = unit * max(1, 65536 // max(1, len(unit)))
        sent = 0
        while sent < self.endless_max and not self._stopping.is_set():
            yield piece
            sent += len(piece)

    def clear_faults(self) -> None:
        with self._lock:
            self._raw.clear()
            self._fails.clear()
            self._drops.clear()
            self._delays.clear()
            self._stalls.clear()

    def _add(self, rules: list[_Rule], rule: _Rule) -> None:
        with self._lock:
            rules.append(rule)

    def _take(self, rules: list[_Rule], req: Request) -> _Rule | None:
        """The first rule that matches ``req``, one use of it consumed."""
        with self._lock:
            for rule in rules:
                if rule.matches(req):
                    rule.times -= 1
                    return rule
        return None

    # ------------------------------------------------------------------ log
    def find(self, path_contains: str, method: str | None = None) -> list[Request]:
        """Logged requests whose (raw or decoded) path contains ``path_contains``."""
        probe = _Rule(path_contains, 1, method)
        return [r for r in list(self.requests) if probe.matches(r)]

    def _log(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    # -------------------------------------------------------------- serving
    def _answer(self, req: Request) -> _Reply:
        """Faults first, then the route."""
        delay = self._take(self._delays, req)
        if delay is not None:
            self._stopping.wait(delay.seconds)
        with self._lock:
            raw = next((make for rule, make in self._raw if rule.matches(req)), None)
            for rule, make in self._raw:
                if make is raw:
                    rule.times -= 1
                    break
        if raw is not None:
            return raw()
        fail = self._take(self._fails, req)
        if fail is not None:
            return _error(fail.status, f"fakehub: injected HTTP {fail.status}", **fail.headers)
        reply = self._route(req)
        if req.method == "GET" and reply.status in (200, 206) and "/resolve/" in req.path:
            drop = self._take(self._drops, req)
            if drop is not None:
                reply.drop_after = max(0, min(drop.nbytes, len(reply.body) - 1))
            stall = self._take(self._stalls, req)
            if stall is not None:
                reply.stall = (min(stall.nbytes, len(reply.body)), stall.seconds)
        return reply

    def _route(self, req: Request) -> _Reply:
        split = urlsplit(req.path)
        segs = [unquote(s) for s in split.path.split("/")[1:]]
        query = parse_qs(split.query, keep_blank_values=True)
        auth = req.headers.get("authorization", "")
        if auth and auth != f"Bearer {TOKEN}":
            return _error(401, INVALID_CREDENTIALS)
        authed = bool(auth)
        if segs[:2] == ["api", "models"]:
            if len(segs) == 2 or (len(segs) == 3 and not segs[2]):
                return self._search(query, authed)
            if len(segs) >= 4:
                return self._repo_api(f"{segs[2]}/{segs[3]}", segs[4:], query, authed)
        if len(segs) >= 5 and segs[2] == "resolve":
            return self._resolve(req, f"{segs[0]}/{segs[1]}", segs[3], "/".join(segs[4:]), authed)
        return _error(404, "Sorry, we can't find the page you are looking for.")

    def _repo_api(
        self, repo_id: str, rest: list[str], query: dict[str, list[str]], authed: bool
    ) -> _Reply:
        if not rest or rest == [""]:
            return self._info(repo_id, "main", query, authed)
        if rest[0] == "revision" and len(rest) == 2:
            return self._info(repo_id, rest[1], query, authed)
        if rest[0] == "tree" and len(rest) >= 2:
            return self._tree(repo_id, rest[1], "/".join(rest[2:]).strip("/"), query, authed)
        return _error(404, "Sorry, we can't find the page you are looking for.")

    def _visible(self, repo_id: str, authed: bool) -> HubRepo | _Reply:
        """The repo, or the error the Hub gives: 404 for a missing repo, 401 for a private
        one without a token (both ``RepoNotFound``, so the client cannot tell them apart)."""
        repo = self._repos.get(repo_id)
        if repo is None:
            return _error(404, "Repository not found", "RepoNotFound")
        if repo.private and not authed:
            return _error(401, "Invalid username or password.", "RepoNotFound")
        return repo

    def _at(self, repo: HubRepo, rev: str) -> _Reply | None:
        if rev in ("main", repo.sha):
            return None
        return _error(404, f"Invalid rev id: {rev}", "RevisionNotFound")

    def _info(self, repo_id: str, rev: str, query: dict[str, list[str]], authed: bool) -> _Reply:
        repo = self._visible(repo_id, authed)
        if isinstance(repo, _Reply):
            return repo
        if (err := self._at(repo, rev)) is not None:
            return err
        blobs = _truthy(query, "blobs")
        info = _model_json(repo)
        info["sha"] = repo.sha
        info["usedStorage"] = sum(f.size for f in repo.files.values())
        info["siblings"] = [_sibling(f, blobs, repo) for _, f in sorted(repo.files.items())]
        return _json(200, info)

    def _tree(
        self, repo_id: str, rev: str, path: str, query: dict[str, list[str]], authed: bool
    ) -> _Reply:
        repo = self._visible(repo_id, authed)
        if isinstance(repo, _Reply):
            return repo
        if (err := self._at(repo, rev)) is not None:
            return err
        entries = _tree_entries(repo, path, _truthy(query, "recursive"))
        if entries is None:
            return _error(
                404,
                f'{path} does not exist on "{rev}"',
                "EntryNotFound",
                **{"X-Repo-Commit": repo.sha},
            )
        return self._page(
            entries, query, f"/api/models/{repo_id}/tree/{rev}" + (f"/{path}" if path else "")
        )

    def _search(self, query: dict[str, list[str]], authed: bool) -> _Reply:
        with self._lock:
            repos = [r for r in self._repos.values() if authed or not r.private]
        found = [_model_json(r) for r in _filter_sort(repos, query)]
        limit = _int(query, "limit")
        return self._page(
            found[:limit] if limit is not None and limit > 0 else found,
            query,
            "/api/models",
            first_page=min(limit, self.page_size) if limit else self.page_size,
        )

    def _page(
        self,
        items: list[dict],
        query: dict[str, list[str]],
        route: str,
        *,
        first_page: int | None = None,
    ) -> _Reply:
        """One page of ``items`` from ``cursor`` on, with a ``Link`` to the next page (the
        client follows it as is, so it carries the whole query)."""
        start = _int(query, "cursor") or 0
        size = max(1, first_page or self.page_size)
        page = items[start : start + size]
        headers: dict[str, str] = {}
        if start + size < len(items):
            nxt = {k: v for k, v in query.items() if k != "cursor"} | {
                "cursor": [str(start + size)]
            }
            headers["Link"] = f'<{self.url}{quote(route)}?{urlencode(nxt, doseq=True)}>; rel="next"'
        return _json(200, page, headers)

    def _resolve(self, req: Request, repo_id: str, rev: str, path: str, authed: bool) -> _Reply:
        repo = self._visible(repo_id, authed)
        if isinstance(repo, _Reply):
            return repo
        if repo.gated and not authed:
            return _error(
                401,
                f"Access to model {repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
                "GatedRepo",
            )
        if (err := self._at(repo, rev)) is not None:
            return err
        hub_file = repo.files.get(path)
        if hub_file is None:
            return _error(404, "Entry not found", "EntryNotFound", **{"X-Repo-Commit": repo.sha})
        return _file_reply(repo, hub_file, req.headers.get("range"))


# ------------------------------------------------------------- JSON shapes
def _model_json(repo: HubRepo) -> dict[str, object]:
    """The fields of a model object that search results and model info share."""
    return {
        "id": repo.repo_id,
        "modelId": repo.repo_id,
        "author": repo.repo_id.split("/")[0],
        "private": repo.private,
        "gated": "auto" if repo.gated else False,
        "disabled": False,
        "downloads": repo.downloads,
        "likes": repo.likes,
        "tags": list(repo.tags),
        "lastModified": LAST_MODIFIED,
        "createdAt": CREATED_AT,
    }


def _sibling(f: HubFile, blobs: bool, repo: HubRepo) -> dict[str, object]:
    """A ``siblings`` entry; size, blob id and LFS info only with ``blobs=true`` (what
    ``model_info(files_metadata=True)`` asks for), less what the repo hides."""
    if not blobs:
        return {"rfilename": f.path}
    entry: dict[str, object] = {
        "rfilename": f.path,
        "size": f.size,
        "blobId": f.git_oid,
        "lfs": {"sha256": f.sha256, "size": f.size, "pointerSize": len(f.pointer)},
    }
    if repo.hide_sizes:
        del entry["size"]
        entry["lfs"] = {"sha256": f.sha256}
    if repo.hide_sha256:
        del entry["lfs"]
    return entry


def _tree_entries(repo: HubRepo, path: str, recursive: bool) -> list[dict] | None:
    """Tree entries under ``path`` (None when it is no folder of the repo): files and the
    folders between them; only direct children unless ``recursive``."""
    prefix = f"{path}/" if path else ""
    files = {p: f for p, f in repo.files.items() if p.startswith(prefix)}
    if path and not files:
        return None
    folders = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
    folders = {d for d in folders if d.startswith(prefix)}
    depth = prefix.count("/")

    def shown(p: str) -> bool:
        return recursive or p.count("/") == depth

    entries: list[dict] = [
        {"type": "directory", "path": d, "oid": _git_oid(b"tree", d.encode()), "size": 0}
        for d in folders
        if shown(d)
    ]
    entries += [
        {
            "type": "file",
            "path": p,
            "size": f.size,
            "oid": f.git_oid,
            "lfs": {"oid": f.sha256, "size": f.size, "pointerSize": len(f.pointer)},
        }
        for p, f in files.items()
        if shown(p)
    ]
    return sorted(entries, key=lambda e: str(e["path"]))


# Sort keys the fake distinguishes (all repos share one date, so date sorts keep insertion order).
_SORT_KEYS = {
    "downloads": "downloads",
    "likes": "likes",
    "trendingScore": "downloads",
    "id": "repo_id",
}


def _filter_sort(repos: list[HubRepo], query: dict[str, list[str]]) -> list[HubRepo]:
    """Search semantics: ``search`` is a case-insensitive substring of the id, every
    ``filter`` must be a tag, ``author`` is the owner; ``sort`` is descending unless
    ``direction=1``."""
    search = (query.get("search") or [""])[0].lower()
    wanted = {t.lower() for v in query.get("filter", []) for t in v.split(",") if t}
    author = (query.get("author") or [""])[0].lower()
    gated = (query.get("gated") or [""])[0].lower()
    out = [
        r
        for r in repos
        if search in r.repo_id.lower()
        and wanted <= {t.lower() for t in r.tags}
        and (not author or r.repo_id.split("/")[0].lower() == author)
        and (gated not in ("true", "false") or r.gated == (gated == "true"))
    ]
    key = _SORT_KEYS.get((query.get("sort") or [""])[0])
    if key:
        descending = (query.get("direction") or ["-1"])[0] != "1"
        out.sort(key=lambda r: getattr(r, key), reverse=descending)
    return out


# ----------------------------------------------------------------- files
def _file_reply(repo: HubRepo, f: HubFile, range_header: str | None) -> _Reply:
    """A ``/resolve`` answer: the whole file, a 206 slice for a satisfiable ``Range``, or
    416 for a range that starts at or past the end (as ``serve_file`` says, if it did)."""
    serving = repo.serving.get(f.path, _Serving())
    data = repo.body(f.path) + serving.extra
    if serving.truncate is not None:
        data = data[: serving.truncate]
    total = len(data)
    headers = {
        "X-Repo-Commit": repo.sha,
        "ETag": f'"{f.sha256}"',
        "X-Linked-Etag": f'"{f.sha256}"',
        "X-Linked-Size": str(total),
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
    }
    if not serving.length or serving.endless:
        del headers["X-Linked-Size"]
    if serving.endless:
        return _Reply(200, headers, data, chunked=True, stream=_zeros())
    span = _parse_range(range_header, total)
    if span is None:
        return _Reply(200, headers, data, chunked=not serving.length)
    if span == "unsatisfiable":
        reply = _error(416, "Requested Range Not Satisfiable")
        reply.headers["Content-Range"] = f"bytes */{total}"
        return reply
    first, last = span
    return _Reply(
        206,
        {**headers, "Content-Range": f"bytes {first}-{last}/{total}"},
        data[first : last + 1],
        chunked=not serving.length,
    )


def _zeros() -> Iterator[bytes]:
    """Zeros without end (the server's ``endless_max`` bounds what is sent)."""
    while True:
        yield b"\0" * 65536


def _parse_range(header: str | None, total: int) -> tuple[int, int] | str | None:
    """``bytes=N-``, ``bytes=N-M`` or ``bytes=-K`` → (first, last); "unsatisfiable";
    None to serve the whole file (no header, or one this server ignores, as RFC 9110
    allows: several ranges, bad syntax)."""
    if not header or not header.strip().lower().startswith("bytes=") or "," in header:
        return None
    spec = header.split("=", 1)[1].strip()
    start_s, sep, end_s = spec.partition("-")
    try:
        if not sep:
            return None
        if not start_s:  # suffix: the last K bytes
            k = int(end_s)
            return "unsatisfiable" if k <= 0 or total == 0 else (max(0, total - k), total - 1)
        first = int(start_s)
        last = int(end_s) if end_s else None
    except ValueError:
        return None
    if first < 0 or (last is not None and last < first):
        return None
    if first >= total:
        return "unsatisfiable"
    return first, total - 1 if last is None else min(last, total - 1)


def _truthy(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or [""])[0].lower() in ("1", "true")


def _int(query: dict[str, list[str]], name: str) -> int | None:
    try:
        return int((query.get(name) or [""])[0])
    except ValueError:
        return None


# ---------------------------------------------------------------- server
class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        """Skip ``HTTPServer.server_bind``'s ``socket.getfqdn``: a reverse DNS lookup that
        can take seconds on a machine without DNS."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away is normal (timeouts, dropped downloads): stay quiet.
        Anything else is a bug of the fake: keep it for the test to see, still quietly."""
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, _DISCONNECTS):
            self.hub.server_errors.append(exc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub; the client pools connections
    server_version = "fakehub"
    sys_version = ""
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.hub._lock:
            self.server.hub._conns.add(self.connection)

    def finish(self) -> None:
        with self.server.hub._lock:
            self.server.hub._conns.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:  # stdlib signature
        """No access log on stderr: tests assert on ``FakeHub.requests`` instead."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        hub = self.server.hub
        req = Request(self.command, self.path, Headers(list(self.headers.items())))
        hub._log(req)
        self._drain_body()
        if req.method not in ("GET", "HEAD"):
            reply = _error(405, f"fakehub serves only GET and HEAD, not {req.method}")
        else:
            try:
                reply = hub._answer(req)
            # a bug in the fake: answer it rather than hang the client
            except Exception as exc:  # noqa: BLE001
                hub.server_errors.append(exc)
                reply = _error(
                    500, "fakehub bug: " + traceback.format_exception_only(exc)[-1].strip()
                )
        self._send(reply, head=req.method == "HEAD")

    def _drain_body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def _send(self, reply: _Reply, *, head: bool) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.chunked or reply.stream is not None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if head:
            return
        if reply.chunked or reply.stream is not None:
            self._send_chunked(reply)
            return
        if reply.stall is not None:
            sent, seconds = reply.stall
            self.wfile.write(reply.body[:sent])
            self.wfile.flush()
            self.server.hub._stopping.wait(seconds)
            self.wfile.write(reply.body[sent:])
            return
        if reply.drop_after is None:
            self.wfile.write(reply.body)
            return
        self.wfile.write(reply.body[: reply.drop_after])
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)  # FIN before the promised length
        except OSError:
            pass

    def _send_chunked(self, reply: _Reply) -> None:
        """A chunked body: ``body`` (cut at ``drop_after``, the connection then closed without
        the last chunk), then ``stream`` up to the hub's ``endless_max`` bytes."""
        hub = self.server.hub

        def chunk(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        try:
            body = reply.body if reply.drop_after is None else reply.body[: reply.drop_after]
            for at in range(0, len(body), 65536):
                chunk(body[at : at + 65536])
            if reply.drop_after is not None:
                self.wfile.flush()
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)  # no last chunk: a truncated body
                except OSError:
                    pass
                return
            sent = 0
            for piece in reply.stream or ():
                if sent >= hub.endless_max:
                    break
                chunk(piece)
                sent += len(piece)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except _DISCONNECTS:
            hub.gone.set()
            self.close_connection = True


# ---------------------------------------------------------------- fixture
def _isolate_huggingface_hub(monkeypatch: pytest.MonkeyPatch, url: str, token_dir: str) -> None:
    """huggingface_hub reads its settings once, at import: mirror in its constants what
    the environment now says, so a call that forgets ``endpoint=`` still reaches the fake
    rather than huggingface.co, no saved token leaks in, Xet stays off and offline mode
    does not block loopback."""
    try:
        from huggingface_hub import constants, hf_api
    except ImportError:
        return
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(
        hf_api.api, "endpoint", url
    )  # the module-level HfApi behind list_models() etc.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", f"{token_dir}/token")
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", f"{token_dir}/stored_tokens")


@pytest.fixture
def fake_hub(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeHub]:
    """A started FakeHub, with the environment pointing at it: ``HF_ENDPOINT`` set, no
    token, not offline, Xet disabled (``HF_HUB_DISABLE_XET``, the name huggingface_hub
    2.4.0 reads). Stopped afterwards."""
    hub = FakeHub().start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        for name in (
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
            "HF_OIDC_RESOURCE",
            "HF_TOKEN_PATH",
        ):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        _isolate_huggingface_hub(
            monkeypatch, hub.url, str(tmp_path_factory.mktemp("fakehub-token"))
        )
        yield hub
    finally:
        hub.stop()
