"""Opening a local .gguf by its path (issue 24, point 4): F3's "Open a file" line with path
completion, its one-line refusals (missing file, folder, FIFO, not a GGUF), the file
remembered once loaded (in the picker next time and in ``vibechat models list``, pruned
when it is gone), and the downloader offering to open a path rather than searching the Hub."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN
from fakes import INFO, RecordingBackend, open_picker, settle
from ggufgen import gguf_bytes, write_gguf
from helpers import wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.downloader import DownloadScreen
from vibechat.app.tui.screens.model_picker import ModelPicker
from vibechat.app.tui.widgets.path_complete import complete_path
from vibechat.engine.models import opened
from vibechat.engine.models.resolve import all_models

SIZE = (110, 36)


async def type_path(pilot, picker: ModelPicker, text: str) -> None:
    field = picker.query_one("#picker-path")
    if not field.has_focus:
        await pilot.press("o")  # the path line
    assert field.has_focus
    field.value = text
    await pilot.press("enter")
    await picker.workers.wait_for_complete()
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def picker_status(picker: ModelPicker) -> str:
    return str(picker.query_one("#picker-status").render())


def app_with_factory(made: list):
    def factory(path):
        made.append(path)
        return RecordingBackend(info=replace(INFO, name=Path(path).stem, path=str(path)))

    return create_app(RecordingBackend(), backend_factory=factory, blink=False, save=False)


async def test_the_picker_opens_a_gguf_by_path_and_remembers_it(tmp_path):
    model = write_gguf(tmp_path / "models" / "my-model-Q8_0.gguf", file_type=7)
    made: list = []
    app = app_with_factory(made)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        picker = await open_picker(pilot)
        assert "file:my-model-Q8_0" not in [m.name for m in picker.models]
        await type_path(pilot, picker, str(model))
        assert made == [model]  # checked, then loaded
        assert app.status.model.path == str(model) and not isinstance(app.screen, ModelPicker)
        assert was_notified(app, "Loaded file:my-model-Q8_0")

        picker = await open_picker(pilot)  # remembered: listed, and shown as the loaded one
        row = [m.name for m in picker.models].index("file:my-model-Q8_0")
        cells = [str(c) for c in picker.query_one("DataTable").get_row_at(row)]
        assert cells[:2] == ["●", "file:my-model-Q8_0"] and "Q8_0" in cells and "file" in cells
    entry = json.loads(opened.list_path().read_text())["files"][0]
    assert entry["path"] == str(model)
    assert (
        opened.list_path().stat().st_mode & 0o777 == 0o600
    )  # the user's folders are nobody else's business

    # `vibechat models list` lists it too, and once the file is gone, not any more
    out = subprocess.run(
        [str(VIBECHAT_BIN), "models", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    [listed] = [m for m in json.loads(out.stdout) if m["source"] == "file"]
    assert (
        listed["name"] == "file:my-model-Q8_0"
        and listed["path"] == str(model)
        and listed["quant"] == "Q8_0"
    )
    # `vibechat models rm file:NAME` forgets it and leaves the user's file alone
    out = subprocess.run(
        [str(VIBECHAT_BIN), "models", "rm", "file:my-model-Q8_0"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0 and "Forgot file:my-model-Q8_0" in out.stdout, out.stderr
    assert model.is_file() and [m for m in all_models() if m.source == "file"] == []
    opened.remember(model)
    model.unlink()
    assert [m for m in all_models() if m.source == "file"] == []
    assert json.loads(opened.list_path().read_text())["files"] == []  # pruned


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
async def test_the_picker_refuses_what_is_no_model_file_in_one_line(tmp_path):
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)  # opening it would block: it must never be opened
    html = tmp_path / "page.gguf"
    html.write_text("<!DOCTYPE html><html>Sign in to download</html>")
    (tmp_path / "folder").mkdir()
    made: list = []
    app = app_with_factory(made)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        picker = await open_picker(pilot)
        for path, why in (
            (tmp_path / "missing.gguf", "does not exist"),
            (tmp_path / "folder", "is a directory"),
            (fifo, "is a FIFO (named pipe), not a model file"),
            (html, "is an HTML page"),
        ):
            await type_path(pilot, picker, str(path))
            assert app.screen is picker  # the picker stays open: the path can be corrected
            shown = picker_status(picker)
            assert why in shown and shown.count("\n") == 0, shown
        assert made == [] and app.status.model.name == INFO.name
    assert not opened.list_path().exists()  # nothing that did not load is remembered


def test_path_completion_offers_folders_and_ggufs_only(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "music").mkdir()
    (tmp_path / ".hidden").mkdir()
    write_gguf(tmp_path / "models" / "qwen-Q4_K_M.gguf")
    (tmp_path / "models" / "qwen-notes.txt").write_text("not a model")
    base = f"{tmp_path}/"
    assert complete_path(base + "mo") == base + "models/"
    assert (
        complete_path(base + "m") == base + "models/"
    )  # models/ and music/ share nothing more: the first
    assert (
        complete_path(base + "models/q") == base + "models/qwen-Q4_K_M.gguf"
    )  # the .txt is no model
    assert complete_path(base + "models/qwen-Q4_K_M.gguf") is None  # complete already
    assert complete_path(base + "x") is None
    assert complete_path(base + ".h") == base + ".hidden/"  # hidden: only once a dot is typed
    assert complete_path(base) in (base + "models/", base + "m")
    assert complete_path("~") == "~/"
    # bounded: a folder with more entries than it reads gives what it found in them
    for i in range(30):
        (tmp_path / "many").mkdir(exist_ok=True)
        write_gguf(tmp_path / "many" / f"m{i:02d}.gguf")
    assert complete_path(base + "many/m", max_entries=5) is not None


async def test_the_path_line_completes_as_you_type(tmp_path):
    (tmp_path / "models").mkdir()
    write_gguf(tmp_path / "models" / "only-Q4_K_M.gguf")
    app = create_app(
        RecordingBackend(), backend_factory=lambda p: RecordingBackend(), blink=False, save=False
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        picker = await open_picker(pilot)
        await pilot.press("o")
        field = picker.query_one("#picker-path")
        field.insert_text_at_cursor(f"{tmp_path}/mo")
        await wait_for(pilot, lambda: field._suggestion, "the path's suggestion")  # from a worker
        assert field._suggestion == f"{tmp_path}/models/"
        await pilot.press("right")  # accepts it
        assert field.value == f"{tmp_path}/models/"


async def test_the_downloader_offers_to_open_a_local_path(tmp_path, fake_hub):
    model = tmp_path / "here-Q4_K_M.gguf"
    model.write_bytes(gguf_bytes())
    made: list = []
    app = app_with_factory(made)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await app.run_action("download")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DownloadScreen)
        field = screen.query_one("Input")
        field.value = str(model)
        await pilot.press("enter")
        await screen.workers.wait_for_complete()
        await pilot.pause()
        status = str(screen.query_one("#download-status").render())
        assert "is a model file on this machine" in status and "Enter again" in status
        assert fake_hub.requests == []  # the Hub was not asked
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert made == [model] and app.status.model.path == str(model)

        await app.run_action("download")
        await pilot.pause()
        screen = app.screen
        screen.query_one("Input").value = str(tmp_path / "gone.gguf")
        await pilot.press("enter")
        await screen.workers.wait_for_complete()
        await pilot.pause()
        assert "does not exist" in str(screen.query_one("#download-status").render())


@pytest.mark.parametrize("name", ["my model.gguf", "[bold]x[red].gguf"])
def test_a_remembered_file_keeps_its_name_as_text(tmp_path, name):
    path = write_gguf(tmp_path / name)
    opened.remember(path)
    [model] = opened.opened_models()
    assert model.name == "file:" + name[:-5] and model.path == path and model.source == "file"
