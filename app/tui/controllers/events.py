"""Every message the chat's workers post to the app, in one place, as dataclasses.

Workers (threads) post them (``post_message`` is thread-safe); the UI thread
renders. Messages about a reply carry its generation number: the app ignores
those of a reply it has left (a new chat, an edit). Widgets' own messages
(``ParamPanel.Changed``, ``ConversationSidebar.Open``, ...) live with their widget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from vibechat.engine.chat.compaction import Compaction, CompactionNotice
from vibechat.engine.chat.records import ConversationSummary, StoredConversation
from vibechat.engine.models.local_model import LocalModel
from vibechat.engine.turns.backend import ChatEvent, ModelInfo

# The downloader's module (and the Hub client) load when a download starts.
if TYPE_CHECKING:
    from vibechat.engine.models.download import Progress

    from ..conversation.assistant_message import AssistantMessage

# ----------------------------------------------------------------- the model


@dataclass
class ModelProgress(Message):
    """The model is loading: ``fraction`` of 0..1 done."""

    fraction: float


@dataclass
class ModelReady(Message):
    """The model loaded."""

    info: ModelInfo


@dataclass
class ModelWarmUp(Message):
    """The model's first load is done and ``ModelReady`` handled: warm the Markdown up once the
    frame that says so is drawn (model_loads.py)."""


@dataclass
class ModelFailed(Message):
    """The model could not be loaded."""

    error: str


@dataclass
class ModelSwitched(Message):
    """Another model is loaded (the previous one is closed); ``reload``: the same model
    with other engine settings (the conversation goes on); ``keep``: the model of the
    conversation just opened (it goes on with it)."""

    info: ModelInfo
    name: str
    reload: bool = False
    keep: bool = False


@dataclass
class OwnModelWanted(Message):
    """A conversation just opened was had with another model than the one loaded: ``name``
    and ``path`` (its file, or for a server's model its URL; ``server``: that server's API
    root), and ``note``, the line that says so when the chat cannot switch to it."""

    name: str
    path: str
    server: str | None
    note: str


@dataclass
class ModelSwitchFailed(Message):
    """The new model could not be loaded; the current one stays."""

    name: str
    error: str


# ---------------------------------------------------------------- a reply


@dataclass
class ReplyText(Message):
    """New text of generation ``generation`` waits in its ``ReplyStream``."""

    generation: int


@dataclass
class ReplyThinking(Message):
    """New thinking of generation ``generation`` waits in its ``ReplyStream``."""

    generation: int


@dataclass
class ReplyEvent(Message):
    """One engine event of generation ``generation`` (``ContextTrimmed``, ``GenerationDone``)."""

    generation: int
    event: ChatEvent


@dataclass
class ReplyCompacted(Message):
    """The ``compact`` context policy summarised the conversation before reply ``generation``
    (or says why it did not: ``notice.problem``)."""

    generation: int
    notice: CompactionNotice


@dataclass
class SummaryReady(Message):
    """``/compact``'s summary came (``compaction``), or could not be had (``error``, one line);
    ``generation``: the session's when it was asked (a later one makes it stale)."""

    generation: int
    compaction: Compaction | None
    error: str = ""


@dataclass
class ReplyFailed(Message):
    """Generation ``generation`` failed; ``partial``: the text a cut stream delivered (kept)."""

    generation: int
    error: str
    partial: str | None = None


@dataclass
class ContextCounted(Message):
    """The conversation as generation ``generation`` sees it takes ``tokens`` tokens: the
    prompt being sent, or what is left after a turn was taken back."""

    generation: int
    tokens: int


@dataclass
class CacheReset(Message):
    """The KV cache was emptied (a new conversation)."""


@dataclass
class CacheRebuilt(Message):
    """An opened conversation's KV cache was rebuilt: it holds ``tokens`` tokens."""

    tokens: int


# ------------------------------------------------------------------ history


@dataclass
class HistoryListed(Message):
    """The saved conversations (newest first); ``repaired``: replies a crash had cut off,
    now marked interrupted; ``problem``: why chats are not saved."""

    summaries: list[ConversationSummary]
    repaired: int
    problem: str | None


@dataclass
class ConversationLoaded(Message):
    """A saved conversation read from the database, to open (``jump_to``: a message id)."""

    stored: StoredConversation
    jump_to: int | None


@dataclass
class ConversationLoadFailed(Message):
    error: str


# ---------------------------------------------------------------- downloads


@dataclass
class DownloadUpdate(Message):
    """Where the running download stands."""

    progress: Progress


@dataclass
class DownloadEnded(Message):
    """The download finished (``model`` set), failed or was cancelled (``error`` set)."""

    title: str
    model: LocalModel | None = None
    error: str | None = None
    cancelled: bool = False


# ----------------------------------------------------------------- tools


@dataclass
class ToolsListed(Message):
    """The tools a reply may be offered (MCP servers started, built-ins enabled); ``problems``:
    one line per server that did not start."""

    specs: tuple
    problems: tuple[str, ...] = ()


@dataclass
class ToolsProblem(Message):
    """A tool server misbehaved while it ran (wrote something other than JSON-RPC on its
    stdout): its one line, said once."""

    line: str


@dataclass
class ToolFinished(Message):
    """A tool call ran (or was cancelled, timed out, failed): its outcome, for the call
    ``index`` of the round that began at ``generation``."""

    generation: int
    index: int
    outcome: object


# ------------------------------------------------------------ the token lens


@dataclass
class LensRead(Message):
    """A saved reply's token lens was read back (in a worker): the lens opens on ``reply``."""

    reply: AssistantMessage


# ----------------------------------------------------------------- /compare


@dataclass
class CompareText(Message):
    """Side ``side`` of comparison ``generation`` has text buffered (controllers/comparisons.py)."""

    generation: int
    side: str


@dataclass
class CompareEvent(Message):
    """Side ``side`` of comparison ``generation`` sent ``event`` (its end among them)."""

    generation: int
    side: str
    event: ChatEvent


@dataclass
class CompareFailed(Message):
    """Side ``side`` of comparison ``generation`` failed: ``error``, one line."""

    generation: int
    side: str
    error: str
