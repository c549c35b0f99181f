"""The chat at 80×24 (issue 46, point 6): help (F1), ``/show info``, the downloader and the
dialogs lay out without breaking a word and without a continued line at the left edge (a
value goes on under its value: a hanging indent), and how to close each is on its first
page. Read from what the real app draws (its screen as text), and kept as snapshots.

Update the snapshots after an intended change with ``pytest --snapshot-update``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fakehub import fake_hub  # noqa: F401  (fixture)
from fakes import INFO, RecordingBackend, send, settle
from ggufgen import gguf_bytes, write_gguf
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.screens.confirm import ConfirmScreen
from vibechat.app.tui.screens.downloader import DownloadScreen
from vibechat.app.tui.screens.history_screens import ExportScreen, RenameScreen
from vibechat.app.tui.screens.model_picker import fit_id
from vibechat.app.tui.screens.tool_approval import ToolApprovalScreen
from vibechat.engine.chat.history import History
from vibechat.engine.settings.config import config_path, models_dir
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

SIZE = (80, 24)
LONG_PATH = (
    "/home/someone/.cache/huggingface/hub/models--unsloth--gemma-3-270m-it-GGUF/snapshots/"
    "0123456789abcdef/gemma-3-270m-it-Q4_K_M.gguf"
)
LONG_INFO = replace(INFO, path=LONG_PATH, file_size=253_100_000)
ARGUMENTS = json.dumps(
    {
        "path": "/home/someone/notes/2026/november/meeting-minutes.txt",
        **{f"option_{n}": n for n in range(24)},
    }
)
SPEC = ToolSpec(
    "read_file",
    "Read a text file (UTF-8) from the folders the user allowed; at most 100 KB "
    "are returned to the model.",
    tool="read_file",
)


def make_app(**kw):
    return create_app(kw.pop("backend", None) or RecordingBackend(), blink=False, **kw)


def screen_lines(app) -> list[str]:
    """What the terminal shows, line by line."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def framed(lines: list[str]) -> list[str]:
    """The lines inside the dialog's frame (its thick border, ``█``), its padding included."""
    return [line[line.index("█") + 1 : line.rindex("█")] for line in lines if line.count("█") >= 2]


def hanging(lines: list[str], starts: set[str], indent: int) -> list[str]:
    """The lines that neither start with one of ``starts`` (a label, a key, a title) nor go on
    ``indent`` columns in: a continued line at the left edge."""
    return [
        line
        for line in lines
        if line.strip() and not line.startswith(tuple(starts)) and not line.startswith(" " * indent)
    ]


def whole_words(text: str, lines: list[str]) -> list[str]:
    """The words of ``text`` not shown whole in ``lines`` (split across two lines)."""
    shown = {word for line in lines for word in line.split()}
    return [word for word in text.split() if word not in shown]


# ------------------------------------------------------------------ help (F1)
async def test_help_says_how_to_close_it_on_its_first_page_and_hangs_its_descriptions():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f1")
        await pilot.pause()
        assert "Esc, F1 or q closes this screen" in "\n".join(framed(screen_lines(app)))
    app = make_app()
    async with app.run_test(size=(80, 200)) as pilot:  # tall enough for the whole help
        await settle(pilot)
        await pilot.press("f1")
        await pilot.pause()
        sections = app.help_sections()
        body = [line[2:] for line in framed(screen_lines(app))]  # past the padding
        starts = (
            {title for title, _ in sections}
            | {key for _, rows in sections for key, _ in rows}
            | {"Esc, F1"}
        )
        for title, rows in sections:
            width = max(len(key) for key, _ in rows)
            first = next(i for i, line in enumerate(body) if line.rstrip() == title)
            section = body[first + 1 : first + 1 + 4 * len(rows)]
            section = section[
                : next(
                    (
                        i
                        for i, line in enumerate(section)
                        if line.strip() in starts - {key for key, _ in rows}
                    ),
                    len(section),
                )
            ]
            assert not hanging(section, starts, width + 2), title
            for _, description in rows:
                assert not whole_words(description, section), description


# ------------------------------------------------------------------ the welcome
async def test_the_welcome_breaks_between_its_parts_and_keeps_words_whole():
    """The empty chat's lines (the model, its context, the keys) break at 80 columns between
    their `` · `` parts, never inside a word and never leaving a `` · `` at a line's end."""
    app = make_app(backend=RecordingBackend(info=LONG_INFO), save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.pause()
        welcome = app.chat.query_one(".chat--empty")
        text = str(welcome.render())
        width = welcome.content_region.width
        assert width < 80
        shown = [strip.text for strip in welcome.render_lines(welcome.region.reset_offset)]
        assert not whole_words(text, shown)
        laid = [line for line in shown if line.strip()]
        assert len(laid) > 2  # broken, at this width
        assert all(
            not line.rstrip().endswith("·") and not line.lstrip().startswith("·") for line in laid
        ), laid


# ------------------------------------------------------------------ /show info
async def test_show_info_values_go_on_under_their_column_and_keep_words_whole():
    app = make_app(backend=RecordingBackend(info=LONG_INFO), save=False)
    async with app.run_test(size=(80, 40)) as pilot:
        await settle(pilot)
        await send(pilot, "/show info")
        note = app.chat.messages()[-1].text
        labels = {line[:13].strip() for line in note.splitlines() if line[:1] != " "}
        shown = [
            line[3:] for line in screen_lines(app) if line.startswith(" █ ")
        ]  # the note, past its border
        shown = shown[next(i for i, line in enumerate(shown) if line.startswith("model ")) :]
        assert not hanging(shown, labels, 15)
        assert any("· 253.1 MB" in line for line in shown)  # a value's parts stay together
        for line in note.splitlines():
            value = line[15:]
            assert not whole_words(value.replace(LONG_PATH, ""), shown), value


# ------------------------------------------------------------------ the downloader
@pytest.fixture
def many_repos(fake_hub):  # noqa: F811
    for n in range(30):
        fake_hub.add_repo(
            f"bartowski/Llama-3.2-{n}B-Instruct-GGUF",
            {f"Llama-{n}B-Q4_K_M.gguf": gguf_bytes()},
            downloads=1000 * (30 - n),
        )
    return fake_hub


async def _search(pilot, text: str = "llama") -> DownloadScreen:
    await settle(pilot)
    await pilot.press("f3", "d")
    screen = pilot.app.screen
    assert isinstance(screen, DownloadScreen)
    screen.query_one("Input").value = text
    await pilot.press("enter")
    await screen.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()
    return screen


async def test_the_downloader_shows_its_placeholder_whole_and_its_keys_over_a_long_list(many_repos):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f3", "d")
        screen = app.screen
        assert isinstance(screen, DownloadScreen)
        assert screen.query_one("Input").placeholder in "\n".join(screen_lines(app))
        await pilot.press("escape", "escape")
        screen = await _search(pilot)
        shown = framed(screen_lines(app))
        assert any("30 GGUF repos" in line for line in shown)  # the status line
        assert any(
            line.strip().startswith("Enter search / open / download · Esc hide") for line in shown
        )
        assert any(
            line.strip().startswith("Ctrl+X cancel the download") for line in shown
        )  # broken between keys


# ------------------------------------------------------------------ dialogs
def _with_conversations(tmp_path: Path, count: int) -> History:
    path = tmp_path / "history.db"
    with History(path) as history:
        for n in range(count):
            cid = history.create(title=f"Question {n} about the borrow checker")
            history.add_message(cid, "user", f"Why does the borrow checker reject example {n}?")
            history.conn.execute(
                "UPDATE conversations SET updated = ? WHERE id = ?",
                (f"2025-01-01T12:{n:02d}:00Z", cid),
            )
    return History(path)


def _many_models() -> None:
    for n in range(20):
        write_gguf(models_dir() / f"model-{n:02d}-Q4_K_M.gguf")


def _many_presets() -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            f'[presets.preset{n:02d}]\nsystem = "You answer in {n} words."\n' for n in range(20)
        )
    )


async def _approval(pilot) -> None:
    await settle(pilot)
    pilot.app.push_screen(
        ToolApprovalScreen(ToolCall("1", "read_file", ARGUMENTS), SPEC), lambda answer: None
    )
    await pilot.pause()


async def _search_history(pilot) -> None:
    await settle(pilot)
    await pilot.press("ctrl+f")
    pilot.app.screen.query_one("Input").value = "borrow"
    await pilot.app.screen.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


async def _picker(pilot) -> None:
    await settle(pilot)
    await pilot.press("f3")
    await pilot.app.screen.workers.wait_for_complete()
    await pilot.pause()


async def _presets(pilot) -> None:
    await settle(pilot)
    await send(pilot, "/preset", wait=False)
    await pilot.pause()
    await pilot.app.screen.workers.wait_for_complete()
    await pilot.pause()


DIALOGS = {
    "tool approval": (_approval, "Esc deny"),
    "search": (_search_history, "Esc close"),
    "model picker": (_picker, "Esc close"),
    "presets": (_presets, "Esc close"),
}


def _app_for(name: str, tmp_path: Path):
    if name == "model picker":
        _many_models()
    if name == "presets":
        _many_presets()
    return make_app(history=_with_conversations(tmp_path, 30) if name == "search" else None)


@pytest.mark.parametrize("name", list(DIALOGS))
async def test_a_full_dialog_at_80x24_keeps_the_line_that_says_how_to_close_it(name, tmp_path):
    """Filled (a long list, long arguments), the dialog still shows its key line, each key
    whole on a line (broken between keys, never a line that starts with "·")."""
    opened, close = DIALOGS[name]
    app = _app_for(name, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await opened(pilot)
        shown = framed(screen_lines(app))
        assert any(close in line for line in shown), "\n".join(shown)
        assert not [line for line in shown if line.strip().startswith("·")]


LONG_ID = "hf.co/unsloth/Qwen3-Coder-30B-A3B-Instruct-1M-with-a-long-suffix-GGUF:UD-Q4_K_XL"


async def test_the_servers_model_picker_full_at_80x24_keeps_its_rows_marks_and_key_line(stub):
    """A server's model picker (F3 on a chat with a server) filled with model ids: at 80x24 its
    title, the model in use (marked), its legend and the line that says how to close it stay on
    screen, and an id wider than the list is shortened in its middle, so that both its start and
    its end (where a quantization differs) show; Enter picks it whole. (No snapshot: its title
    names the stub server's port, which changes.)"""
    stub.models = ["stub-small", LONG_ID] + [f"org/model-{i:02d}-instruct" for i in range(30)]
    app = make_app(backend=stub.backend(), save=False)
    async with app.run_test(size=SIZE) as pilot:
        await _picker(pilot)
        shown = framed(screen_lines(app))
        text = "\n".join(shown)
        assert any("Models on http://127.0.0.1:" in line for line in shown), text
        assert any("● " in line and "stub-small" in line for line in shown), text
        assert any("32 models" in line for line in shown), text
        assert any("Esc close" in line for line in shown), text
        long_row = [line for line in shown if "hf.co/unsloth/Qwen3-Coder" in line]
        assert len(long_row) == 1 and "…" in long_row[0], text
        assert long_row[0].rstrip().endswith("-GGUF:UD-Q4_K_XL"), text
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.session.info and app.session.info.name == LONG_ID)


def test_an_id_wider_than_its_room_keeps_its_start_and_end():
    assert fit_id("short", 20) == "short"
    shown = fit_id(LONG_ID, 40)
    assert len(shown) == 40 and shown.startswith("hf.co/unsloth/Qwen3")
    assert shown.endswith("GGUF:UD-Q4_K_XL") and shown.count("…") == 1


# ------------------------------------------------------------------ snapshots at 80×24
def test_help_screen_80x24(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_show_info_80x24(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await send(pilot, "/show info")

    assert snap_compare(
        make_app(backend=RecordingBackend(info=LONG_INFO), save=False),
        terminal_size=SIZE,
        run_before=run_before,
    )


def test_downloader_80x24(snap_compare, many_repos):
    async def run_before(pilot) -> None:
        await _search(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("name", list(DIALOGS))
def test_full_dialog_80x24(snap_compare, name, tmp_path):
    assert snap_compare(_app_for(name, tmp_path), terminal_size=SIZE, run_before=DIALOGS[name][0])


QUESTIONS = {
    "confirm": lambda: ConfirmScreen(
        "Delete the conversation “What is the capital of France and why is it Paris "
        "rather than Lyon” and all its messages?\n\nThis cannot be undone.",
        yes="delete it",
        no="keep it",
    ),
    "rename": lambda: RenameScreen(
        "What is the capital of France and why is it Paris rather than Lyon"
    ),
    "export": lambda: ExportScreen(Path("chats") / "what-is-the-capital-of-france"),
}


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_dialog_80x24(snap_compare, name):
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.push_screen(QUESTIONS[name](), lambda answer: None)
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(make_app(save=False), terminal_size=SIZE, run_before=run_before)
