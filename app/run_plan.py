"""What to run: the model and engine, the sampling parameters, the system prompt and the
conversation it continues, decided once from the loaded config, a preset and the command's
flags (:class:`RunPlan`). The chat (``vibechat``), ``vibechat run`` and ``run --prompts-file``
each build one and act on it, so a setting reaches all three the same way:

    flags > preset > ``VIBECHAT_*`` > the config file > defaults

and, for ``run --continue`` / ``--conversation``, flags > preset > the saved conversation's
own system prompt and parameters > the config (the conversation was set up on purpose: the
standing defaults do not change it; a preset named on purpose does). Its model and server
are its own: another one named on purpose needs ``--switch-model``
(app/conversation_backend.py).

Headless: no Textual, no Rich, no llama.cpp; nothing is loaded or opened here but the
config's presets (``--preset``).

Imports inside functions are deliberate: the history database, the chat log and the preset files
load only when a run needs them (start-up time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.choices import check_speculative
from vibechat.engine.settings.knobs import EngineSettings

from .conversation_backend import OwnBackend, chat_mix, own_engine, start_engine
from .options import SettingFlags

if TYPE_CHECKING:
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.history import History
    from vibechat.engine.chat.records import StoredConversation
    from vibechat.engine.settings.config import LoadedConfig
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.settings.presets import Preset
    from vibechat.engine.settings.structured import OutputFormat
    from vibechat.engine.settings.table import Config


@dataclass(frozen=True)
class RunFlags:
    """What the command line asked for, as typed: every setting's flag (``settings``: the
    engine flags given, the sampling flags, ``--system``) and ``--preset`` (None: not given)."""

    settings: SettingFlags = field(default_factory=SettingFlags)
    preset: str | None = None


@dataclass(frozen=True)
class RunPlan:
    """What a command runs (see the module docstring). ``system`` None: no system prompt, or,
    continuing a conversation, the conversation's own; ``chat``: the conversation a ``run``
    adds to (None until :meth:`continuing`)."""

    # The config with the preset and the flags on top (``config show``'s view).
    loaded: LoadedConfig
    flags: RunFlags
    # The model and how it runs.
    engine: EngineSettings
    params: SamplingParams
    system: str | None
    preset: Preset | None = None
    # --json-schema / --grammar.
    output_format: OutputFormat | None = None
    chat: ChatLog | None = None

    @classmethod
    def of(cls, loaded: LoadedConfig, flags: RunFlags) -> RunPlan:
        """The plan for ``loaded`` (file and variables) with ``flags.preset`` and the flags on
        top. An unknown or broken preset, or a flag's bad value, raises one line."""
        preset = None
        if flags.preset is not None:
            from vibechat.engine.settings.preset_file import apply_to_loaded, load_presets

            preset = load_presets(loaded.path).get(flags.preset)
            loaded = apply_to_loaded(loaded, preset)
        loaded = flags.settings.apply(loaded)
        config = loaded.config
        return cls(
            loaded=loaded,
            flags=flags,
            engine=EngineSettings.from_config(config),
            params=config.params,
            system=config.system_prompt,
            preset=preset,
        )

    @property
    def config(self) -> Config:
        return self.loaded.config

    def check(self) -> None:
        """Flags that would be ignored without a word are refused: ``--draft-tokens`` while
        drafting is off (no ``--draft``, nor ``speculative`` or a draft model in the config)."""

        config = self.config
        if (
            self.flags.settings.engine.get("draft_tokens") is not None
            and check_speculative(config.speculative or "off") == "off"
            and not config.draft_model
        ):
            raise VibechatError(
                "--draft-tokens applies only with speculative decoding: add --draft prompt-lookup, "
                "or drop --draft-tokens."
            )

    def with_output_format(self, output_format: OutputFormat | None) -> RunPlan:
        """The reply constrained to ``output_format`` (``--json-schema``/``--grammar``; None:
        as the config and preset say)."""
        if output_format is None:
            return self
        return replace(
            self,
            output_format=output_format,
            params=self.params.replace(output_format=output_format),
        )

    def saves(self, no_save: bool, continuing: bool) -> bool:
        """Whether the run is saved in the history: not with ``--no-save``; ``save_runs =
        false`` keeps runs out too, except one that asks to add to a saved conversation."""
        return not no_save and (self.config.save_runs or continuing)

    def open_conversation(
        self,
        *,
        no_save: bool,
        continue_latest: bool,
        conversation_id: int | None,
        switch: bool = False,
    ) -> RunPlan:
        """The plan for a ``run`` (``--continue``, ``--conversation ID`` or a new
        conversation, saved unless ``--no-save``): :func:`open_chat`, then :meth:`continuing`
        (``switch``: ``--switch-model``)."""
        continuing = continue_latest or conversation_id is not None
        if switch and not continuing:
            raise VibechatError(
                "--switch-model applies only with --continue or --conversation ID: drop it."
            )
        chat = open_chat(
            no_save=not self.saves(no_save, continuing),
            continue_latest=continue_latest,
            conversation_id=conversation_id,
        )
        try:
            return self.continuing(chat, switch)
        except BaseException:
            if chat.history is not None:
                chat.history.close()
            raise

    def continuing(self, chat: ChatLog, switch: bool = False) -> RunPlan:
        """The plan for a ``run`` that adds to ``chat``. A saved conversation goes on with its
        own parameters and system prompt, under the preset and then the flags, and with its
        own model on its own server: another one named on purpose is refused in one line
        unless ``switch`` (``--switch-model``; app/conversation_backend.py). A new one takes
        the plan as it is."""
        if chat.conversation_id is None:
            return replace(self, chat=chat)
        params, system = self.over_saved(chat.conversation.params)
        engine = self.engine
        own = OwnBackend.of(chat.model, chat.model_path)
        # Its own model and server, or (chosen on purpose) one line; see conversation_backend.
        if own is not None:
            engine = own_engine(own, engine, self.chosen_backend(), chat.conversation_id, switch)
        return replace(self, chat=chat, params=params, system=system, engine=engine)

    def over_saved(self, params: SamplingParams) -> tuple[SamplingParams, str | None]:
        """A saved conversation's ``params`` with the preset and then the flags on top (the
        config's standing defaults do not change them), and the system prompt they name in
        place of its own (None: none named, it keeps its own; "": none)."""
        preset, flags = self.preset, self.flags.settings
        if preset is not None:
            params = preset.over(params)
        params = flags.sampling.to_params(params)
        if self.output_format is not None:
            params = params.replace(output_format=self.output_format)
        system = flags.system
        if system is None and preset is not None:
            # "" takes the conversation's system prompt away, as the preset says.
            system = preset.system
        return params, system

    def chosen_backend(self) -> set[str]:
        """What the user named on purpose of where and what runs: ``model``, ``base_url``,
        ``backend`` (their flags), ``model`` for a preset's model too."""
        chosen = {
            key
            for key in ("model", "base_url", "backend")
            if self.flags.settings.engine.get(key) is not None
        }
        if self.preset is not None and self.preset.model is not None:
            chosen.add("model")
        return chosen

    def opening(
        self, *, no_save: bool, new: bool, continue_latest: bool, conversation_id: int | None
    ) -> ChatStart:
        """How the chat starts: on a saved conversation (``--continue``, ``--conversation ID``, or
        ``continue_last`` in the config unless ``--new``), picked as ``run`` picks it
        (:func:`pick_conversation`: an empty history or an unknown id asked for is one line),
        with the engine on that conversation's own model where opening it would load that
        anyway (conversation_backend.start_engine); else a new chat. A model or server named
        on purpose that opening it would switch away from is one line (chat_mix). The
        standing setting never stops a start: with nothing saved, a history that cannot be
        read, or another model named, the chat opens new (and says what is wrong with the
        history, as ever)."""
        from vibechat.engine.chat.history import History
        from vibechat.engine.errors import VibechatError

        from .appconfig import chat_settings

        check_pick(
            no_save=no_save, continue_latest=continue_latest, conversation_id=conversation_id
        )
        asked = continue_latest or conversation_id is not None
        if new and asked:
            raise VibechatError(
                "--new starts a new chat, and --continue/--conversation open a saved one: "
                "use one of them."
            )
        standing = not (asked or new or no_save) and chat_settings(self.loaded).continue_last
        if not (asked or standing):
            return ChatStart(self)
        # Reading a saved chat needs no write access, as in the list.
        history = History(read_only_ok=True)
        try:
            stored = pick_conversation(
                history.open(),
                continue_latest=continue_latest or standing,
                conversation_id=conversation_id,
            )
        except BaseException as exc:
            if asked or not isinstance(exc, VibechatError):
                history.close()
                raise
            return ChatStart(self, history=history)
        # Not reached: something was asked for.
        if stored is None:
            return ChatStart(self, history=history)
        own = OwnBackend.of(stored.summary.model, stored.model_path)
        flag = "--continue" if continue_latest else "--conversation"
        mix = chat_mix(own, self.engine, self.chosen_backend(), stored.id, flag)
        # Another model named on purpose: refused, or (standing) a new chat.
        if mix is not None:
            if standing:
                return ChatStart(self, history=history)
            history.close()
            raise VibechatError(mix)
        engine = start_engine(own, self.engine, self.chosen_backend())
        return ChatStart(replace(self, engine=engine), stored.id, history, self.over_saved)


@dataclass(frozen=True)
class ChatStart:
    """What the chat starts on (:meth:`RunPlan.opening`): the plan, the saved conversation it
    opens (None: a new chat), the history that was read for it (open; None: none was, the
    chat opens its own) and what the preset and flags set over the conversation's own
    parameters and system prompt (:meth:`RunPlan.over_saved`, as in ``run --continue``)."""

    plan: RunPlan
    conversation_id: int | None = None
    history: History | None = None
    over_saved: Callable[[SamplingParams], tuple[SamplingParams, str | None]] | None = None


def open_chat(*, no_save: bool, continue_latest: bool, conversation_id: int | None) -> ChatLog:
    """The ``ChatLog`` a ``run`` adds to: a new saved conversation, a saved one to continue,
    or (``no_save``) one kept in memory only."""
    from vibechat.engine.chat.chatlog import ChatLog
    from vibechat.engine.chat.conversation import Conversation
    from vibechat.engine.chat.history import History

    check_pick(no_save=no_save, continue_latest=continue_latest, conversation_id=conversation_id)
    if no_save:
        return ChatLog(Conversation())
    # A read-only data dir fails here, in one line, before any work.
    history = History().open()
    try:
        stored = pick_conversation(
            history, continue_latest=continue_latest, conversation_id=conversation_id
        )
        if stored is not None:
            return ChatLog.from_stored(stored, history)
    except BaseException:
        history.close()
        raise
    return ChatLog(Conversation(), history, source="run")


def check_pick(*, no_save: bool, continue_latest: bool, conversation_id: int | None) -> None:
    """``--continue`` and ``--conversation ID`` (of ``run`` and of the chat) asked for together,
    or with ``--no-save``: one line naming the fix."""
    from vibechat.engine.errors import VibechatError

    if continue_latest and conversation_id is not None:
        raise VibechatError(
            "--continue and --conversation both pick a conversation: use one of them."
        )
    if no_save and (continue_latest or conversation_id is not None):
        raise VibechatError(
            "--no-save cannot add to a saved conversation: drop --no-save, "
            "or --continue/--conversation."
        )


def pick_conversation(
    history: History, *, continue_latest: bool, conversation_id: int | None
) -> StoredConversation | None:
    """The saved conversation ``--continue`` (the latest) or ``--conversation ID`` names in
    ``history``, read (None: neither was asked for). An empty history or an unknown id raises
    one line with the fix; ``run`` and the chat pick by this one rule."""
    from vibechat.engine.errors import VibechatError

    if continue_latest:
        latest = history.latest()
        if latest is None:
            raise VibechatError(
                "no saved conversation to continue yet: leave out --continue to start one."
            )
        conversation_id = latest.id
    if conversation_id is None:
        return None
    # An unknown id: one line naming 'vibechat history list'.
    return history.get(conversation_id)
