"""Attachments in the chat (issue 29, points 2 and 4): ``/image`` and ``/file`` read a file off
the UI thread into the tray above the input; a pasted path is offered, attached only on Enter;
the prompt goes with its attachments (checked first: images to a model that takes none are
refused in one line and stay pending); the user's message shows an image's thumbnail and label
and a file as a folded block; a reopened conversation shows them again and sends them again;
Ctrl+L brings them back to the tray. The real app with the recording backend, real files (Pillow
writes the images), the real history database under the test's data dir."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PIL import Image
from textual import events
from textual.widgets import Static

from conftest import worker_threads
from fakes import INFO, OnePieceAtATime, RecordingBackend, send, settle
from helpers import notifications, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.attachment_view import (
    FileAttachment,
    ImageAttachment,
    UserMessage,
    thumbnails_loaded,
)
from vibechat.app.tui.widgets.attachment_tray import AttachmentTray, TrayItem
from vibechat.engine.chat.history import History
from vibechat.engine.turns.attachments import Attachment

SIZE = (110, 40)
VISION = replace(INFO, projector="/models/mmproj-fake.gguf")


def write_png(path, size=(64, 48)):
    image = Image.new("RGB", size, (200, 30, 30))
    for x in range(size[0] // 2):  # two colours: a picture, not a flat block
        for y in range(size[1]):
            image.putpixel((x, y), (20, 40, 220))
    image.save(path)
    return path


def tray(app) -> AttachmentTray:
    return app.query_one(AttachmentTray)


def errors(app) -> list[str]:
    return [str(n.message) for n in notifications(app) if n.severity == "error"]


def user_messages(app) -> list[UserMessage]:
    return [m for m in app.chat.messages() if isinstance(m, UserMessage)]


def shown(widget) -> str:
    return "\n".join(str(s.render()) for s in widget.query("*") if isinstance(s, Static))


async def attach(pilot, command: str, count: int) -> None:
    await send(
        pilot, command, wait=False
    )  # (a reply may be streaming: its worker is not waited for)
    await wait_for(
        pilot, lambda: len(tray(pilot.app).attachments) == count or errors(pilot.app), command
    )


async def test_an_image_attached_goes_with_the_prompt_and_shows_as_a_thumbnail(tmp_path):
    photo = write_png(tmp_path / "photo.png")
    backend = RecordingBackend(info=VISION)
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        assert not tray(app).display  # nothing attached: no tray
        await attach(pilot, f"/image {photo}", 1)
        assert errors(app) == []
        items = list(tray(app).query(TrayItem))
        assert len(items) == 1 and "photo.png · 64×48" in str(items[0].render())
        assert tray(app).display

        await send(pilot, "What is in this picture?")
        sent = backend.requests[-1][0][-1]
        assert sent.role == "user" and sent.content == "What is in this picture?"
        assert [(a.name, a.kind, a.width, a.height) for a in sent.images] == [
            ("photo.png", "image", 64, 48)
        ]
        assert tray(app).attachments == () and not tray(app).display  # the tray emptied

        message = user_messages(app)[-1]
        await wait_for(pilot, lambda: thumbnails_loaded(message), "the thumbnail")
        image = message.query_one(ImageAttachment)
        assert image.shown and not image.problem
        assert "photo.png · 64×48" in shown(image)
        thumb = image.query_one(".attachment--thumb")
        assert (
            type(thumb).__name__ == "UnicodeImage"
        )  # headless: the Unicode renderer, wherever it runs
        assert 0 < thumb.size.height <= 8  # a few rows, not the screen


async def test_a_text_file_is_a_folded_block_that_opens_and_its_text_reaches_the_model(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("first line [bold]not markup[/bold]\nsecond line\n")
    backend = RecordingBackend()
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await attach(pilot, f"/file {notes}", 1)
        await send(pilot, "Summarise it.")
        sent = backend.requests[-1][0][-1]
        assert sent.content.startswith("File: notes.md\n```\nfirst line [bold]not markup[/bold]")
        assert sent.content.endswith("Summarise it.")

        block = user_messages(app)[-1].query_one(FileAttachment)
        assert not block.expanded
        assert "▸ 📄 notes.md" in shown(block) and "second line" not in shown(block)
        block.focus()
        await pilot.press("enter")
        assert block.expanded
        text = str(block.query_one(".attachment--text", Static).render())
        assert "[bold]not markup[/bold]" in text and "second line" in text  # plain, never markup
        await pilot.click(block)  # a click folds it again
        assert not block.expanded


async def test_a_bad_file_is_one_line_and_nothing_else_changes(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("hello\n")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    app = create_app(RecordingBackend(info=VISION), blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await attach(pilot, f"/image {notes}", 1)  # a text file is no image
        await attach(pilot, f"/file {binary}", 1)  # a binary file is no text
        await attach(pilot, f"/image {tmp_path / 'missing.png'}", 1)
        await wait_for(pilot, lambda: len(errors(app)) == 3, "three refusals")
        for error in errors(app):
            assert "\n" not in error and "Traceback" not in error
        assert tray(app).attachments == ()

        app.prompt_input.load_text("my draft")  # a draft in the input stays as it is
        app.attachments.attach(str(binary), "file")
        await wait_for(pilot, lambda: len(errors(app)) == 4, "the refusal")
        assert app.prompt_input.text == "my draft" and tray(app).attachments == ()


async def test_a_pasted_path_is_offered_and_attached_only_on_enter(tmp_path):
    photo = write_png(tmp_path / "my photo.png")
    backend = RecordingBackend(info=VISION)
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app.prompt_input.focus()
        pasted = str(photo).replace(" ", "\\ ")  # as a terminal pastes a dropped file
        app.post_message(events.Paste(pasted))
        await wait_for(pilot, lambda: tray(app).offering, "the offer")
        assert "Attach my photo.png? Enter attach · Esc keep the text" in shown(tray(app))
        assert app.prompt_input.text == pasted  # nothing attached yet
        await pilot.press("escape")  # declined: the text stays, nothing attached
        assert not tray(app).offering and app.prompt_input.text == pasted
        assert tray(app).attachments == () and backend.requests == []

        app.prompt_input.load_text("Look: ")
        app.prompt_input.move_cursor(app.prompt_input.document.end)
        app.post_message(events.Paste(f"'{photo}'"))
        await wait_for(pilot, lambda: tray(app).offering, "the offer")
        await pilot.press("enter")  # yes: attached, and the pasted text leaves the input
        await wait_for(pilot, lambda: len(tray(app).attachments) == 1, "the attachment")
        assert (
            app.prompt_input.text == "Look: " and backend.requests == []
        )  # Enter attached, did not send
        assert not tray(app).offering


async def test_an_image_for_a_model_known_to_take_none_is_refused_where_it_is_attached(tmp_path):
    """Not accepted into the tray to be refused at Enter: /image (or a pasted image path) on a
    loaded model without a projector is one line at once, naming --mmproj and a vision model."""
    photo = write_png(tmp_path / "photo.png")
    backend = RecordingBackend()  # no projector
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await attach(pilot, f"/image {photo}", 1)
        refusal = errors(app)
        assert len(refusal) == 1 and "takes no images" in refusal[0] and "--mmproj" in refusal[0]
        assert "vision model" in refusal[0] and "\n" not in refusal[0]
        assert tray(app).attachments == ()  # nothing pending
        app.attachments.attach(
            photo, None
        )  # a pasted path, accepted with Enter: read, then refused
        await wait_for(pilot, lambda: len(errors(app)) == 2, "the second refusal")
        await settle(pilot)
        assert tray(app).attachments == ()


async def test_an_image_refused_at_enter_stays_pending_and_the_line_says_how_to_remove_it(tmp_path):
    photo = write_png(tmp_path / "photo.png")
    backend = RecordingBackend(info=VISION)
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await attach(pilot, f"/image {photo}", 1)
        backend.info = app.session.info = (
            INFO  # the model changed (no projector) while the image waited
        )
        await send(pilot, "Describe it.")
        assert backend.requests == [] and user_messages(app) == []
        refusal = errors(app)
        assert len(refusal) == 1 and "takes no images" in refusal[0] and "--mmproj" in refusal[0]
        assert "/detach" in refusal[0] and "\n" not in refusal[0]
        assert len(tray(app).attachments) == 1  # still pending
        assert app.prompt_input.text == "Describe it."  # and the prompt back in the input

        notes = tmp_path / "notes.md"
        notes.write_text("text\n")
        await attach(pilot, f"/file {notes}", 2)
        list(tray(app).query(TrayItem))[0].focus()  # a focused line: Delete removes it
        await pilot.press("delete")
        assert [a.name for a in tray(app).attachments] == ["notes.md"]
        await pilot.press("delete")  # the focus moved to the line left: Delete again
        assert tray(app).attachments == ()
        assert app.prompt_input.has_focus  # the last one gone: back to the input
        await attach(pilot, f"/file {notes}", 1)
        await send(pilot, "/detach")
        assert tray(app).attachments == ()


async def test_an_empty_prompt_with_attachments_is_sent(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("just the file\n")
    backend = RecordingBackend()
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("enter")  # nothing typed, nothing attached: nothing sent
        await settle(pilot)
        assert backend.requests == []
        await attach(pilot, f"/file {notes}", 1)
        app.prompt_input.focus()
        # The tray tells the input it holds something (a message): Enter on an empty input sends
        # then.
        await wait_for(
            pilot,
            lambda: app.prompt_input.has_attachments and app.prompt_input.has_focus,
            "the input knowing of the attachment",
        )
        await pilot.press("enter")
        await wait_for(pilot, lambda: backend.requests, "the prompt of an attachment alone")
        await settle(pilot)
        assert len(backend.requests) == 1
        assert "just the file" in backend.requests[-1][0][-1].content


async def test_attachments_are_saved_reopened_and_sent_again(tmp_path):
    photo = write_png(tmp_path / "photo.png")
    notes = tmp_path / "notes.md"
    notes.write_text("remember this\n")
    history = History(tmp_path / "history.db")
    backend = RecordingBackend(info=VISION)
    app = create_app(backend, blink=False, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await attach(pilot, f"/image {photo}", 1)
        await attach(pilot, f"/file {notes}", 2)
        await send(pilot, "Both, please.")
        conversation_id = app.chatlog.conversation_id
        assert conversation_id is not None

        # Ctrl+L: the prompt back in the input, its attachments back in the tray
        await pilot.press("ctrl+l")
        await settle(pilot)
        assert app.prompt_input.text == "Both, please."
        assert [a.name for a in tray(app).attachments] == ["photo.png", "notes.md"]
        await pilot.press("enter")
        await settle(pilot)
        assert tray(app).attachments == ()

    # Another chat opens the conversation: shown the same way, and sent again with its next prompt.
    backend2 = RecordingBackend(info=VISION)
    app2 = create_app(backend2, blink=False, history=History(tmp_path / "history.db"))
    async with app2.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app2.chats.open_conversation(conversation_id)
        await wait_for(pilot, lambda: user_messages(app2), "the reopened conversation")
        message = user_messages(app2)[-1]
        assert [a.name for a in message.attachments] == ["photo.png", "notes.md"]
        await wait_for(pilot, lambda: thumbnails_loaded(message), "the thumbnail")
        assert message.query_one(ImageAttachment).shown
        assert "▸ 📄 notes.md" in shown(message.query_one(FileAttachment))

        await send(pilot, "And again?")
        sent = backend2.requests[-1][0]
        earlier = [m for m in sent if m.role == "user"][0]
        # the backend gets the image as an attachment, the file inlined into the text
        # (ChatMessage.inlined)
        assert [a.name for a in earlier.attachments] == [
            "photo.png"
        ] and "remember this" in earlier.content
        assert earlier.attachments[0].path  # its kept copy, found again


async def test_a_queued_prompt_keeps_its_attachments(tmp_path):
    """Enter while a reply streams queues the prompt, and the tray's attachments go with it: sent
    with it when the reply ends, or back in the tray when it is given back (Esc)."""
    notes = tmp_path / "notes.md"
    notes.write_text("queued file text\n")
    backend = OnePieceAtATime("one two three")
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("first")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.generating, "the reply to start")
        await attach(pilot, f"/file {notes}", 1)  # a slash command runs at once, even now
        app.prompt_input.focus()
        await pilot.press("A", "A", "A", "enter")
        await wait_for(
            pilot,
            lambda: app.prompt_input.queued == "AAA" and not tray(app).attachments,
            "the queue",
        )
        backend.step.release(6)  # the three words of each reply: the next one will wait again
        await wait_for(
            pilot,
            lambda: len(backend.requests) == 2 and not app.generating,
            "the queued prompt's reply",
        )
        await settle(pilot)
        sent = backend.requests[-1][0][-1]
        assert sent.content.startswith("File: notes.md") and sent.content.endswith("AAA")
        assert [a.name for a in user_messages(app)[-1].attachments] == ["notes.md"]

        app.prompt_input.load_text("second")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.generating, "the next reply to start")
        await attach(pilot, f"/file {notes}", 1)
        app.prompt_input.focus()
        await pilot.press("B", "B", "B", "enter")
        await wait_for(
            pilot,
            lambda: app.prompt_input.queued == "BBB" and not tray(app).attachments,
            "the queue",
        )
        await pilot.press(
            "escape"
        )  # stopped: the queued prompt and its attachments are the user's again
        await wait_for(
            pilot, lambda: len(tray(app).attachments) == 1, "the attachments back in the tray"
        )
        assert app.prompt_input.text == "BBB"
        backend.step.release(100)
        await settle(pilot)
        assert len(backend.requests) == 3


async def test_an_image_that_cannot_be_shown_is_its_label_and_why(tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)  # a PNG's signature, then nothing
    gone = Attachment(
        "image",
        "gone.png",
        "0" * 64,
        "image/png",
        1234,
        "",
        640,
        480,
        note="its kept copy is missing",
    )
    bad = Attachment("image", "broken.png", "1" * 64, "image/png", 48, str(broken), 640, 480)
    app = create_app(RecordingBackend(info=VISION), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        message = await app.chat.add(UserMessage("", (gone, bad)))
        await wait_for(pilot, lambda: thumbnails_loaded(message), "the thumbnails")
        missing, undecoded = message.query(ImageAttachment)
        assert (
            not missing.shown
            and "gone.png · 640×480" in shown(missing)
            and "missing" in shown(missing)
        )
        assert not undecoded.shown and "broken.png · 640×480 · 48 B (not shown:" in shown(undecoded)
        assert not message.query(".attachment--thumb")


async def test_the_palette_and_the_help_offer_attaching(tmp_path):
    app = create_app(RecordingBackend(), blink=False, save=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Attach an image", "Attach a text file"} <= titles
        await app.run_action("attach('image')")  # the palette's entry: /image typed, for the path
        assert app.prompt_input.text == "/image " and app.prompt_input.has_focus
        slash_rows = dict(dict(app.help_sections())["Slash commands"])
        assert {"/image", "/file", "/detach"} <= set(slash_rows)


def test_only_a_graphics_terminal_is_asked_and_no_other_waits_for_textual_image():
    """textual-image asks the terminal on import (~0.2 s before the first frame): only a terminal
    whose environment says it draws pictures is asked; elsewhere nothing is imported at start."""
    import subprocess
    import sys

    from vibechat.app.tui.conversation.attachment_view import graphics_terminal

    assert graphics_terminal({"TERM": "xterm-kitty"})
    assert graphics_terminal({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"})
    assert graphics_terminal({"TERM": "xterm-256color", "KONSOLE_VERSION": "230804"})
    assert not graphics_terminal({"TERM": "xterm-256color", "TERM_PROGRAM": "Apple_Terminal"})
    assert not graphics_terminal({"TERM": "screen-256color"})
    code = (
        "import sys; from vibechat.app.tui.conversation.attachment_view import probe_terminal; "
        "asked = probe_terminal({'TERM': 'xterm-256color'}); "
        "print(asked, 'textual_image' in sys.modules, 'PIL' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False", "False"], out.stderr


def test_a_mistyped_attachment_command_is_pointed_to_the_right_one():
    from vibechat.app.slash import suggestion

    assert "Did you mean /image?" in suggestion("/imag")
    assert "Did you mean /detach?" in suggestion("/deta")


@pytest.mark.model
async def test_the_chat_sends_an_image_to_the_real_engine_and_a_reopened_chat_sends_it_again(
    tmp_path, starter_path, starter_projector
):
    """The whole chat path, no doubles: the starter and the tests' tiny projector in the engine
    process (the chat's WorkerBackend), /image, a reply, the context meter counting the image's
    tokens; then a second app on the same history and engine reopens the conversation, shows the
    image and answers the next prompt with the image still in its prompt. (The projector's
    weights are random: the reply's words are not judged.)"""
    from vibechat.engine.llama.worker import WorkerBackend
    from vibechat.engine.settings.knobs import LlamaCppOptions
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import ChatMessage

    photo = write_png(tmp_path / "leaf.png")
    params = SamplingParams(temperature=0, max_tokens=8)
    backend = WorkerBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            mmproj_path=starter_projector,
            context_size=1024,
            repack="off",
        )
    )
    try:
        app = create_app(backend, params=params, blink=False)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_for(pilot, lambda: app.status.state == "ready", "the model", bound=120)
            assert app.status.model.projector == starter_projector.name
            await attach(pilot, f"/image {photo}", 1)
            await send(pilot, "What is in this picture?")
            await wait_for(pilot, lambda: not app.generating, "the reply", bound=120)
            assert errors(app) == [] and app.status.stats.finish_reason in ("stop", "length")
            with_image = app.status.stats.prompt_tokens
            message = user_messages(app)[-1]
            await wait_for(pilot, lambda: thumbnails_loaded(message), "the thumbnail")
            assert len(message.query(ImageAttachment)) == 1
        # The same prompt without the picture: the image's tokens are what the meter counted more.
        image_tokens = with_image - backend.count_tokens(
            [ChatMessage("user", "What is in this picture?")]
        )
        assert image_tokens > 8

        with History() as history:
            conversation_id = history.latest().id
            [stored] = [m for m in history.get(conversation_id).messages if m.role == "user"]
        assert [a.name for a in stored.attachments] == ["leaf.png"]

        app = create_app(backend, params=params, blink=False)  # a new chat on the same engine
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_for(pilot, lambda: app.status.state == "ready", "the model", bound=120)
            app.chats.open_conversation(conversation_id)
            await wait_for(pilot, lambda: user_messages(app), "the reopened conversation")
            message = user_messages(app)[0]
            await wait_for(pilot, lambda: thumbnails_loaded(message), "the reopened thumbnail")
            await send(pilot, "And now?")
            await wait_for(pilot, lambda: not app.generating, "the second reply", bound=120)
            assert errors(app) == [] and app.status.stats.finish_reason in ("stop", "length")
            sent = app.session.conversation.messages()
            assert [a.name for a in sent[0].images] == ["leaf.png"]  # what the engine was sent
            stripped = [replace(m, attachments=()) for m in sent]
            assert backend.count_tokens(sent) - backend.count_tokens(stripped) == image_tokens
    finally:
        backend.close()
