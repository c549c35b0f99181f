"""The ``vibechat`` command line. Heavy modules (llama.cpp, Textual) are imported
only inside the commands that need them, so ``--help`` answers at once."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated, Optional, TypeVar

import typer

from .models_cmd import models_app
from .options import (
    CtxOpt,
    EngineChoice,
    GpuLayersOpt,
    MaxTokensOpt,
    MinPOpt,
    ModelOpt,
    RepeatPenaltyOpt,
    SamplingChoice,
    SeedOpt,
    StopOpt,
    SystemOpt,
    TemperatureOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
)

cli = typer.Typer(
    name="vibechat",
    help="Chat with local LLMs in your terminal. With no command, opens the chat.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

T = TypeVar("T")

cli.add_typer(models_app, name="models")


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"vibechat: error: {message}", err=True)
    return typer.Exit(code)


def guarded(fn: Callable[[], T]) -> T:
    """Run ``fn``; a VibechatError becomes a one-line message and exit code 1."""
    from vibechat.engine.errors import VibechatError

    try:
        return fn()
    except VibechatError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        typer.echo("", err=True)
        raise typer.Exit(130) from None


def _setup_logging(verbose: bool) -> None:
    root = logging.getLogger("vibechat")
    root.propagate = False
    root.handlers.clear()
    if verbose or os.environ.get("VIBECHAT_DEBUG"):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.vibechat = True  # type: ignore[attr-defined]  # kept when huggingface_hub is imported
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        logging.getLogger("huggingface_hub").addHandler(handler)
    else:
        root.addHandler(logging.NullHandler())


def _sampling(temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, stop) -> SamplingChoice:
    return SamplingChoice(
        values={"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
                "repeat_penalty": repeat_penalty, "max_tokens": max_tokens, "seed": seed},
        stop=stop,
    )


@cli.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    model: ModelOpt = None,
    system: SystemOpt = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    min_p: MinPOpt = None,
    repeat_penalty: RepeatPenaltyOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    n_ctx: CtxOpt = None,
    n_gpu_layers: GpuLayersOpt = None,
    threads: ThreadsOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Log llama.cpp and vibechat details to stderr.")] = False,
) -> None:
    """Chat with local LLMs in your terminal. With no command, opens the chat."""
    _setup_logging(verbose)
    ctx.obj = {"verbose": verbose}
    if ctx.invoked_subcommand is not None:
        return
    engine = EngineChoice(model=model, ctx=n_ctx, n_gpu_layers=n_gpu_layers, threads=threads)
    sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, stop)

    def start() -> None:
        from .tui import run_tui

        params = sampling.to_params()
        run_tui(engine=engine, params=params, system=system)

    guarded(start)


@cli.command()
def run(
    prompt: Annotated[Optional[str], typer.Option(
        "--prompt", "-p", help="The prompt; '-' reads stdin (also read when piped and no --prompt).")] = None,
    model: ModelOpt = None,
    system: SystemOpt = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    min_p: MinPOpt = None,
    repeat_penalty: RepeatPenaltyOpt = None,
    max_tokens: MaxTokensOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    n_ctx: CtxOpt = None,
    n_gpu_layers: GpuLayersOpt = None,
    threads: ThreadsOpt = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, model, params, stats).")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print timing statistics on stderr.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Do not strip terminal control sequences from the output.")] = False,
) -> None:
    """Answer one prompt, streaming the reply to stdout."""
    engine = EngineChoice(model=model, ctx=n_ctx, n_gpu_layers=n_gpu_layers, threads=threads)
    sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, stop)

    def go() -> int:
        from .backends import make_backend
        from .models_cmd import pull_with_progress
        from .run_cmd import RunRequest, execute, read_prompt

        params = sampling.to_params()
        text = read_prompt(prompt, sys.stdin)
        backend = make_backend(engine, pull=pull_with_progress)
        request = RunRequest(prompt=text, system=system, params=params,
                             json_output=json_output, show_stats=stats, raw=raw)
        try:
            return execute(backend, request, sys.stdout, sys.stderr)
        finally:
            backend.close()

    code = guarded(go)
    if code:
        raise typer.Exit(code)


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)
