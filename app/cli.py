"""The ``vibechat`` command line. Heavy modules (llama.cpp, Textual) are imported
only inside the commands that need them, so ``--help`` answers at once."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated, Optional, TypeVar

import typer

from .config_cmd import config_app
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
    with_flags,
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
cli.add_typer(config_app, name="config")


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
    engine = EngineChoice(model=model, ctx=n_ctx, n_gpu_layers=n_gpu_layers, threads=threads)
    sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, stop)
    # `vibechat --temperature 0.2 config show` shows what the flags would change.
    ctx.obj = {"verbose": verbose, "flags": (engine, sampling, system)}
    if ctx.invoked_subcommand is not None:
        return

    def start() -> None:
        from .appconfig import load_app_config
        from .tui import run_tui

        # A problem in the config file does not stop the chat: it starts on the defaults
        # and shows the problem.
        loaded = with_flags(load_app_config(), engine, sampling, system)
        config = loaded.config
        run_tui(engine=EngineChoice.from_config(config), params=config.params, system=config.system_prompt,
                config=loaded)

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
        from vibechat.engine.errors import ConfigError

        from .appconfig import load_app_config
        from .backends import make_backend
        from .models_cmd import pull_with_progress
        from .run_cmd import RunRequest, execute, read_prompt

        loaded = load_app_config()
        if loaded.problem:
            raise ConfigError(loaded.problem)
        config = with_flags(loaded, engine, sampling, system).config
        params = config.params
        text = read_prompt(prompt, sys.stdin)
        backend = make_backend(EngineChoice.from_config(config), pull=pull_with_progress)
        request = RunRequest(prompt=text, system=config.system_prompt, params=params,
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
