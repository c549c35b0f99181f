"""The ``vibechat`` command line. Heavy modules (llama.cpp, Textual) are imported
only inside the commands that need them, so ``--help`` answers at once.

Imports inside functions are deliberate: each command loads its own modules (the chat's Textual
app, the backends, llama-cpp-python, the run and batch commands) only when it runs, so
``--help`` and quick commands start fast (tests/test_engine_headless.py checks which load)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from typer.main import get_command

from vibechat.engine.errors import ConfigError, VibechatError

from ..options import (
    HISTORY,
    STRUCTURED,
    FileOpt,
    ImageOpt,
    NoSaveOpt,
    SettingFlags,
    setting_options,
)
from ..progress import pull_with_progress
from ..run_plan import RunFlags, RunPlan
from .click_patches import (
    click_exception,
    escape_help,
    quiet_flags,
    skip_unset_coercion,
    usage_error_line,
)
from .clitools import echo, guard, usage_json, usage_message
from .config import config_app
from .history import history_app
from .models import list_cmd as models_list
from .models import models_app
from .models import pull_cmd as models_pull
from .models import rm as models_rm
from .models import show as models_show
from .presets import PresetOpt, presets_app
from .run_args import CompactOpt, CompareOpt, positional_prompt, structured_output
from .tool_options import AllowToolOpt, McpConfigOpt, ToolChoiceOpt, chat_tools, tools_for
from .tools import tools as tools_cmd
from .version import print_version

if TYPE_CHECKING:
    from vibechat.engine.llama.worker_ahead import EngineAhead

cli = typer.Typer(
    name="vibechat",
    help="Chat with local LLMs in your terminal. With no command, opens the chat.",
    epilog=(
        "ollama-style shortcuts: list (ls), pull, show and rm are the 'models' commands of the "
        "same names."
    ),
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

cli.add_typer(models_app, name="models")
cli.add_typer(history_app, name="history")
cli.add_typer(config_app, name="config")
cli.add_typer(presets_app, name="presets")

# ollama habits: `vibechat list` (or `ls`), `pull`, `show` and `rm` are the `models` commands
# of the same names, with the same options. Hidden: the command list stays short; the main
# page's last line names them.
OLLAMA_SHORTCUTS: dict[str, Callable[..., None]] = {
    "list": models_list,
    "ls": models_list,
    "pull": models_pull,
    "show": models_show,
    "rm": models_rm,
}
for _name, _command in OLLAMA_SHORTCUTS.items():
    cli.command(_name, hidden=True)(_command)


def _setup_logging(verbose: bool) -> None:
    from ..logfile import route_logs_to_file

    root = logging.getLogger("vibechat")
    root.propagate = False
    root.handlers.clear()
    # Libraries' records too: never on the terminal.
    root.addHandler(route_logs_to_file())
    if verbose or os.environ.get("VIBECHAT_DEBUG"):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        # kept when huggingface_hub is imported
        handler.vibechat = True  # type: ignore[attr-defined]
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        logging.getLogger("huggingface_hub").addHandler(handler)


@cli.callback(invoke_without_command=True)
@setting_options
def main_callback(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=print_version,
            is_eager=True,
            expose_value=False,
            help="Print the versions of vibechat and llama-cpp-python, and whether this build can "
            "offload to a GPU.",
        ),
    ] = False,
    # every setting's flag, from the settings table (options.py)
    flags: SettingFlags = SettingFlags.NONE,
    preset: PresetOpt = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Log llama.cpp and vibechat details to stderr.")
    ] = False,
    no_save: NoSaveOpt = False,
    continue_: Annotated[
        bool,
        typer.Option(
            "--continue",
            "-c",
            help="Open the chat on the latest saved conversation (its model, parameters and "
            "KV snapshot).",
            rich_help_panel=HISTORY,
        ),
    ] = False,
    conversation: Annotated[
        int | None,
        typer.Option(
            "--conversation",
            "--cid",
            metavar="ID",
            help="Open the chat on saved conversation ID ('vibechat history list').",
            min=1,
            rich_help_panel=HISTORY,
        ),
    ] = None,
    new: Annotated[
        bool,
        typer.Option(
            "--new",
            help="Start a new chat, also when continue_last in the config opens the last one.",
            rich_help_panel=HISTORY,
        ),
    ] = False,
    mcp_config: McpConfigOpt = None,
) -> None:
    """Chat with local LLMs in your terminal. With no command, opens the chat."""
    # The chat's engine process, started by main() before the command line was parsed
    # (_engine_ahead); start() hands it to the chat, and main() ends it if nothing took it.
    ahead = (ctx.obj or {}).get(AHEAD) if ctx.invoked_subcommand is None else None
    _setup_logging(verbose)
    # `vibechat --temperature 0.2 config show` shows what the flags would change.
    ctx.obj = {"verbose": verbose, "flags": flags.as_tuple()}
    if ctx.invoked_subcommand is not None:
        chat_only = [
            flag
            for flag, given in (
                ("--continue", continue_),
                ("--conversation", conversation is not None),
                ("--new", new),
            )
            if given
        ]
        # `vibechat -c run ...`: it would be ignored without a word.
        if chat_only:
            command, flag = ctx.invoked_subcommand, chat_only[0]
            where = (
                f" (for run, after it: vibechat run {flag} ...)"
                if command == "run" and flag != "--new"
                else ""
            )
            raise click_exception("UsageError")(
                f"{flag} before '{command}' opens the chat, which '{command}' does not: leave it "
                f"out{where}.",
                ctx=ctx,
            )
        return
    wanted = RunFlags(flags, preset)

    def start() -> int:
        from ..appconfig import load_app_config
        from ..tui import run_tui

        opening, registry = None, None
        try:
            # A problem in the config does not stop the chat: a bad key is left out on its own
            # (a file that is not TOML, whole), and the chat lists what it left out
            # (config_bar.py).
            plan = RunPlan.of(load_app_config(), wanted)
            plan.check()
            # --continue, --conversation ID or continue_last: picked as `run` picks, before the
            # screen opens.
            opening = plan.opening(
                no_save=no_save, new=new, continue_latest=continue_, conversation_id=conversation
            )
            plan = opening.plan
            # The chat asks before each call.
            registry, approval = chat_tools(plan.config, mcp_config)
            return run_tui(
                engine=plan.engine,
                params=plan.params,
                system=plan.system,
                config=plan.loaded,
                save=not no_save,
                tools=registry,
                tool_policy=approval,
                tool_rounds=plan.config.tool_rounds,
                history=opening.history,
                open_conversation=opening.conversation_id,
                open_over=opening.over_saved,
                ahead=ahead,
            )
        finally:
            # Taken by the chat's backend, and ended with it, if local.
            if ahead is not None:
                ahead.end()
            if registry is not None:
                registry.close()
            # Closed already when the chat ran.
            if opening is not None and opening.history is not None:
                opening.history.close()

    code = guard(start)
    # The chat crashed (its traceback is on the screen): say so to the shell too.
    if code:
        raise typer.Exit(code)


# main() hands the callback the engine process it started, in ctx.obj.
AHEAD = "engine_ahead"


def _engine_ahead(args: list[str]) -> EngineAhead | None:
    """The chat's engine process, started before the command line is parsed, the config read,
    the model picked or Textual imported (engine/llama/worker_ahead.py): its interpreter and
    llama.cpp's bindings start on another core while the chat gets ready, and the model's load
    begins as soon as the model is known, so it runs while the screen's first frame is drawn.
    Only where ``args`` open the chat, as far as their words tell (no command's name among them,
    no --help or --version: a value that happens to be a command's name, ``--system run``, only
    starts the engine later, as before), and it can open (a terminal on both ends; else
    ``run_tui`` refuses in one line, and nothing was started)."""
    from typer.main import get_command_name

    from ..terminal import has_terminal

    words = {"-h", "--help", "-V", "--version"}
    words |= {
        c.name or get_command_name(c.callback.__name__)
        for c in cli.registered_commands
        if c.callback
    }
    words |= {g.name for g in cli.registered_groups if g.name}
    if words.intersection(args) or not has_terminal():
        return None
    from vibechat.engine.llama.worker_ahead import EngineAhead

    return EngineAhead()


# Built from one line per paragraph: with Rich, --help keeps a docstring's line breaks.
RUN_HELP = (
    "Answer one prompt, streaming the reply to stdout.\n\n"
    "Saved as a conversation unless --no-save; --continue or --conversation ID add to a saved "
    "one (its system prompt and parameters apply, under your flags). --prompts-file runs many "
    "prompts, each a new conversation."
)


@cli.command(help=RUN_HELP)
@setting_options
def run(
    ctx: typer.Context,
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PROMPT",
            show_default=False,
            help="The prompt, as with 'ollama run' (words are joined by spaces; '-' reads stdin).",
        ),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt",
            "-p",
            metavar="TEXT",
            help="The prompt, as an option; '-' reads stdin (also read when piped and no prompt is "
            "given).",
        ),
    ] = None,
    # every setting's flag, from the settings table (options.py)
    flags: SettingFlags = SettingFlags.NONE,
    preset: PresetOpt = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object (text, thinking, model, params, stats; completion_tokens "
            "count the thinking too).",
        ),
    ] = False,
    show_thinking: Annotated[
        bool,
        typer.Option(
            "--show-thinking",
            help="Show a reasoning model's thinking on stderr, between [thinking] and "
            "[end of thinking] lines (stdout carries the answer only).",
        ),
    ] = False,
    stats: Annotated[
        bool, typer.Option("--stats", help="Print timing statistics on stderr.")
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="Do not strip terminal control sequences from the output.")
    ] = False,
    no_save: NoSaveOpt = False,
    continue_: Annotated[
        bool,
        typer.Option(
            "--continue",
            "-c",
            help="Add this prompt to the latest saved conversation.",
            rich_help_panel=HISTORY,
        ),
    ] = False,
    conversation: Annotated[
        int | None,
        typer.Option(
            "--conversation",
            "--cid",
            metavar="ID",
            help="Add this prompt to saved conversation ID ('vibechat history list').",
            min=1,
            rich_help_panel=HISTORY,
        ),
    ] = None,
    switch_model: Annotated[
        bool,
        typer.Option(
            "--switch-model",
            help="With --continue/--conversation: go on with the model and server this run names "
            "(--model, --base-url, --backend, a preset's model) instead of the conversation's "
            "own; without it a different one is refused.",
            rich_help_panel=HISTORY,
        ),
    ] = False,
    compact: CompactOpt = False,
    prompts_file: Annotated[
        str | None,
        typer.Option(
            "--prompts-file",
            metavar="FILE.jsonl",
            help="Run every prompt of a JSON Lines file ('-' reads stdin): one JSON result per "
            "line on stdout; exit 1 if any line failed.",
        ),
    ] = None,
    no_prefix_cache: Annotated[
        bool,
        typer.Option(
            "--no-prefix-cache",
            help="With --prompts-file: start every prompt from an empty KV cache instead of "
            "reusing the prefix it shares with the previous one (slower; results then cannot "
            "depend on line order).",
        ),
    ] = False,
    json_schema: Annotated[
        str | None,
        typer.Option(
            "--json-schema",
            metavar="FILE|JSON",
            help="Constrain the reply to JSON that follows this JSON Schema (a file, or inline "
            "JSON; 'json': any JSON object). Local engine: llama.cpp's grammar sampler; remote: "
            "response_format. A reply that --max-tokens or the context cuts before it is complete "
            "exits with status 3.",
            rich_help_panel=STRUCTURED,
        ),
    ] = None,
    grammar: Annotated[
        str | None,
        typer.Option(
            "--grammar",
            metavar="FILE",
            help="Constrain the reply to a GBNF grammar (llama.cpp's format; a 'root' rule). Local "
            "engine only. A reply that --max-tokens or the context cuts exits with status 3.",
            rich_help_panel=STRUCTURED,
        ),
    ] = None,
    allow_tool: AllowToolOpt = None,
    tool_choice: ToolChoiceOpt = None,
    mcp_config: McpConfigOpt = None,
    image: ImageOpt = None,
    file: FileOpt = None,
    compare: CompareOpt = None,
) -> None:
    """Answer one prompt, streaming the reply to stdout (help text: RUN_HELP)."""
    positional = bool(words)
    prompt = positional_prompt(ctx, words, prompt)
    wanted = RunFlags(flags, preset)

    from .run_result import JsonFailure

    # --json (and --prompts-file, whose results are JSON Lines) promise one JSON object on
    # stdout, also when the run fails before its reply: what is known by then goes in it.
    failure = JsonFailure(json_output or prompts_file is not None, sys.stdout)
    failure.model = flags.engine.get("model")

    def go() -> int:
        from ..appconfig import load_app_config
        from ..backends import make_backend
        from .run import execute
        from .run_args import compact_instructions
        from .run_input import read_attachments, read_prompt
        from .run_request import RunRequest

        if prompts_file is not None:
            from .batch import batch_main, check_conflicts

            check_conflicts(
                prompt=prompt,
                continue_latest=continue_,
                conversation_id=conversation,
                prompt_flag="PROMPT" if positional else "--prompt",
            )
            if switch_model:
                raise VibechatError(
                    "--switch-model applies only with --continue or --conversation ID, not with "
                    "--prompts-file (each line is a new conversation): drop it."
                )
        elif no_prefix_cache:
            raise VibechatError(
                "--no-prefix-cache applies only with --prompts-file (one prompt always starts "
                "from an empty cache); drop it."
            )
        loaded = load_app_config()
        # Unknown VIBECHAT_* variables: they set nothing, the run goes on.
        for warning in loaded.warnings:
            echo(f"vibechat: warning: {warning}", err=True)
        if loaded.problem:
            raise ConfigError(loaded.problem)
        plan = RunPlan.of(loaded, wanted)
        failure.model, failure.params = plan.config.model, plan.params
        plan.check()
        if compare is not None:
            from .compare import compare_main

            return compare_main(compare, loaded, wanted, {**ctx.params, "prompt": prompt})
        # checked before any model loads
        plan = plan.with_output_format(structured_output(json_schema, grammar, plan.engine))
        attachments = read_attachments(
            image, file, sys.stderr, batch=prompts_file is not None, failure=failure
        )
        # Many prompts: app/commands/batch.py.
        if prompts_file is not None:
            return batch_main(
                prompts_file,
                plan,
                no_save=not plan.saves(no_save, continuing=False),
                raw=raw,
                show_stats=stats,
                reuse_prefix=not no_prefix_cache,
                show_thinking=show_thinking,
            )
        plan = plan.open_conversation(
            no_save=no_save,
            continue_latest=continue_,
            conversation_id=conversation,
            switch=switch_model,
        )
        chat = plan.chat
        assert chat is not None
        failure.conversation_id = chat.conversation_id
        # A reply's lens candidates kept with it, bounded.
        if chat.history is not None:
            chat.history.lens_bytes = plan.config.lens_history_bytes
        given = compact_instructions(prompt, continue_ or bool(conversation)) if compact else None
        given = given or read_prompt(prompt, sys.stdin)
        # Flag > preset > config.
        choice = tool_choice if tool_choice is not None else plan.config.tool_choice
        registry, approval = tools_for(plan.config, mcp_config, allow_tool, choice)
        # A server that misbehaves: one line each (the details: the log file).
        if registry is not None:
            registry.hear_problems(lambda line: echo(f"vibechat: {line}", err=True))
        try:
            backend = make_backend(plan.engine, pull=pull_with_progress)
        except BaseException:
            if registry is not None:
                registry.close()
            raise
        failure.model, failure.params = plan.engine.model, plan.params
        request = RunRequest(
            prompt=given.text,
            stdin_chars=given.stdin_chars,
            system=plan.system,
            # The lens's candidates go only in --json's object: none asked for without it.
            params=plan.params if json_output else plan.params.replace(logprobs=0),
            json_output=json_output,
            show_stats=stats,
            raw=raw,
            show_thinking=show_thinking,
            tools=registry,
            allow_tool=approval.allowed,
            tool_choice=choice,
            verbose=bool((ctx.obj or {}).get("verbose")),
            tool_rounds=plan.config.tool_rounds,
            attachments=attachments,
            context_policy=plan.config.context_policy,
            compact=compact,
        )
        failure.request = request
        try:
            return execute(backend, request, sys.stdout, sys.stderr, chat)
        finally:
            backend.close()
            if registry is not None:
                registry.close()
            if chat.history is not None:
                chat.history.close()

    code = guard(go, on_failure=failure.failed)
    if code:
        raise typer.Exit(code)


cli.command("tools", help="List the MCP servers and their tools, and the built-in tools.")(
    tools_cmd
)


def main() -> None:
    """The console script: runs the commands with click's standalone mode off, so that a
    usage error (an unknown option, a value of the wrong type) is one line on stderr and
    exit code 2 rather than click's boxed panel."""

    # a character the terminal's encoding lacks is no traceback
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (OSError, ValueError):
                pass
    # First: before Typer builds and parses the command line.
    ahead = _engine_ahead(sys.argv[1:])
    try:
        _main(ahead)
    finally:
        # Nothing took it: a usage error, say (the chat ends its own).
        if ahead is not None:
            ahead.end()


def _main(ahead: EngineAhead | None) -> None:
    """Build the click command from Typer's, patch it (click_patches.py) and run it, handing the
    chat ``ahead`` (its engine process, in ``ctx.obj``); every way out is an exit status."""
    command = get_command(cli)
    quiet_flags(command)
    escape_help(command)
    skip_unset_coercion(command)
    click_error, usage_error = click_exception("ClickException"), click_exception("UsageError")
    try:
        code = command.main(standalone_mode=False, obj={AHEAD: ahead} if ahead else None)
    except KeyboardInterrupt:
        sys.exit(130)
    except typer.Abort:
        # Ctrl-D or Ctrl-C at a confirmation prompt.
        typer.echo("\nvibechat: aborted.", err=True)
        sys.exit(1)
    except click_error as exc:
        # `vibechat history`: its help, as before (with Rich, it is printed already).
        if type(exc).__name__ == "NoArgsIsHelpError":
            if exc.format_message().strip():
                typer.echo(exc.format_message())
        elif isinstance(exc, usage_error):
            typer.echo(usage_error_line(exc), err=True)
            # run --json: its one object, with the error
            usage_json(exc, usage_message(exc), sys.argv[1:])
        else:
            echo(f"vibechat: error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(getattr(exc, "exit_code", 1))
    sys.exit(code if isinstance(code, int) else 0)


# python -m vibechat.app.commands.cli (bench/bench_decode.py without a vibechat script).
if __name__ == "__main__":
    main()
