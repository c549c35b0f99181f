"""Self-tests of the fake Hub: the real huggingface_hub client (2.4.0) must parse every
answer, raise the right error class for each failure, and see each injected fault."""

from __future__ import annotations

import hashlib
import types
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import (
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub import errors as hf
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils import get_session, hf_raise_for_status

import fakehub
from fakehub import FakeHub
from ggufgen import gguf_bytes

Q4 = gguf_bytes(name="tiny", file_type=15, payload=256)
Q8 = gguf_bytes(name="tiny", file_type=7, payload=512)
REPO = "acme/Tiny-GGUF"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:
    """The fake with one public repo: a root file and a file in a folder."""
    fake_hub.add_repo(REPO, {"tiny-Q4_K_M.gguf": Q4, "Q8_0/tiny-Q8_0.gguf": Q8}, downloads=10)
    return fake_hub


def api(hub: FakeHub, token: str | bool = False) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def download(
    hub: FakeHub, tmp_path: Path, filename: str = "tiny-Q4_K_M.gguf", repo: str = REPO, **kwargs
) -> bytes:
    path = hf_hub_download(
        repo, filename, endpoint=hub.url, cache_dir=tmp_path / "hf", token=False, **kwargs
    )
    return Path(path).read_bytes()


def url(hub: FakeHub, filename: str = "tiny-Q4_K_M.gguf") -> str:
    return hf_hub_url(REPO, filename, endpoint=hub.url)


# ------------------------------------------------------------------ search
def test_search_sorted_filtered_and_limited(hub: FakeHub) -> None:
    hub.add_repo("acme/Big-GGUF", {"big.gguf": Q4}, downloads=500)
    hub.add_repo("other/mid-gguf", {"mid.gguf": Q4}, downloads=50)
    hub.add_repo("acme/Tiny-safetensors", {"x.bin": b"x"}, downloads=9999, tags=["safetensors"])
    hub.add_repo("acme/Secret-GGUF", {"s.gguf": Q4}, downloads=99999, private=True)

    found = api(hub).list_models(filter="gguf", sort="downloads", limit=10)
    assert [m.id for m in found] == ["acme/Big-GGUF", "other/mid-gguf", REPO]
    assert [m.id for m in api(hub).list_models(search="TINY", filter="gguf", sort="downloads")] == [
        REPO
    ]
    assert [m.id for m in api(hub).list_models(filter="gguf", sort="downloads", limit=2)] == [
        "acme/Big-GGUF",
        "other/mid-gguf",
    ]
    top = next(iter(api(hub, fakehub.TOKEN).list_models(filter="gguf", sort="downloads", limit=1)))
    assert (top.id, top.private, top.downloads, top.gated) == (
        "acme/Secret-GGUF",
        True,
        99999,
        False,
    )
    assert top.last_modified is not None and top.tags == ["gguf"]
    assert hub.find("/api/models?")[0].query == {
        "filter": ["gguf"],
        "sort": ["downloads"],
        "limit": ["10"],
    }


def test_search_follows_link_pagination(hub: FakeHub) -> None:
    for i in range(4):
        hub.add_repo(f"acme/m{i}-GGUF", {"m.gguf": Q4}, downloads=i)
    hub.page_size = 2
    assert len(list(api(hub).list_models(filter="gguf"))) == 5
    assert len(hub.find("/api/models")) == 3
    assert len(list(api(hub).list_repo_tree(REPO, recursive=True))) == 3  # two pages of tree too


# ------------------------------------------------------------ repo metadata
def test_model_info_with_files_metadata(hub: FakeHub) -> None:
    info = api(hub).model_info(REPO, files_metadata=True)
    assert info.sha == hub.repo(REPO).sha and len(info.sha) == 40
    assert info.gated is False and info.private is False and info.downloads == 10
    files = {s.rfilename: s for s in info.siblings or []}
    assert files["Q8_0/tiny-Q8_0.gguf"].size == len(Q8)
    assert files["Q8_0/tiny-Q8_0.gguf"].lfs is not None
    assert files["Q8_0/tiny-Q8_0.gguf"].lfs.sha256 == sha256(Q8)
    assert files["tiny-Q4_K_M.gguf"].lfs.size == len(Q4)
    assert hub.find("/api/models/acme/Tiny-GGUF")[0].query == {"blobs": ["true"]}
    plain = api(hub).model_info(REPO, revision=info.sha)
    assert plain.sha == info.sha and all(s.size is None for s in plain.siblings or [])


def test_list_repo_tree_recursive_and_by_folder(hub: FakeHub) -> None:
    entries = list(api(hub).list_repo_tree(REPO, recursive=True))
    files = {e.path: e for e in entries if isinstance(e, RepoFile)}
    assert [e.path for e in entries if isinstance(e, RepoFolder)] == ["Q8_0"]
    assert files["Q8_0/tiny-Q8_0.gguf"].size == len(Q8)
    assert files["Q8_0/tiny-Q8_0.gguf"].lfs.sha256 == sha256(Q8)
    assert [e.path for e in api(hub).list_repo_tree(REPO)] == ["Q8_0", "tiny-Q4_K_M.gguf"]
    assert [e.path for e in api(hub).list_repo_tree(REPO, path_in_repo="Q8_0")] == [
        "Q8_0/tiny-Q8_0.gguf"
    ]


# ---------------------------------------------------------------- downloads
def test_hf_hub_download_returns_exact_bytes(hub: FakeHub, tmp_path: Path) -> None:
    assert download(hub, tmp_path) == Q4
    assert download(hub, tmp_path, "Q8_0/tiny-Q8_0.gguf") == Q8
    gets = hub.find("/resolve/main/Q8_0/tiny-Q8_0.gguf")
    assert [r.method for r in gets] == ["HEAD", "GET"]
    hub.add_repo("acme/Odd-GGUF", {"a dir/ünï #1.gguf": Q8})
    assert (
        download(hub, tmp_path, "a dir/ünï #1.gguf", repo="acme/Odd-GGUF") == Q8
    )  # URL-decoded paths
    with pytest.raises(hf.RemoteEntryNotFoundError):
        list(api(hub).list_repo_tree("acme/Odd-GGUF", path_in_repo="ü dir"))
    meta = get_hf_file_metadata(url(hub), token=False)
    assert (meta.etag, meta.size, meta.commit_hash) == (sha256(Q4), len(Q4), hub.repo(REPO).sha)
    assert meta.xet_file_data is None  # plain HTTP


def test_snapshot_download_by_pattern(hub: FakeHub, tmp_path: Path) -> None:
    folder = snapshot_download(
        REPO, allow_patterns="Q8_0/*", endpoint=hub.url, cache_dir=tmp_path, token=False
    )
    assert (Path(folder) / "Q8_0/tiny-Q8_0.gguf").read_bytes() == Q8
    assert not (Path(folder) / "tiny-Q4_K_M.gguf").exists()


def test_range_requests(hub: FakeHub) -> None:
    session = get_session()
    r = session.get(url(hub), headers={"Range": "bytes=100-"})
    assert r.status_code == 206 and r.content == Q4[100:]
    assert r.headers["Content-Range"] == f"bytes 100-{len(Q4) - 1}/{len(Q4)}"
    r = session.get(url(hub), headers={"Range": "bytes=10-19"})
    assert (r.status_code, r.content, r.headers["Content-Length"]) == (206, Q4[10:20], "10")
    r = session.get(url(hub), headers={"Range": f"bytes={len(Q4)}-"})
    assert r.status_code == 416 and r.headers["Content-Range"] == f"bytes */{len(Q4)}"
    with pytest.raises(hf.HfHubHTTPError):
        hf_raise_for_status(r)
    assert hub.requests[0].headers["range"] == "bytes=100-"  # case-insensitive lookup


# ------------------------------------------------------------------ errors
def test_gated_repo_needs_the_token(hub: FakeHub, tmp_path: Path) -> None:
    hub.add_repo("acme/Gated-GGUF", {"g.gguf": Q4}, gated=True)
    assert api(hub).model_info("acme/Gated-GGUF").gated == "auto"  # metadata stays public
    assert len(list(api(hub).list_repo_tree("acme/Gated-GGUF"))) == 1
    with pytest.raises(hf.GatedRepoError) as err:
        download(hub, tmp_path, "g.gguf", repo="acme/Gated-GGUF")
    assert err.value.response.status_code == 401
    path = hf_hub_download(
        "acme/Gated-GGUF", "g.gguf", endpoint=hub.url, cache_dir=tmp_path, token=fakehub.TOKEN
    )
    assert Path(path).read_bytes() == Q4
    assert hub.requests[-1].headers["Authorization"] == f"Bearer {fakehub.TOKEN}"


def test_private_repo_is_not_found_without_the_token(hub: FakeHub, tmp_path: Path) -> None:
    hub.add_repo("acme/Private-GGUF", {"p.gguf": Q4}, private=True)
    with pytest.raises(hf.RepositoryNotFoundError) as err:
        api(hub).model_info("acme/Private-GGUF")
    assert err.type is hf.RepositoryNotFoundError and err.value.response.status_code == 401
    with pytest.raises(hf.RepositoryNotFoundError):
        download(hub, tmp_path, "p.gguf", repo="acme/Private-GGUF")
    assert api(hub, fakehub.TOKEN).model_info("acme/Private-GGUF").private is True


def test_missing_repo_file_and_revision(hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(hf.RepositoryNotFoundError) as err:
        api(hub).model_info("acme/Nope")
    assert err.type is hf.RepositoryNotFoundError and err.value.response.status_code == 404
    with pytest.raises(hf.RepositoryNotFoundError):
        download(hub, tmp_path, "x.gguf", repo="acme/Nope")
    with pytest.raises(hf.RemoteEntryNotFoundError) as missing:
        download(hub, tmp_path, "nope.gguf")
    assert (
        isinstance(missing.value, hf.EntryNotFoundError)
        and missing.value.response.status_code == 404
    )
    with pytest.raises(hf.RevisionNotFoundError):
        download(hub, tmp_path, revision="v9")
    with pytest.raises(hf.RevisionNotFoundError):
        api(hub).model_info(REPO, revision="v9")
    with pytest.raises(hf.RevisionNotFoundError):
        list(api(hub).list_repo_tree(REPO, revision="v9"))


def test_wrong_token_is_refused_like_the_hub(hub: FakeHub) -> None:
    with pytest.raises(hf.HfHubHTTPError) as err:
        api(hub, "hf_expired").model_info(REPO)
    assert not isinstance(err.value, hf.RepositoryNotFoundError)
    assert (
        err.value.response.status_code == 401
        and err.value.server_message == fakehub.INVALID_CREDENTIALS
    )


# ------------------------------------------------------------------ faults
def test_fail_next_fails_once(hub: FakeHub, tmp_path: Path) -> None:
    hub.fail_next("/resolve/", status=503)
    assert get_session().get(url(hub)).status_code == 503
    assert get_session().get(url(hub)).status_code == 200
    hub.fail_next("/api/models/acme/Tiny-GGUF")
    with pytest.raises(hf.HfHubHTTPError) as err:
        api(hub).model_info(REPO)
    assert err.value.response.status_code == 500
    assert api(hub).model_info(REPO).sha == hub.repo(REPO).sha
    hub.fail_next("/resolve/", method="HEAD")  # hf_hub_download retries a failed HEAD at once
    assert download(hub, tmp_path) == Q4


def test_drop_after_truncates_the_body(hub: FakeHub) -> None:
    hub.drop_after("tiny-Q4_K_M.gguf", 100)
    received = bytearray()
    with pytest.raises(httpx2.RemoteProtocolError):
        with get_session().stream("GET", url(hub)) as r:
            assert r.headers["Content-Length"] == str(len(Q4))
            for chunk in r.iter_bytes():
                received += chunk
    assert bytes(received) == Q4[:100]
    hub.drop_after("tiny-Q4_K_M.gguf", 10)
    with pytest.raises(httpx2.RemoteProtocolError):
        get_session().get(url(hub), headers={"Range": "bytes=100-"})
    assert get_session().get(url(hub)).content == Q4


def test_hf_hub_download_resumes_with_range(hub: FakeHub, tmp_path: Path, monkeypatch) -> None:
    """http_get reads in DOWNLOAD_CHUNK_SIZE (10 MiB) chunks and loses a partial chunk when
    the connection drops, so it resumes with a Range only past 10 MiB: shrink the chunk."""
    from huggingface_hub import constants, file_download

    monkeypatch.setattr(file_download, "time", types.SimpleNamespace(sleep=lambda s: None))
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64)
    hub.drop_after("tiny-Q4_K_M.gguf", 128)
    assert download(hub, tmp_path) == Q4
    gets = hub.find("tiny-Q4_K_M.gguf", method="GET")
    assert len(gets) == 2 and gets[1].headers["Range"] == "bytes=128-"


def test_serve_wrong_bytes_keeps_the_listed_hash(hub: FakeHub, tmp_path: Path) -> None:
    hub.serve_wrong_bytes(REPO, "tiny-Q4_K_M.gguf")
    listed = {e.path: e for e in api(hub).list_repo_tree(REPO, recursive=True)}["tiny-Q4_K_M.gguf"]
    served = download(hub, tmp_path)  # hf_hub_download checks the size only
    assert len(served) == len(Q4) and served != Q4
    assert listed.lfs.sha256 == sha256(Q4) != sha256(served)
    assert get_session().head(url(hub)).headers["ETag"] == f'"{sha256(Q4)}"'


def test_delay_makes_a_short_timeout_fire(hub: FakeHub, capfd) -> None:
    hub.delay("/resolve/", 0.5)
    with pytest.raises(httpx2.ReadTimeout):
        get_session().get(url(hub), timeout=0.1)
    assert get_session().get(url(hub), timeout=5).content == Q4
    hub.stop()  # ends the pending delay; its write to the closed socket must stay quiet
    assert capfd.readouterr().err == "" and hub.server_errors == []


def test_standalone_start_stop() -> None:
    with FakeHub() as hub:
        hub.add_repo("a/b", {"f.gguf": Q4})
        assert get_session().get(f"{hub.url}/a/b/resolve/main/f.gguf").content == Q4
    with pytest.raises(RuntimeError):
        _ = hub.url
