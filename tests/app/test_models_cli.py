"""`vibechat models ...` end to end: real subprocesses, the fake Hub on 127.0.0.1, real
files in the (temporary) models dir, and other tools' folders built in tmp_path."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import VIBECHAT_BIN, default_sigint
from ggufgen import gguf_bytes, write_gguf
from helpers import vibechat
from vibechat.app.progress import CliProgress
from vibechat.engine.models.download import Progress
from vibechat.engine.settings.config import models_dir

REPO = "acme/Tiny-Chat-GGUF"
FILES = {
    "Tiny-Chat-Q4_K_M.gguf": gguf_bytes(
        file_type=15, payload=3000, chat_template="{{ messages }}", context_length=4096
    ),
    "Tiny-Chat-Q8_0.gguf": gguf_bytes(file_type=7, payload=6000),
    **{
        f"Tiny-Chat-Q6_K-0000{i}-of-00002.gguf": gguf_bytes(file_type=18, payload=1000)
        for i in (1, 2)
    },
}


@pytest.fixture
def hub(fake_hub):
    fake_hub.add_repo(REPO, FILES, downloads=1200)
    fake_hub.add_repo("acme/Other-GGUF", {"Other-Q4_K_M.gguf": gguf_bytes()}, downloads=50)
    return fake_hub


def listed() -> list[dict]:
    out = vibechat("models", "list", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_search_table_and_json(hub):
    out = vibechat("models", "search", "gguf")
    assert out.returncode == 0, out.stderr
    assert out.stdout.index(REPO) < out.stdout.index("acme/Other-GGUF") and "1,200" in out.stdout
    found = json.loads(vibechat("models", "search", "tiny", "--json").stdout)
    assert [m["id"] for m in found] == [REPO]


def test_files_groups_quants_with_sizes_fit_and_default(hub):
    out = vibechat("models", "files", REPO, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {r["quant"]: r for r in data["models"]}
    assert set(rows) == {"Q4_K_M", "Q8_0", "Q6_K"}
    assert len(rows["Q6_K"]["files"]) == 2 and rows["Q4_K_M"]["default"]
    assert rows["Q8_0"]["size"] == len(FILES["Tiny-Chat-Q8_0.gguf"]) and rows["Q8_0"]["fits"] in (
        "yes",
        "yes (GPU)",
    )
    table = vibechat("models", "files", REPO).stdout
    assert "Q4_K_M *" in table


def test_pull_list_info_rm(hub):
    out = vibechat("models", "pull", f"{REPO}:q4_k_m")
    assert out.returncode == 0, out.stderr
    assert "Downloading acme/Tiny-Chat-GGUF Q4_K_M" in out.stderr
    assert "100.0%" in out.stderr  # plain progress lines: stderr is not a terminal
    assert out.stdout.startswith(f"{REPO}:Q4_K_M")

    [model] = [m for m in listed() if m["source"] == "vibechat"]
    for key in ("name", "path", "size", "quant", "sha256", "source"):
        assert model[key], key
    assert model["name"] == f"{REPO}:Q4_K_M" and model["size"] == len(
        FILES["Tiny-Chat-Q4_K_M.gguf"]
    )
    assert any(m["source"] == "starter" for m in listed())

    info = json.loads(vibechat("models", "info", f"{REPO}:Q4_K_M", "--json").stdout)
    assert (info["architecture"], info["context_length"], info["quant"], info["chat_template"]) == (
        "llama",
        4096,
        "Q4_K_M",
        True,
    )
    assert info["size"] == model["size"]

    refused = vibechat("models", "rm", f"{REPO}:Q4_K_M")  # no terminal to ask on, no --yes
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    kept = vibechat("models", "rm", f"{REPO}:Q4_K_M", input="n\n")
    assert os.path.exists(model["path"]), kept.stderr
    gone = vibechat("models", "rm", f"{REPO}:Q4_K_M", "--yes")
    assert gone.returncode == 0 and "Deleted" in gone.stdout
    assert not os.path.exists(model["path"])
    assert not [m for m in listed() if m["source"] == "vibechat"]


def test_ollama_style_pull_ls_show_rm(hub):
    """`vibechat pull`, `ls` (`list`), `show` and `rm`, as ollama users type them: the models
    commands of those names."""
    out = vibechat("pull", f"{REPO}:q4_k_m")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{REPO}:Q4_K_M")
    name = f"{REPO}:Q4_K_M"
    for shortcut in ("ls", "list"):
        shown = vibechat(shortcut, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout) == listed()
    assert name in vibechat("ls").stdout
    info = vibechat("show", name, "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout) == json.loads(vibechat("models", "show", name, "--json").stdout)
    assert json.loads(info.stdout)["quant"] == "Q4_K_M"
    gone = vibechat("rm", name, "--yes")
    assert gone.returncode == 0 and "Deleted" in gone.stdout
    assert not [m for m in listed() if m["source"] == "vibechat"]


def test_an_interrupted_pull_resumes_in_the_next_process(hub):
    hub.drop_after("Tiny-Chat-Q8_0.gguf", nbytes=9000, times=20)
    first = vibechat("models", "pull", f"{REPO}:Q8_0")
    assert first.returncode == 1
    assert "kept failing" in first.stderr and "run the same command again to resume" in first.stderr
    assert "Traceback" not in first.stderr and not listed()[1:]
    hub.clear_faults()
    hub.requests.clear()
    second = vibechat("models", "pull", f"{REPO}:Q8_0")
    assert second.returncode == 0, second.stderr
    gets = [r for r in hub.find("Tiny-Chat-Q8_0.gguf") if r.method == "GET"]
    assert gets[0].headers["Range"].startswith("bytes=") and gets[0].headers["Range"] != "bytes=0-"
    assert [m["name"] for m in listed() if m["source"] == "vibechat"] == [f"{REPO}:Q8_0"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "crash"])
def test_ctrl_c_or_a_crash_mid_download_resumes_in_the_next_process(hub, sig):
    name = "Tiny-Chat-Q8_0.gguf"
    hub.stall_after(name, nbytes=10_000, seconds=60)
    part = models_dir() / "acme" / "Tiny-Chat-GGUF" / (name + ".part")
    proc = subprocess.Popen(
        [str(VIBECHAT_BIN), "models", "pull", f"{REPO}:Q8_0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    for _ in range(600):  # until the first 10,000 bytes are on disk
        if part.exists() and part.stat().st_size >= 10_000:
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Traceback" not in err
        assert "download stopped; run the same command again to resume" in err
    else:
        assert proc.returncode == -signal.SIGKILL
    assert part.stat().st_size == 10_000
    assert [m["source"] for m in listed()] == ["starter"]  # nothing half-downloaded is listed

    hub.clear_faults()
    hub.requests.clear()
    again = vibechat("models", "pull", f"{REPO}:Q8_0")
    assert again.returncode == 0, again.stderr
    assert [r.headers["Range"] for r in hub.find(name, method="GET")] == ["bytes=10000-"]
    [model] = [m for m in listed() if m["source"] == "vibechat"]
    assert open(model["path"], "rb").read() == FILES[name]


def test_progress_is_a_rich_bar_on_a_terminal_and_plain_lines_elsewhere():
    steps = [
        Progress(done, 3_000_000, 1_500_000.0, "m.gguf", 1, 1) for done in (0, 1_000_000, 3_000_000)
    ]
    bar = io.StringIO()
    with CliProgress("Downloading acme/M Q4_K_M", stream=bar, fancy=True) as progress:
        for step in steps:
            progress.update(step)
    assert "Downloading acme/M Q4_K_M" in bar.getvalue() and "3.0/3.0 MB" in bar.getvalue()
    plain = io.StringIO()
    with CliProgress("Downloading acme/M Q4_K_M", stream=plain, fancy=False) as progress:
        for step in steps:
            progress.update(step)
    lines = plain.getvalue().splitlines()
    assert lines[0] == "Downloading acme/M Q4_K_M"
    assert lines[-1].split() == [
        "100.0%",
        "3.0",
        "MB",
        "/",
        "3.0",
        "MB",
        "1.5",
        "MB/s",
        "ETA",
        "0:00",
    ]


def test_a_split_model_is_one_entry(hub):
    assert vibechat("models", "pull", f"{REPO}:Q6_K").returncode == 0
    [model] = [m for m in listed() if m["source"] == "vibechat"]
    assert len(model["files"]) == 2 and model["path"].endswith("00001-of-00002.gguf")


def test_hub_errors_are_one_line(hub):
    out = vibechat("models", "pull", "acme/Missing-GGUF")
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("vibechat: error: acme/Missing-GGUF was not found")
    out = vibechat("models", "pull", f"{REPO}:IQ1_S")
    assert "has no IQ1_S file: choose one of" in out.stderr and out.returncode == 1
    out = vibechat("models", "pull", f"{REPO}/../../x.gguf")
    assert "outside the repo" in out.stderr and out.returncode == 1
    out = vibechat("models", "info", "nothing-called-this")
    assert "no local model named" in out.stderr and out.returncode == 1


def test_models_of_other_tools_are_listed_read_only(user_dirs, monkeypatch, tmp_path):
    home = user_dirs["home"]
    write_gguf(
        home / ".lmstudio" / "models" / "lmstudio-community" / "Foo-GGUF" / "Foo-Q5_K_M.gguf",
        file_type=17,
    )
    ollama = tmp_path / "ollama"
    blob = write_gguf(ollama / "blobs" / ("sha256-" + "a" * 64), file_type=15)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "foo" / "1b"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "layers": [
                    {
                        "mediaType": "application/vnd.ollama.image.model",
                        "digest": "sha256:" + "a" * 64,
                    }
                ]
            }
        )
    )
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    names = {m["name"]: m for m in listed()}
    assert names["lmstudio:lmstudio-community/Foo-GGUF:Q5_K_M"]["source"] == "lmstudio"
    assert (
        names["ollama:foo:1b"]["path"] == str(blob) and names["ollama:foo:1b"]["quant"] == "Q4_K_M"
    )
    out = vibechat("models", "rm", "ollama:foo:1b", "--yes")
    assert out.returncode == 1 and "belongs to Ollama" in out.stderr and blob.exists()
    assert "remove it with 'ollama rm foo:1b'" in out.stderr


@pytest.mark.parametrize(
    "path", ["/nonexistent/x.gguf", "./missing.gguf", "missing.gguf", "~/nowhere/m.bin"]
)
def test_info_on_a_missing_path_says_the_file_does_not_exist(path):
    out = vibechat("models", "info", path)
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "does not exist" in out.stderr and "no local model named" not in out.stderr


def test_the_starter_model_cannot_be_removed_and_says_why(user_dirs):
    out = vibechat("models", "rm", "starter", "--yes")
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "bundled with vibechat" in out.stderr and "cannot be removed" in out.stderr
    assert "that tool" not in out.stderr


def test_info_describes_the_starter_model_without_unpacking_it(user_dirs, starter_path):
    from vibechat.engine.models.gguf import inspect_gguf

    out = vibechat("models", "info", "starter", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    real = inspect_gguf(
        starter_path
    )  # the unpacked file (in the session's own cache) says the same
    assert (
        info["architecture"],
        info["context_length"],
        info["layers"],
        info["quant"],
        info["size"],
    ) == (
        real.architecture,
        real.context_length,
        real.block_count,
        real.quantization,
        real.file_size,
    )
    assert info["chat_template"] is False and info["source"] == "starter"
    assert not (
        user_dirs["cache"] / "vibechat" / "starter"
    ).exists()  # nothing unpacked in this test's cache
    text = vibechat("models", "info", "starter").stdout
    assert "unpacked there when first used" in text and "gemma3" in text


@pytest.mark.model
def test_run_downloads_a_hub_model_it_does_not_have_then_answers_with_it(fake_hub, starter_path):
    fake_hub.add_repo(
        "google/gemma-3-270m-GGUF", {"gemma-3-270m-Q4_K_M.gguf": starter_path.read_bytes()}
    )
    out = vibechat(
        "run",
        "--model",
        "google/gemma-3-270m-GGUF",
        "-p",
        "Hello",
        "-n",
        "4",
        "--json",
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "Downloading google/gemma-3-270m-GGUF Q4_K_M" in out.stderr
    result = json.loads(out.stdout)
    [model] = [m for m in listed() if m["source"] == "vibechat"]
    assert model["name"] == "google/gemma-3-270m-GGUF:Q4_K_M"
    assert result["model_path"] == model["path"] and result["stats"]["completion_tokens"] > 0
    assert (
        model["sha256"]
        == fake_hub.repo("google/gemma-3-270m-GGUF").files["gemma-3-270m-Q4_K_M.gguf"].sha256
    )
    again = vibechat("run", "--model", "google/gemma-3-270m-GGUF:Q4_K_M", "-p", "Hi", "-n", "2")
    assert again.returncode == 0 and "Downloading" not in again.stderr  # the local copy is used
