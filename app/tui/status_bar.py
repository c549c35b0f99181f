"""The status bar: model and quantization, CPU/GPU (layers offloaded; or the remote
server: ``openai · http://127.0.0.1:8080``), KV-cache type and memory, context meter, last
reply's speed (every generated token counts, a reasoning model's thinking included: then
the bar says how many were thinking, ``312 tok (118 thinking)``, or ``(thinking included)``
where a server does not say; while a reply is drafted and after it, the accepted share and the
draft length),
the reply format (``/format``), the thinking switch (``/think``: ``think off``), and what the
engine is doing. The app sets its attributes; it renders them.

The model's name comes from outside (a GGUF's ``general.name``, a server's model id), and so
can a state (``loading NAME…``): every text shown is sanitised and kept to one line
(``outside.one_line``), never read as markup."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from vibechat.engine.backend import DraftProgress, GenerationStats, ModelInfo
from vibechat.engine.knobs import human_mib
from vibechat.engine.params import SamplingParams

from .outside import one_line


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
    context_used: reactive[int] = reactive(0)
    stats: reactive[GenerationStats | None] = reactive(None)
    download: reactive[str] = reactive("")  # e.g. "⬇ 42%" while a model downloads
    thought: reactive[bool] = reactive(False)  # the last reply had thinking (its tokens are in stats)
    output_format: reactive[str] = reactive("")  # /format: "json", "schema person.json" ("": free text)
    thinking: reactive[str] = reactive("auto")  # /think: shown when not auto ("think off")
    drafting: reactive[DraftProgress | None] = reactive(None)  # live, while a drafted reply streams

    def show_params(self, params: SamplingParams) -> None:
        """What the status bar shows of the parameters: the reply format, the thinking switch."""
        self.output_format = params.output_format.label if params.output_format else ""
        self.thinking = params.thinking

    def render(self) -> Text:
        dim = "dim"
        parts: list[Text | tuple[str, str] | str] = []
        info = self.model
        if info is not None:
            parts.append((one_line(info.name), "bold"))
            if info.quantization:
                parts += [" ", (one_line(info.quantization), dim)]
            parts += [" · ", one_line(info.device.split(" (")[0]), " · "]
            if info.kv_cache_bytes:
                parts += [one_line(info.kv_cache), " · "]
            if info.draft_model:
                parts += [("draft ", dim), one_line(info.draft_model), (f" {human_mib(info.draft_model_bytes or 0)}", dim),
                          " · "]
            used, size = self.context_used, info.context_size
            ratio = used / size if size else 0
            style = "red" if ratio > 0.9 else "yellow" if ratio > 0.7 else ""
            # A remote server may not say its context size (0): then only what is used.
            parts += [("ctx ", dim), (f"{used:,}/{size:,}" if size else f"{used:,}", style)]
        stats = self.stats
        if stats is not None and stats.completion_tokens:
            parts += [" · ", ("ttft ", dim), f"{stats.ttft_ms:.0f} ms", " · "]
            if stats.thinking_tokens:  # generated too: in the count and the speed
                parts += [f"{stats.completion_tokens:,} tok ", (f"({stats.thinking_tokens:,} thinking)", dim), " · "]
            elif self.thought:  # a server that does not say how many were thinking
                parts += [f"{stats.completion_tokens:,} tok ", ("(thinking included)", dim), " · "]
            parts.append(f"{stats.decode_tokens_per_s:.1f} tok/s")
            if (stats.drafted_tokens or stats.drafting_turned_off) and self.drafting is None:
                parts += [" · ", ("draft ", dim), draft_text(stats.drafted_tokens, stats.accepted_draft_tokens,
                                                          stats.draft_k, stats.drafting_turned_off)]
        if (live := self.drafting) is not None:
            parts += [" · ", ("draft ", dim), draft_text(live.drafted, live.accepted, live.k, live.turned_off)]
        if self.output_format:
            parts += [" · ", ("format ", dim), (one_line(self.output_format), "bold")]
        if self.thinking != "auto":
            parts += [" · ", ("think ", dim), (self.thinking, "bold")]
        left = Text.assemble(*parts)
        right = Text.assemble((one_line(self.download) + "  ", "bold") if self.download else "",
                              (one_line(self.state), "italic"))
        gap = max(1, self.size.width - 2 - left.cell_len - right.cell_len)
        return Text.assemble(left, " " * gap, right)
