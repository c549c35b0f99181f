"""The one place the chat's sampling parameters change: from the parameter panel's sliders,
a nudge key (F5–F10, ``ParamSpec.nudge``), a slash command or a preset (``set``), and a
conversation opened with the parameters saved with it (``show``).

Each change reaches the next generation (the conversation keeps it), the panel, the chat
state (the status bar's reply format, thinking switch and token lens) and the token lens's cut
lines (moved live while the lens is open).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.app import App

from vibechat.engine.chat.session import ChatSession
from vibechat.engine.settings.params import PARAM_SPECS, SamplingParams

from ..chat_state import ChatState
from ..widgets.param_panel import ParamPanel, param_slider
from . import notices

if TYPE_CHECKING:
    from ..controllers.host import Handlers

# Seconds a nudge's notice ("Temperature 1.2") stays.
NUDGE_NOTICE_S = 1.5


class ParamChanges:
    """The conversation's sampling parameters as the chat changes them, and the nudge keys'
    one notice (replaced on each press, never stacked)."""

    def __init__(
        self,
        app: App[Any],
        session: ChatSession,
        panel: Callable[[], ParamPanel],
        state: ChatState,
        shown: Callable[[SamplingParams], None] | None = None,
    ) -> None:
        """``panel``: the parameter panel (queried when needed: it is composed after this is
        made); ``shown``: told each change too (the token lens's cut lines follow the sliders)."""
        self._app = app
        self._session = session
        self._panel = panel
        self._state = state
        self._shown = shown
        self._nudge_notice = notices.Slot()

    def handlers(self) -> Handlers:
        """The messages it answers (the app's ``route`` hands them over)."""
        return {ParamPanel.Changed: self.changed}

    def set(self, params: SamplingParams) -> None:
        """The next generation uses exactly ``params``, and the conversation remembers them."""
        self._session.chat.set_params(params)
        self._show(params)

    def show(self, params: SamplingParams) -> None:
        """An opened conversation's parameters (already saved with it)."""
        self._session.conversation.params = params
        self._show(params)

    def _show(self, params: SamplingParams) -> None:
        """The panel's sliders, the chat state (the reply format, the thinking switch, the
        lens) and the token lens's cut lines."""
        self._panel().params = params
        self._state.show_params(params)
        if self._shown is not None:
            self._shown(params)

    def changed(self, message: ParamPanel.Changed) -> None:
        """The panel's sliders now say ``message.params``: set, unless they are already the
        conversation's."""
        if message.params != self._session.conversation.params:
            self.set(message.params)

    def nudge(self, name: str, direction: int) -> None:
        """Parameter ``name`` one fine step down (``direction`` -1) or up (+1), as its slider
        steps, said in one notice."""
        spec = param_slider(PARAM_SPECS[name])
        params = self._session.conversation.params
        value = spec.clamp(getattr(params, name) + spec.fine * direction)
        self.set(params.replace(**{name: value}))
        shown = f"{spec.label} {spec.show(value)}"
        self._nudge_notice.show(self._app, shown, timeout=NUDGE_NOTICE_S)
