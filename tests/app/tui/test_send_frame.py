"""What the frame that shows a sent prompt does that buys nothing (issue 42, round five;
bench/bench_worst_turn.py's send frame): a reply laid out before its first words renders no
Markdown. A prompt sent while the model loads is shown with its empty reply at once, and
rendering that empty text imported Rich's Markdown, markdown-it and Pygments on the event loop
(55-105 ms of that frame on a 2-vCPU Xeon), before the warm-up that imports them off it."""

from __future__ import annotations

from vibechat.app.tui.conversation import markdown_segment


def _chat_view_app():
    """A chat view alone in an app."""
    from textual.app import App, ComposeResult

    from vibechat.app.tui.conversation.chat_view import ChatView

    class OneView(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    return OneView()


async def test_a_reply_laid_out_before_its_first_words_renders_no_markdown(monkeypatch):
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    built: list[str] = []
    chat_markdown = markdown_segment.chat_markdown

    def counted(markup: str, code_theme: str):
        built.append(markup)
        return chat_markdown(markup, code_theme)

    monkeypatch.setattr(markdown_segment, "chat_markdown", counted)
    app = _chat_view_app()
    async with app.run_test(size=(80, 30)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage(live=True))
        await pilot.pause()
        assert reply.body.size.height >= 0 and reply.body.content_size.width > 0  # laid out
        assert built == []
        await reply.append("The keeper climbed the stairs.")
        await pilot.pause()
        assert built == ["The keeper climbed the stairs."]  # its words render as ever
