"""The help screen's rows and the command palette's entries, from the bindings.

Every action is reachable from the command palette: each binding with a
description is one entry (keys sharing an action are one entry), plus the
actions that have no key of their own (``PALETTE_ONLY``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from textual.app import SystemCommand
from textual.binding import Binding

from ... import slash
from .. import outside
from ..controllers.attachments import COMMANDS as ATTACH
from ..conversation.assistant_message import AssistantMessage
from ..conversation.attachment_view import FileAttachment
from ..conversation.compare_view import CompareView
from ..conversation.messages import ChatMessageWidget
from ..conversation.thinking_block import ThinkingBlock
from ..widgets.attachment_tray import TrayItem
from ..widgets.param_panel import ParamPanel
from ..widgets.sidebar import ConversationSidebar
from ..widgets.slider import Slider
from ..widgets.token_lens import TokenLens

# Actions without a key of their own: (title, help, action); {config} is the config file.
PALETTE_ONLY = [
    ("Download a model", "Search the Hugging Face Hub and download a GGUF model", "download"),
    (
        "Apply a preset",
        "Pick one of the presets in {config} ([presets.NAME]: model, system prompt, parameters)",
        "presets",
    ),
    (
        "Save parameters as default",
        "Write the current sampling parameters to the [params] table of {config}",
        "save_params_default",
    ),
    ("Rename this conversation", "Give the open conversation another title", "rename_conversation"),
    (
        "Delete this conversation",
        "Delete the open conversation from the history (asks first)",
        "delete_conversation",
    ),
    (
        "Export this conversation",
        "Write the open conversation to a Markdown or JSON file",
        "export_conversation",
    ),
    (
        "Fork this branch",
        "Copy the branch on screen into a new conversation and open it (the original keeps "
        "every branch)",
        "fork_conversation",
    ),
    (
        "Compact the conversation",
        "The model summarises the conversation; accepted, it goes on from a new branch that "
        "starts with the summary, the original kept (/compact [instructions]; Ctrl+X on a "
        "message: up to it)",
        "compact",
    ),
    (
        "Pin or unpin a message",
        "A pinned message is never left out to fit the context (the focused message; Ctrl+U "
        "on it does the same)",
        "pin_message",
    ),
    (
        "Conversation list: chats, runs, prompt files or all",
        "Show the next of them in the conversation list (f in the list)",
        "filter_conversations",
    ),
    (
        "Attach an image",
        "Attach an image to the next prompt, for a vision model (/image PATH)",
        "attach('image')",
    ),
    (
        "Attach a text file",
        "Attach a text file to the next prompt: its text goes to the model with its name "
        "(/file PATH)",
        "attach('file')",
    ),
    (
        "Compare the next prompt…",
        "Answer the next prompt twice, side by side: a small dialog asks what side B changes "
        "(/compare SPEC)",
        "compare_setup",
    ),
    (
        "Compare the last prompt again",
        "Answer the last prompt again, twice, side by side, with the last /compare's settings "
        "(/compare again SPEC for others)",
        "compare_again",
    ),
    (
        "Pick A",
        "Of two replies compared, keep the first column's (1 on the comparison)",
        "compare_pick(0)",
    ),
    (
        "Pick B",
        "Of two replies compared, keep the second column's (2 on the comparison)",
        "compare_pick(1)",
    ),
    (
        "Stop side A alone",
        "Of two replies being compared, stop the first column's; the other goes on ([)",
        "compare_stop(0)",
    ),
    (
        "Stop side B alone",
        "Of two replies being compared, stop the second column's; the other goes on (])",
        "compare_stop(1)",
    ),
    (
        "Thinking expanded or folded",
        "New replies show their thinking expanded, or folded to one line (until "
        "vibechat closes; thinking_expanded in {config} keeps it)",
        "toggle_thinking_expanded",
    ),
]


def by_action(bindings: Iterable[Binding]) -> list[list[Binding]]:
    """The bindings people see (a description, not Textual's own ``system`` ones), grouped
    by action: Esc and Ctrl+C both stop a reply, and are shown as one entry."""
    groups: dict[str, list[Binding]] = {}
    for binding in bindings:
        if binding.description and not binding.system:
            groups.setdefault(binding.action, []).append(binding)
    return list(groups.values())


def help_sections(
    app_bindings: list[Binding], key_for: Callable[[Binding], str]
) -> list[tuple[str, list[tuple[str, str]]]]:
    """The help screen (F1): every key, by where it works; ``key_for`` shows a binding's
    key after the config's overrides."""

    def rows(bindings) -> list[tuple[str, str]]:
        return [
            (" / ".join(key_for(b) for b in same), same[0].description)
            for same in by_action(bindings)
        ]

    return [
        (
            "Chat",
            rows(app_bindings)
            + [
                ("ctrl+p", "Command palette: every action by name"),
                ("ctrl+q", "Quit"),
                ("pgup / pgdn", "Scroll the conversation"),
                ("tab / shift+tab", "Move focus (input, messages, parameter sliders)"),
            ],
        ),
        (
            "Input",
            [
                ("enter", "Send"),
                ("ctrl+j (shift+enter, alt+enter)", "New line"),
                ("up / down", "Earlier / later prompts (in an empty input)"),
            ],
        ),
        (
            "A focused message (Tab or click it; typing goes back to the input)",
            rows(ChatMessageWidget.BINDINGS)
            + rows(AssistantMessage.BINDINGS)
            + rows(ThinkingBlock.BINDINGS)
            + rows(FileAttachment.BINDINGS)
            + rows(TrayItem.BINDINGS),
        ),
        ("Two replies compared (/compare; Tab to them)", rows(CompareView.BINDINGS)),
        ("Parameter panel (F2)", rows(Slider.BINDINGS) + rows(ParamPanel.BINDINGS)),
        ("Token lens (F12; the sliders still move under it)", rows(TokenLens.BINDINGS)),
        (
            "Conversation list (Ctrl+B)",
            [("enter", "Open the conversation")] + rows(ConversationSidebar.BINDINGS),
        ),
        (
            "Slash commands",
            [(name, text.split(": ", 1)[1]) for name, text in {**slash.COMMANDS, **ATTACH}.items()]
            + [("//text", "Send a message that starts with /")],
        ),
    ]


def action_commands(
    app_bindings: list[Binding],
    bound_key: Callable[[Binding], str],
    config_path: object,
    run_action: Callable[[str], object],
) -> Iterable[SystemCommand]:
    """One palette entry per action. The palette reads help lines as markup: every bracket is
    escaped (``outside.markup_literal``)."""
    for same in by_action(app_bindings):
        first, action = same[0], same[0].action
        keys = " / ".join(bound_key(b) for b in same)
        yield SystemCommand(
            first.description,
            outside.markup_literal(f"{first.tooltip or first.description} ({keys})"),
            lambda action=action: run_action(action),
        )
    for title, help_text, action in PALETTE_ONLY:
        yield SystemCommand(
            title,
            outside.markup_literal(outside.one_line(help_text.format(config=config_path))),
            lambda action=action: run_action(action),
        )
