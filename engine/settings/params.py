"""Sampling parameters: one validated, immutable type shared by every backend.

``PARAM_SPECS`` declares each numeric parameter once (``ParamSpec``: range, default, steps,
help, flag, label, Ollama name, slider, export, llama.cpp's sampler stage, a server's fields,
nudge keys): the CLI flags, the TUI sliders and keys, ``/set``, presets and Modelfiles, the
backends and the exports are made from it, so they all agree with validation. Adding a
parameter is a spec here and a ``SamplingParams`` field of its name.

``max_tokens`` and ``repeat_penalty`` default to ``None``, "auto": the model's own default,
which the backend resolves (``SamplingParams.resolved``) by how it prompts the model. A model
with a chat template gets what it always got (no token limit, repeat penalty 1 = off); a base
model prompted as a completion model (engine/turns/chat_template.py) gets a reply budget and a
repeat penalty (``COMPLETION_AUTO``, chosen by bench/bench_starter_chat.py: a base model
otherwise drifts into a new document). An explicit value always wins: ``max_tokens`` 0 (typed
``none``) is no limit, ``repeat_penalty`` 1 (typed ``off``) is off. Resolved, ``max_tokens``
None means no limit, as everywhere downstream (the reply's ``GenerationDone.params``).
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidParameterError
from .choices import COMPLETION
from .param_parts import LlamaStage, Nudge, RemoteField
from .structured import OutputFormat
from .think_switch import DEFAULT_THINKING, check_thinking

# llama.cpp reserves 0xFFFFFFFF for "random".
SEED_MAX = 2**32 - 2
MAX_STOP_STRINGS = 16
# The token lens: most candidates a step reports (``logprobs``; OpenAI's top_logprobs stops at
# 20), and how many the chat's lens shows when turned on.
MAX_LOGPROBS = 20
LENS_DEFAULT = 10
# The lens_history_bytes setting's default (engine/settings/table.py): a reply's candidates kept
# in the history, in bytes of JSON (about 3,000 tokens at 10 candidates).
LENS_HISTORY_BYTES = 2_000_000
# The thinking budget's top (a budget is checked against the model's context when a reply starts).
MAX_THINK_BUDGET = 1_000_000


@dataclass(frozen=True)
class ParamSpec:
    """One numeric sampling parameter, declared once: how it is bounded, typed, shown and
    stepped, and every place it shows up takes its part from here: the flag (``short``,
    ``metavar``, ``flag_words``; engine/settings/table.py), the config's example, ``/set`` and
    Ollama's name (``ollama``: its Modelfile's ``PARAMETER`` and ``/set parameter``), the
    slider (``slider``, ``slider_maximum``), the export line (``exported``, under ``label``),
    llama.cpp's sampler (``llama``), a server's request (``remote``) and the chat's keys
    (``nudge``). ``SamplingParams`` has a field of the same name whose default is ``default``.

    Special handling is said here, not in each consumer: ``optional`` (None allowed), ``auto``
    (None is the model's default, ``off`` what 'none'/'off' type), ``none_text`` (None shown:
    ``random`` for the seed)."""

    name: str
    kind: type  # int or float
    minimum: float
    maximum: float
    default: float | int | None
    fine_step: float
    coarse_step: float
    help: str
    # None allowed: "random" (seed) or "auto" (the model's default: ``auto``).
    optional: bool = False
    # None is "auto", resolved by the backend (SamplingParams.resolved).
    auto: bool = False
    # What 'none' / 'off' mean where None is auto (max_tokens 0, penalty 1).
    off: float | int | None = None
    # The word typed for ``off`` ('none' for max_tokens).
    off_word: str = "off"
    # What ``off`` does, in two words ('no limit' for max_tokens).
    off_text: str = "off"
    # None shown for people where it is not "auto" ('random' for the seed).
    none_text: str = "none"
    # The name people read: the slider's, the export line's (lower case), the key's.
    label: str = ""
    short: str | None = None  # the flag's short alias (``-t``)
    metavar: str = "NUMBER"
    # The flag's line before its default; ``{range}`` is ``span()``.
    flag_words: str = "{range}"
    # The config template's example value (default: the default).
    example: str = ""
    # Ollama's name for it (Modelfile PARAMETER, /set parameter), if not ``name``, and its values
    # that mean one of ours ('-2': 'none').
    ollama: str = ""
    ollama_words: tuple[tuple[str, str], ...] = ()
    # The parameter panel has a slider for it; the slider's top, if below ``maximum``.
    slider: bool = True
    slider_maximum: float | None = None
    # On the Markdown export's parameters line.
    exported: bool = False
    llama: LlamaStage | None = None
    remote: RemoteField | None = None
    nudge: Nudge | None = None

    @property
    def modelfile_name(self) -> str:
        """The name Ollama's Modelfile and ``/set parameter`` give it."""
        return self.ollama or self.name

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> float | int | None:
        if value is None:
            if self.optional:
                return None
            raise InvalidParameterError(f"{self.name} needs a value {self.range_text()}.")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = self.parse(str(value))
            except InvalidParameterError:
                raise
        if self.kind is int:
            if isinstance(value, float):
                if not value.is_integer():
                    raise InvalidParameterError(
                        f"{self.name} must be a whole number {self.range_text()} (got {value:g})."
                    )
                value = int(value)
        else:
            value = float(value)
            if math.isnan(value) or math.isinf(value):
                raise InvalidParameterError(
                    f"{self.name} must be a number {self.range_text()} (got {value})."
                )
        if not (self.minimum <= value <= self.maximum):
            raise InvalidParameterError(
                f"{self.name} must be {self.range_text()} (got {_fmt(value)})."
            )
        return value

    def parse(self, text: str) -> float | int | None:
        """Parse a user-typed value (CLI flag, ``/set``): ``auto`` (or nothing) is the model's
        default where there is one; ``none``/``off`` clear a seed (random), lift the token limit
        (0) and turn the repeat penalty off (1)."""
        raw = text.strip()
        word = raw.lower()
        if self.auto:
            if word in {"auto", "default", ""}:
                return None
            if word in {"none", "off", "no limit", "unlimited", "-1"}:
                return self.off
        elif self.optional and word in {"none", "off", "random", "-1", ""}:
            return None
        try:
            number: float | int = int(raw) if self.kind is int else float(raw)
        except ValueError:
            kind = "a whole number" if self.kind is int else "a number"
            raise InvalidParameterError(
                f"{self.name} must be {kind} {self.range_text()} (got {raw!r})."
            ) from None
        return self.check(number)

    def range_text(self) -> str:
        text = f"between {_fmt(self.minimum)} and {_fmt(self.maximum)}"
        if self.auto:
            word = self.off_word
            text += (
                f" ({_fmt(self.off) if self.off is not None else word} or '{word}': "
                f"{self.off_text}; 'auto': the model's default)"
            )
        elif self.optional:
            text += " (or 'none')"
        return text

    def show(self, value: float | int | None, places: int | None = None) -> str:
        """``value`` for people: ``auto``, ``no limit``, ``off``, ``random``, else the number
        (``places``: a float with that many decimals, as a slider shows it)."""
        if value is None:
            return "auto" if self.auto else self.none_text
        if self.auto and value == self.off:
            return self.off_text
        if places is not None and self.kind is float:
            return f"{value:.{places}f}"
        return _fmt(value)

    def span(self) -> str:
        """The range as help pages write it: ``0-5``."""
        return f"{_fmt(self.minimum)}-{_fmt(self.maximum)}"

    def default_text(self) -> str:
        """The default as help pages say it, from this declaration: the number, ``random``, or
        for ``auto`` what each kind of model gets (``TEMPLATE_AUTO``, ``COMPLETION_AUTO``)."""
        if not self.auto:
            return self.show(self.default)
        template, completion = TEMPLATE_AUTO[self.name], COMPLETION_AUTO[self.name]
        return (
            f"auto: {self.off_text if template is None else self.show(template)} for a "
            f"model with a chat template, {self.show(completion)} for a base model "
            "prompted as a completion model"
        )

    def clamp(self, value: float) -> float | int:
        value = min(max(value, self.minimum), self.maximum)
        return int(round(value)) if self.kind is int else round(float(value), 6)


def _fmt(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# "auto" for a base model prompted as a completion model (engine/turns/chat_template.py): a reply
# budget and a repeat penalty, measured with bench/bench_starter_chat.py (docs/PERFORMANCE.md).
COMPLETION_AUTO: dict[str, float | int] = {"max_tokens": 256, "repeat_penalty": 1.1}
# ... and for every other model: no limit (None once resolved), the penalty off.
TEMPLATE_AUTO: dict[str, float | int | None] = {"max_tokens": None, "repeat_penalty": 1.0}
# The tokens llama.cpp's repeat penalty looks back over.
PENALTY_LAST_N = 64


def _penalties(ll: Any, vocab: Any, penalty: float | None) -> Any:
    """llama.cpp's repeat penalty, left out while it is off (1) or unresolved "auto" (None)."""
    if penalty is None or penalty == 1.0:
        return None
    return ll.llama_sampler_init_penalties(
        ll.llama_vocab_n_tokens(vocab), PENALTY_LAST_N, penalty, 0.0, 0.0
    )


def _draw(ll: Any, vocab: Any, seed: int | None) -> Any:
    """The seeded draw that ends the chain (a backend fixes the seed first: ``with_seed``)."""
    assert seed is not None
    return ll.llama_sampler_init_dist(seed)


PARAM_SPECS: dict[str, ParamSpec] = {
    spec.name: spec
    for spec in (
        ParamSpec(
            "temperature",
            float,
            0.0,
            5.0,
            0.8,
            0.05,
            0.25,
            "Randomness of sampling; 0 always picks the most likely token (greedy).",
            label="Temperature",
            short="-t",
            flag_words="{range}; 0 is greedy",
            exported=True,
            llama=LlamaStage(40, lambda ll, vocab, value: ll.llama_sampler_init_temp(value)),
            remote=RemoteField(("temperature",)),
            nudge=Nudge(
                "f5",
                "f6",
                "Lower the temperature by one step: more predictable replies",
                "Raise the temperature by one step: more varied replies",
            ),
        ),
        ParamSpec(
            "top_k",
            int,
            0,
            1000,
            40,
            1,
            10,
            "Sample only among the K most likely tokens; 0 disables the limit.",
            label="Top-k",
            metavar="N",
            flag_words="{range}; 0 disables",
            exported=True,
            llama=LlamaStage(
                10,
                lambda ll, vocab, value: ll.llama_sampler_init_top_k(value) if value > 0 else None,
            ),
            remote=RemoteField(("top_k",), optional=True),
            nudge=Nudge(
                "f7",
                "f8",
                "Sample from fewer of the likeliest tokens",
                "Sample from more of the likeliest tokens",
            ),
        ),
        ParamSpec(
            "top_p",
            float,
            0.0,
            1.0,
            0.95,
            0.01,
            0.05,
            "Nucleus sampling: keep the smallest set of tokens whose "
            "probability reaches P; 1 disables.",
            label="Top-p",
            flag_words="{range}; 1 disables",
            exported=True,
            llama=LlamaStage(
                20,
                lambda ll, vocab, value: (
                    ll.llama_sampler_init_top_p(value, 1) if value < 1.0 else None
                ),
            ),
            remote=RemoteField(("top_p",)),
            nudge=Nudge(
                "f9",
                "f10",
                "Sample from a smaller share of the probability mass",
                "Sample from a larger share of the probability mass",
            ),
        ),
        ParamSpec(
            "min_p",
            float,
            0.0,
            1.0,
            0.05,
            0.01,
            0.05,
            "Drop tokens less likely than min_p times the top token's probability; 0 disables.",
            label="Min-p",
            flag_words="{range}; 0 disables",
            exported=True,
            llama=LlamaStage(
                30,
                lambda ll, vocab, value: (
                    ll.llama_sampler_init_min_p(value, 1) if value > 0.0 else None
                ),
            ),
            remote=RemoteField(("min_p",), optional=True),
        ),
        ParamSpec(
            "repeat_penalty",
            float,
            0.1,
            5.0,
            None,
            0.01,
            0.1,
            "Penalise recently generated tokens; 1 (off) disables; auto = the model's "
            f"default (off, or {COMPLETION_AUTO['repeat_penalty']:g} for a base model "
            "prompted as a completion model).",
            optional=True,
            auto=True,
            off=1.0,
            label="Repeat penalty",
            flag_words="{range}; 1 (off) disables",
            example="1.1",
            exported=True,
            llama=LlamaStage(0, _penalties, sampling=False),
            # vLLM's name beside llama.cpp's; None ("auto"): the server's default
            remote=RemoteField(
                ("repeat_penalty", "repetition_penalty"), optional=True, unsent=(None,)
            ),
        ),
        # No stage in llama.cpp's chain: the decode loop stops at the limit
        # (engine/llama/decoding.py Emitter).
        ParamSpec(
            "max_tokens",
            int,
            0,
            1_000_000,
            None,
            16,
            256,
            "Stop after this many generated tokens; 0 (none) = until the model stops or the "
            "context is full; auto = the model's default (none, or "
            f"{COMPLETION_AUTO['max_tokens']} for a base model prompted as a completion model).",
            optional=True,
            auto=True,
            off=0,
            off_word="none",
            off_text="no limit",
            label="Max tokens",
            short="-n",
            metavar="N",
            flag_words="Most tokens to generate; 0 (none) = no limit",
            example="512",
            ollama="num_predict",
            ollama_words=(("-2", "none"),),  # Ollama: fill the context
            slider_maximum=32768,
            # None ("auto": the server's default) and 0 (no limit) send nothing
            remote=RemoteField(("max_tokens",), unsent=(None, 0)),
        ),
        ParamSpec(
            "seed",
            int,
            0,
            SEED_MAX,
            None,
            1,
            1000,
            "Random seed; the same seed and settings reproduce a reply. none = "
            "a fresh random seed each time.",
            optional=True,
            none_text="random",
            label="Seed",
            metavar="N",
            flag_words="Seed for reproducible sampling",
            example="42",
            slider=False,
            llama=LlamaStage(50, _draw),
            remote=RemoteField(("seed",)),
        ),
        # The token lens (issue 43): no stage in the chain, no slider (the chat's lens key turns
        # it on); the local engine reads each step's logits (engine/llama/lens.py), a server is
        # asked for ``logprobs`` too (engine/remote/request.py).
        ParamSpec(
            "logprobs",
            int,
            0,
            MAX_LOGPROBS,
            0,
            1,
            5,
            "The token lens: for each generated token, the N most likely candidates with their "
            "probability before and after the sampler chain, and the stage that cut each; "
            f"0 (off) disables (the chat's lens shows {LENS_DEFAULT}).",
            label="Logprobs",
            metavar="N",
            flag_words="Candidates per token, {range}; 0 (off) disables",
            example=str(LENS_DEFAULT),
            slider=False,
            remote=RemoteField(("top_logprobs",), unsent=(0,)),
        ),
        # The thinking budget (issue 45): no stage in the chain; the local engine closes the
        # thinking at it (engine/llama/think_budget.py). Servers: llama-server's and vLLM's
        # per-request fields, extras a strict server may refuse.
        ParamSpec(
            "think_budget",
            int,
            1,
            MAX_THINK_BUDGET,
            None,
            64,
            512,
            "Most tokens a reply may think: at the budget the local engine puts the closing "
            "phrase (think_budget_message) and the model's end of thinking into the reply, and "
            "the answer begins; none (off) = no budget.",
            optional=True,
            none_text="off",
            label="Think budget",
            metavar="N",
            flag_words="Most thinking tokens a reply may take, {range}; off (none) = no budget",
            example="1024",
            slider=False,
            exported=True,
            remote=RemoteField(
                ("thinking_budget_tokens", "thinking_token_budget"), optional=True, unsent=(None,)
            ),
        ),
    )
}


AUTO_PARAMS = tuple(name for name, spec in PARAM_SPECS.items() if spec.auto)


def auto_values(chat_format: str) -> dict[str, float | int | None]:
    """What "auto" is for a model prompted in ``chat_format`` (``ModelInfo.chat_format``)."""
    return dict(COMPLETION_AUTO) if chat_format == COMPLETION else dict(TEMPLATE_AUTO)


@dataclass(frozen=True)
class SamplingParams:
    """Validated sampling parameters. Construct with keywords; invalid values raise
    :class:`InvalidParameterError` naming the parameter and its range."""

    temperature: float = PARAM_SPECS["temperature"].default  # type: ignore[assignment]
    top_k: int = PARAM_SPECS["top_k"].default  # type: ignore[assignment]
    top_p: float = PARAM_SPECS["top_p"].default  # type: ignore[assignment]
    min_p: float = PARAM_SPECS["min_p"].default  # type: ignore[assignment]
    repeat_penalty: float = PARAM_SPECS["repeat_penalty"].default  # type: ignore[assignment]
    max_tokens: int | None = PARAM_SPECS["max_tokens"].default  # type: ignore[assignment]
    seed: int | None = PARAM_SPECS["seed"].default  # type: ignore[assignment]
    # The token lens: candidates per generated token (0: off; engine/turns/backend.py
    # ``TokenCandidates``).
    logprobs: int = PARAM_SPECS["logprobs"].default  # type: ignore[assignment]
    # Most tokens a reply may think (None: no budget; engine/llama/think_budget.py).
    think_budget: int | None = PARAM_SPECS["think_budget"].default  # type: ignore[assignment]
    stop: tuple[str, ...] = field(default_factory=tuple)
    # JSON, a JSON Schema or a GBNF grammar the reply must follow (None: free text). Saved with
    # the conversation's parameters (the text itself, not a file's path).
    output_format: OutputFormat | None = None
    # A reasoning model's thinking: "auto" (its template's default), "on" or "off", where its
    # template takes a switch (engine/settings/think_switch.py). Travels with each request.
    thinking: str = DEFAULT_THINKING

    def __post_init__(self) -> None:
        for name, spec in PARAM_SPECS.items():
            # Every spec's field is checked (a subclass may add one).
            if name in self.__dataclass_fields__:
                object.__setattr__(self, name, spec.check(getattr(self, name)))
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        stop = tuple(stop or ())
        if len(stop) > MAX_STOP_STRINGS:
            raise InvalidParameterError(
                f"stop takes at most {MAX_STOP_STRINGS} strings (got {len(stop)})."
            )
        for item in stop:
            if not isinstance(item, str) or not item:
                raise InvalidParameterError("stop strings must be non-empty text.")
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "thinking", check_thinking(self.thinking))
        fmt = self.output_format
        if fmt is not None and not isinstance(fmt, OutputFormat):
            object.__setattr__(self, "output_format", OutputFormat.from_dict(fmt))

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    def resolved(self, chat_format: str) -> SamplingParams:
        """The values a backend uses for a model prompted in ``chat_format``: each "auto"
        (None) made the model's default (``auto_values``), an explicit one kept; max_tokens 0
        (no limit) becomes None, what "no limit" is downstream."""
        defaults = auto_values(chat_format)
        changes: dict[str, Any] = {
            name: defaults[name] for name in AUTO_PARAMS if getattr(self, name) is None
        }
        if self.max_tokens == 0:
            changes["max_tokens"] = None
        return dataclasses.replace(self, **changes) if changes else self

    def with_seed(self) -> SamplingParams:
        """A copy whose seed is fixed: the given one, or a freshly drawn random one."""
        if self.seed is not None:
            return self
        return self.replace(seed=random.SystemRandom().randint(0, SEED_MAX))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stop"] = list(self.stop)
        if self.output_format is None:
            # As before structured output (and thinking): older readers take it.
            del data["output_format"]
        if self.thinking == DEFAULT_THINKING:
            del data["thinking"]
        if not self.logprobs:
            # Off, as before the lens: older readers take it.
            del data["logprobs"]
        if self.think_budget is None:
            # Off, as before the budget: older readers take it.
            del data["think_budget"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidParameterError(
                f"unknown sampling parameter {unknown[0]!r}; known: {', '.join(sorted(known))}."
            )
        return cls(**data)

    def set_from_text(self, name: str, text: str) -> SamplingParams:
        """Apply a ``/set NAME VALUE``-style change, with a helpful error for unknown names."""
        key = name.strip().lower().replace("-", "_")
        if key == "stop":
            return self.replace(stop=tuple(s for s in text.split("|") if s) if text.strip() else ())
        if key in ("thinking", "think"):
            return self.replace(thinking=check_thinking(text))
        if key in ("format", "output_format"):
            raw = text.strip()
            return self.replace(
                output_format=None
                if raw.lower() in ("", "off", "none")
                else OutputFormat.parse(raw)
            )
        spec = PARAM_SPECS.get(key)
        if spec is None:
            raise InvalidParameterError(
                f"unknown parameter {name!r}; known: "
                f"{', '.join([*PARAM_SPECS, 'stop', 'thinking'])}."
            )
        return self.replace(**{key: spec.parse(text)})


def _undeclared() -> list[str]:
    """The specs ``SamplingParams`` has no field for (none: each parameter is a field)."""
    return sorted(set(PARAM_SPECS) - {f.name for f in dataclasses.fields(SamplingParams)})


if _undeclared():  # pragma: no cover - a declaration mistake, found on import
    raise TypeError(f"SamplingParams needs a field for {', '.join(_undeclared())}")
