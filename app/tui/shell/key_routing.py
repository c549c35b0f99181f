"""Where a key or a paste goes before Textual hands it on (``VibechatApp.on_event``).

Two rules, so that a key means what the user saw when they pressed it:

- A key that types, pressed while the focus is on the conversation list, the chat or the
  parameter panel (``TypesIntoInput``), gives the input the focus first: the keys that came
  with it follow it there, in order; a paste there goes to the input whole.
- While a question is up (``question.py``), what the user types or pastes goes where they
  were typing, and a key pressed before the question could be seen goes nowhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import events
from textual.app import App
from textual.widgets import Input, TextArea

from ..conversation.compare_view import CompareView
from ..screens.question import QuestionScreen
from ..widgets.prompt_input import PromptInput
from ..widgets.type_through import TypesIntoInput
from .outside_app import pasted_text

if TYPE_CHECKING:
    from ..controllers.host import Handlers


class KeyRouter:
    """The app's keys and pastes, looked at before Textual's own handling: typing elsewhere
    goes to the input, typing under a question goes where the user was typing."""

    def __init__(self, app: App[Any], prompt: Callable[[], PromptInput]) -> None:
        """``prompt``: the input (queried when needed: it is composed after this is made)."""
        self._app = app
        self._prompt = prompt

    def handlers(self) -> Handlers:
        """The messages it answers (the app's ``route`` hands them over)."""
        return {TypesIntoInput.Typed: self.typed}

    def hand_on(self, event: events.Key | events.Paste) -> bool:
        """Route ``event`` (a key or a paste the terminal sent): True when Textual handles it
        as ever, False when it was typed here (under a question) or goes nowhere."""
        if isinstance(event, events.Key) and self.typing_elsewhere(event):
            self._app.screen.set_focus(self._prompt())
        question = self.question
        if question is None:
            return True
        if isinstance(event, events.Paste):
            self.type_on(pasted_text(event.text))
            return False
        verdict = question.verdict(event)
        if verdict == "pass":
            self.type_on(event.character or "", backspace=event.key == "backspace")
        return verdict == "take"

    def typed(self, message: TypesIntoInput.Typed) -> None:
        """A paste (whole) while a message, the chat, the conversation list or the parameter
        panel has the focus: the text goes where it belongs, at the input's cursor (typed keys
        go there by ``typing_elsewhere``)."""
        prompt = self._prompt()
        prompt.focus()
        prompt.insert(message.character, maintain_selection_offset=False)

    def typing_elsewhere(self, event: events.Key) -> bool:
        """``event`` types, and the focus is where typing belongs in the input (the
        conversation list, the chat, the parameter panel: ``TypesIntoInput``).

        The input takes the focus now, before the key is handed on, so the keys that came
        with it (a burst: tmux, a paste without brackets, a fast typist) follow it there in
        order: "/d" Enter typed fast on the list put "/d" in the input and then opened the
        list's conversation with the Enter."""
        app = self._app
        focused = app.focused
        if not (event.is_printable and event.character) or focused is None:
            return False
        if app.screen is not app.default_screen:
            return False
        # A comparison's own keys (1 / 2 pick, [ / ] stop one side, f flips) stay with it.
        if isinstance(focused, CompareView) and focused.acts_on(event.key):
            return False
        return any(isinstance(node, TypesIntoInput) for node in focused.ancestors_with_self)

    @property
    def question(self) -> QuestionScreen | None:
        """The question on screen, if one is."""
        # The stack, not ``screen``: that raises while the stack is empty.
        stack = self._app.screen_stack
        return stack[-1] if stack and isinstance(stack[-1], QuestionScreen) else None

    def type_on(self, text: str, backspace: bool = False) -> None:
        """``text`` (or a Backspace) typed while a question is up, where the user was typing:
        the text field focused under it, else the prompt input (as typing on a message or the
        list does)."""
        app = self._app
        below = app.screen_stack[-2] if len(app.screen_stack) > 1 else app.screen
        target = below.focused
        if not isinstance(target, (Input, TextArea)):
            target = self._prompt()
            if below is app.default_screen:
                target.focus()
        if backspace:
            target.action_delete_left()
        elif isinstance(target, Input):
            target.insert_text_at_cursor(text)
        else:
            target.insert(text, maintain_selection_offset=False)
