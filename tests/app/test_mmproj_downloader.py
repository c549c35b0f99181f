"""The chat's downloader and a vision model (issue 29.1): listing a repo that holds a projector
says it comes with the model (its name and size), and the download, run by the app, fetches it
beside the model, where ``--mmproj auto`` finds it. The real app (Pilot) against the fake Hub."""

from __future__ import annotations

from fakes import RecordingBackend, settle
from ggufgen import gguf_bytes
from helpers import was_notified
from vibechat.app.progress import human_size
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.downloader import DownloadScreen
from vibechat.engine.models.projector import find_projector
from vibechat.engine.models.store import model_folder, recorded_projector, store_models

REPO = "acme/Tiny-Vision-GGUF"
PROJECTOR = gguf_bytes(architecture="clip", file_type=1, payload=700)


async def test_the_downloader_shows_the_projector_and_fetches_it_with_the_model(fake_hub):
    fake_hub.add_repo(
        REPO,
        {
            "Tiny-Vision-Q4_K_M.gguf": gguf_bytes(payload=2000),
            "mmproj-Tiny-Vision-F16.gguf": PROJECTOR,
        },
    )
    app = create_app(RecordingBackend(), blink=False)
    async with app.run_test(size=(140, 36), notifications=True) as pilot:
        await settle(pilot)
        await app.run_action("download")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DownloadScreen)
        field = screen.query_one("Input")
        field.value = REPO
        field.focus()
        await pilot.press("enter")
        await screen.workers.wait_for_complete()
        await pilot.pause()
        table = screen.query_one("DataTable")
        assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)] == [
            "Q4_K_M *"
        ]  # no projector row
        status = str(screen.query_one("#download-status").render())
        assert (
            f"its projector mmproj-Tiny-Vision-F16.gguf ({human_size(len(PROJECTOR))}) "
            "comes with it" in status
        )
        await pilot.press("enter")  # download it
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert was_notified(app, f"Downloaded {REPO}:Q4_K_M")
    [model] = store_models()
    projector = model_folder(REPO) / "mmproj-Tiny-Vision-F16.gguf"
    assert projector.read_bytes() == PROJECTOR and model.projector == projector
    assert find_projector(model.path, recorded_projector(model.path)) == projector
