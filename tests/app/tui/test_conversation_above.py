"""A new reply never lays out the conversation above it again (issue 42, point 1).

Every layout of the screen arranges the chat view's column; Textual's own vertical layout
asks each of its messages its box (``_get_box_model``), however many there are and whatever
changed. The chat view keeps the places of the messages above the one that changed
(``one_layout.KeptColumn``): a new prompt and reply, the reply's words, a sealed segment, and
the footer's keys changing when Stop appears ask none of them again."""

from __future__ import annotations

from collections import Counter

from textual.layouts.vertical import VerticalLayout
from textual.widget import Widget

from fakes import OnePieceAtATime, settle
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage

PARAGRAPH = " ".join(["A paragraph of words that goes on for a while so that it wraps."] * 12)
LONG_REPLY = f"Here is the start.\n\n{PARAGRAPH}\n\n{PARAGRAPH}\n\nAnd a last line."
SHORT_REPLY = "A short reply with `code` in it."


def shown_keys(app) -> list[str]:
    return [key.key for key in app.screen.query("FooterKey")]


def asked(monkeypatch, watched: dict[Widget, str]) -> Counter:
    """How often the layout asks each watched widget its box, by name."""
    counts: Counter = Counter()
    original = Widget._get_box_model

    def counting(self, *args, **kwargs):
        name = watched.get(self)
        if name is not None:
            counts[name] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Widget, "_get_box_model", counting)
    return counts


async def exchange(pilot, backend: OnePieceAtATime, prompt: str) -> None:
    """A whole exchange: the prompt and its reply, every word released."""
    backend.step.release(len(backend.reply.split(" ")))
    pilot.app.prompt_input.load_text(prompt)
    await pilot.press("enter")
    await settle(pilot)


def placed(view, counts: Counter) -> tuple[list, list]:
    """The regions the chat view's column gives its messages (asking none of them: the
    places it kept), and those Textual's own vertical layout gives them from scratch."""
    children = [child for child in view.children if child.display]
    size = view.scrollable_content_region.size
    before = sum(counts.values())
    kept = view.layout.arrange(view, children, size)
    assert sum(counts.values()) == before
    plain = VerticalLayout().arrange(view, children, size)
    return (
        [(p.widget, p.region) for p in kept],
        [(p.widget, p.region) for p in plain],
    )


async def test_a_new_reply_its_segments_and_stop_never_lay_out_the_messages_above(monkeypatch):
    backend = OnePieceAtATime(SHORT_REPLY)
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=(100, 40)) as pilot:
        try:
            await the_last_reply(pilot, backend, monkeypatch)
        finally:
            backend.step.release(1000)  # a failed check leaves no reply waiting


async def the_last_reply(pilot, backend: OnePieceAtATime, monkeypatch) -> None:
    """Three exchanges, then a long reply, released a few words at a time."""
    app = pilot.app
    await settle(pilot)
    for n in range(3):
        await exchange(pilot, backend, f"question {n}")
    above = app.chat.messages()
    assert len(above) == 6
    watched = {
        widget: f"message {i}"
        for i, message in enumerate(above)
        for widget in [message, *message.query("*")]
    }
    counts = asked(monkeypatch, watched)

    backend.reply = LONG_REPLY
    app.prompt_input.load_text("the last question")
    await pilot.press("enter")
    await wait_for(pilot, lambda: len(app.chat.messages()) == 8, "the new reply")
    prompt, reply = app.chat.messages()[6:]
    assert isinstance(reply, AssistantMessage)
    backend.step.release(3)  # the reply's first words
    await wait_for(pilot, lambda: "Here is" in reply.text, "the first words")
    await wait_for(pilot, lambda: prompt.region and reply.region, "both on screen")
    await pilot.pause()
    for widget in [prompt, *prompt.query("*")]:  # from now on above the reply
        watched[widget] = "the new prompt"
    await wait_for(pilot, lambda: "escape" in shown_keys(app), "Stop in the footer")
    words = len(LONG_REPLY.split(" "))
    backend.step.release(words - 8)  # a paragraph sealed, the next one growing
    await wait_for(pilot, lambda: len(reply.body.markdowns) >= 3, "a sealed segment")
    await pilot.pause()
    assert not counts, f"asked again: {dict(counts)}"

    kept, plain = placed(app.chat, counts)
    assert kept == plain  # the kept places are those a layout from scratch gives

    backend.step.release(10)
    await settle(pilot)
    assert reply.text == LONG_REPLY
    kept, plain = placed(app.chat, counts)
    assert kept == plain
