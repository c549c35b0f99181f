"""The status bar: model and quantization, CPU/GPU (layers offloaded; or the remote
server: ``openai · http://127.0.0.1:8080``), KV-cache type and memory, context meter, the
reply's speed (every generated token counts, a reasoning model's thinking included: then
the bar says how many were thinking, ``312 tok (118 thinking)``, or ``(thinking included)``
where a server does not say; while a reply is drafted and after it, the accepted share and the
draft length; after a reply that started from a KV snapshot, beside its time to first token, how
much it restored: ``ttft 133 ms (restored 8,132 tokens in 0.11 s)``), the reply format
(``/format``), the thinking switch (``/think``: ``think off``) and budget (``/think budget``:
``budget 512``; while a reply thinks, its thinking tokens against it: ``thinking 120/512``), the
token lens while it is on (``lens on (10)``), a ``/compare`` armed for the next prompt
(``compare: B temperature=1.2``), and what the engine is doing.
It shows the chat's ``ChatState`` (chat_state.py): its reactives are copies of the state's
fields, made when it mounts and each time a field changes (as ``data_bind``
would); the controllers write the state, never the bar.

While a reply streams, the bar shows that reply's figures (``live``, updated by replies.py
at the pace of the reply's renders, never per token): its tokens so far, its speed so far,
and the context it fills (the prompt and the tokens generated). A count the backend does
not give (a server) is the number of streamed pieces, about a token each, and is shown as
an estimate: ``~57 tok``. No figure of an earlier reply is shown meanwhile: the last
reply's stats are cleared when a reply starts, and its own replace the live ones when it
ends.

The bar is one line. Where it is too narrow for every field, fields are dropped whole,
never cut, in the reverse of ``PRIORITY``: the engine's state (and a download's progress)
on the right stay longest, then the context meter, the model's name (which may be
shortened, ``gemma-3-27b-it-q…``), the speed, the token count, a comparison armed, the format
and thinking
switches, the drafting figures; the quantization, the thinking share, where the model
runs, the KV cache, the time to first token and the draft model go first. At 80 columns
the state, context, name, speed and count fit.

The model's name comes from outside (a GGUF's ``general.name``, a server's model id), and so
can a state (``loading NAME…``): every text shown is sanitised and kept to one line
(``outside.one_line``), never read as markup."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from vibechat.engine.settings.knobs import human_mib
from vibechat.engine.turns.backend import DraftProgress, GenerationStats, ModelInfo

from ..chat_state import ChatState, LiveReply
from ..outside import one_line

# The fields on the left, most important first: a narrow bar drops them from the end. The
# state (and a download's progress) on the right stay longest of all.
PRIORITY = (
    "context",
    "model",
    "speed",
    "tokens",
    "compare",
    "format",
    "think",
    "lens",
    "budget",
    "draft",
    "quantization",
    "thinking",
    "device",
    "kv_cache",
    "ttft",
    "draft_model",
)
# The chat state's fields the bar shows, by the name of the bar's own reactive.
SHOWN = {
    "model": "model",
    "status": "state",
    "context_used": "context_used",
    "left_out": "left_out",
    "stats": "stats",
    "live": "live",
    "download": "download",
    "thought": "thought",
    "output_format": "output_format",
    "thinking": "thinking",
    "think_budget": "think_budget",
    "drafting": "drafting",
    "lens": "lens",
    "compare": "compare",
}
# Cells a shortened model name keeps at least (with its ellipsis).
NAME_MIN = 12
# Cells at least between the fields and the state.
GAP = 2


def model_line(info: ModelInfo) -> str:
    """The welcome's line about the model: name, quantization, where it runs, context
    (what a remote server does not say is left out), sanitised, on one line."""
    parts = [one_line(info.name), one_line(info.quantization), one_line(info.device)]
    if info.context_size:
        parts.append(f"context {info.context_size:,} tokens")
    return " · ".join(p for p in parts if p)


def draft_text(drafted: int, accepted: int, k: int, turned_off: bool) -> str:
    """Speculative decoding in a few characters: ``62% k3`` (accepted share of the drafts, the
    draft length), ``off`` when adaptive drafting found that it did not pay."""
    rate = f"{accepted / drafted:.0%} " if drafted else ""
    return rate + ("off" if turned_off else f"k{k}")


@dataclass(frozen=True)
class _Field:
    key: str
    text: Text
    # The field it sticks to, with a space instead of " · " (quantization: the name).
    after: str = ""


class StatusBar(Widget):
    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $text;
        padding: 0 1;
    }
    """
    COMPONENT_CLASSES = {"status--model", "status--state", "status--dim"}

    model: reactive[ModelInfo | None] = reactive(None)
    state: reactive[str] = reactive("starting")
    # While a reply streams: its prompt (the live tokens are added).
    context_used: reactive[int] = reactive(0)
    # Messages the last prompt left out to fit the context (shown beside the meter).
    left_out: reactive[int] = reactive(0)
    stats: reactive[GenerationStats | None] = reactive(None)
    # The reply streaming now.
    live: reactive[LiveReply | None] = reactive(None)
    # Such as "⬇ 42%" while a model downloads.
    download: reactive[str] = reactive("")
    # The last reply had thinking (its tokens are in stats).
    thought: reactive[bool] = reactive(False)
    # /format: "json", "schema person.json" ("": free text).
    output_format: reactive[str] = reactive("")
    # /think: shown when not auto ("think off").
    thinking: reactive[str] = reactive("auto")
    # /think budget (None: none): while the reply thinks, its thinking tokens against it.
    think_budget: reactive[int | None] = reactive(None)
    # Live, while a drafted reply streams.
    drafting: reactive[DraftProgress | None] = reactive(None)
    # The token lens: candidates per token (0: off).
    lens: reactive[int] = reactive(0)
    # /compare armed: what side B (and A) run with ("": none armed).
    compare: reactive[str] = reactive("")

    def __init__(self, state: ChatState, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chat_state = state

    def on_mount(self) -> None:
        for name in SHOWN:
            self._follow(name)
        # At once: in the order written.
        self.chat_state.changed.subscribe(self, self._follow, immediate=True)

    def _follow(self, name: str) -> None:
        """A field of the chat state changed: the bar's copy follows (a repaint when shown)."""
        mine = SHOWN.get(name)
        if mine is not None:
            setattr(self, mine, getattr(self.chat_state, name))

    # ------------------------------------------------------------------ fields
    def _fields(self) -> list[_Field]:
        """Every field there is something to show for, in the order they are shown."""
        dim = "dim"
        fields: list[_Field] = []

        def add(key: str, *parts: str | tuple[str, str], after: str = "") -> None:
            fields.append(_Field(key, Text.assemble(*parts), after))

        info, live, stats = self.model, self.live, self.stats
        if live is not None:
            # Never an earlier reply's figures (replies.py clears them too).
            stats = None
        estimate = "~" if live is not None and live.estimated else ""
        if info is not None:
            add("model", (one_line(info.name), "bold"))
            if info.quantization:
                add("quantization", (one_line(info.quantization), dim), after="model")
            add("device", one_line(info.device.split(" (")[0]))
            if info.kv_cache_bytes:
                add("kv_cache", one_line(info.kv_cache))
            if info.draft_model:
                add(
                    "draft_model",
                    ("draft ", dim),
                    one_line(info.draft_model),
                    (f" {human_mib(info.draft_model_bytes or 0)}", dim),
                )
            used, size = (
                self.context_used + (live.tokens if live is not None else 0),
                info.context_size,
            )
            ratio = used / size if size else 0
            style = "red" if ratio > 0.9 else "yellow" if ratio > 0.7 else ""
            # A remote server may not say its context size (0): then only what is used.
            add(
                "context",
                ("ctx ", dim),
                (estimate + (f"{used:,}/{size:,}" if size else f"{used:,}"), style),
                (f" −{self.left_out} left out" if self.left_out else "", "yellow"),
            )
        if live is not None and live.tokens:
            add("tokens", f"{estimate}{live.tokens:,} tok")
            if live.tokens_per_s > 0:
                add("speed", f"{estimate}{live.tokens_per_s:.1f} tok/s")
        if stats is not None and stats.completion_tokens:
            restored: tuple[str | tuple[str, str], ...] = ()
            # The reply started from a KV snapshot: why its first token came soon.
            if stats.restored_tokens:
                restored = (
                    (" (restored ", dim),
                    f"{stats.restored_tokens:,} tokens",
                    (f" in {stats.restore_ms / 1000:.2f} s)", dim),
                )
            add("ttft", ("ttft ", dim), f"{stats.ttft_ms:.0f} ms", *restored)
            add("tokens", f"{stats.completion_tokens:,} tok")
            # Thinking tokens were generated too: in the count and the speed.
            if stats.thinking_tokens:
                add("thinking", (f"({stats.thinking_tokens:,} thinking)", dim), after="tokens")
            # A server that does not say how many were thinking.
            elif self.thought:
                add("thinking", ("(thinking included)", dim), after="tokens")
            add("speed", f"{stats.decode_tokens_per_s:.1f} tok/s")
            if (stats.drafted_tokens or stats.drafting_turned_off) and self.drafting is None:
                add(
                    "draft",
                    ("draft ", dim),
                    draft_text(
                        stats.drafted_tokens,
                        stats.accepted_draft_tokens,
                        stats.draft_k,
                        stats.drafting_turned_off,
                    ),
                )
        if (drafting := self.drafting) is not None:
            add(
                "draft",
                ("draft ", dim),
                draft_text(drafting.drafted, drafting.accepted, drafting.k, drafting.turned_off),
            )
        if self.compare:
            add("compare", ("compare: ", dim), (one_line(self.compare), "bold"))
        if self.output_format:
            add("format", ("format ", dim), (one_line(self.output_format), "bold"))
        if self.thinking != "auto":
            add("think", ("think ", dim), (self.thinking, "bold"))
        if self.lens:
            add("lens", ("lens ", dim), (f"on ({self.lens})", "bold"))
        if (budget := self.think_budget) is not None:
            if live is not None and live.thinking:
                spent = (f"{estimate}{live.tokens:,}", "red" if live.tokens >= budget else "")
                add("budget", ("thinking ", dim), spent, f"/{budget:,}")
            else:
                add("budget", ("budget ", dim), f"{budget:,}")
        return fields

    @staticmethod
    def _join(fields: list[_Field]) -> Text:
        out = Text()
        previous = ""
        for field in fields:
            if previous:
                out.append(" " if field.after and field.after == previous else " · ")
            out.append_text(field.text)
            previous = field.key
        return out

    @staticmethod
    def _width(fields: list[_Field], widths: dict[str, int]) -> int:
        """The cells ``fields`` take joined (``_join``), each as wide as ``widths`` says."""
        total, previous = 0, ""
        for field in fields:
            if previous:
                total += 1 if field.after and field.after == previous else 3
            total += widths[field.key]
            previous = field.key
        return total

    def _fit(self, fields: list[_Field], room: int) -> list[_Field]:
        """The most important fields (``PRIORITY``) that fit in ``room`` cells, shown in their
        own order: the first that does not fit is dropped, and every one after it. The model's
        name counts as ``NAME_MIN`` cells, and takes what is left, up to its whole length."""
        widths = {field.key: field.text.cell_len for field in fields}
        whole_name = widths.get("model", 0)
        if whole_name > NAME_MIN:
            widths["model"] = NAME_MIN
        order = {key: rank for rank, key in enumerate(PRIORITY)}
        chosen: list[_Field] = []
        kept: set[str] = set()
        for field in sorted(fields, key=lambda f: order[f.key]):
            trial = [f for f in fields if f.key in kept or f is field]
            if self._width(trial, widths) > room:
                break
            chosen = trial
            kept.add(field.key)
        if whole_name > NAME_MIN and any(f.key == "model" for f in chosen):
            cells = min(whole_name, NAME_MIN + room - self._width(chosen, widths))
            chosen = [
                _Field("model", _shortened(f.text, cells)) if f.key == "model" else f
                for f in chosen
            ]
        return chosen

    def render(self) -> Text:
        fields = self._fields()
        download = Text(one_line(self.download), style="bold") if self.download else None
        state = Text(one_line(self.state), style="italic")
        width = self.content_size.width
        # Not laid out yet: everything, unfitted.
        if not width:
            return Text.assemble(
                self._join(fields), "  ", download or "", "  " if download else "", state
            )
        state.truncate(width, overflow="ellipsis")
        right = state
        if download is not None and download.cell_len + 2 + state.cell_len <= width:
            right = Text.assemble(download, "  ", state)
        room = width - right.cell_len - GAP
        left = self._join(self._fit(fields, room)) if room > 0 else Text()
        gap = max(0, width - left.cell_len - right.cell_len)
        return Text.assemble(left, " " * gap, right)


def _shortened(text: Text, cells: int) -> Text:
    """``text`` cut to ``cells`` cells, an ellipsis at the cut."""
    if text.cell_len <= cells:
        return text
    cut = text.copy()
    cut.truncate(max(1, cells), overflow="ellipsis")
    return cut
