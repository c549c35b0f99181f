"""What ``vibechat run`` sends: the prompt (``run PROMPT``, ``--prompt``, piped stdin, or both
joined) and the files attached to it.

``--image PATH`` and ``--file PATH`` (repeatable) attach files to the prompt
(``read_attachments``): read, checked and kept (engine/attach) before the model loads, so a
bad one is one line and exit status 2 with nothing loaded or saved; the prompt is then
checked (a model that takes no images refuses them in one line) and saved with them.
``--prompts-file`` refuses them (one line): its lines are prompts of their own, and one
image attached to each would be evaluated again for every line.

Imports inside functions are deliberate: attachment reading (Pillow for images) loads only when
a run attaches a file (start-up time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TextIO

from vibechat.engine.attach.store import AttachmentError, AttachmentStore
from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.limits import MAX_CONTEXT, prompt_byte_limit
from vibechat.engine.turns.attachments import Attachment, AttachmentKind

from .clitools import fail, plain
from .run_result import EXIT_USAGE, JsonFailure

# between piped stdin (the context, first) and the prompt given, as a blank line
STDIN_JOIN = "\n\n"


class PromptMissing(VibechatError):
    """No prompt to send (none given, stdin empty, or blank text): a malformed command line,
    so ``guard`` ends the run with ``exit_status`` 2, as a missing argument does."""

    exit_status = EXIT_USAGE


@dataclass(frozen=True)
class Prompt:
    """The prompt a run sends: ``text``, and ``stdin_chars`` when piped stdin was joined
    with a prompt given on the command line (None: it was not; ``--json``'s ``stdin``)."""

    text: str
    stdin_chars: int | None = None


def read_prompt(prompt: str | None, stdin: TextIO) -> Prompt:
    """The prompt given (``run PROMPT`` or ``--prompt``; ``-`` reads stdin), or piped stdin.
    Both a prompt and piped stdin are one prompt, as ollama and llm make them: stdin first,
    as the context, then a blank line and the prompt (``echo TEXT | vibechat run "Sum it up:"``).
    Stdin is read within the same bound whichever way it comes."""
    piped = not stdin.isatty()
    if prompt == "-" or (prompt is None and piped):
        text, joined = _read_stdin(stdin), None
    elif prompt is None:
        raise PromptMissing(
            'no prompt: give it after run (vibechat run "Why is the sky blue?"), with --prompt '
            "TEXT, or pipe text on stdin ('-' reads it)."
        )
    else:
        context = _read_stdin(stdin).rstrip() if piped else ""
        text, joined = prompt, None
        if context.strip():
            text, joined = f"{context}{STDIN_JOIN}{prompt}", len(context)
    if not text.strip() and prompt is None:
        raise PromptMissing(
            'no prompt: stdin was empty; give it after run (vibechat run "Why is the sky blue?") '
            "or with --prompt TEXT, or pipe text on stdin."
        )
    if not text.strip():
        raise PromptMissing(
            'the prompt is empty: give some text (vibechat run "TEXT", --prompt TEXT, or on stdin).'
        )
    return Prompt(text, joined)


def _read_stdin(stdin: TextIO) -> str:
    """All of stdin, bounded: a runaway pipe is not read into memory."""

    most = prompt_byte_limit(MAX_CONTEXT)
    text = stdin.read(most + 1)
    if len(text) > most:
        raise VibechatError(
            f"the prompt on stdin is larger than {most >> 20} MiB, more than any context "
            "holds: shorten it."
        )
    return text


def read_attachments(
    images: list[str] | None,
    files: list[str] | None,
    err: TextIO,
    *,
    batch: bool = False,
    failure: JsonFailure | None = None,
) -> tuple[Attachment, ...]:
    """``--image`` and ``--file``, read, checked and kept (``read_attachment``, the default
    store) before any model loads: the images first, then the files, each in the order given.
    What reading changed (an image scaled, a file cut) is said on stderr, one line each. A bad
    one ends the run: one line on stderr and exit status 2 (a command line naming a file that
    cannot be attached), ``--json``'s object with the error; nothing is loaded or saved.
    ``batch`` (``--prompts-file``) refuses them: see the module docstring."""
    if not images and not files:
        return ()
    if batch:
        flag = "--image" if images else "--file"
        raise VibechatError(
            f"--prompts-file and {flag} do not mix: each line of the file is a prompt of its "
            f'own; attach files to single prompts (vibechat run {flag} PATH "PROMPT"), or '
            f"drop {flag}."
        )
    from vibechat.engine.attach.reading import read_attachment

    store = AttachmentStore.default()
    wanted: list[tuple[str, AttachmentKind]] = [(path, "image") for path in images or ()]
    wanted += [(path, "file") for path in files or ()]
    kept: list[Attachment] = []
    try:
        for path, kind in wanted:
            kept.append(read_attachment(path, store, kind=kind))
    except AttachmentError as problem:
        exc = AttachmentError(_as_flags(str(problem)))
        if failure is not None:
            failure.failed(exc, EXIT_USAGE)
        raise fail(str(exc), EXIT_USAGE) from None
    for attachment in kept:
        if attachment.note:
            err.write(plain(f"vibechat: {attachment.name}: {attachment.note}") + "\n")
    if failure is not None:
        failure.attachments = tuple(kept)
    return tuple(kept)


def _as_flags(message: str) -> str:
    """A reading error's fix in run's words: the chat's ``/image`` and ``/file`` ("attach an
    image with /image") are ``--image`` and ``--file`` here; a path the message quotes is left
    as it is (a word that goes on, ``/file.txt``, ``/images/``, is no command)."""

    return re.sub(r"(?<=\bwith )/(image|file)\b(?![\w./-])", r"--\1", message)
