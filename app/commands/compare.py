"""``vibechat run --compare A B``: one prompt answered twice, with two sets of settings.

The sides are parsed by app/compare_plan.py (shared with the chat's ``/compare``). With the
same local model on both sides, one ``LlamaCppBackend`` answers both at once
(``PairedReplies``: two sequences of one context, engine/llama/pairing.py); otherwise each side
gets its own backend (loaded one after the other, so the second local model is loaded only if
the same memory check as any load passes) and the two replies run in two threads. A side that
cannot run (a setting that does not parse, a model that is not there or does not fit, a server
that is down) is one line on stderr for that side; the other still answers.

Text output: the two replies one after the other, each headed by its side and settings.
``--json``: one object, ``a`` and ``b`` (each like ``run --json``'s object, with ``differs``),
and ``differs``. With ``--prompts-file``, one such object per line (``line``, ``id``). Both
replies are saved as sibling replies of the one prompt (the conversation shows A's), each with
its parameters. ``--image`` / ``--file`` attach files to the prompt, sent to both sides.
Exit status: 0 when both sides answered, 1 when either failed (its line said), else 3 when a
side's structured reply is not complete (as ``run``'s).

Imports inside functions are deliberate: the backends, the model resolution and the prompt's
reading load only when a comparison runs (``vibechat --help`` stays instant).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, TextIO

from vibechat.engine.chat.batch import BatchLineError, read_requests
from vibechat.engine.chat.history import History
from vibechat.engine.chat.pairs import save_sibling
from vibechat.engine.errors import VibechatError
from vibechat.engine.sanitize import sanitize
from vibechat.engine.settings.config import LoadedConfig
from vibechat.engine.settings.structured import OutputFormat
from vibechat.engine.settings.think_switch import check_budget
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import (
    SIDES,
    Backend,
    ChatMessage,
    GenerationDone,
    ModelInfo,
    PairedReplies,
    Side,
    SideRequest,
)

from ..compare_plan import SidePlan, does_not_fit, side_plan, what_differs
from ..report import RunResult, error_kind, error_object, json_stats, structured_state
from ..run_plan import RunFlags
from .clitools import plain, safe_json

EXIT_FAILED = 1
# A structured reply (--json-schema / --grammar / a side's format) cut short, as run's.
EXIT_INCOMPLETE = 3


@dataclass(frozen=True)
class CompareOptions:
    """What the command line asked of a comparison besides its sides."""

    prompt: str | None
    prompts_file: str | None
    json_output: bool
    no_save: bool
    raw: bool
    # --json-schema / --grammar: both sides' replies follow it.
    json_schema: str | None = None
    grammar: str | None = None
    # --image / --file: attached to the prompt, sent to both sides (read before any load).
    attachments: tuple[Attachment, ...] = ()


@dataclass
class Outcome:
    """One side's answer to one prompt: its end, or its failure in one line."""

    done: GenerationDone | None = None
    error: str | None = None
    kind: str = "error"


@dataclass
class Engines:
    """The sides' backends once loaded: one shared (``paired``) or one a side; a side whose
    backend could not be made or loaded has its line in ``problems``."""

    backends: dict[Side, Backend] = field(default_factory=dict)
    infos: dict[Side, ModelInfo] = field(default_factory=dict)
    problems: dict[Side, tuple[str, str]] = field(default_factory=dict)
    paired: bool = False

    def close(self) -> None:
        for backend in {id(b): b for b in self.backends.values()}.values():
            backend.close()


# A new prompt: what a comparison answers.
_NEW_PROMPT = "a comparison answers one new prompt"
# Tools: a side that calls one ends asking for it (the pair), and no side runs the call yet.
_NO_TOOLS = "a comparison's sides are offered no tools; compare without them, or run alone"
# run's options that a comparison does not take (by parameter name): their flags and why.
REFUSED = {
    "continue_": ("--continue", _NEW_PROMPT),
    "conversation": ("--conversation", _NEW_PROMPT),
    "allow_tool": ("--allow-tool", _NO_TOOLS),
    "tool_choice": ("--tool-choice", _NO_TOOLS),
    "mcp_config": ("--mcp-config", _NO_TOOLS),
    "switch_model": ("--switch-model", _NEW_PROMPT),
    "no_prefix_cache": ("--no-prefix-cache", _NEW_PROMPT),
}


def compare_main(
    specs: tuple[str, str], loaded: LoadedConfig, wanted: RunFlags, given: dict[str, Any]
) -> int:
    """``run --compare A B`` (with ``--prompts-file``: every line through both); ``given``:
    run's parameters by name (``prompt``: the prompt as given, words or ``--prompt``)."""
    for name, (flag, why) in REFUSED.items():
        if given.get(name):
            raise VibechatError(f"--compare and {flag} do not mix: {why}; drop {flag}.")
    from .run_input import read_attachments
    from .run_result import JsonFailure

    # Read and checked before any model loads (a bad one: one line, exit status 2, and
    # --json's one object with the error, as run's).
    attachments = read_attachments(
        given.get("image"),
        given.get("file"),
        sys.stderr,
        batch=bool(given.get("prompts_file")),
        failure=JsonFailure(bool(given.get("json_output")), sys.stdout),
    )
    options = CompareOptions(
        prompt=given.get("prompt"),
        prompts_file=given.get("prompts_file"),
        json_output=bool(given.get("json_output")),
        no_save=bool(given.get("no_save")),
        raw=bool(given.get("raw")),
        json_schema=given.get("json_schema"),
        grammar=given.get("grammar"),
        attachments=attachments,
    )
    return _compare(specs, loaded, wanted, options)


def _compare(
    specs: tuple[str, str], loaded: LoadedConfig, wanted: RunFlags, options: CompareOptions
) -> int:
    sides = [
        _formatted(side_plan(side, text, loaded, wanted), options)
        for side, text in zip(SIDES, specs, strict=True)
    ]
    for plan in sides:
        if plan.problem is not None:
            _say(f"side {plan.label}: {plan.problem}")
    if all(plan.plan is None for plan in sides):
        raise VibechatError("neither side of --compare can run (each one's problem is above).")
    prompts = _prompts(options)
    # KV snapshots as run takes them (a later run --continue restores side A's), none for a
    # prompts file's lines (as --prompts-file alone takes none).
    engines = open_engines(sides, snapshots=options.prompts_file is None)
    history = None
    try:
        for side, (line, _kind) in engines.problems.items():
            _say(f"side {side}: {line}")
        if not options.no_save and any(p.plan and p.plan.saves(False, False) for p in sides):
            history = History().open()
        failed = cut = False
        for number, request_id, prompt, system in prompts:
            if isinstance(prompt, BatchLineError):
                print(safe_json({"line": number, "error": str(prompt)}), flush=True)
                failed = True
                continue
            outcomes = answer_both(engines, sides, prompt, system, options.attachments)
            source = "run" if number is None else "batch"
            saved = _save(history, sides, engines, (prompt, options.attachments), outcomes, source)
            obj = compare_object(sides, engines, outcomes, saved, options.raw)
            failed |= any(o.error is not None for o in outcomes.values())
            cut |= _cut_short(sides, engines, outcomes)
            _print(obj, sides, outcomes, options, number, request_id)
        return EXIT_FAILED if failed else EXIT_INCOMPLETE if cut else 0
    finally:
        engines.close()
        if history is not None:
            history.close()


def _formatted(side: SidePlan, options: CompareOptions) -> SidePlan:
    """Side ``side`` with ``--json-schema`` / ``--grammar`` on its reply (checked for its own
    engine, as ``run`` checks it), else with its own ``format=`` checked so; one that cannot
    take it has its line."""
    if side.plan is None:
        return side
    from .run_args import structured_output

    own = side.plan.params.output_format
    try:
        if options.json_schema is not None or options.grammar is not None:
            fmt = structured_output(options.json_schema, options.grammar, side.plan.engine)
            return replace(side, plan=side.plan.with_output_format(fmt))
        if own is not None:
            _check_format(own, side.plan.engine.remote)
    except VibechatError as exc:
        return replace(side, plan=None, problem=str(exc))
    return side


def _check_format(fmt: OutputFormat, remote: bool) -> None:
    """A side's own ``format=`` checked for its engine, as ``run``'s flags are: one line."""
    try:
        if remote:
            fmt.check_remote()
        else:
            from vibechat.engine.llama.native import check_output_format

            check_output_format(fmt)
    except VibechatError as exc:
        raise VibechatError(f"format: {exc}") from None


def _say(line: str) -> None:
    sys.stderr.write(plain(f"vibechat: {line}") + "\n")
    sys.stderr.flush()


# A prompt to compare: its line (None: not a prompts file's), its id, its text (or the line's
# error) and its system prompt (None: the sides' own).
Prompt = tuple[int | None, Any, str | BatchLineError, str | None]


def _prompts(options: CompareOptions) -> Iterator[Prompt]:
    """Each prompt: ``(line, id, prompt or the line's error, system)``; one prompt without a
    prompts file (line None). The prompt, or the file, is read or opened here, before any model
    loads (a missing one costs no load); a file's lines are read as they are run."""
    if options.prompts_file is None:
        from .run_input import read_prompt

        return iter([(None, None, read_prompt(options.prompt, sys.stdin).text, None)])
    from .batch import open_prompts

    stream, source = open_prompts(options.prompts_file, sys.stdin.buffer)
    return _lines(stream, source)


def _lines(stream: BinaryIO, source: str) -> Iterator[Prompt]:
    """A prompts file's lines (engine/chat/batch.py reads them). A line's own sampling
    parameters are refused: each side has its own."""
    from .batch import bounded_lines

    try:
        for item in read_requests(bounded_lines(stream, source)):
            if isinstance(item, BatchLineError):
                yield item.line, item.id, item, None
            elif item.overrides:
                names = ", ".join(sorted(item.overrides))
                refused = BatchLineError(
                    item.line,
                    f"with --compare a line sets no sampling parameters (each side has its "
                    f"own): drop {names}",
                    item.id,
                )
                yield item.line, item.id, refused, None
            else:
                yield item.line, item.id, item.prompt, item.system
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def open_engines(sides: list[SidePlan], snapshots: bool = True) -> Engines:
    """The sides' backends, loaded: one for both when both run the same local model (it must
    offer ``PairedReplies``), else one each, A's first. ``snapshots``: a local model takes
    and uses KV snapshots as ``run``'s does (the pair keeps side A's)."""
    from ..backends import make_backend
    from ..progress import pull_with_progress

    engines = Engines()
    live = [s for s in sides if s.plan is not None]
    plans = [s.plan for s in live if s.plan is not None]
    if len(plans) == 2 and plans[0].engine == plans[1].engine and not plans[0].engine.remote:
        try:
            backend = make_backend(plans[0].engine, pull=pull_with_progress, kv_snapshots=snapshots)
            info = backend.load()
        except VibechatError as exc:
            for side in live:
                engines.problems[side.side] = (str(exc), error_kind(exc))
            return engines
        if isinstance(backend, PairedReplies):
            engines.paired = True
            for side in live:
                engines.backends[side.side], engines.infos[side.side] = backend, info
            return engines
        backend.close()
    for side in live:
        assert side.plan is not None
        try:
            one = make_backend(side.plan.engine, pull=pull_with_progress, kv_snapshots=snapshots)
        except VibechatError as exc:
            engines.problems[side.side] = (str(exc), error_kind(exc))
            continue
        beside = [i for i in engines.infos.values() if not i.server]
        too_big = does_not_fit(one) if beside else None
        if too_big is not None:
            one.close()
            engines.problems[side.side] = (too_big, "model")
            continue
        try:
            engines.infos[side.side] = one.load()
        except VibechatError as exc:
            one.close()
            engines.problems[side.side] = (str(exc), error_kind(exc))
            continue
        engines.backends[side.side] = one
    return engines


def _messages(
    side: SidePlan, prompt: str, system: str | None, attachments: tuple[Attachment, ...] = ()
) -> tuple[ChatMessage, ...]:
    """What side ``side`` sends: its system prompt (the line's, when a prompts file gives one;
    "" none) and the prompt, with its attachments (text files inlined, as run sends them)."""
    assert side.plan is not None
    system = side.plan.system if system is None else (system or None)
    head = (ChatMessage("system", system),) if system else ()
    return (*head, ChatMessage("user", prompt, attachments=attachments).inlined())


def _refused(
    side: SidePlan, info: ModelInfo | None, attachments: tuple[Attachment, ...]
) -> Outcome | None:
    """Why side ``side``'s loaded model cannot take this prompt, before it is asked (None: it
    can): images for a model that takes none, a thinking budget beyond its context."""
    assert side.plan is not None
    if info is None:
        return None
    if any(a.is_image for a in attachments) and not info.takes_images:
        from vibechat.engine.chat.session import NO_IMAGES, ImagesNotTaken

        return Outcome(error=NO_IMAGES, kind=error_kind(ImagesNotTaken(NO_IMAGES)))
    try:
        check_budget(side.plan.params.think_budget, info.context_size or 0)
    except VibechatError as exc:
        return Outcome(error=str(exc), kind=error_kind(exc))
    return None


def answer_both(
    engines: Engines,
    sides: list[SidePlan],
    prompt: str,
    system: str | None,
    attachments: tuple[Attachment, ...] = (),
) -> dict[Side, Outcome]:
    """Both sides' answers to ``prompt`` (with ``attachments``): at once in one context
    (``engines.paired``), else in two threads; a side that cannot run has its line, and the
    other answers alone."""
    outcomes: dict[Side, Outcome] = {}
    for side in sides:
        if side.plan is None:
            outcomes[side.side] = Outcome(error=side.problem, kind="invalid_parameter")
        elif side.side in engines.problems:
            line, kind = engines.problems[side.side]
            outcomes[side.side] = Outcome(error=line, kind=kind)
        elif (refused := _refused(side, engines.infos.get(side.side), attachments)) is not None:
            outcomes[side.side] = refused
            _say(f"side {side.side}: {refused.error}")
    running = [s for s in sides if s.side not in outcomes]
    if engines.paired and len(running) == 2:
        outcomes.update(_paired(engines, running, (prompt, system, attachments)))
        return outcomes
    threads = []
    for side in running:
        outcome = outcomes[side.side] = Outcome()
        backend = engines.backends[side.side]
        job = _one_reply(backend, side, _messages(side, prompt, system, attachments), outcome)
        threads.append(threading.Thread(target=job, name=f"vibechat-compare-{side.side}"))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for side in running:
        if outcomes[side.side].error is not None:
            _say(f"side {side.side}: {outcomes[side.side].error}")
    return outcomes


def _one_reply(
    backend: Backend, side: SidePlan, messages: tuple[ChatMessage, ...], outcome: Outcome
) -> Callable[[], None]:
    """A thread's work: side ``side``'s reply, into ``outcome``."""

    def run() -> None:
        assert side.plan is not None
        try:
            for event in backend.stream_chat(list(messages), side.plan.params.with_seed()):
                if isinstance(event, GenerationDone):
                    outcome.done = event
        except VibechatError as exc:
            outcome.error, outcome.kind = str(exc), error_kind(exc)
        if outcome.done is None and outcome.error is None:
            outcome.error = "the reply ended without its end."

    return run


# What both sides are sent: the prompt, the system prompt (None: each side's own) and the
# attachments.
Sent = tuple[str, str | None, tuple[Attachment, ...]]


def _paired(engines: Engines, sides: list[SidePlan], sent: Sent) -> dict[Side, Outcome]:
    """Both replies from one backend at once (``PairedReplies``)."""
    backend = engines.backends["A"]
    assert isinstance(backend, PairedReplies)
    requests = []
    for side in sides:
        assert side.plan is not None
        requests.append(SideRequest(_messages(side, *sent), side.plan.params))
    outcomes = {side.side: Outcome() for side in sides}
    try:
        for item in backend.stream_pair(requests[0], requests[1]):
            if isinstance(item.event, GenerationDone):
                outcomes[item.side].done = item.event
    except VibechatError as exc:
        _say(f"both sides: {exc}")
        for outcome in outcomes.values():
            if outcome.done is None:
                outcome.error, outcome.kind = str(exc), error_kind(exc)
    return outcomes


def _save(
    history: History | None,
    sides: list[SidePlan],
    engines: Engines,
    asked: tuple[str, tuple[Attachment, ...]],
    outcomes: dict[Side, Outcome],
    source: str,
) -> int | None:
    """The prompt (``asked``: its text and attachments) and both replies in the history: one
    conversation (``source``: ``run``, or
    ``batch`` for a prompts file's line), the replies siblings under the prompt, each with its
    parameters and stats; the conversation shows A's (the first that answered). None: not
    saved."""
    prompt, attachments = asked
    answered = [s for s in sides if outcomes[s.side].done is not None]
    if history is None or not answered:
        return None
    first = answered[0]
    assert first.plan is not None
    info = engines.infos.get(first.side)
    conversation = history.create(
        title=prompt.strip().splitlines()[0][:80] if prompt.strip() else "compare",
        model=info.name if info is not None else None,
        model_path=info.path if info is not None and not info.server else None,
        system=first.plan.system,
        params=first.plan.params,
        source=source,
    )
    user = history.add_message(
        conversation, "user", prompt, parent_id=None, attachments=attachments
    )
    rows = []
    for side in answered:
        done = outcomes[side.side].done
        assert done is not None
        rows.append(save_sibling(history, conversation, user, done))
    history.set_leaf(conversation, rows[0])
    return conversation


def _cut_short(sides: list[SidePlan], engines: Engines, outcomes: dict[Side, Outcome]) -> bool:
    """Whether a side's structured reply is not complete (cut by a limit, ended early, not
    what was asked): one stderr line for each, as ``run`` says it (exit status 3)."""
    from .run_result import incomplete_line

    cut = False
    for side in sides:
        done, info = outcomes[side.side].done, engines.infos.get(side.side)
        if done is None or info is None or side.plan is None:
            continue
        line = incomplete_line(done.params or side.plan.params, done.stats, info, done.text)
        if line is not None:
            _say(f"side {side.side}: {line}")
            cut = True
    return cut


def compare_object(
    sides: list[SidePlan],
    engines: Engines,
    outcomes: dict[Side, Outcome],
    conversation: int | None,
    raw: bool,
) -> dict[str, object]:
    """``--json``'s object: ``a`` and ``b`` (each as ``run --json``'s, with ``differs``),
    ``differs`` and ``paired`` (decoded together in one context)."""
    differs: dict[str, object] = dict(what_differs(sides[0], sides[1]))
    obj: dict[str, object] = {}
    for side in sides:
        outcome, info = outcomes[side.side], engines.infos.get(side.side)
        done = outcome.done
        params = done.params if done is not None else (side.plan.params if side.plan else None)
        model = side.plan.engine.model if side.plan is not None else None
        result = RunResult(
            text=(done.text if raw else sanitize(done.text)) if done else "",
            thinking=(done.thinking if raw else sanitize(done.thinking)) if done else "",
            info=info,
            model=model,
            conversation_id=conversation,
            params=params,
            finish_reason=done.finish_reason if done is not None else None,
            stats=json_stats(done.stats) if done is not None else None,
            structured=structured_state(params, done.text, done.stats)
            if done is not None and params is not None
            else None,
            error=error_object(outcome.error, outcome.kind, EXIT_FAILED)
            if outcome.error is not None
            else None,
            differs=differs,
        )
        obj[side.side.lower()] = {"settings": sanitize(side.text), **result.to_json()}
    obj["differs"] = differs
    obj["paired"] = engines.paired
    return obj


def _print(
    obj: dict[str, object],
    sides: list[SidePlan],
    outcomes: dict[Side, Outcome],
    options: CompareOptions,
    line: int | None,
    request_id: Any,
) -> None:
    """One comparison on stdout: its JSON (one line with a prompts file, after ``line`` and
    ``id``), or the two replies one after the other, each headed by its side and settings."""
    out: TextIO = sys.stdout
    if line is not None:
        head: dict[str, object] = {"line": line}
        if request_id is not None:
            head["id"] = request_id
        out.write(safe_json({**head, **obj}) + "\n")
    elif options.json_output:
        out.write(safe_json(obj) + "\n")
    else:
        for side in sides:
            outcome = outcomes[side.side]
            out.write(f"=== {plain(side.label)} ===\n")
            if outcome.done is not None:
                text = outcome.done.text if options.raw else sanitize(outcome.done.text)
                out.write(text.strip("\n") + "\n")
            else:
                out.write(f"(no reply: {plain(outcome.error or 'failed')})\n")
            out.write("\n" if side.side == "A" else "")
    out.flush()
