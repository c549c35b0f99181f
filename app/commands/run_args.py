"""``vibechat run``'s command line into what it asks: the prompt as words or ``--prompt``
(``positional_prompt``; a model's name where the prompt goes is a usage error, an ollama
habit: ``looks_like_a_model``), and ``--json-schema``/``--grammar`` as an ``OutputFormat``
checked for the backend (``structured_output``), each before any model loads; ``--compare``'s
option (``CompareOpt``).

Imports inside functions are deliberate: the model list and llama.cpp's grammar check load only
when a run needs them (start-up time: ``--help`` stays instant)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.structured import OutputFormat

from ..options import HISTORY
from .click_patches import click_exception

if TYPE_CHECKING:
    from .run_input import Prompt

CompactOpt = Annotated[
    bool,
    typer.Option(
        "--compact",
        help="With --continue/--conversation: the model summarises the conversation, which "
        "goes on from a new branch that starts with the summary (the original is kept); the "
        "summary is printed. The prompt, if any, is instructions for the summary.",
        rich_help_panel=HISTORY,
    ),
]


def compact_instructions(prompt: str | None, continuing: bool) -> Prompt:
    """``run --compact``'s instructions for the summary (the prompt, if any; stdin is not
    read): a one-line error without a saved conversation to compact."""
    from .run_input import Prompt

    if not continuing:
        raise VibechatError(
            "--compact summarises a saved conversation: add --continue or --conversation ID."
        )
    return Prompt(prompt or "")


# run --compare A B (app/commands/compare.py).
CompareOpt = Annotated[
    tuple[str, str] | None,
    typer.Option(
        "--compare",
        metavar="A B",
        help="Answer the prompt twice and print both replies: A and B are each a preset's name "
        "or key=value,... (sampling settings as /set takes them, system=TEXT, model=PATH-or-NAME, "
        "base-url=URL). The same local model on both sides decodes both at once; with "
        "--prompts-file, one JSON line per prompt.",
    ),
]


def positional_prompt(
    ctx: typer.Context, words: list[str] | None, option: str | None
) -> str | None:
    """The prompt of ``vibechat run PROMPT`` (words joined by spaces, as ``ollama run MODEL
    PROMPT`` does) or of ``--prompt``: both, or a model's name where the prompt goes (an
    ollama habit: ``run MODEL PROMPT``), is a one-line usage error saying what to type."""
    if not words:
        return option
    usage_error = click_exception("UsageError")
    if option is not None:
        raise usage_error(
            "the prompt is given twice, as PROMPT and with --prompt: give one of them.", ctx=ctx
        )
    first = words[0]
    if looks_like_a_model(first, by_name=len(words) > 1):
        shown = " ".join(words[1:]) or "your prompt"
        raise usage_error(
            f"{first!r} is a model, not a prompt: pick the model with --model, e.g. "
            f'vibechat run --model {first} "{shown}"',
            ctx=ctx,
        )
    return " ".join(words)


def looks_like_a_model(word: str, by_name: bool = True) -> bool:
    """Whether a prompt's first word names a model (``ollama run MODEL PROMPT`` typed out of
    habit): a ``.gguf`` file, a GGUF repo on the Hub, or (``by_name``: more words follow, as
    after a model) the exact name of one of vibechat's own models: the starter, its downloads,
    files opened by path (other tools' folders are not walked for it: that would slow every
    run, and their names carry a prefix, ``ollama:``, nobody types as a prompt). A word with a
    space in it (a quoted prompt) never does."""
    if word in ("", "-") or any(ch.isspace() for ch in word) or len(word) > 300:
        return False
    lowered = word.lower()
    if lowered.endswith(".gguf") or ("/" in lowered and "gguf" in lowered):
        return True
    if not by_name:
        return False
    try:
        from vibechat.engine.models.resolve import all_models

        return any(model.name.lower() == lowered for model in all_models(discover=False))
    except Exception:  # noqa: BLE001 - a folder that cannot be read: then it is a prompt
        return False


def structured_output(json_schema: str | None, grammar: str | None, choice):
    """The ``OutputFormat`` of ``--json-schema`` / ``--grammar`` (None: neither), checked for
    the backend that will run it: a one-line error here, before any model loads."""

    if json_schema is not None and grammar is not None:
        raise VibechatError(
            "--json-schema and --grammar both constrain the reply: give one of them."
        )
    if json_schema is None and grammar is None:
        return None
    fmt = (
        OutputFormat.parse(grammar, kind="grammar")
        if grammar is not None
        else OutputFormat.parse(json_schema or "")
    )
    flag = "--grammar" if grammar is not None else "--json-schema"
    try:
        if choice.remote:
            fmt.check_remote()
        else:
            from vibechat.engine.llama.native import check_output_format

            check_output_format(fmt)
    except VibechatError as exc:
        raise VibechatError(f"{flag}: {exc}") from None
    return fmt
