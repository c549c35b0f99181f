"""What the app's parts (``actions.py``, ``bound_keys.py``, ``theme_choice.py``) use of
``VibechatApp``, for the type checker only.

The parts are mixins of ``VibechatApp``: Textual looks a binding's action up on the app
(``action_<name>``), so the actions must be the app's methods, and a mixin is how a group of
them lives in a module of its own. At run time they derive from ``object`` and the app itself
has everything listed here; to the type checker they derive from ``AppFace``, which declares it
(``VibechatApp``'s controllers, made in its ``__init__``, and the properties it defines). The
parts hand the app to the controllers as their host, so ``AppFace`` is also what the controllers
see of it (``PresetHost``: ``host.ChatHost`` and the model manager).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.settings.config import LoadedConfig

    from ..controllers.attachments import Attachments
    from ..controllers.branches import Branches
    from ..controllers.compactions import Compactions
    from ..controllers.comparisons import Comparisons
    from ..controllers.conversations import Conversations
    from ..controllers.copies import Copies
    from ..controllers.lens import Lens
    from ..controllers.models import Models
    from ..controllers.paths import Paths
    from ..controllers.presets import PresetHost
    from ..controllers.regenerations import Regenerations
    from ..controllers.replies import Replies
    from ..controllers.thinking_blocks import ThinkingBlocks
    from ..controllers.tool_rounds import ToolRounds
    from ..conversation.chat_view import ChatView
    from ..widgets.param_panel import ParamPanel
    from ..widgets.prompt_input import PromptInput
    from .outside_app import OutsideTextApp
    from .param_changes import ParamChanges
    from .side_panels import SidePanels

    class AppFace(OutsideTextApp, PresetHost):
        """``VibechatApp`` as its parts see it."""

        config: LoadedConfig
        replies: Replies
        regenerations: Regenerations
        paths: Paths
        copies: Copies
        thinking: ThinkingBlocks
        models: Models
        chats: Conversations
        branches: Branches
        compactions: Compactions
        param_changes: ParamChanges
        side_panels: SidePanels
        attachments: Attachments
        tool_rounds: ToolRounds
        lens: Lens

        @property
        def comparisons(self) -> Comparisons: ...

        @property
        def conversation(self) -> Conversation: ...
        @property
        def generating(self) -> bool: ...
        @property
        def chat(self) -> ChatView: ...
        @property
        def prompt_input(self) -> PromptInput: ...
        @property
        def panel(self) -> ParamPanel: ...
        def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]: ...

else:
    AppFace = object
