"""What the frame that shows a sent prompt does that buys nothing (issue 42, round five;
bench/bench_worst_turn.py's send frame): a reply laid out before its first words renders no
Markdown. A prompt sent while the model loads is shown with its empty reply at once, and
rendering that empty text imported Rich's Markdown, markdown-it and Pygments on the event loop
(55-105 ms of that frame on a 2-vCPU Xeon), before the warm-up that imports them off it. And
the first words' Markdown, rendered on the loop in that frame, builds no markdown-it parser of
its own."""

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


def test_the_chat_parses_markdown_with_one_parser_in_every_thread(monkeypatch):
    """Rich's Markdown builds a markdown-it parser for every document it renders, and compiles
    its rules on its first parse (a fifth to a third of a reply's first 290 characters, on the
    event loop in the send frame); the chat's Markdown parses with one parser, made once (by the
    warm-up, in its worker), in every thread, into the same document Rich's own ``__init__``
    makes (the same attributes, the same tokens)."""
    import threading

    import markdown_it
    from rich.markdown import Markdown

    from vibechat.app.tui.conversation import chat_markdown

    built: list[int] = []
    init = markdown_it.MarkdownIt.__init__

    def counted(self, *args, **kwargs):
        built.append(threading.get_ident())
        init(self, *args, **kwargs)

    monkeypatch.setattr(markdown_it.MarkdownIt, "__init__", counted)
    monkeypatch.setattr(chat_markdown, "_shared", None, raising=False)  # as in a new process
    text = "# A\n\nSome *words*,\na line.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n~~gone~~\n"
    documents: list = []

    def render_three() -> None:
        documents.extend(chat_markdown.ChatMarkdown(text, "monokai") for _ in range(3))

    # Two new threads (the event loop's and a worker's, as the chat renders).
    for _ in range(2):
        thread = threading.Thread(target=render_three)
        thread.start()
        thread.join()
    assert len(documents) == 6
    assert len(built) == 1  # one parser, not one per document
    rich = Markdown(text, code_theme="monokai", hyperlinks=False)
    for ours in documents[0], documents[-1]:
        assert set(vars(ours)) == set(vars(rich))
        for name in vars(rich):
            if name != "parsed":
                assert getattr(ours, name) == getattr(rich, name), name

        def tokens(document, breaks: str):
            return [
                (
                    token.type,
                    token.content,
                    [
                        breaks if child.type == "softbreak" else child.type
                        for child in token.children or ()
                    ],
                )
                for token in document.parsed
            ]

        # Rich's softbreaks are the chat's hardbreaks (line breaks kept).
        assert tokens(ours, "?") == tokens(rich, "hardbreak")
