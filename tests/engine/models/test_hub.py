"""Finding and downloading models: the real huggingface_hub client and our downloader
against a real HTTP server standing in for the Hub (tests/fakehub.py)."""

from __future__ import annotations

import errno
import hashlib
import json
import threading

import pytest

from fakehub import TOKEN
from ggufgen import gguf_bytes
from vibechat.engine.errors import DownloadCancelled, DownloadError, HubError, ModelRefError
from vibechat.engine.models import download as download_module
from vibechat.engine.models.download import Downloader, part_paths
from vibechat.engine.models.hub import Hub
from vibechat.engine.models.resolve import all_models, find_model
from vibechat.engine.models.store import model_folder, pull, read_registry, store_models
from vibechat.engine.settings.config import models_dir
from vibechat.engine.settings.refs import HubRef, parse_hub_ref

REPO = "acme/Tiny-Chat-GGUF"
FILES = {
    "Tiny-Chat-Q8_0.gguf": gguf_bytes(file_type=7, payload=4000),
    "Tiny-Chat-Q4_K_M.gguf": gguf_bytes(file_type=15, payload=3000),
    "Tiny-Chat-Q5_K_M.gguf": gguf_bytes(file_type=17, payload=3500),
    "mmproj-Tiny-Chat-F16.gguf": gguf_bytes(architecture="clip", payload=100),
    "Tiny-Chat.imatrix.gguf": gguf_bytes(payload=10),
    "README.md": b"# Tiny Chat\n",
}
SPLIT = {
    f"Q6_K/Tiny-Chat-Q6_K-0000{i}-of-00003.gguf": gguf_bytes(file_type=18, payload=2000 + i)
    for i in (1, 2, 3)
}


def no_sleep(_seconds: float) -> None:
    pass


@pytest.fixture
def hub(fake_hub):
    fake_hub.add_repo(REPO, {**FILES, **SPLIT}, downloads=500)
    fake_hub.add_repo("acme/Other-GGUF", {"Other-Q4_K_M.gguf": gguf_bytes()}, downloads=9000)
    fake_hub.add_repo(
        "acme/not-a-gguf", {"model.safetensors": b"x"}, downloads=99999, tags=["safetensors"]
    )
    fake_hub.add_repo("corp/Gated-GGUF", {"Gated-Q4_K_M.gguf": gguf_bytes()}, gated=True)
    return fake_hub


def test_search_finds_gguf_repos_most_downloaded_first(hub):
    found = Hub().search("gguf")
    assert [m.id for m in found] == ["acme/Other-GGUF", REPO, "corp/Gated-GGUF"]
    assert found[0].downloads == 9000
    assert [m.id for m in Hub().search("tiny")] == [REPO]
    assert Hub().search("nothing-like-this") == []


def test_listing_groups_quantizations_and_skips_non_models(hub):
    listing = Hub().listing(REPO)
    assert listing.revision == hub.repo(REPO).sha
    options = listing.options
    assert [o.label for o in options] == [
        "Q6_K",
        "Q4_K_M",
        "Q5_K_M",
        "Q8_0",
    ]  # no mmproj, imatrix, README
    q6 = options[0]
    assert len(q6.files) == 3 and q6.size == sum(len(b) for b in SPLIT.values())
    assert all(
        f.sha256 == hashlib.sha256(FILES[f.path]).hexdigest() for o in options[1:] for f in o.files
    )
    assert listing.choose(HubRef(REPO)).label == "Q4_K_M"
    assert listing.choose(HubRef(REPO, "q5_k_m")).label == "Q5_K_M"
    with pytest.raises(
        ModelRefError, match="no IQ1_S file: choose one of Q6_K, Q4_K_M, Q5_K_M, Q8_0"
    ):
        listing.choose(HubRef(REPO, "IQ1_S"))


def test_pull_downloads_verifies_and_registers_the_default_quant(hub):
    seen = []
    model = pull(parse_hub_ref(REPO), on_progress=seen.append)
    data = FILES["Tiny-Chat-Q4_K_M.gguf"]
    assert model.name == f"{REPO}:Q4_K_M" and model.quant == "Q4_K_M" and model.source == "vibechat"
    assert model.path == models_dir() / "acme" / "Tiny-Chat-GGUF" / "Tiny-Chat-Q4_K_M.gguf"
    assert model.path.read_bytes() == data
    assert model.sha256 == hashlib.sha256(data).hexdigest() and model.revision == hub.repo(REPO).sha
    assert not part_paths(model.path)[0].exists()
    entry = read_registry()[f"{REPO}/Tiny-Chat-Q4_K_M.gguf"]
    assert entry["repo"] == REPO and entry["added"]
    # Progress: monotonic, complete, with the file and a speed; the projector comes with the model.
    assert seen and seen[-1].done == seen[-1].total == len(data) + len(
        FILES["mmproj-Tiny-Chat-F16.gguf"]
    )
    assert all(a.done <= b.done for a, b in zip(seen, seen[1:], strict=False))
    # Listed, found by its name and by the Hub reference, which no longer needs a download.
    assert [m.name for m in store_models()] == [model.name]
    assert find_model(REPO).path == model.path == find_model(f"{REPO}:q4_k_m").path


def test_a_split_model_downloads_every_shard_beside_the_first(hub):
    model = pull(HubRef(REPO, "Q6_K"))
    assert [p.name for p in model.all_files] == [
        f"Tiny-Chat-Q6_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert model.path.parent.name == "Q6_K" and model.size == sum(len(b) for b in SPLIT.values())
    listed = [m for m in all_models(discover=False) if m.source == "vibechat"]
    assert len(listed) == 1 and listed[0].name == f"{REPO}:Q6_K"


def test_an_exact_file_reference(hub):
    model = pull(parse_hub_ref(f"{REPO}/Tiny-Chat-Q8_0.gguf"))
    assert model.quant == "Q8_0" and model.path.read_bytes() == FILES["Tiny-Chat-Q8_0.gguf"]


def test_an_interrupted_download_resumes_with_a_range_request(hub):
    name = "Tiny-Chat-Q4_K_M.gguf"
    data = FILES[name]
    listing = Hub().listing(REPO)
    option = listing.choose(HubRef(REPO))
    dest = model_folder(REPO)
    hub.drop_after(name, nbytes=5000, times=10)  # this attempt keeps losing the connection
    with pytest.raises(DownloadError, match="kept failing .*run the same command again to resume"):
        Downloader(Hub(), retries=0, sleep=no_sleep).download(REPO, listing.revision, option, dest)
    part, meta = part_paths(dest / name)
    assert (
        part.stat().st_size == 5000
        and json.loads(meta.read_text())["sha256"] == option.first.sha256
    )
    assert store_models() == []  # never listed half-downloaded
    hub.clear_faults()
    hub.requests.clear()
    # A new downloader (as after a restart of vibechat) continues where the last one stopped.
    seen = []
    Downloader(Hub(), on_progress=seen.append).download(REPO, listing.revision, option, dest)
    gets = [r for r in hub.find(name) if r.method == "GET"]
    assert gets[0].headers["Range"] == "bytes=5000-"
    assert (dest / name).read_bytes() == data and not part.exists() and not meta.exists()
    assert seen[-1].resumed_from == 5000


def test_a_dropped_connection_is_retried_on_the_spot(hub):
    hub.drop_after("Tiny-Chat-Q4_K_M.gguf", nbytes=3000, times=2)
    model = pull(HubRef(REPO), hub=Hub(sleep=no_sleep))
    assert model.path.read_bytes() == FILES["Tiny-Chat-Q4_K_M.gguf"]
    ranges = [
        r.headers.get("Range") for r in hub.find("Tiny-Chat-Q4_K_M.gguf") if r.method == "GET"
    ]
    assert ranges == [None, "bytes=3000-", "bytes=6000-"]


def test_a_checksum_mismatch_deletes_the_file_and_says_so(hub):
    hub.serve_wrong_bytes(REPO, "Tiny-Chat-Q4_K_M.gguf")
    with pytest.raises(
        DownloadError, match="failed its checksum .* so it was deleted: download it again"
    ):
        pull(HubRef(REPO))
    folder = model_folder(REPO)
    assert not any(folder.rglob("*.gguf*"))
    assert store_models() == [] and read_registry() == {}


def test_gated_repo_explains_license_and_token(hub, monkeypatch):
    with pytest.raises(
        HubError, match=r"corp/Gated-GGUF is gated: accept its license at .*set HF_TOKEN"
    ):
        pull(HubRef("corp/Gated-GGUF"))
    assert store_models() == []
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert pull(HubRef("corp/Gated-GGUF")).name == "corp/Gated-GGUF:Q4_K_M"


def test_missing_repo_revision_and_file(hub):
    with pytest.raises(
        HubError, match=r"acme/Nope-GGUF was not found on .* \(or it is private: set HF_TOKEN"
    ):
        Hub().listing("acme/Nope-GGUF")
    with pytest.raises(HubError, match="has no revision 'v9'"):
        Hub().listing(REPO, "v9")
    hub.fail_next(
        "resolve",
        status=404,
        headers={"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"},
    )
    with pytest.raises(HubError, match="a file of acme/Tiny-Chat-GGUF was not found"):
        pull(HubRef(REPO), hub=Hub(sleep=no_sleep))


def test_server_errors_are_retried_then_explained(hub):
    hub.fail_next(f"/api/models/{REPO}", status=500, times=1, method="GET")
    assert Hub(sleep=no_sleep).listing(REPO).repo == REPO  # one 500, then fine
    hub.fail_next(f"/api/models/{REPO}", status=503, times=10, method="GET")
    with pytest.raises(HubError, match="failed with HTTP 503 .* several times: try again later"):
        Hub(sleep=no_sleep).listing(REPO)
    hub.clear_faults()
    hub.fail_next("Tiny-Chat-Q4_K_M.gguf", status=502, times=2, method="GET")
    assert pull(HubRef(REPO), hub=Hub(sleep=no_sleep)).quant == "Q4_K_M"  # file 502s retried too


def test_a_server_that_does_not_answer_times_out(hub, monkeypatch):
    monkeypatch.setattr(download_module, "READ_TIMEOUT", 0.3)
    hub.delay("Tiny-Chat-Q4_K_M.gguf", seconds=1.5, times=10, method="GET")
    with pytest.raises(DownloadError, match="kept failing"):
        Downloader(Hub(), retries=1, sleep=no_sleep).download(
            REPO,
            Hub().listing(REPO).revision,
            Hub().listing(REPO).choose(HubRef(REPO)),
            model_folder(REPO),
        )


def test_unsafe_paths_in_a_listing_are_never_offered(fake_hub):
    fake_hub.add_repo(
        "evil/Trap-GGUF",
        {
            "../escape-Q4_K_M.gguf": gguf_bytes(),
            "a/../../b-Q5_K_M.gguf": gguf_bytes(),
            "ok-Q8_0.gguf": gguf_bytes(),
        },
    )
    listing = Hub().listing("evil/Trap-GGUF")
    assert "../escape-Q4_K_M.gguf" in [f.path for f in listing.files]  # the Hub listed it...
    assert [o.label for o in listing.options] == ["Q8_0"]  # ...vibechat never offers it
    with pytest.raises(ModelRefError, match="no Q4_K_M file: choose one of Q8_0"):
        listing.choose(HubRef("evil/Trap-GGUF", "Q4_K_M"))
    with pytest.raises(ModelRefError, match="outside the repo"):
        parse_hub_ref("evil/Trap-GGUF/../../escape-Q4_K_M.gguf")


def test_not_enough_disk_space_is_refused_before_starting(hub, monkeypatch):
    class Usage:
        free = 1000

    monkeypatch.setattr(download_module.shutil, "disk_usage", lambda _path: Usage)
    with pytest.raises(DownloadError, match="not enough disk space for acme/Tiny-Chat-GGUF Q4_K_M"):
        pull(HubRef(REPO))
    assert not hub.find("resolve")


BIG = "acme/Big-GGUF"  # 8 MB: arrives in many reads, so a download can be stopped midway


@pytest.fixture
def big(fake_hub):
    data = gguf_bytes(payload=2_000_000)
    fake_hub.add_repo(BIG, {"Big-Q4_K_M.gguf": data})
    return data


def test_a_full_disk_mid_download_is_a_clean_error(big, monkeypatch):
    real_add = download_module._Part.add

    def add(self, chunk):
        if self.offset + len(chunk) > 1_000_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_add(self, chunk)

    monkeypatch.setattr(download_module._Part, "add", add)
    with pytest.raises(
        DownloadError, match="the disk filled up .* run the same command again to resume"
    ):
        pull(HubRef(BIG))
    assert store_models() == [] and read_registry() == {}


def test_cancel_stops_and_keeps_the_part(big):
    cancel = threading.Event()

    def progress(p):  # the first report comes with the first bytes
        cancel.set()

    with pytest.raises(DownloadCancelled, match="run the same command again to resume"):
        pull(HubRef(BIG), cancel=cancel, on_progress=progress)
    part = part_paths(model_folder(BIG) / "Big-Q4_K_M.gguf")[0]
    assert 0 < part.stat().st_size < len(big) and store_models() == []
    assert pull(HubRef(BIG)).path.read_bytes() == big


def test_offline_mode_is_honoured(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set"):
        Hub().search("tiny")
    assert not hub.requests


def test_a_gated_repo_answering_403_is_explained_too(hub):
    hub.fail_next(
        "resolve",
        status=403,
        headers={
            "X-Error-Code": "GatedRepo",
            "X-Error-Message": "Access to this model is restricted",
        },
    )
    with pytest.raises(
        HubError, match=r"acme/Tiny-Chat-GGUF is gated: accept its license at .*set HF_TOKEN"
    ):
        pull(HubRef(REPO), hub=Hub(sleep=no_sleep))
    assert store_models() == []


def test_the_token_saved_by_hf_auth_login_under_hf_home_is_used(hub, user_dirs, monkeypatch):
    hf_home = user_dirs["cache"] / "hf-home"
    hf_home.mkdir()
    (hf_home / "token").write_text(TOKEN + "\n")
    monkeypatch.setenv("HF_HOME", str(hf_home))
    assert Hub().token == TOKEN
    assert pull(HubRef("corp/Gated-GGUF")).name == "corp/Gated-GGUF:Q4_K_M"


# ------------------------------------------- what a Hub (or a mirror) sends is untrusted
def test_a_listing_without_sizes_downloads_to_the_end_and_checks_the_sha256(hub):
    """A mirror whose listing has no sizes: the loop never ran, and `.part -> .gguf` raised
    FileNotFoundError (a traceback)."""
    hub.hide_sizes(REPO)
    listing = Hub().listing(REPO)
    option = listing.choose(HubRef(REPO))
    assert option.first.size == 0 and option.first.sha256  # unknown size, known sha256
    seen = []
    model = pull(HubRef(REPO), on_progress=seen.append)
    assert model.path.read_bytes() == FILES["Tiny-Chat-Q4_K_M.gguf"]
    last = [p for p in seen if p.file == "Tiny-Chat-Q4_K_M.gguf"][-1]
    assert last.done == last.total == len(FILES["Tiny-Chat-Q4_K_M.gguf"])  # the size, learnt
    assert not part_paths(model.path)[0].exists()


def test_no_size_no_sha_and_no_length_reads_to_the_end_resumes_and_checks_it_is_a_gguf(hub):
    name = "Tiny-Chat-Q4_K_M.gguf"
    hub.hide_sizes(REPO, sha256=False)
    hub.serve_file(REPO, name, length=False)  # chunked, no Content-Length
    hub.drop_after(name, nbytes=3000)  # and the first answer breaks off
    model = pull(HubRef(REPO), hub=Hub(sleep=no_sleep))
    assert model.path.read_bytes() == FILES[name]
    ranges = [r.headers.get("Range") for r in hub.find(name) if r.method == "GET"]
    assert ranges == [None, "bytes=3000-"]


def test_no_size_no_sha_and_a_cut_file_is_refused_and_deleted(hub):
    name = "Tiny-Chat-Q4_K_M.gguf"
    hub.hide_sizes(REPO, sha256=False)
    hub.serve_file(
        REPO, name, length=False, truncate=len(FILES[name]) - 500
    )  # a clean end, too early
    with pytest.raises(
        DownloadError,
        match=r"Tiny-Chat-Q4_K_M.gguf arrived but is not a whole GGUF file "
        r"\(it is truncated.*so it was deleted",
    ):
        pull(HubRef(REPO))
    assert not any(model_folder(REPO).rglob("*.gguf*")) and store_models() == []


def test_no_size_and_an_endless_file_stops_at_the_free_disk_space(hub, monkeypatch):
    name = "Tiny-Chat-Q4_K_M.gguf"
    hub.hide_sizes(REPO, sha256=False)
    hub.serve_file(REPO, name, endless=True)

    class Usage:
        free = download_module.SPARE_BYTES + 1_000_000  # a megabyte to spare

    monkeypatch.setattr(download_module.shutil, "disk_usage", lambda _path: Usage)
    with pytest.raises(
        DownloadError, match="kept coming past 1.0 MB, more than the free disk space"
    ):
        pull(HubRef(REPO))
    assert hub.gone.wait(10)  # it hung up rather than read on
    assert not any(model_folder(REPO).rglob("*.gguf*"))


def test_more_bytes_than_the_listing_says_are_not_read(hub):
    name = "Tiny-Chat-Q4_K_M.gguf"
    hub.serve_file(REPO, name, extra=b"\0" * 5_000_000)
    with pytest.raises(
        DownloadError, match=r"arrived with more than the [\d,]+ bytes announced, so it was deleted"
    ):
        pull(HubRef(REPO))
    assert not any(model_folder(REPO).rglob("*.gguf*"))


def test_control_characters_in_a_hub_file_name_never_reach_a_path(fake_hub):
    """QA: `model-[reverse]REV\\x1b]0;T\\x07.gguf` was saved as is, escape sequence and all."""
    evil = "model-[reverse]REV\x1b]0;T\x07.gguf"
    fake_hub.add_repo("evil/Names-GGUF", {evil: gguf_bytes()})
    with pytest.raises(ModelRefError) as err:
        pull(HubRef("evil/Names-GGUF"))
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message and "\x07" not in message
    assert (
        "evil/Names-GGUF has no GGUF model files" in message
        and "'model-[reverse]REV\\x1b]0;T\\x07.gguf'" in message
    )
    assert not fake_hub.find("resolve")
    # Beside a safe file, the unsafe one is never offered nor written.
    fake_hub.add_repo(
        "evil/Mixed-GGUF",
        {
            evil: gguf_bytes(),
            "ok-Q4_K_M.gguf": gguf_bytes(),
            "x" * 300 + "-Q8_0.gguf": gguf_bytes(),
        },
    )
    assert [o.label for o in Hub().listing("evil/Mixed-GGUF").options] == ["Q4_K_M"]
    assert pull(HubRef("evil/Mixed-GGUF")).path.name == "ok-Q4_K_M.gguf"
    written = [p.name for p in models_dir().rglob("*")]
    assert all(name.isprintable() and len(name) < 255 for name in written), written


def test_a_file_name_longer_than_a_disk_allows_is_a_clean_error(fake_hub):
    fake_hub.add_repo("evil/Long-GGUF", {"x" * 300 + "-Q4_K_M.gguf": gguf_bytes()})
    with pytest.raises(
        ModelRefError, match="has no GGUF model files.*; left out as unsafe to save: 'xxxx"
    ):
        pull(HubRef("evil/Long-GGUF"))


def test_search_results_are_checked_and_bounded(hub):
    results = [
        {
            "id": "acme/Good-GGUF",
            "downloads": 5,
            "likes": 2,
            "lastModified": "2024-05-01",
            "gated": False,
        },
        {"id": "evil/\x1b]0;title\x07-GGUF", "downloads": 1},
        {"id": "a/b/c"},
        {"id": 42},
        "not an object",
        {"no": "id"},
        {
            "id": "acme/Odd-Numbers",
            "downloads": "many",
            "likes": -3,
            "lastModified": {"x": 1},
            "gated": "manual",
        },
        {"id": "acme/Huge", "downloads": 10**40, "likes": 1.5},
    ]
    hub.answer_next("/api/models", json.dumps(results).encode())
    found = Hub().search("x")
    assert [m.id for m in found] == ["acme/Good-GGUF", "acme/Odd-Numbers", "acme/Huge"]
    assert (found[0].downloads, found[0].likes, found[0].updated) == (5, 2, "2024-05-01")
    assert (found[1].downloads, found[1].likes, found[1].updated, found[1].gated) == (
        0,
        0,
        None,
        True,
    )
    assert (found[2].downloads, found[2].likes) == (0, 0)
    hub.answer_next("/api/models", json.dumps([{"id": f"a/m{i}"} for i in range(50)]).encode())
    assert len(Hub().search("x", limit=5)) == 5  # no more than asked for


def test_an_endless_or_nested_answer_is_one_clear_error(hub):
    hub.answer_next("/api/models", b"[", endless=b'{"id": "acme/Spam-GGUF"}, ')
    with pytest.raises(
        HubError, match="answered search for 'x' with more than 32 MB: check HF_ENDPOINT"
    ):
        Hub().search("x")
    assert hub.gone.wait(10)
    hub.answer_next("/api/models", b"[" * 100_000)
    with pytest.raises(HubError, match="something other than JSON"):
        Hub().search("x")
    hub.answer_next(f"/api/models/{REPO}", b'{"siblings": ' + b"[" * 100_000)
    with pytest.raises(HubError, match="something other than JSON"):
        Hub().listing(REPO)


def test_an_endless_error_answer_is_read_only_in_part(hub):
    hub.gone.clear()
    hub.answer_next("/api/models", b"", status=500, times=3, endless=b"Internal error. ")
    with pytest.raises(HubError, match="failed with HTTP 500 .* several times"):
        Hub(sleep=no_sleep).search("x")
    assert hub.gone.wait(10)


def test_a_listing_with_nonsense_fields_keeps_what_makes_sense(hub):
    good = hashlib.sha256(b"x").hexdigest()
    info = {
        "sha": "not-a-commit\x1b[2J",
        "gated": "auto",
        "siblings": [
            {"rfilename": "a-Q4_K_M.gguf", "size": -5, "lfs": {"sha256": "zz", "size": "big"}},
            {"rfilename": "b-Q8_0.gguf", "size": True, "lfs": {"sha256": good.upper(), "size": 7}},
            {"rfilename": 12, "size": 3},
            "junk",
            {"size": 4},
        ],
    }
    hub.answer_next(f"/api/models/{REPO}", json.dumps(info).encode())
    listing = Hub().listing(REPO)
    assert listing.revision == "main" and listing.gated
    assert [(f.path, f.size, f.sha256) for f in listing.files] == [
        ("a-Q4_K_M.gguf", 0, None),
        ("b-Q8_0.gguf", 7, good),
    ]
    with pytest.raises(ModelRefError, match="not a Hub repo id"):
        Hub().listing("evil/\x1b[2J")


def test_a_server_whose_copy_is_shorter_than_listed_ends_in_a_size_error(hub):
    """The answer ends early, the resume gets 416 (nothing past the server's end): one clear
    error, not a loop."""
    name = "Tiny-Chat-Q4_K_M.gguf"
    hub.serve_file(REPO, name, truncate=len(FILES[name]) - 500)
    with pytest.raises(
        DownloadError, match=r"arrived with [\d,]+ bytes instead of [\d,]+, so it was deleted"
    ):
        pull(HubRef(REPO), hub=Hub(sleep=no_sleep))
    assert [r.headers.get("Range") for r in hub.find(name) if r.method == "GET"][
        -1
    ] == f"bytes={len(FILES[name]) - 500}-"


# ---------------------------------------------------- a vision model's projector (issue 29.1)
def test_a_vision_model_is_pulled_with_its_projector_which_auto_then_finds(hub):
    """The repo holds an mmproj GGUF: it is downloaded beside the model, verified, recorded with
    it, listed as the model's projector (never as a model), and what --mmproj auto resolves to."""
    from vibechat.engine.models.projector import find_projector
    from vibechat.engine.models.store import recorded_projector, remove

    listing = Hub().listing(REPO)
    assert listing.projector_for(listing.choose(HubRef(REPO))).path == "mmproj-Tiny-Chat-F16.gguf"
    model = pull(HubRef(REPO, "Q8_0"))
    projector = model_folder(REPO) / "mmproj-Tiny-Chat-F16.gguf"
    assert (
        model.projector == projector
        and projector.read_bytes() == FILES["mmproj-Tiny-Chat-F16.gguf"]
    )
    entry = read_registry()[f"{REPO}/Tiny-Chat-Q8_0.gguf"]
    assert entry["mmproj"] == f"{REPO}/mmproj-Tiny-Chat-F16.gguf"
    assert entry["mmproj_sha256"] == hashlib.sha256(FILES["mmproj-Tiny-Chat-F16.gguf"]).hexdigest()
    assert (
        recorded_projector(model.path)
        == projector
        == find_projector(model.path, recorded_projector(model.path))
    )
    assert [m.name for m in store_models()] == [f"{REPO}:Q8_0"]  # the projector is no model
    # A split model in a subfolder finds the repo's projector through the registry.
    split = pull(HubRef(REPO, "Q6_K"))
    assert (
        split.projector == projector
        and find_projector(split.path, recorded_projector(split.path)) == projector
    )
    remove(split)
    assert projector.exists()  # the Q8_0 uses it still
    remove(find_model(f"{REPO}:Q8_0"))
    assert not projector.exists() and not model_folder(REPO).exists()


def test_a_text_model_has_no_projector(hub):
    model = pull(HubRef("acme/Other-GGUF"))
    assert (
        model.projector is None
        and "mmproj" not in read_registry()["acme/Other-GGUF/Other-Q4_K_M.gguf"]
    )
    assert [p.name for p in model_folder("acme/Other-GGUF").iterdir()] == ["Other-Q4_K_M.gguf"]


def test_a_projector_that_fails_its_sha256_is_not_kept(hub):
    hub.serve_wrong_bytes(REPO, "mmproj-Tiny-Chat-F16.gguf")
    with pytest.raises(DownloadError):
        pull(HubRef(REPO, "Q8_0"))
    assert not (model_folder(REPO) / "mmproj-Tiny-Chat-F16.gguf").exists()
    # The model's own file, verified before, stays: the next pull fetches only the projector.
    assert (model_folder(REPO) / "Tiny-Chat-Q8_0.gguf").read_bytes() == FILES["Tiny-Chat-Q8_0.gguf"]
