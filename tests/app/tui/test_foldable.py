"""The foldable block has one home (app/tui/conversation/foldable.py): a reasoning model's thinking
and a text file under a prompt share its CSS and its toggle, in a real Textual app."""

from __future__ import annotations

from textual.app import App, ComposeResult

from vibechat.app.tui.conversation.attachment_view import FileAttachment
from vibechat.app.tui.conversation.foldable import FoldableBlock
from vibechat.app.tui.conversation.thinking_block import ThinkingBlock
from vibechat.engine.turns.attachments import Attachment

NOTES = Attachment(
    "file",
    "notes.md",
    "0" * 64,
    "text/plain",
    24,
    "/nowhere/notes.md",
    text="first line\nsecond line\n",
)


class Blocks(App):
    def compose(self) -> ComposeResult:
        yield ThinkingBlock("I wonder.\nYes.", seconds=2.0, count=5)
        yield FileAttachment(NOTES)


async def test_thinking_and_a_text_file_fold_and_open_alike():
    app = Blocks()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        for block in (app.query_one(ThinkingBlock), app.query_one(FileAttachment)):
            assert isinstance(block, FoldableBlock) and not block.expanded
            header, body = block.query_one(".fold--header"), block.query_one(".fold--body")
            assert header.size.height == 1 and not body.display  # folded: the header line only
            block.focus()
            await pilot.press("enter")
            await pilot.pause()
            assert block.expanded and body.display and body.size.height >= 2
            block.toggle()
            await pilot.pause()
            assert not block.expanded and not body.display
