"""The chat's key bindings (``VibechatApp.BINDINGS``), each with an id (``[keys]`` in the
config file can rebind it: ``appconfig.BINDING_IDS``), a description (the footer, help and the
command palette name the action by it) and a tooltip (what it does)."""

from __future__ import annotations

from textual.binding import Binding

from vibechat.engine.settings.params import PARAM_SPECS

from ...appconfig import nudge_ids


def nudge_bindings() -> list[Binding]:
    """Each parameter's nudge keys (``ParamSpec.nudge``, engine/settings/params.py): one fine
    step down or up (``VibechatApp.action_nudge``), named by its label."""
    out: list[Binding] = []
    for spec in PARAM_SPECS.values():
        if spec.nudge is None:
            continue
        down, up = nudge_ids(spec.name)
        out += [
            Binding(
                spec.nudge.down,
                f"nudge('{spec.name}', -1)",
                f"{spec.label} down",
                id=down,
                show=False,
                priority=True,
                tooltip=spec.nudge.lower,
            ),
            Binding(
                spec.nudge.up,
                f"nudge('{spec.name}', 1)",
                f"{spec.label} up",
                id=up,
                show=False,
                priority=True,
                tooltip=spec.nudge.higher,
            ),
        ]
    return out


# The description names an action in the footer, help and the command palette; the
# tooltip says what it does (the palette's help line, and the footer's on hover). The
# footer shows only what fits in 80 columns (Stop only while a reply streams); the rest
# is in help (F1) and the palette.
APP_BINDINGS: list[Binding | tuple[str, str] | tuple[str, str, str]] = [
    Binding("f1", "help", "Help", id="help", tooltip="Every key binding, by where it works"),
    Binding(
        "f2",
        "toggle_params",
        "Params",
        id="toggle_params",
        tooltip="Show or hide the sampling parameters and the GPU layers slider",
    ),
    Binding(
        "ctrl+n",
        "new_conversation",
        "New chat",
        id="new_conversation",
        priority=True,
        tooltip="Start a new conversation (clears the view and the model's KV cache)",
    ),
    # Before Regenerate on the same key: it answers only while the welcome offers the last chat
    # (an empty chat, where there is nothing to regenerate); else the key goes on to Regenerate.
    Binding(
        "ctrl+r",
        "resume_last",
        "Reopen last chat (empty chat)",
        id="resume_last",
        show=False,
        priority=True,
        tooltip="Open the last saved conversation (the welcome of an empty chat offers it)",
    ),
    Binding(
        "ctrl+r",
        "regenerate",
        "Regenerate",
        id="regenerate",
        show=False,
        priority=True,
        tooltip=(
            "A new reply in place of the focused or last one (the old one stays: ← → on it switch)"
        ),
    ),
    Binding(
        "ctrl+l",
        "edit_last",
        "Edit message",
        id="edit_last",
        show=False,
        priority=True,
        tooltip=(
            "Take your focused or last message back into the input, to change and resend it "
            "(the old one stays: ← → on it switch)"
        ),
    ),
    Binding(
        "ctrl+o",
        "copy_last",
        "Copy reply",
        id="copy_last",
        show=False,
        priority=True,
        tooltip="Copy the last reply to the clipboard (OSC 52: works over SSH)",
    ),
    Binding(
        "ctrl+t",
        "toggle_thinking",
        "Toggle thinking",
        id="toggle_thinking",
        show=False,
        priority=True,
        tooltip=(
            "Open or close the last reply's thinking (a reasoning model's; Enter or a click on any)"
        ),
    ),
    Binding(
        "ctrl+b",
        "toggle_sidebar",
        "Chats",
        id="toggle_sidebar",
        priority=True,
        tooltip="Show or hide the saved conversations, newest first",
    ),
    Binding(
        "ctrl+f",
        "search_history",
        "Search chats",
        id="search_history",
        show=False,
        priority=True,
        tooltip="Search every saved message and jump to the match",
    ),
    Binding("f3", "models", "Models", id="models", tooltip="Load another model, or download one"),
    Binding(
        "f4",
        "change_theme",
        "Theme",
        id="change_theme",
        show=False,
        tooltip="Pick the colour theme (remembered in the config file)",
    ),
    Binding(
        "f11",
        "toggle_lens",
        "Lens on/off",
        id="toggle_lens",
        show=False,
        tooltip=(
            "Turn the token lens on or off for this conversation: replies keep each token's "
            "candidates (the lens_history_bytes setting bounds them)"
        ),
    ),
    Binding(
        "f12",
        "open_lens",
        "Token lens",
        id="open_lens",
        show=False,
        tooltip=(
            "Look at the focused or last reply token by token: its candidates, and where the "
            "sliders cut them (Esc leaves)"
        ),
    ),
    # Works from the input too (f does on the comparison itself, once focused).
    Binding(
        "ctrl+backslash",
        "compare_flip",
        "Show the other compared reply",
        id="compare_flip",
        show=False,
        priority=True,
        tooltip=(
            "Below 100 columns a comparison (/compare) shows one reply at a time: show the other"
        ),
    ),
    Binding("escape", "stop", "Stop", id="stop", tooltip="Stop the reply; the text so far stays"),
    Binding(
        "escape",
        "cancel_edit",
        "Cancel edit",
        id="cancel_edit",
        tooltip=(
            "Put back the message taken to edit (Ctrl+L) and its reply, and the input as it was"
        ),
    ),
    # Ctrl+C stops a streaming reply, as in ollama and llama-cli; otherwise it falls through
    # to the input's (or a mouse selection's) copy, then to Textual's hint on how to quit.
    # Binding ctrl+c here replaces Textual's own ctrl+c binding (a class's bindings for a
    # key replace its base classes'), so that hint is bound again.
    Binding(
        "ctrl+c",
        "stop",
        "Stop",
        id="interrupt",
        show=False,
        priority=True,
        tooltip="Stop the reply; the text so far stays",
    ),
    Binding("ctrl+c", "help_quit", "How to quit", id="quit_hint", show=False, system=True),
    # Ctrl+D quits from an empty input, as in ollama and shells. The input passes the key on only
    # when it is empty (PromptInput.check_action); with text in it, Ctrl+D deletes to the right.
    Binding(
        "ctrl+d",
        "quit_if_empty",
        "Quit if the input is empty",
        id="quit_if_empty",
        show=False,
        tooltip="Quit vibechat, as Ctrl+D does in ollama and shells (Ctrl+Q quits at any time)",
    ),
    *nudge_bindings(),
    Binding(
        "ctrl+g",
        "hide_config_problems",
        "Hide config problems",
        id="hide_config_problems",
        show=False,
        priority=True,
        tooltip="Hide the bar that lists the config's problems (they stay until fixed)",
    ),
    Binding(
        "ctrl+end",
        "scroll_chat_end",
        "Scroll to end",
        id="scroll_end",
        show=False,
        tooltip="Scroll the conversation to the newest message and follow the reply",
    ),
    Binding(
        "ctrl+home",
        "scroll_chat_home",
        "Scroll to start",
        id="scroll_home",
        show=False,
        tooltip="Scroll the conversation to its first message",
    ),
]
