"""The ``mmproj`` setting (issue 29.1): the flag, variable and config key say which projector a
vision model sees images through, and app/backends.py resolves it before any model loads:
a file given is checked (one line when it is missing or no projector), "auto" finds the one
beside the model or pulled with it, "off" never uses one. Real files, real GGUF headers, the
real command line (``vibechat run``, ``config show``) and the fake Hub for ``models pull``."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from ggufgen import gguf_bytes, write_gguf
from vibechat.app.backends import make_backend
from vibechat.app.progress import human_size
from vibechat.engine.errors import ModelFileError
from vibechat.engine.models.resolve import file_model
from vibechat.engine.settings.config import config_path
from vibechat.engine.settings.knobs import EngineSettings

pytestmark = pytest.mark.usefixtures("no_setting_variables")  # conftest.py

REPO = "acme/Tiny-Vision-GGUF"
VISION = {
    "Tiny-Vision-Q4_K_M.gguf": gguf_bytes(file_type=15, payload=2000),
    "Tiny-Vision-Q8_0.gguf": gguf_bytes(file_type=7, payload=3000),
    "mmproj-Tiny-Vision-Q8_0.gguf": gguf_bytes(architecture="clip", file_type=7, payload=300),
    "mmproj-Tiny-Vision-F16.gguf": gguf_bytes(architecture="clip", file_type=1, payload=500),
}


def vibechat(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def options(**settings: object):
    """The options the chat's engine process would load with (nothing starts: ``load()`` is never
    called)."""
    backend = make_backend(EngineSettings(**settings), worker=True)  # type: ignore[arg-type]
    return backend.options  # type: ignore[attr-defined]


@pytest.fixture
def vision_model(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    for name, data in VISION.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder / "Tiny-Vision-Q4_K_M.gguf"


def test_auto_is_the_projector_beside_the_model_and_off_is_none(vision_model, tmp_path):
    assert EngineSettings().mmproj == "auto"
    assert (
        options(model=str(vision_model)).mmproj_path
        == vision_model.parent / "mmproj-Tiny-Vision-F16.gguf"
    )
    assert options(model=str(vision_model), mmproj="OFF").mmproj_path is None
    assert options(model=str(vision_model), mmproj="none").mmproj_path is None
    text_only = write_gguf(tmp_path / "alone" / "Text-Q4_K_M.gguf")
    assert options(model=str(text_only)).mmproj_path is None  # nothing found: text only, silently
    chosen = vision_model.parent / "mmproj-Tiny-Vision-Q8_0.gguf"
    assert options(model=str(vision_model), mmproj=f" {chosen} ").mmproj_path == chosen


def test_a_bad_projector_file_or_a_projector_as_the_model_is_one_line(vision_model, tmp_path):
    with pytest.raises(ModelFileError, match="does not exist.*--mmproj") as caught:
        options(model=str(vision_model), mmproj=str(tmp_path / "nope.gguf"))
    assert "\n" not in str(caught.value)
    with pytest.raises(
        ModelFileError, match="is not a vision projector \\(its GGUF is a llama model"
    ):
        options(model=str(vision_model), mmproj=str(vision_model.parent / "Tiny-Vision-Q8_0.gguf"))
    readme = tmp_path / "README.md"
    readme.write_text("# hello\n")
    with pytest.raises(ModelFileError, match="the projector is unusable: .* not a GGUF"):
        options(model=str(vision_model), mmproj=str(readme))
    with pytest.raises(
        ModelFileError, match="is a vision projector \\(mmproj\\), not a chat model"
    ):
        options(model=str(vision_model.parent / "mmproj-Tiny-Vision-F16.gguf"))
    with pytest.raises(
        ModelFileError, match="is a vision projector \\(mmproj\\), not a chat model"
    ):
        file_model(
            vision_model.parent / "mmproj-Tiny-Vision-F16.gguf"
        )  # /load PATH, a path in the downloader


def test_the_flag_the_variable_and_the_config_key(vision_model, tmp_path):
    missing = tmp_path / "missing-mmproj.gguf"
    for args, env in ((["--mmproj", str(missing)], {}), ([], {"VIBECHAT_MMPROJ": str(missing)})):
        out = vibechat("run", "--model", str(vision_model), "--no-save", *args, "hello", env=env)
        assert out.returncode == 1, out.stderr
        [line] = out.stderr.strip().splitlines()
        assert "does not exist" in line and str(missing) in line and "--mmproj off" in line
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text('mmproj = "off"\n')
    shown = json.loads(vibechat("config", "show", "--json").stdout)["settings"]["mmproj"]
    assert shown["value"] == "off" and shown["source"] == "file"
    shown = json.loads(vibechat("--mmproj", "AUTO", "config", "show", "--json").stdout)["settings"][
        "mmproj"
    ]
    assert shown == {"value": "auto", "source": "flag", "flag": "--mmproj"}
    for command in (["run"], []):  # the flag of both commands, from the settings table
        assert re.search(
            r"--mmproj +FILE +The vision model's projector",
            vibechat(*command, "--help", env={"COLUMNS": "200"}).stdout,
        )


def test_models_pull_fetches_the_projector_and_shows_it_and_the_list_offers_no_projector(fake_hub):
    fake_hub.add_repo(REPO, VISION)
    files = vibechat("models", "files", REPO)
    assert (
        "its projector mmproj-Tiny-Vision-F16.gguf "
        f"({human_size(len(VISION['mmproj-Tiny-Vision-F16.gguf']))})"
        in files.stderr
        and "mmproj" not in files.stdout
    )  # no row of its own
    assert json.loads(vibechat("models", "files", REPO, "--json").stdout)["projector"] == {
        "file": "mmproj-Tiny-Vision-F16.gguf",
        "size": len(VISION["mmproj-Tiny-Vision-F16.gguf"]),
    }
    out = vibechat("models", "pull", f"{REPO}:Q8_0")
    assert out.returncode == 0, out.stderr
    size = len(VISION["Tiny-Vision-Q8_0.gguf"])
    projector_size = len(VISION["mmproj-Tiny-Vision-F16.gguf"])
    assert f"+ projector mmproj-Tiny-Vision-F16.gguf ({human_size(projector_size)})" in out.stderr
    first, second = out.stdout.splitlines()
    assert first.startswith(f"{REPO}:Q8_0") and second.split()[:2] == [
        "projector",
        "mmproj-Tiny-Vision-F16.gguf",
    ]
    listed = json.loads(vibechat("models", "list", "--json").stdout)
    mine = [m for m in listed if m["source"] == "vibechat"]
    assert [m["name"] for m in mine] == [f"{REPO}:Q8_0"] and mine[0]["size"] == size
    assert mine[0]["projector"].endswith("/mmproj-Tiny-Vision-F16.gguf")
    assert not any("mmproj" in m["name"] or "mmproj" in m["path"] for m in listed)
    info = json.loads(vibechat("models", "info", f"{REPO}:Q8_0", "--json").stdout)
    assert info["projector"] == mine[0]["projector"]
    # The Hub reference resolves to the model, whose projector auto finds (the one pulled with it).
    assert options(model=f"{REPO}:Q8_0").mmproj_path == Path(mine[0]["projector"])


@pytest.mark.model
def test_the_starter_sees_an_image_through_the_projector_auto_finds_beside_it(
    starter_path, starter_projector, tmp_path
):
    """The whole path: ``vibechat run --image`` on a model whose projector lies beside it (no
    --mmproj given) loads the projector and replies; ``--mmproj off`` makes the same model text
    only, and the image is then refused in one line. (The projector's weights are random: the
    reply's words are not judged.)"""
    from projector import write_test_image

    folder = tmp_path / "vision"
    folder.mkdir()
    model = folder / "gemma-3-270m-Q4_K_M.gguf"
    model.symlink_to(starter_path)
    (folder / "mmproj-gemma-3-270m-F16.gguf").symlink_to(starter_projector)
    image = write_test_image(tmp_path / "leaf.png")
    args = [
        "run",
        "--model",
        str(model),
        "--image",
        str(image),
        "--no-save",
        "-n",
        "4",
        "--temperature",
        "0",
        "--ctx",
        "1024",
        "--repack",
        "off",
        "--json",
        "-p",
        "What is this?",
    ]
    out = vibechat(*args)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["attachments"][0]["name"] == "leaf.png"
    assert json.loads(out.stdout)["engine"]["projector"] == "mmproj-gemma-3-270m-F16.gguf"
    refused = vibechat(*args, "--mmproj", "off")
    assert refused.returncode == 1
    errors = [line for line in refused.stderr.splitlines() if line.startswith("vibechat: error: ")]
    assert len(errors) == 1 and "takes no images" in errors[0] and "--mmproj" in errors[0]
