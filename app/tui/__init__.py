"""The chat TUI. ``create_app`` is the one factory the CLI and the tests use; the
backend is injected.

Imports inside functions are deliberate: the Textual app and what it needs (backends, history,
the engine process) load only when the chat opens, so the CLI starts without Textual."""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from vibechat.engine.chat.history import History
    from vibechat.engine.chat.tool_turns import ToolBox
    from vibechat.engine.llama.worker_ahead import EngineAhead
    from vibechat.engine.settings.config import LoadedConfig
    from vibechat.engine.settings.knobs import EngineSettings
    from vibechat.engine.settings.params import SamplingParams
    from vibechat.engine.turns.backend import Backend

    from .controllers.conversations import OverSaved
    from .controllers.models import BackendFactory
    from .controllers.tool_rounds import ToolPolicy
    from .shell.app import VibechatApp


def create_app(
    backend: Backend,
    *,
    params: SamplingParams | None = None,
    system: str | None = None,
    config: LoadedConfig | None = None,
    blink: bool = True,
    backend_factory: BackendFactory | None = None,
    history: History | None = None,
    save: bool = True,
    freeze_gc: bool = False,
    tools: ToolBox | None = None,
    tool_policy: ToolPolicy | None = None,
    tool_rounds: int = 8,
    exit_on_signals: bool = False,
    open_conversation: int | None = None,
    open_over: OverSaved | None = None,
) -> VibechatApp:
    """The app, with ``backend`` injected; ``backend_factory`` makes a backend for another
    model file (the model picker needs it to switch models). ``config``: the loaded config
    file (None: load it); ``params`` (None: the config's) and ``system`` are what the chat
    starts with. Chats are saved in ``history`` (None: the default database under the
    data dir), unless ``save`` is false. ``freeze_gc``: once the model is ready, what the app
    built so far leaves the garbage collector's sight (see ``gc_policy``; the real chat does,
    tests that make many apps in one process do not). ``tools``: what replies may call (None:
    no tools), ``tool_policy`` who runs without asking, ``tool_rounds`` the most rounds of calls
    per prompt (engine/chat/tool_turns.py). ``exit_on_signals``: SIGTERM, SIGHUP and SIGINT end
    the app as Ctrl+Q does (the real chat's; app/terminal.py ``SignalExit``). ``open_conversation``:
    the saved conversation the chat opens on once the model is ready (``--continue``), with
    ``open_over``'s parameters and system prompt over its own (the preset's and the flags')."""
    from vibechat.engine.chat.history import History

    from .shell.app import VibechatApp

    if not save:
        history = None
    elif history is None:
        # Opened in a worker once the app is up; browsable if read-only.
        history = History(read_only_ok=True)
    return VibechatApp(
        backend,
        params=params,
        system=system,
        config=config,
        blink=blink,
        backend_factory=backend_factory,
        history=history,
        freeze_gc=freeze_gc,
        tools=tools,
        tool_policy=tool_policy,
        tool_rounds=tool_rounds,
        exit_on_signals=exit_on_signals,
        open_conversation=open_conversation,
        open_over=open_over,
    )


def freeze_startup_objects() -> None:
    """Before the screen opens, what the imports built (modules, classes, bindings) leaves the
    collector's sight (gc_policy's first freeze). Without a full collection first: at this
    point it finds nothing to free (0 objects, measured) and took 20-33 ms of the first frame
    on a 355 µs host (~70 ms at the 974 µs reference; docs/PERFORMANCE.md, "Speed on slow
    CPUs"). The freeze once the model is ready collects first, as before."""
    gc.freeze()


def run_tui(
    engine: EngineSettings,
    params: SamplingParams,
    system: str | None,
    config: LoadedConfig | None = None,
    save: bool = True,
    tools: ToolBox | None = None,
    tool_policy: ToolPolicy | None = None,
    tool_rounds: int = 8,
    history: History | None = None,
    open_conversation: int | None = None,
    open_over: OverSaved | None = None,
    ahead: EngineAhead | None = None,
) -> int:
    """Run the chat until it quits; returns the exit status: 0, or 1 when the app ended on an
    unhandled exception (Textual shows the traceback, and ``app.run()`` itself returns
    normally, so the status is the only sign of the crash). ``history``: the one already
    opened to pick ``open_conversation`` (None: the chat opens its own). ``ahead``: an engine
    process the command line started before it read the config (cli.py): a local model's
    backend takes it, and it is ended at once otherwise (a remote server's chat)."""
    from .frame_rate import use_frame_rate

    # Before anything imports Textual, which reads it once.
    use_frame_rate()
    from vibechat.engine.llama.worker import WorkerBackend

    from ..backends import make_backend
    from ..progress import pull_with_progress
    from ..terminal import require_terminal

    # `vibechat < /dev/null > out`: one line, before any escape code or model load.
    require_terminal()
    # A bad --model fails here, before the screen opens; a Hub model is downloaded first.
    # GPU layers asked of a CPU-only build: the chat runs on the CPU and says why (a notice).
    # A local model runs in a child process: a llama.cpp crash ends that process, not the chat.
    backend = make_backend(
        engine, pull=pull_with_progress, cpu_fallback=True, worker=True, ahead=ahead
    )
    if isinstance(backend, WorkerBackend):
        # The engine process loads the model while the screen opens.
        backend.preload()
    elif ahead is not None:
        # A remote server: no engine process here.
        ahead.end()
    # No collection until the first frame is drawn (the app resumes them then: shell/app.py):
    # Textual's and the chat's imports and the first layout build tens of thousands of objects
    # that live as long as the chat, and scanning them took ~10 % of the CPU to the first frame
    # (136 young, 12 middle and one full collection, measured).
    gc.disable()

    def factory(path: Path, **changes: Any) -> Backend:
        """The same engine settings, another model (or other settings, by config key:
        ``gpu_layers``)."""
        return make_backend(
            replace(engine, model=str(path), **changes), cpu_fallback=True, worker=True
        )

    from .conversation.attachment_view import probe_terminal

    # A graphics terminal is asked what it draws images with, before the screen reads keys.
    probe_terminal()
    app = create_app(
        backend,
        params=params,
        system=system,
        config=config,
        backend_factory=factory,
        save=save,
        history=history,
        freeze_gc=True,
        tools=tools,
        tool_policy=tool_policy,
        tool_rounds=tool_rounds,
        exit_on_signals=True,
        open_conversation=open_conversation,
        open_over=open_over,
    )
    freeze_startup_objects()
    try:
        app.run()
    finally:
        # The app did, after its first frame, unless it ended before one.
        gc.enable()
        backend.close()
        # Switched models: the engine process in use now ends too.
        if app.session.backend is not backend:
            app.session.backend.close()
        if app.history is not None:
            app.history.close()
    return app.return_code or 0
