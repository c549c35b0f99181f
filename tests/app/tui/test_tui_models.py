"""The model picker and the downloader in the real app: switching real models, a broken
file that must not cost the current model, and a download from the fake Hub with
its progress on screen while chatting goes on."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import replace

import pytest

from conftest import worker_threads
from fakes import INFO, RecordingBackend, open_picker, send, settle
from ggufgen import gguf_bytes
from helpers import notifications, wait_for, was_notified
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.downloader import DownloadScreen
from vibechat.app.tui.screens.model_picker import ModelPicker
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.models.store import store_models
from vibechat.engine.settings.config import models_dir
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams

SIZE = (110, 36)


def real_backend(path) -> LlamaCppBackend:
    return LlamaCppBackend(
        LlamaCppOptions(threads=worker_threads(), model_path=path, context_size=1024, repack="off")
    )


async def ask(pilot, screen: DownloadScreen, text: str) -> None:
    """Type ``text`` into the downloader and press Enter; wait for its answer."""
    field = screen.query_one("Input")
    field.value = text
    field.focus()
    await pilot.press("enter")
    await screen.workers.wait_for_complete()
    await pilot.pause()


async def press_and_wait(pilot, key: str) -> None:
    await pilot.press(key)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def choose(pilot, picker: ModelPicker, name: str) -> None:
    table = picker.query_one("DataTable")
    table.move_cursor(row=[m.name for m in picker.models].index(name))
    await pilot.press("enter")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.model
async def test_picker_lists_models_and_switching_starts_a_new_conversation(starter_installed):
    copy = models_dir() / "acme" / "Gemma-Copy-GGUF" / "gemma-copy-Q4_K_M.gguf"
    copy.parent.mkdir(parents=True)
    os.link(starter_installed, copy)
    broken = models_dir() / "acme" / "Broken-GGUF" / "broken-Q8_0.gguf"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"<!DOCTYPE html><html>Sign in to download</html>")

    app = create_app(
        real_backend(starter_installed),
        params=SamplingParams(temperature=0, max_tokens=4),
        backend_factory=real_backend,
        blink=False,
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "Hello")
        assert len(app.chat.messages()) == 2

        picker = await open_picker(pilot)
        names = [m.name for m in picker.models]
        assert names[:3] == ["starter", "acme/Broken-GGUF:Q8_0", "acme/Gemma-Copy-GGUF:Q4_K_M"]
        table = picker.query_one("DataTable")
        assert table.get_row_at(0)[0] == "●"  # the loaded one
        assert (
            table.get_row_at(0)[-1] == "0/18" and table.get_row_at(2)[-1] == ""
        )  # its layers on the GPU
        assert "● loaded (CPU (no GPU offload in this build))" in str(
            picker.query_one("#picker-status").render()
        )
        row = [
            str(cell) for cell in table.get_row_at(2)
        ]  # outside names are Text cells (never markup)
        assert "Q4_K_M" in row and "253.1 MB" in row

        await choose(pilot, picker, "acme/Gemma-Copy-GGUF:Q4_K_M")
        assert app.status.model.path == str(copy)
        assert app.chat.messages() == [] and app.conversation.turns == []  # a new conversation
        assert was_notified(app, "Loaded acme/Gemma-Copy-GGUF:Q4_K_M")
        await send(pilot, "Hello again")
        assert app.status.stats.completion_tokens > 0  # the new model answers

        # A broken file: a clear reason, and the current model stays loaded and working.
        current = app.backend
        picker = await open_picker(pilot)
        await choose(pilot, picker, "acme/Broken-GGUF:Q8_0")
        assert any(
            "Could not load acme/Broken-GGUF:Q8_0" in n.message
            and "HTML page" in n.message
            and "current model stays loaded" in n.message
            for n in notifications(app)
        )
        assert app.backend is current and app.status.model.path == str(copy)
        assert app.status.state == "ready"
        await send(pilot, "Still there?")
        assert app.status.stats.completion_tokens > 0
    app.backend.close()


async def test_a_model_too_big_for_memory_is_refused_and_the_current_one_stays(monkeypatch):
    from vibechat.app.tui.controllers import models as models_ui

    big = models_dir() / "acme" / "Huge-GGUF" / "huge-Q8_0.gguf"
    big.parent.mkdir(parents=True)
    big.write_bytes(gguf_bytes(payload=300_000))
    monkeypatch.setattr("vibechat.engine.system.available_memory", lambda: 10_000)
    factory_calls = []
    small = dataclasses.replace(
        INFO, kv_cache_bytes=1000
    )  # closing it frees 1,001 bytes: not enough
    app = create_app(
        RecordingBackend(info=small),
        backend_factory=lambda p: factory_calls.append(p) or RecordingBackend(),
        blink=False,
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        current = app.backend
        picker = await open_picker(pilot)
        await choose(pilot, picker, "acme/Huge-GGUF:Q8_0")
        assert any(
            "needs about" in n.message and "smaller quantization" in n.message
            for n in notifications(app)
        )
        assert app.backend is current
    assert models_ui  # the module under test


BIG = "acme/Big-GGUF"


async def test_downloader_shows_progress_and_chatting_goes_on(fake_hub):
    data = gguf_bytes(payload=2_000_000)
    fake_hub.add_repo(
        BIG, {"Big-Q4_K_M.gguf": data, "Big-Q8_0.gguf": gguf_bytes(payload=10)}, downloads=7
    )
    fake_hub.delay("Big-Q4_K_M.gguf", seconds=1.0, method="GET")  # time to hide the screen
    backend = RecordingBackend()
    app = create_app(backend, backend_factory=lambda p: RecordingBackend(), blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("f3", "d")  # the downloader, from the picker
        screen = app.screen
        assert isinstance(screen, DownloadScreen)
        await ask(pilot, screen, "big")  # search
        table = screen.query_one("DataTable")
        assert str(table.get_row_at(0)[0]) == BIG  # a Text cell (outside text is never markup)
        await pilot.press("enter")  # the repo's files
        await screen.workers.wait_for_complete()
        await pilot.pause()
        assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)] == ["Q8_0", "Q4_K_M *"]
        assert table.cursor_row == 1  # the default is highlighted
        await pilot.press("enter")  # download it
        await pilot.pause()
        assert screen.has_class("-downloading") and app.status.download
        await pilot.press("escape")  # hide it; the download goes on
        assert not isinstance(app.screen, DownloadScreen)
        app.prompt_input.load_text("meanwhile")
        await pilot.press("enter")
        await wait_for(pilot, lambda: backend.requests, "the message sent during the download")
        assert backend.requests[-1][0][-1].content == "meanwhile"
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert was_notified(app, f"Downloaded {BIG}:Q4_K_M")
        assert app.status.download == ""
        [model] = store_models()
        assert model.name == f"{BIG}:Q4_K_M" and model.path.read_bytes() == data

        # Open again: progress of a new download shows on screen, with its bar.
        fake_hub.clear_faults()
        await pilot.press("f3", "d")
        screen = app.screen
        await ask(pilot, screen, f"{BIG}:Q8_0")
        await press_and_wait(pilot, "enter")
        bar = screen.query_one("ProgressBar")
        assert bar.total == bar.progress > 0
        assert "Downloaded" in str(screen.query_one("#download-status").render())
        assert {m.name for m in store_models()} == {f"{BIG}:Q4_K_M", f"{BIG}:Q8_0"}


async def test_downloader_reports_hub_errors_on_screen(fake_hub):
    fake_hub.add_repo("corp/Gated-GGUF", {"Gated-Q4_K_M.gguf": gguf_bytes()}, gated=True)
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await app.run_action("download")
        await pilot.pause()
        screen = app.screen
        await ask(pilot, screen, "nobody/Nothing-GGUF")
        assert "was not found" in str(screen.query_one("#download-status").render())
        await ask(pilot, screen, "corp/Gated-GGUF")
        await press_and_wait(pilot, "enter")
        assert was_notified(app, "is gated: accept its license")
        assert store_models() == []


async def test_choosing_the_loaded_model_does_not_reload_it(starter_installed):
    made = []
    app = create_app(
        RecordingBackend(info=replace(INFO, path=str(starter_installed))),
        backend_factory=lambda p: made.append(p) or RecordingBackend(),
        blink=False,
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        picker = await open_picker(pilot)
        await choose(pilot, picker, "starter")
        assert made == [] and was_notified(app, "already loaded")


async def focus_gpu_slider(pilot):
    from vibechat.app.tui.widgets.slider import Slider

    await pilot.press("f2")
    slider = pilot.app.query_one("#slider-gpu_layers", Slider)
    slider.focus()
    await pilot.pause()
    return slider


async def test_gpu_layers_on_a_build_without_offload_is_disabled_with_a_one_line_reason(tmp_path):
    """This build cannot offload: the chat runs on the CPU with a warning (``vibechat run`` fails
    instead), and the GPU layers slider is disabled with one line saying why (the rebuild
    command in its tooltip), rather than taking key presses and answering each with a notice."""
    from textual.widgets import Static

    notice = "Running on the CPU: GPU offload of all layers was asked for (...)"
    made = []
    app = create_app(
        RecordingBackend(info=replace(INFO, notices=(notice,))),
        backend_factory=lambda p, **kw: made.append((p, kw)) or RecordingBackend(),
        blink=False,
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert any(n.message == notice and n.severity == "warning" for n in notifications(app))
        slider = await focus_gpu_slider(pilot)
        assert slider.disabled and not slider.has_focus  # a disabled widget takes no focus, no keys
        assert slider.value == 0 and slider.spec.maximum == INFO.n_layers
        hint = str(app.query_one("#gpu-hint", Static).render())
        assert hint == "Off: a CPU-only llama.cpp build."
        assert app.query_one("#gpu-hint").size.height == 1  # one line in the panel
        assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in str(slider.tooltip)
        await pilot.press("tab", "right", "right")  # keys elsewhere never reach it
        await pilot.pause()
        assert slider.value == 0 and made == []
        assert not [n for n in notifications(app) if n.title == "GPU layers"]


async def test_the_gpu_layers_slider_is_disabled_for_a_server_and_until_a_model_is_loaded():
    from vibechat.app.tui.widgets.slider import Slider

    gate = __import__("threading").Event()
    server = replace(
        INFO, server="http://127.0.0.1:1/v1", backend="openai", gpu_offload_supported=True
    )
    backend = RecordingBackend(info=server)
    real_load = backend.load

    def slow_load(on_progress=None):
        gate.wait(10)
        return real_load(on_progress)

    backend.load = slow_load
    app = create_app(backend, blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        slider = app.query_one("#slider-gpu_layers", Slider)
        assert slider.disabled  # the model is still loading
        gate.set()
        await settle(pilot)
        assert slider.disabled
        assert "server decides" in str(app.query_one("#gpu-hint").render())


async def test_the_gpu_layers_slider_reloads_the_model_and_keeps_the_conversation(tmp_path):
    """On a build that can offload (a double here: no GPU on the test machine), moving the
    slider reloads the model with that many layers once it rests."""
    path = tmp_path / "gpu-model-Q4_K_M.gguf"
    path.write_bytes(gguf_bytes())
    gpu = replace(INFO, path=str(path), gpu_offload_supported=True, gpu_layers=16)
    made = []

    def factory(p, **changes):
        made.append((p, changes))
        return RecordingBackend(info=replace(gpu, gpu_layers=changes.get("gpu_layers", 16)))

    app = create_app(RecordingBackend(info=gpu), backend_factory=factory, blink=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await send(pilot, "Hello")
        assert app.status.model.device == "GPU 16/16 layers"
        slider = await focus_gpu_slider(pilot)
        assert slider.value == 16
        await pilot.press("left", "left", "left")  # one reload, after the slider rests
        await wait_for(pilot, lambda: made, "the reload once the slider rests")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert made == [(path, {"gpu_layers": 13})]
        assert app.status.model.device == "GPU 13/16 layers" and slider.value == 13
        assert was_notified(app, "Reloaded Fake 1B: GPU 13/16 layers")
        assert len(app.chat.messages()) == 2  # the conversation goes on
        picker = await open_picker(pilot)
        assert "● loaded (GPU 13/16 layers)" in str(picker.query_one("#picker-status").render())
        await pilot.press("escape", "f2")  # the panel closes, the input has the focus
        await send(pilot, "Again")
        assert len(app.chat.messages()) == 4
        assert app.backend.requests  # the reloaded backend answered
