"""The ``vibechat`` command line. Heavy modules (llama.cpp, Textual) are imported
only inside the commands that need them, so ``--help`` answers at once."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional, TypeVar

import typer

from .config_cmd import config_app
from .history_cmd import history_app
from .models_cmd import models_app
from .options import (
    ApiKeyEnvOpt,
    BackendOpt,
    BaseUrlOpt,
    CtxOpt,
    DraftOpt,
    DraftTokensOpt,
    EngineChoice,
    GpuLayersOpt,
    MaxTokensOpt,
    HISTORY,
    KvCacheTypeOpt,
    MinPOpt,
    ModelOpt,
    NoSaveOpt,
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
cli.add_typer(history_app, name="history")
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
    backend: BackendOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    kv_cache_type: KvCacheTypeOpt = None,
    draft: DraftOpt = None,
    draft_tokens: DraftTokensOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Log llama.cpp and vibechat details to stderr.")] = False,
    no_save: NoSaveOpt = False,
) -> None:
    """Chat with local LLMs in your terminal. With no command, opens the chat."""
    _setup_logging(verbose)
    engine = EngineChoice(model=model, ctx=n_ctx, n_gpu_layers=n_gpu_layers, threads=threads,
                          backend=backend, base_url=base_url, api_key_env=api_key_env,
                          kv_cache_type=kv_cache_type, speculative=draft, draft_tokens=draft_tokens)
    sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, stop)
    # `vibechat --temperature 0.2 config show` shows what the flags would change.
    ctx.obj = {"verbose": verbose, "flags": (engine, sampling, system)}
    if ctx.invoked_subcommand is not None:
        return

    def start() -> int:
        from .appconfig import load_app_config
        from .tui import run_tui

        # A problem in the config file does not stop the chat: it starts on the defaults
        # and shows the problem.
        loaded = with_flags(load_app_config(), engine, sampling, system)
        config = loaded.config
        return run_tui(engine=EngineChoice.from_config(config), params=config.params,
                       system=config.system_prompt, config=loaded, save=not no_save)

    code = guarded(start)
    if code:  # the chat crashed (its traceback is on the screen): say so to the shell too
        raise typer.Exit(code)


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
    backend: BackendOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    kv_cache_type: KvCacheTypeOpt = None,
    draft: DraftOpt = None,
    draft_tokens: DraftTokensOpt = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object (text, model, params, stats).")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print timing statistics on stderr.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Do not strip terminal control sequences from the output.")] = False,
    no_save: NoSaveOpt = False,
    continue_: Annotated[bool, typer.Option(
        "--continue", "-c", help="Add this prompt to the latest saved conversation.",
        rich_help_panel=HISTORY)] = False,
    conversation: Annotated[Optional[int], typer.Option(
        "--conversation", "--cid", help="Add this prompt to saved conversation ID ('vibechat history list').",
        min=1, rich_help_panel=HISTORY)] = None,
    prompts_file: Annotated[Optional[str], typer.Option(
        "--prompts-file", metavar="FILE.jsonl",
        help="Run every prompt of a JSON Lines file ('-' reads stdin): one JSON result per line on stdout; "
             "exit 1 if any line failed.")] = None,
    no_prefix_cache: Annotated[bool, typer.Option(
        "--no-prefix-cache",
        help="With --prompts-file: start every prompt from an empty KV cache instead of reusing the prefix "
             "it shares with the previous one (slower; results then cannot depend on line order).")] = False,
) -> None:
    """Answer one prompt, streaming the reply to stdout. Saved as a conversation unless
    --no-save; --continue or --conversation ID add to a saved one (its system prompt and
    parameters apply, under your flags). --prompts-file runs many prompts, each a new
    conversation."""
    engine = EngineChoice(model=model, ctx=n_ctx, n_gpu_layers=n_gpu_layers, threads=threads,
                          backend=backend, base_url=base_url, api_key_env=api_key_env,
                          kv_cache_type=kv_cache_type, speculative=draft, draft_tokens=draft_tokens)
    sampling = _sampling(temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed, stop)

    def go() -> int:
        from vibechat.engine.errors import ConfigError, VibechatError

        from .appconfig import load_app_config
        from .backends import make_backend
        from .models_cmd import pull_with_progress
        from .run_cmd import RunRequest, execute, read_prompt

        if prompts_file is not None:
            from .batch_cmd import batch_main, check_conflicts

            check_conflicts(prompt=prompt, continue_latest=continue_, conversation_id=conversation)
        elif no_prefix_cache:
            raise VibechatError("--no-prefix-cache applies only with --prompts-file (one prompt always starts "
                                "from an empty cache); drop it.")
        loaded = load_app_config()
        if loaded.problem:
            raise ConfigError(loaded.problem)
        config = with_flags(loaded, engine, sampling, system).config
        if prompts_file is not None:  # many prompts: app/batch_cmd.py
            return batch_main(prompts_file, config=config, no_save=no_save, raw=raw, show_stats=stats,
                              reuse_prefix=not no_prefix_cache)
        chat = open_chat(no_save=no_save, continue_latest=continue_, conversation_id=conversation)
        choice = EngineChoice.from_config(config)
        params, system_prompt = config.params, config.system_prompt
        if chat.conversation_id is not None:  # continuing: the conversation's settings, under the flags
            params = sampling.to_params(chat.conversation.params)
            system_prompt = system  # None keeps the conversation's
            if engine.model is None and chat.model_path and Path(chat.model_path).is_file():
                choice = replace(choice, model=chat.model_path)
        text = read_prompt(prompt, sys.stdin)
        backend = make_backend(choice, pull=pull_with_progress)
        request = RunRequest(prompt=text, system=system_prompt, params=params,
                             json_output=json_output, show_stats=stats, raw=raw)
        try:
            return execute(backend, request, sys.stdout, sys.stderr, chat)
        finally:
            backend.close()
            if chat.history is not None:
                chat.history.close()

    code = guarded(go)
    if code:
        raise typer.Exit(code)


def open_chat(*, no_save: bool, continue_latest: bool, conversation_id: int | None):
    """The ``ChatLog`` a ``run`` adds to: a new saved conversation, a saved one to continue,
    or (``--no-save``) one kept in memory only."""
    from vibechat.engine.chatlog import ChatLog
    from vibechat.engine.conversation import Conversation
    from vibechat.engine.errors import VibechatError
    from vibechat.engine.history import History

    if continue_latest and conversation_id is not None:
        raise VibechatError("--continue and --conversation both pick a conversation: use one of them.")
    if no_save:
        if continue_latest or conversation_id is not None:
            raise VibechatError("--no-save cannot add to a saved conversation: drop --no-save, "
                                "or --continue/--conversation.")
        return ChatLog(Conversation())
    history = History().open()  # a read-only data dir fails here, in one line, before any work
    try:
        if continue_latest:
            latest = history.latest()
            if latest is None:
                raise VibechatError("no saved conversation to continue yet: ask without --continue first.")
            conversation_id = latest.id
        if conversation_id is not None:
            return ChatLog.open(history, conversation_id)
    except BaseException:
        history.close()
        raise
    return ChatLog(Conversation(), history)


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)
