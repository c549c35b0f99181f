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
from typing import Annotated, Any

import typer
from typer import core
from typer.main import get_command

from vibechat.engine.errors import ConfigError, VibechatError
from vibechat.engine.settings.choices import DEFAULT_REPACK, check_repack
from vibechat.engine.settings.structured import OutputFormat

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
from .clitools import echo, guard, usage_message
from .config import config_app
from .history import history_app
from .models import list_cmd as models_list
from .models import models_app
from .models import pull_cmd as models_pull
from .models import rm as models_rm
from .models import show as models_show
from .presets import PresetOpt, presets_app
from .tool_options import AllowToolOpt, McpConfigOpt, ToolChoiceOpt, chat_tools, tools_for
from .tools import tools as tools_cmd

cli = typer.Typer(
    name="vibechat",
    help="Chat with local LLMs in your terminal. With no command, opens the chat.",
    epilog="ollama-style shortcuts: list (ls), pull, show and rm are the 'models' commands of the same names.",
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
    "list": models_list, "ls": models_list, "pull": models_pull, "show": models_show, "rm": models_rm}
for _name, _command in OLLAMA_SHORTCUTS.items():
    cli.command(_name, hidden=True)(_command)


def _setup_logging(verbose: bool) -> None:
    from ..logfile import route_logs_to_file

    root = logging.getLogger("vibechat")
    root.propagate = False
    root.handlers.clear()
    root.addHandler(route_logs_to_file())  # libraries' records too: never on the terminal
    if verbose or os.environ.get("VIBECHAT_DEBUG"):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.vibechat = True  # type: ignore[attr-defined]  # kept when huggingface_hub is imported
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        logging.getLogger("huggingface_hub").addHandler(handler)


def version_text() -> str:
    """``vibechat --version``: vibechat's version, llama-cpp-python's, the llama.cpp
    backends it was built with and whether it can offload to a GPU. Loads no model;
    llama_cpp is imported here only (``--help`` stays instant)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    lines = [f"vibechat {installed('vibechat') or '(version unknown: not installed as a package)'}"]
    llama = installed("llama-cpp-python")
    try:
        import llama_cpp

        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        info = llama_cpp.llama_print_system_info()
    except Exception as exc:  # noqa: BLE001 - not installed, or a build that does not load
        problem = " ".join(str(exc).split()) or type(exc).__name__
        lines.append(f"llama-cpp-python {llama or '(not installed)'}: cannot load it ({problem})")
        return "\n".join(lines)
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    # "CUDA : ARCHS = 890 | ... | CPU : SSE3 = 1 | ...": each backend starts with "NAME : ".
    backends = [part.split(" : ")[0].strip() for part in text.split("|") if " : " in part]
    lines.append(f"llama-cpp-python {llama or getattr(llama_cpp, '__version__', '?')}"
                 + (f" (llama.cpp backends: {', '.join(backends)})" if backends else ""))
    lines.append("GPU offload: yes" if gpu else
                 "GPU offload: no (a CPU-only build; GPU in docs/USAGE.md says how to rebuild it)")
    lines.append(_repack_line(text, str(llama or getattr(llama_cpp, "__version__", ""))))
    return "\n".join(lines)


def _repack_line(system_info: str, llama_version: str) -> str:
    """``--version``'s line about CPU weight repacking under the configured ``repack``."""
    from vibechat.engine.llama import repack
    from vibechat.engine.paths import cache_dir

    from ..appconfig import load_app_config

    loaded = load_app_config()
    try:
        setting = check_repack(loaded.config.repack)
    except Exception:  # noqa: BLE001 - a bad value is reported where it is used
        setting = DEFAULT_REPACK
    key = repack.probe_key(system_info, llama_version)
    return repack.setting_summary(setting, system_info, repack.cpu_flags(), cache_dir() / repack.VERDICT_FILE, key)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@cli.callback(invoke_without_command=True)
@setting_options
def main_callback(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_print_version, is_eager=True, expose_value=False,
        help="Print the versions of vibechat and llama-cpp-python, and whether this build can offload "
             "to a GPU.")] = False,
    flags: SettingFlags = SettingFlags.NONE,  # every setting's flag, from the settings table (options.py)
    preset: PresetOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Log llama.cpp and vibechat details to stderr.")] = False,
    no_save: NoSaveOpt = False,
    continue_: Annotated[bool, typer.Option(
        "--continue", "-c", help="Open the chat on the latest saved conversation (its model, parameters and "
                                 "KV snapshot).", rich_help_panel=HISTORY)] = False,
    conversation: Annotated[int | None, typer.Option(
        "--conversation", "--cid", metavar="ID", help="Open the chat on saved conversation ID ('vibechat "
                                                      "history list').", min=1, rich_help_panel=HISTORY)] = None,
    new: Annotated[bool, typer.Option(
        "--new", help="Start a new chat, also when continue_last in the config opens the last one.",
        rich_help_panel=HISTORY)] = False,
    mcp_config: McpConfigOpt = None,
) -> None:
    """Chat with local LLMs in your terminal. With no command, opens the chat."""
    _setup_logging(verbose)
    # `vibechat --temperature 0.2 config show` shows what the flags would change.
    ctx.obj = {"verbose": verbose, "flags": flags.as_tuple()}
    if ctx.invoked_subcommand is not None:
        chat_only = [flag for flag, given in (("--continue", continue_), ("--conversation", conversation is not None),
                                              ("--new", new)) if given]
        if chat_only:  # `vibechat -c run ...`: it would be ignored without a word
            command, flag = ctx.invoked_subcommand, chat_only[0]
            where = f" (for run, after it: vibechat run {flag} ...)" if command == "run" and flag != "--new" else ""
            raise _click_exception("UsageError")(
                f"{flag} before '{command}' opens the chat, which '{command}' does not: leave it out{where}.", ctx=ctx)
        return
    wanted = RunFlags(flags, preset)

    def start() -> int:
        from ..appconfig import load_app_config
        from ..tui import run_tui

        # A problem in the config does not stop the chat: a bad key is left out on its own (a
        # file that is not TOML, whole), and the chat lists what it left out (config_bar.py).
        plan = RunPlan.of(load_app_config(), wanted)
        plan.check()
        # --continue, --conversation ID or continue_last: picked as `run` picks, before the screen opens
        opening = plan.opening(no_save=no_save, new=new, continue_latest=continue_, conversation_id=conversation)
        plan, registry = opening.plan, None
        try:
            registry, approval = chat_tools(plan.config, mcp_config)  # the chat asks before each call
            return run_tui(engine=plan.engine, params=plan.params, system=plan.system, config=plan.loaded,
                           save=not no_save, tools=registry, tool_policy=approval,
                           tool_rounds=plan.config.tool_rounds, history=opening.history,
                           open_conversation=opening.conversation_id, open_over=opening.over_saved)
        finally:
            if registry is not None:
                registry.close()
            if opening.history is not None:  # (closed already when the chat ran)
                opening.history.close()

    code = guard(start)
    if code:  # the chat crashed (its traceback is on the screen): say so to the shell too
        raise typer.Exit(code)


# Built from one line per paragraph: with Rich, --help keeps a docstring's line breaks.
RUN_HELP = ("Answer one prompt, streaming the reply to stdout.\n\n"
            "Saved as a conversation unless --no-save; --continue or --conversation ID add to a saved one "
            "(its system prompt and parameters apply, under your flags). --prompts-file runs many prompts, "
            "each a new conversation.")


@cli.command(help=RUN_HELP)
@setting_options
def run(
    ctx: typer.Context,
    words: Annotated[list[str] | None, typer.Argument(
        metavar="PROMPT", show_default=False,
        help="The prompt, as with 'ollama run' (words are joined by spaces; '-' reads stdin).")] = None,
    prompt: Annotated[str | None, typer.Option(
        "--prompt", "-p", metavar="TEXT",
        help="The prompt, as an option; '-' reads stdin (also read when piped and no prompt is given).")] = None,
    flags: SettingFlags = SettingFlags.NONE,  # every setting's flag, from the settings table (options.py)
    preset: PresetOpt = None,
    json_output: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object (text, thinking, model, params, stats; completion_tokens count "
                       "the thinking too).")] = False,
    show_thinking: Annotated[bool, typer.Option(
        "--show-thinking", help="Show a reasoning model's thinking on stderr, between [thinking] and "
                                "[end of thinking] lines (stdout carries the answer only).")] = False,
    stats: Annotated[bool, typer.Option("--stats", help="Print timing statistics on stderr.")] = False,
    raw: Annotated[bool, typer.Option(
        "--raw", help="Do not strip terminal control sequences from the output.")] = False,
    no_save: NoSaveOpt = False,
    continue_: Annotated[bool, typer.Option(
        "--continue", "-c", help="Add this prompt to the latest saved conversation.",
        rich_help_panel=HISTORY)] = False,
    conversation: Annotated[int | None, typer.Option(
        "--conversation", "--cid", metavar="ID",
        help="Add this prompt to saved conversation ID ('vibechat history list').",
        min=1, rich_help_panel=HISTORY)] = None,
    switch_model: Annotated[bool, typer.Option(
        "--switch-model",
        help="With --continue/--conversation: go on with the model and server this run names (--model, "
             "--base-url, --backend, a preset's model) instead of the conversation's own; without it a "
             "different one is refused.",
        rich_help_panel=HISTORY)] = False,
    prompts_file: Annotated[str | None, typer.Option(
        "--prompts-file", metavar="FILE.jsonl",
        help="Run every prompt of a JSON Lines file ('-' reads stdin): one JSON result per line on stdout; "
             "exit 1 if any line failed.")] = None,
    no_prefix_cache: Annotated[bool, typer.Option(
        "--no-prefix-cache",
        help="With --prompts-file: start every prompt from an empty KV cache instead of reusing the prefix "
             "it shares with the previous one (slower; results then cannot depend on line order).")] = False,
    json_schema: Annotated[str | None, typer.Option(
        "--json-schema", metavar="FILE|JSON",
        help="Constrain the reply to JSON that follows this JSON Schema (a file, or inline JSON; 'json': any "
             "JSON object). Local engine: llama.cpp's grammar sampler; remote: response_format. A reply that "
             "--max-tokens or the context cuts before it is complete exits with status 3.",
        rich_help_panel=STRUCTURED)] = None,
    grammar: Annotated[str | None, typer.Option(
        "--grammar", metavar="FILE",
        help="Constrain the reply to a GBNF grammar (llama.cpp's format; a 'root' rule). Local engine only. A reply "
             "that --max-tokens or the context cuts exits with status 3.",
        rich_help_panel=STRUCTURED)] = None,
    allow_tool: AllowToolOpt = None,
    tool_choice: ToolChoiceOpt = None,
    mcp_config: McpConfigOpt = None,
    image: ImageOpt = None,
    file: FileOpt = None,
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
        from .run_input import read_attachments, read_prompt
        from .run_request import RunRequest

        if prompts_file is not None:
            from .batch import batch_main, check_conflicts

            check_conflicts(prompt=prompt, continue_latest=continue_, conversation_id=conversation,
                            prompt_flag="PROMPT" if positional else "--prompt")
            if switch_model:
                raise VibechatError("--switch-model applies only with --continue or --conversation ID, not with "
                                    "--prompts-file (each line is a new conversation): drop it.")
        elif no_prefix_cache:
            raise VibechatError("--no-prefix-cache applies only with --prompts-file (one prompt always starts "
                                "from an empty cache); drop it.")
        loaded = load_app_config()
        for warning in loaded.warnings:  # unknown VIBECHAT_* variables: they set nothing, the run goes on
            echo(f"vibechat: warning: {warning}", err=True)
        if loaded.problem:
            raise ConfigError(loaded.problem)
        plan = RunPlan.of(loaded, wanted)
        failure.model, failure.params = plan.config.model, plan.params
        plan.check()
        # checked before any model loads
        plan = plan.with_output_format(structured_output(json_schema, grammar, plan.engine))
        attachments = read_attachments(image, file, sys.stderr, batch=prompts_file is not None, failure=failure)
        if prompts_file is not None:  # many prompts: app/commands/batch.py
            return batch_main(prompts_file, plan, no_save=not plan.saves(no_save, continuing=False), raw=raw,
                              show_stats=stats, reuse_prefix=not no_prefix_cache, show_thinking=show_thinking)
        plan = plan.open_conversation(no_save=no_save, continue_latest=continue_, conversation_id=conversation,
                                      switch=switch_model)
        chat = plan.chat
        assert chat is not None
        failure.conversation_id = chat.conversation_id
        given = read_prompt(prompt, sys.stdin)
        choice = tool_choice if tool_choice is not None else plan.config.tool_choice  # flag > preset > config
        registry, approval = tools_for(plan.config, mcp_config, allow_tool, choice)
        if registry is not None:  # a server that misbehaves: one line each (the details: the log file)
            registry.hear_problems(lambda line: echo(f"vibechat: {line}", err=True))
        try:
            backend = make_backend(plan.engine, pull=pull_with_progress)
        except BaseException:
            if registry is not None:
                registry.close()
            raise
        failure.model, failure.params = plan.engine.model, plan.params
        request = RunRequest(prompt=given.text, stdin_chars=given.stdin_chars, system=plan.system, params=plan.params,
                             json_output=json_output, show_stats=stats, raw=raw, show_thinking=show_thinking,
                             tools=registry, allow_tool=approval.allowed, tool_choice=choice,
                             verbose=bool((ctx.obj or {}).get("verbose")),
                             tool_rounds=plan.config.tool_rounds, attachments=attachments)
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


cli.command("tools", help="List the MCP servers and their tools, and the built-in tools.")(tools_cmd)


def positional_prompt(ctx: typer.Context, words: list[str] | None, option: str | None) -> str | None:
    """The prompt of ``vibechat run PROMPT`` (words joined by spaces, as ``ollama run MODEL
    PROMPT`` does) or of ``--prompt``: both, or a model's name where the prompt goes (an
    ollama habit: ``run MODEL PROMPT``), is a one-line usage error saying what to type."""
    if not words:
        return option
    usage_error = _click_exception("UsageError")
    if option is not None:
        raise usage_error("the prompt is given twice, as PROMPT and with --prompt: give one of them.", ctx=ctx)
    first = words[0]
    if looks_like_a_model(first, by_name=len(words) > 1):
        shown = " ".join(words[1:]) or "your prompt"
        raise usage_error(f"{first!r} is a model, not a prompt: pick the model with --model, e.g. "
                          f'vibechat run --model {first} "{shown}"', ctx=ctx)
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
        raise VibechatError("--json-schema and --grammar both constrain the reply: give one of them.")
    if json_schema is None and grammar is None:
        return None
    fmt = OutputFormat.parse(grammar, kind="grammar") if grammar is not None else OutputFormat.parse(json_schema or "")
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


def _click_exception(name: str) -> Any:
    """Click's exception class ``name`` as the installed Typer raises it: recent Typer
    vendors its own copy of click, older ones use click itself; typer.BadParameter is
    one of them in both."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


def usage_error_line(exc: Any) -> str:
    """Click's usage error as the one line vibechat prints: the message (typer's
    "Did you mean" suggestions included) and where to read the command's options."""

    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "vibechat"
    return f"vibechat: error: {usage_message(exc)} (see '{where} --help')"


def quiet_flags(command: Any, help_names: list[str] | None = None) -> None:
    """Tidy value labels in ``--help``: recent Typer shows every parameter's type, so
    ``<bool>`` beside ``--json`` or ``--help``, which take no value, and ``<str>`` beside
    an argument already named by its metavar (``QUERY``). Flags get no label; arguments
    with a metavar show just it."""
    help_names = command.context_settings.get("help_option_names", help_names) or ["--help"]
    options = [p for p in command.params if getattr(p, "is_flag", False)]
    try:  # -h/--help, which click adds itself (and, since click 8.2, keeps)
        options.append(command.get_help_option(command.context_class(command, help_option_names=help_names)))
    except Exception:  # noqa: BLE001 - only the help page's looks are at stake
        pass
    for option in options:
        if option is not None and getattr(option, "is_flag", False) and option.metavar is None:
            option.metavar = ""
    for param in command.params:
        if param.param_type_name == "argument" and param.metavar and hasattr(param, "display_type_rich"):
            param.display_type_rich = lambda ctx: None
    for sub in getattr(command, "commands", {}).values():
        quiet_flags(sub, help_names)


def escape_help(command: Any, seen: set[int] | None = None) -> None:
    """Help texts as written: Typer renders them as Rich markup, which would take the
    bracketed words of a help text (``[thinking]``) for style tags and drop them. Each
    command's and option's help is escaped once, before the first page is drawn, where
    Rich draws it (plain click help, ``TYPER_USE_RICH=0``, shows the text as is)."""
    from rich.markup import escape

    seen = set() if seen is None else seen
    if id(command) in seen:  # a command reached twice (an alias) is escaped once
        return
    seen.add(id(command))
    if core.HAS_RICH and getattr(command, "rich_markup_mode", None) == "rich":
        for attr in ("help", "short_help", "epilog"):
            text = getattr(command, attr, None)
            if isinstance(text, str):
                setattr(command, attr, escape(text))
        for param in command.params:
            if isinstance(getattr(param, "help", None), str) and id(param) not in seen:
                seen.add(id(param))
                param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        escape_help(sub, seen)


def skip_unset_coercion(command: Any) -> None:
    """A parameter the command line leaves unset (None) skips the pydantic ``TypeAdapter`` that
    this Typer builds for every parameter it processes, only to turn None into None (or ``()``).
    The chat's start parses ~30 of them, all unset: with pydantic's import, 0.17 s (busy 2-core
    host) before the engine process even starts, so before the first frame and the model's load
    (docs/PERFORMANCE.md, "Speed on slow CPUs"). The value
    is the same: Typer's coercion returns before any type's code for None, so a stand-in that
    has no adapter gives its result; a value that is given is coerced as before. A Typer
    without these internals is left alone."""
    try:
        from typer._coercion import PassThroughRuntimeParam
    except ImportError:
        return
    # With -h/--help, which click makes once per command (quiet_flags, run first, made it).
    for param in [*command.params, getattr(command, "_help_option", None)]:
        if not hasattr(param, "_runtime_param") or not hasattr(param, "type_descriptor"):
            continue

        def process_value(ctx: Any, value: Any, _param: Any = param, _process: Any = param.process_value) -> Any:
            if value is not None or _param._runtime_param is not None:
                return _process(ctx, value)
            kind = _param.type_descriptor
            _param._runtime_param = PassThroughRuntimeParam(parameter_info=kind.parameter_info,
                                                            annotation=kind.annotation)
            try:
                return _process(ctx, value)
            finally:
                _param._runtime_param = None  # a later given value builds the real one

        param.process_value = process_value
    for sub in getattr(command, "commands", {}).values():
        skip_unset_coercion(sub)


def main() -> None:
    """The console script: runs the commands with click's standalone mode off, so that a
    usage error (an unknown option, a value of the wrong type) is one line on stderr and
    exit code 2 rather than click's boxed panel."""

    for stream in (sys.stdout, sys.stderr):  # a character the terminal's encoding lacks is no traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (OSError, ValueError):
                pass
    command = get_command(cli)
    quiet_flags(command)
    escape_help(command)
    skip_unset_coercion(command)
    click_exception, usage_error = _click_exception("ClickException"), _click_exception("UsageError")
    try:
        code = command.main(standalone_mode=False)
    except KeyboardInterrupt:
        sys.exit(130)
    except typer.Abort:  # Ctrl-D or Ctrl-C at a confirmation prompt
        typer.echo("\nvibechat: aborted.", err=True)
        sys.exit(1)
    except click_exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `vibechat history`: its help, as before
            if exc.format_message().strip():  # (with Rich, it is printed already)
                typer.echo(exc.format_message())
        elif isinstance(exc, usage_error):
            from .clitools import usage_json, usage_message

            typer.echo(usage_error_line(exc), err=True)
            usage_json(exc, usage_message(exc), sys.argv[1:])  # run --json: its one object, with the error
        else:
            from .clitools import echo

            echo(f"vibechat: error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(getattr(exc, "exit_code", 1))
    sys.exit(code if isinstance(code, int) else 0)
