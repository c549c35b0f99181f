"""The chat's process never loads libllama (issue 26): the model lives in the engine
process (engine/llama/worker.py), and nothing the user opens in the chat imports llama_cpp or
vibechat.engine.llama.llamacpp there: the model picker and its open-file field, the
downloader (searching and listing a repo, which judges each file against the machine's
memory), the parameter panel with its GPU slider, /show, /stats, the chats sidebar and
its search, rename and export dialogs, presets, help, the command palette and the theme
picker.

The real chat (the real worker engine on the starter model, the real Textual app under
Pilot, the fake Hub on 127.0.0.1) runs in a fresh Python process: the test process has
long imported llama_cpp for other tests. The driver checks ``sys.modules`` after each
screen, so a failure names the screen that loaded it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ggufgen import gguf_bytes

TESTS = Path(__file__).resolve().parents[2]
SIZE = (110, 36)
REPO = "acme/Big-GGUF"
LIBLLAMA = ("llama_cpp", "vibechat.engine.llama.llamacpp")


def libllama_modules() -> list[str]:
    return sorted(
        m for m in sys.modules if any(m == name or m.startswith(name + ".") for name in LIBLLAMA)
    )


async def drive(model: str) -> dict[str, list[str]]:
    """Open every screen of a real chat on ``model``; for each, what of libllama's modules
    the process had loaded after it (all empty when the rule holds)."""
    from dataclasses import replace

    from textual.command import CommandPalette

    from fakes import send, settle
    from vibechat.app.backends import make_backend
    from vibechat.app.tui import create_app
    from vibechat.app.tui.screens.downloader import DownloadScreen
    from vibechat.app.tui.screens.help_screen import HelpScreen
    from vibechat.app.tui.screens.history_screens import ExportScreen, RenameScreen, SearchScreen
    from vibechat.app.tui.screens.model_picker import ModelPicker
    from vibechat.app.tui.screens.preset_picker import PresetPicker
    from vibechat.app.tui.widgets.slider import Slider
    from vibechat.engine.settings.knobs import EngineSettings
    from vibechat.engine.settings.params import SamplingParams

    # The cores shared out between pytest-xdist's workers, as conftest.worker_threads gives the
    # suite's other real-model tests (VIBECHAT_THREADS: set for them, and inherited here).
    threads = int(os.environ["VIBECHAT_THREADS"]) if os.environ.get("VIBECHAT_THREADS") else None
    engine = EngineSettings(model=model, context_size=512, repack="off", threads=threads)
    backend = make_backend(engine, cpu_fallback=True, worker=True)

    def factory(path: Path, **changes: object):
        return make_backend(
            replace(engine, model=str(path), **changes), cpu_fallback=True, worker=True
        )

    seen: dict[str, list[str]] = {}
    app = create_app(
        backend,
        params=SamplingParams(temperature=0, max_tokens=4),
        blink=False,
        backend_factory=factory,
    )
    try:
        async with app.run_test(size=SIZE, notifications=True) as pilot:

            async def idle() -> None:
                await app.workers.wait_for_complete()
                await app.screen.workers.wait_for_complete()
                await pilot.pause()

            async def opened(name: str, keys: tuple[str, ...], screen_type: type) -> None:
                await pilot.press(*keys)
                await idle()
                assert isinstance(app.screen, screen_type), (name, app.screen)
                seen[name] = libllama_modules()

            async def closed() -> None:
                await pilot.press("escape")
                await idle()

            await settle(pilot)
            assert app.session.info is not None, "the model did not load"
            await send(pilot, "Hi")  # a reply, streamed from the engine process
            assert app.chat.messages()[-1].role == "assistant"
            seen["a reply"] = libllama_modules()

            await opened("help", ("f1",), HelpScreen)
            await closed()
            await pilot.press("f2")  # the parameter panel, with the GPU layers slider
            await idle()
            assert app.panel.display
            [gpu] = [s for s in app.panel.query(Slider) if s.spec.name == "gpu_layers"]
            gpu.focus()  # a CPU-only build disables it: then its hint says why
            await pilot.press("right")
            await idle()
            seen["parameters and the GPU slider"] = libllama_modules()
            await pilot.press("f2")
            app.prompt_input.focus()

            await opened("model picker", ("f3",), ModelPicker)
            await pilot.press("o")  # a file's path, checked
            picker = app.screen
            field = picker.query_one("#picker-path")
            field.value = str(Path(model).with_name("missing.gguf"))
            await pilot.press("enter")
            await idle()
            seen["model picker: open a file"] = libllama_modules()
            await opened("downloader", ("escape", "f3", "d"), DownloadScreen)
            screen = app.screen
            search = screen.query_one("Input")
            search.value = "big"
            search.focus()
            await pilot.press("enter")
            await idle()
            table = screen.query_one("DataTable")
            assert str(table.get_row_at(0)[0]) == REPO
            seen["downloader: search"] = libllama_modules()
            await pilot.press("enter")  # the repo's files, each judged against free memory
            await idle()
            assert table.row_count == 2, "the repo's files were not listed"
            seen["downloader: a repo's files and whether they fit"] = libllama_modules()
            await closed()
            if isinstance(app.screen, ModelPicker):
                await closed()

            await opened("command palette", ("ctrl+p",), CommandPalette)
            await closed()
            await pilot.press("f4")  # the theme picker (the palette, searching themes)
            await idle()
            seen["theme picker"] = libllama_modules()
            await closed()
            app.prompt_input.focus()

            for command in (
                "/show info",
                "/show parameters",
                "/show template",
                "/show system",
                "/stats",
            ):
                await send(pilot, command)
                seen[command] = libllama_modules()
            await send(pilot, "/preset")
            assert isinstance(app.screen, PresetPicker), app.screen
            seen["presets"] = libllama_modules()
            await closed()

            await pilot.press("ctrl+b")  # the chats sidebar
            await idle()
            seen["chats sidebar"] = libllama_modules()
            await opened("chat search", ("ctrl+f",), SearchScreen)
            await closed()
            for name, action, screen_type in (
                ("rename", "rename_conversation", RenameScreen),
                ("export", "export_conversation", ExportScreen),
            ):
                await app.run_action(action)  # the open conversation's (the palette lists them)
                await idle()
                assert isinstance(app.screen, screen_type), (name, app.screen)
                seen[name] = libllama_modules()
                await closed()
    finally:
        backend.close()
        if app.session.backend is not backend:
            app.session.backend.close()
    return seen


@pytest.mark.model
def test_the_chat_never_loads_libllama_whatever_the_user_opens(
    starter_path, fake_hub, tmp_path: Path
):
    fake_hub.add_repo(
        REPO, {"Big-Q4_K_M.gguf": gguf_bytes(payload=20_000), "Big-Q8_0.gguf": gguf_bytes()}
    )
    script = textwrap.dedent(f"""
        import asyncio, json, sys
        # this module, then the shared helpers
        sys.path[:0] = [{str(Path(__file__).resolve().parent)!r}, {str(TESTS)!r}]
        from test_no_libllama import drive
        print("SEEN " + json.dumps(asyncio.run(drive({str(starter_path)!r}))))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
        env={**os.environ, "VIBECHAT_REPACK": "off"},
    )
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    [line] = [line for line in out.stdout.splitlines() if line.startswith("SEEN ")]
    seen = json.loads(line[len("SEEN ") :])
    assert len(seen) >= 20, seen  # every screen was reached
    loaded = [f"{name}: {modules}" for name, modules in seen.items() if modules]
    assert not loaded, f"the chat's process loaded libllama, first at {loaded[0]}"


@pytest.mark.parametrize(
    ("files", "offloads"),
    [
        (["libggml-base.so", "libggml-cpu.so", "libllama.so"], False),  # the CPU build
        (["libggml-base.so", "libggml-cpu.so", "libggml-cuda.so", "libllama.so"], True),
        (["libggml-metal.dylib", "libllama.dylib"], True),
        (["ggml-vulkan.dll", "llama.dll"], True),
        (["libggml-hip.so.0"], True),
        ([], False),
    ],
)
def test_whether_the_build_offloads_is_read_from_its_libraries(tmp_path: Path, files, offloads):
    from vibechat.engine.models.fit import build_offloads

    for name in files:
        (tmp_path / name).write_bytes(b"")
    assert build_offloads(tmp_path) is offloads
    assert build_offloads(tmp_path / "missing") is False


def test_the_installed_build_answers_as_llama_cpp_does(monkeypatch):
    """The library check agrees with libllama's own answer on this machine's build, and
    follows LLAMA_CPP_LIB_PATH as llama-cpp-python does."""
    import llama_cpp

    from vibechat.engine.models.fit import build_offloads

    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    assert build_offloads() is bool(llama_cpp.llama_supports_gpu_offload())
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(TESTS))  # no ggml library there
    assert build_offloads() is False
