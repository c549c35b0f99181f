"""Finding GGUF models other tools put on the machine: the Hugging Face cache, Ollama,
LM Studio. Every layout is built in tmp_path from tiny real GGUF files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ggufgen import gguf_bytes, write_gguf, write_split_gguf
from vibechat.engine.models import discover
from vibechat.engine.models.discover import (
    discover_models,
    hf_cache_models,
    hf_hub_cache_dir,
    lmstudio_models,
    ollama_models,
)

REPO = "bartowski/Llama-3.2-1B-Instruct-GGUF"
COMMIT = "a" * 40
OLD_COMMIT = "b" * 40


@pytest.fixture(autouse=True)
def no_system_ollama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real /usr/share/ollama must not leak into these tests."""
    monkeypatch.setattr(discover, "OLLAMA_SYSTEM_MODELS", tmp_path / "no-system-ollama")
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "OLLAMA_MODELS"):
        monkeypatch.delenv(name, raising=False)


# --- layout builders ---------------------------------------------------------------------


def hf_snapshot(
    cache: Path, repo: str, commit: str, files: dict[str, bytes | None], main: bool = True
) -> Path:
    """What huggingface_hub writes: blobs named by the LFS sha256 (git sha1 for small
    files), relative symlinks from snapshots/{commit}/... into ../../blobs/, refs/main.
    A None content makes a dangling link (the blob is missing)."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    blobs = repo_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot = repo_dir / "snapshots" / commit
    for rel, data in files.items():
        if rel.endswith(".gguf"):
            etag = hashlib.sha256(data if data is not None else rel.encode()).hexdigest()
        else:
            etag = hashlib.sha1(data or b"").hexdigest()
        blob = blobs / etag
        if data is not None:
            blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    if main:
        (repo_dir / "refs").mkdir(exist_ok=True)
        (repo_dir / "refs" / "main").write_text(commit)
    return snapshot


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ollama_manifest(
    root: Path,
    host: str,
    namespace: str,
    model: str,
    tag: str,
    digest: str,
    media_type: str = "application/vnd.ollama.image.model",
) -> Path:
    path = root / "manifests" / host / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": media_type, "digest": f"sha256:{digest}", "size": 1},
        {
            "mediaType": "application/vnd.ollama.image.template",
            "digest": "sha256:" + "0" * 64,
            "size": 1,
        },
    ]
    path.write_text(json.dumps({"schemaVersion": 2, "config": {}, "layers": layers}))
    return path


def ollama_blob(root: Path, data: bytes) -> tuple[Path, str]:
    digest = sha(data)
    blob = root / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    return blob, digest


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


# --- Hugging Face cache ------------------------------------------------------------------


def test_hf_cache_lists_quants_of_main_snapshot(tmp_path: Path):
    cache = tmp_path / "hub"
    q4, q8 = gguf_bytes(file_type=15, payload=64), gguf_bytes(file_type=7, payload=128)
    split_dir = tmp_path / "split"
    shards = [
        p.read_bytes()
        for p in write_split_gguf(split_dir, "Llama-3.2-1B-Instruct-Q6_K", 2, file_type=18)
    ]
    hf_snapshot(
        cache,
        REPO,
        OLD_COMMIT,
        {"Llama-3.2-1B-Instruct-F16.gguf": gguf_bytes(file_type=1)},
        main=False,
    )
    snapshot = hf_snapshot(
        cache,
        REPO,
        COMMIT,
        {
            "README.md": b"# readme",
            "Llama-3.2-1B-Instruct-Q4_K_M.gguf": q4,
            "Llama-3.2-1B-Instruct-Q8_0.gguf": q8,
            "mmproj-Llama-3.2-1B-Instruct-f16.gguf": gguf_bytes(file_type=1),
            "Llama-3.2-1B-Instruct.imatrix.gguf": gguf_bytes(),
            "Q6_K/Llama-3.2-1B-Instruct-Q6_K-00001-of-00002.gguf": shards[0],
            "Q6_K/Llama-3.2-1B-Instruct-Q6_K-00002-of-00002.gguf": shards[1],
        },
    )
    before = tree_state(tmp_path)

    models = hf_cache_models(cache)

    assert [m.name for m in models] == [f"{REPO}:Q4_K_M", f"{REPO}:Q6_K", f"{REPO}:Q8_0"]
    q4_model, q6_model, q8_model = models
    assert q4_model.path == snapshot / "Llama-3.2-1B-Instruct-Q4_K_M.gguf"
    assert q4_model.path.is_symlink()  # the snapshot entry, not the blob
    assert q4_model.size == len(q4) and q4_model.quant == "Q4_K_M"
    assert q4_model.sha256 == sha(q4)
    assert q4_model.files == (q4_model.path,)
    assert (q4_model.repo, q4_model.revision, q4_model.source) == (REPO, COMMIT, "hf-cache")
    assert all(m.read_only for m in models)
    assert q8_model.size == len(q8) and q8_model.sha256 == sha(q8) and q8_model.quant == "Q8_0"
    # The split model: listed once, loaded from shard 1, every shard side by side.
    assert q6_model.files == (
        snapshot / "Q6_K/Llama-3.2-1B-Instruct-Q6_K-00001-of-00002.gguf",
        snapshot / "Q6_K/Llama-3.2-1B-Instruct-Q6_K-00002-of-00002.gguf",
    )
    assert q6_model.path == q6_model.files[0]
    assert q6_model.size == sum(len(s) for s in shards) and q6_model.quant == "Q6_K"
    assert q6_model.sha256 == sha(shards[0])
    # The projector beside a model is its own (mmproj auto): none in the split model's folder.
    assert (
        q4_model.projector
        == q8_model.projector
        == snapshot / "mmproj-Llama-3.2-1B-Instruct-f16.gguf"
    )
    assert q6_model.projector is None
    assert tree_state(tmp_path) == before  # nothing written


def test_hf_fixture_matches_huggingface_hub_layout(tmp_path: Path):
    from huggingface_hub import try_to_load_from_cache

    cache = tmp_path / "hub"
    hf_snapshot(cache, REPO, COMMIT, {"sub/Model-Q4_K_M.gguf": gguf_bytes()})
    found = try_to_load_from_cache(REPO, "sub/Model-Q4_K_M.gguf", cache_dir=cache)
    [model] = hf_cache_models(cache)
    assert model.path == Path(found)
    assert model.name == f"{REPO}:Q4_K_M"


def test_hf_cache_skips_dangling_incomplete_and_other_repo_types(tmp_path: Path):
    cache = tmp_path / "hub"
    snapshot = hf_snapshot(
        cache,
        REPO,
        COMMIT,
        {
            "Model-Q4_K_M.gguf": gguf_bytes(),
            "Model-Q8_0.gguf": None,  # blob missing: dangling symlink
            "Big-Q6_K-00001-of-00002.gguf": gguf_bytes(),
            "Big-Q6_K-00002-of-00002.gguf": None,  # a split model missing a shard
        },
    )
    blobs = snapshot.parent.parent / "blobs"
    (blobs / f"{'c' * 64}.incomplete").write_bytes(gguf_bytes())
    os.symlink(f"../../blobs/{'c' * 64}.incomplete", snapshot / "Model-Q5_K_M.gguf")
    hf_snapshot(cache, "someone/data", COMMIT, {"x-Q4_K_M.gguf": gguf_bytes()})
    (cache / "models--someone--data").rename(cache / "datasets--someone--data")
    (cache / "models--empty--repo").mkdir()  # no snapshots at all
    (cache / "models--not--a-dir").write_text("odd")
    (cache / ".locks").mkdir()

    assert [m.name for m in hf_cache_models(cache)] == [f"{REPO}:Q4_K_M"]


def test_hf_cache_shared_xet_store_keeps_the_etag_as_sha256(tmp_path: Path):
    """huggingface_hub 2.x may turn a repo's blobs/<etag> into a link to the cache-wide
    store blobs/<2 hex>/<xet hash>: the sha256 is still the etag, the size the store file's."""
    cache = tmp_path / "hub"
    data = gguf_bytes()
    snapshot = hf_snapshot(cache, REPO, COMMIT, {"m-Q4_K_M.gguf": data})
    repo_blob = snapshot.parent.parent / "blobs" / sha(data)
    xet = "e" * 64
    store = cache / "blobs" / xet[:2] / xet
    store.parent.mkdir(parents=True)
    repo_blob.rename(store)
    os.symlink(os.path.relpath(store, repo_blob.parent), repo_blob)
    [model] = hf_cache_models(cache)
    assert (model.sha256, model.size, model.path) == (
        sha(data),
        len(data),
        snapshot / "m-Q4_K_M.gguf",
    )


def test_hf_cache_quant_from_header_when_name_has_none(tmp_path: Path):
    cache = tmp_path / "hub"
    hf_snapshot(
        cache,
        "someone/tiny",
        COMMIT,
        {
            "tiny.gguf": gguf_bytes(file_type=7),
            "mystery.gguf": gguf_bytes(file_type=None),
        },
    )
    models = {m.name: m for m in hf_cache_models(cache)}
    assert models["someone/tiny:tiny"].quant == "Q8_0"
    assert models["someone/tiny:mystery"].quant == "?"


def test_hf_cache_uses_newest_snapshot_without_usable_refs_main(tmp_path: Path):
    cache = tmp_path / "hub"
    old = hf_snapshot(
        cache, "a/one", OLD_COMMIT, {"m-Q8_0.gguf": gguf_bytes(file_type=7)}, main=False
    )
    new = hf_snapshot(cache, "a/one", COMMIT, {"m-Q4_K_M.gguf": gguf_bytes()}, main=False)
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    hf_snapshot(cache, "b/two", OLD_COMMIT, {"m-Q4_K_M.gguf": gguf_bytes()})
    (cache / "models--b--two" / "refs" / "main").write_text("f" * 40)  # no such snapshot

    models = hf_cache_models(cache)
    assert [(m.name, m.revision) for m in models] == [
        ("a/one:Q4_K_M", COMMIT),
        ("b/two:Q4_K_M", OLD_COMMIT),
    ]


# --- Ollama --------------------------------------------------------------------------------


def test_ollama_models_names_quants_and_skips(tmp_path: Path):
    root = tmp_path / "ollama"
    q4_blob, q4 = ollama_blob(root, gguf_bytes(file_type=15))
    q8_blob, q8 = ollama_blob(root, gguf_bytes(file_type=7, payload=96))
    _, text = ollama_blob(root, b"{not a model}")
    ollama_manifest(root, "registry.ollama.ai", "library", "llama3.2", "latest", q4)
    ollama_manifest(root, "registry.ollama.ai", "library", "llama3.2", "1b", q4)
    ollama_manifest(root, "registry.ollama.ai", "someone", "tiny", "q8", q8)
    ollama_manifest(root, "hf.co", "bartowski", "Llama-3.2-1B-Instruct-GGUF", "Q8_0", q8)
    ollama_manifest(root, "registry.ollama.ai", "library", "notgguf", "latest", text)
    ollama_manifest(root, "registry.ollama.ai", "library", "gone", "latest", "d" * 64)
    ollama_manifest(
        root,
        "registry.ollama.ai",
        "library",
        "projector",
        "latest",
        q4,
        media_type="application/vnd.ollama.image.projector",
    )
    bad = root / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{oops")
    before = tree_state(tmp_path)

    models = ollama_models(root)

    assert [m.name for m in models] == [
        "ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0",
        "ollama:llama3.2:1b",
        "ollama:llama3.2:latest",
        "ollama:someone/tiny:q8",
    ]
    by_name = {m.name: m for m in models}
    latest = by_name["ollama:llama3.2:latest"]
    assert latest.path == q4_blob and latest.sha256 == q4 and latest.quant == "Q4_K_M"
    assert latest.size == q4_blob.stat().st_size and latest.source == "ollama" and latest.read_only
    assert by_name["ollama:llama3.2:1b"].path == q4_blob  # two tags, one blob: two entries
    tiny = by_name["ollama:someone/tiny:q8"]
    assert (tiny.path, tiny.sha256, tiny.quant, tiny.size) == (
        q8_blob,
        q8,
        "Q8_0",
        q8_blob.stat().st_size,
    )
    assert by_name["ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"].repo == (
        "bartowski/Llama-3.2-1B-Instruct-GGUF"
    )
    assert tree_state(tmp_path) == before


def test_ollama_other_host_full_name(tmp_path: Path):
    root = tmp_path / "ollama"
    _, digest = ollama_blob(root, gguf_bytes(file_type=None))
    ollama_manifest(root, "my.registry:5000", "team", "model", "v1", digest)
    [model] = ollama_models(root)
    assert model.name == "ollama:my.registry:5000/team/model:v1"
    assert model.quant == "?"


# --- LM Studio -----------------------------------------------------------------------------


def test_lmstudio_models(tmp_path: Path):
    root = tmp_path / "lms"
    repo_dir = root / "lmstudio-community" / "Qwen3-0.6B-GGUF"
    q4 = write_gguf(repo_dir / "Qwen3-0.6B-Q4_K_M.gguf")
    q8 = write_gguf(repo_dir / "Qwen3-0.6B-Q8_0.gguf", file_type=7, payload=100)
    write_gguf(repo_dir / "mmproj-Qwen3-0.6B-F16.gguf", file_type=1)
    write_gguf(repo_dir / "imatrix.gguf")
    shards = write_split_gguf(repo_dir / "big", "Qwen3-0.6B-BF16", 3, file_type=32)
    plain = write_gguf(root / "me" / "custom" / "nested" / "finetune.gguf", file_type=7)
    write_gguf(root / "loose-Q4_K_M.gguf")  # not in publisher/repo: not LM Studio's layout
    (root / "me" / "notes.txt").write_text("hi")
    before = tree_state(tmp_path)

    models = lmstudio_models(root)

    assert [m.name for m in models] == [
        "lmstudio:lmstudio-community/Qwen3-0.6B-GGUF:BF16",
        "lmstudio:lmstudio-community/Qwen3-0.6B-GGUF:Q4_K_M",
        "lmstudio:lmstudio-community/Qwen3-0.6B-GGUF:Q8_0",
        "lmstudio:me/custom:finetune",
    ]
    bf16, m_q4, m_q8, custom = models
    assert (m_q4.path, m_q4.size, m_q4.quant, m_q4.files) == (
        q4,
        q4.stat().st_size,
        "Q4_K_M",
        (q4,),
    )
    assert (m_q8.path, m_q8.size, m_q8.quant) == (q8, q8.stat().st_size, "Q8_0")
    assert bf16.files == tuple(shards) and bf16.path == shards[0]
    assert bf16.size == sum(s.stat().st_size for s in shards) and bf16.quant == "BF16"
    assert (custom.path, custom.quant, custom.repo) == (plain, "Q8_0", "me/custom")
    for m in models:
        assert m.source == "lmstudio" and m.sha256 is None and m.read_only and m.revision is None
    assert m_q4.repo == "lmstudio-community/Qwen3-0.6B-GGUF"
    assert (
        m_q4.projector == m_q8.projector == repo_dir / "mmproj-Qwen3-0.6B-F16.gguf"
        and bf16.projector is None
    )
    assert tree_state(tmp_path) == before


def test_lmstudio_symlink_loop_and_dangling_link(tmp_path: Path):
    root = tmp_path / "lms"
    repo_dir = root / "pub" / "repo"
    model = write_gguf(repo_dir / "m-Q4_K_M.gguf")
    os.symlink("..", repo_dir / "loop")  # repo/loop -> pub: a cycle through the repo folder
    os.symlink(repo_dir, repo_dir / "self")
    os.symlink(tmp_path / "nowhere-Q8_0.gguf", repo_dir / "gone-Q8_0.gguf")
    linked = write_gguf(tmp_path / "elsewhere" / "x-Q5_K_M.gguf")
    os.symlink(linked.parent, repo_dir / "linked")  # a symlinked folder is followed

    models = lmstudio_models(root)
    assert [(m.name, m.path) for m in models] == [
        ("lmstudio:pub/repo:Q4_K_M", model),
        ("lmstudio:pub/repo:Q5_K_M", repo_dir / "linked" / "x-Q5_K_M.gguf"),
    ]


def test_permission_errors_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Unreadable folders: listing one raises PermissionError (simulated, since the tests
    run as root, where chmod 0 does not stop anything)."""
    root = tmp_path / "lms"
    write_gguf(root / "pub" / "ok" / "m-Q4_K_M.gguf")
    locked = root / "pub" / "locked"
    write_gguf(locked / "m-Q4_K_M.gguf")
    hub = tmp_path / "hub"
    hf_snapshot(hub, "a/locked", COMMIT, {"m-Q4_K_M.gguf": gguf_bytes()})
    ollama = tmp_path / "ollama"
    _, digest = ollama_blob(ollama, gguf_bytes())
    ollama_manifest(ollama, "registry.ollama.ai", "library", "m", "latest", digest)
    real_scandir = os.scandir

    def scandir(path):
        if Path(path) in (
            locked,
            hub / "models--a--locked" / "snapshots" / COMMIT,
            ollama / "manifests",
        ):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert [m.name for m in lmstudio_models(root)] == ["lmstudio:pub/ok:Q4_K_M"]
    assert hf_cache_models(hub) == []
    assert ollama_models(ollama) == []


# --- all sources, roots from the environment -------------------------------------------------


def test_missing_or_odd_roots_give_nothing(tmp_path: Path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for finder in (hf_cache_models, ollama_models, lmstudio_models):
        assert finder(tmp_path / "missing") == []
        assert finder(afile) == []


def test_empty_machine_gives_nothing():
    assert discover_models() == []


def test_hf_cache_dir_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_dirs: dict[str, Path]
):
    monkeypatch.delenv("HF_HOME")
    assert hf_hub_cache_dir() == user_dirs["cache"] / "huggingface" / "hub"  # XDG_CACHE_HOME
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert hf_hub_cache_dir() == user_dirs["home"] / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert hf_hub_cache_dir() == tmp_path / "hfhome" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert hf_hub_cache_dir() == tmp_path / "legacy"
    monkeypatch.setenv("HF_HUB_CACHE", "~/hub")
    assert hf_hub_cache_dir() == user_dirs["home"] / "hub"


def test_discover_models_finds_all_three_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_dirs: dict[str, Path]
):
    home = user_dirs["home"]
    # HF cache under $HF_HOME/hub (the autouse fixture sets HF_HOME).
    hf_snapshot(
        Path(os.environ["HF_HOME"]) / "hub",
        REPO,
        COMMIT,
        {"Llama-3.2-1B-Instruct-Q4_K_M.gguf": gguf_bytes()},
    )
    ollama_root = tmp_path / "ollama-models"
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama_root))
    _, digest = ollama_blob(ollama_root, gguf_bytes())
    ollama_manifest(ollama_root, "registry.ollama.ai", "library", "llama3.2", "latest", digest)
    write_gguf(home / ".lmstudio" / "models" / "pub" / "new" / "n-Q8_0.gguf", file_type=7)
    write_gguf(
        home / ".cache" / "lm-studio" / "models" / "pub" / "old" / "o-Q4_0.gguf", file_type=2
    )

    models = discover_models()
    assert [(m.source, m.name) for m in models] == [
        ("hf-cache", f"{REPO}:Q4_K_M"),
        ("ollama", "ollama:llama3.2:latest"),
        ("lmstudio", "lmstudio:pub/new:Q8_0"),
        ("lmstudio", "lmstudio:pub/old:Q4_0"),
    ]

    # HF_HUB_CACHE wins over HF_HOME, read at call time; the system Ollama folder is added.
    other = tmp_path / "other-hub"
    hf_snapshot(other, "x/y", COMMIT, {"y-Q5_K_M.gguf": gguf_bytes()})
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    system = tmp_path / "usr-share-ollama"
    _, digest2 = ollama_blob(system, gguf_bytes(file_type=7))
    ollama_manifest(system, "registry.ollama.ai", "library", "qwen3", "0.6b", digest2)
    monkeypatch.setattr(discover, "OLLAMA_SYSTEM_MODELS", system)
    names = [m.name for m in discover_models()]
    assert names[:3] == ["x/y:Q5_K_M", "ollama:llama3.2:latest", "ollama:qwen3:0.6b"]
    assert f"{REPO}:Q4_K_M" not in names
