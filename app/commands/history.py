"""``vibechat history``: list, show, search, export and delete saved conversations.

Every chat in the TUI and every ``vibechat run`` (unless ``--no-save`` or
``save_runs = false``) is saved in one SQLite database under the data dir, with where
it came from (its source: chat, run, or batch for ``--prompts-file``);
``vibechat run --continue`` adds to the latest conversation, ``--conversation ID`` to any.

Imports inside functions are deliberate: the history database and its export load only when a
``history`` command runs (start-up time).
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from .clitools import echo, guard, plain, safe_json, table

history_app = typer.Typer(
    help="List, show, search, export and delete saved conversations.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
# engine/chat/history.py's SOURCES, and all.
SOURCE_CHOICES = ["chat", "run", "batch", "all"]
IdArg = Annotated[
    int, typer.Argument(metavar="ID", help="A conversation id from 'vibechat history list'.", min=1)
]


def _open(*, reading: bool = True):
    """The history, opened to read (``list``, ``show``, ``search``, ``export``): a read-only
    data dir or a full disk still reads, and says so once on stderr. ``reading=False``
    (``rm``): a history that cannot be written fails at once, in one line."""
    from vibechat.engine.chat.history import History

    history = History(read_only_ok=reading).open()
    if history.read_only is not None:
        echo(f"vibechat: note: reading the chat history only: {history.read_only}", err=True)
    return history


def _when(stamp: str) -> str:
    """An ISO timestamp shown in local time, to the minute."""

    try:
        return (
            datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            .astimezone()
            .strftime("%Y-%m-%d %H:%M")
        )
    except ValueError:
        return stamp


def _emit_json(data: object) -> None:
    typer.echo(safe_json(data))


@history_app.command("list")
def list_(
    ctx: typer.Context,
    limit: Annotated[
        int | None,
        typer.Option("--limit", "-n", metavar="N", help="Show at most this many.", min=1),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--source",
            "-s",
            metavar="SOURCE",
            help="Only conversations from: chat (the chat), run ('vibechat run'), "
            "batch (--prompts-file) or all.",
        ),
    ] = "all",
    json_output: JsonOpt = False,
) -> None:
    """Saved conversations, most recently active first (a rename does not move one)."""
    wanted = source.strip().lower()
    # A usage error (exit 2), like any bad option value.
    if wanted not in SOURCE_CHOICES:
        raise typer.BadParameter(
            f"unknown source {source!r}: use {', '.join(SOURCE_CHOICES)}.",
            ctx=ctx,
            param_hint="'--source'",
        )

    def go() -> None:
        with _open() as history:
            found = history.conversations(limit=limit, source=None if wanted == "all" else wanted)
        if json_output:
            _emit_json([c.to_dict() for c in found])
            return
        if not found:
            if wanted != "all":
                typer.echo(
                    f"No saved conversations from {wanted}: 'vibechat history list' shows all.",
                    err=True,
                )
                return
            typer.echo(
                "No saved conversations yet: chat in 'vibechat' or ask with 'vibechat run'.",
                err=True,
            )
            return
        table(
            ["id", "updated", "source", "model", "title"],
            [[str(c.id), _when(c.updated), c.source, c.model or "", c.title] for c in found],
            right={0},
        )

    guard(go)


@history_app.command("compare-stats")
def compare_stats(json_output: JsonOpt = False) -> None:
    """The picks between two replies (the chat's /compare): wins per model, per preset and per
    value of each setting that differed."""

    def go() -> None:
        with _open() as history:
            total, tally = history.pick_count(), history.pick_tally()
        if json_output:
            _emit_json({"picks": total, "tally": [row.to_dict() for row in tally]})
            return
        if not total:
            typer.echo(
                "No picks yet: choose between two replies with /compare in the chat.", err=True
            )
            return
        typer.echo(f"{total} pick{'s' if total != 1 else ''}")
        table(
            ["kind", "name", "value", "wins", "picks"],
            [[row.kind, row.name, row.value or "", str(row.wins), str(row.picks)] for row in tally],
            right={3, 4},
        )

    guard(go)


@history_app.command()
def show(conversation_id: IdArg, json_output: JsonOpt = False) -> None:
    """One conversation: the branch last on screen as Markdown (a message with other versions, a
    regenerated reply or an edited prompt, says "version 2 of 3"); --json carries every branch
    (``tree``, each message with its ``parent_id``)."""

    def go() -> None:
        from vibechat.engine.sanitize import sanitize

        with _open() as history:
            conversation = history.get(conversation_id)
        if json_output:
            _emit_json(conversation.to_dict())
        else:
            typer.echo(sanitize(conversation.to_markdown()), nl=False)

    guard(go)


@history_app.command()
def search(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help="Words to find in any message (all must appear).")
    ],
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", metavar="N", help="Show at most this many matches.", min=1),
    ] = 20,
    json_output: JsonOpt = False,
) -> None:
    """Full-text search across every saved message (what was said: a reasoning model's thinking is
    not searched)."""
    from vibechat.engine.chat.records import fts_query

    # Nothing to look for: a usage error, like a missing argument.
    if fts_query(query) is None:
        raise typer.BadParameter(
            f"no word to search for in {query!r}: give at least one word.",
            ctx=ctx,
            param_hint="'QUERY'",
        )

    def go() -> None:
        from vibechat.engine.chat.records import HIT_END, HIT_START

        with _open() as history:
            hits = history.search(query, limit=limit)
        if json_output:
            _emit_json(
                [
                    {
                        **h.to_dict(),
                        "snippet": h.snippet.replace(HIT_START, "").replace(HIT_END, ""),
                    }
                    for h in hits
                ]
            )
            return
        if not hits:
            echo(f"No message matches {query!r}.", err=True)
            return
        table(
            ["id", "title", "role", "match"],
            [
                [
                    str(h.conversation_id),
                    h.title,
                    h.role,
                    h.snippet.replace(HIT_START, "«").replace(HIT_END, "»"),
                ]
                for h in hits
            ],
            right={0},
        )

    guard(go)


@history_app.command()
def export(
    conversation_id: IdArg,
    format_: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help="md (Markdown) or json; default: json for an -o file ending in .json, "
            "else Markdown.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write to this file instead of stdout.",
            dir_okay=False,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the -o file if it exists.")
    ] = False,
) -> None:
    """Write one conversation as Markdown or JSON."""

    def go() -> None:
        from vibechat.engine.chat.export import write_export
        from vibechat.engine.errors import VibechatError
        from vibechat.engine.sanitize import sanitize

        # No --format: from the file's extension, .json is JSON, anything else Markdown.
        if format_ is None:
            kind = "json" if output is not None and output.suffix.lower() == ".json" else "md"
        else:
            kind = format_.lower().lstrip(".")
            if kind in ("markdown",):
                kind = "md"
            if kind not in ("md", "json"):
                raise VibechatError(
                    f"unknown export format {format_!r}: use --format md or --format json."
                )
        with _open() as history:
            conversation = history.get(conversation_id)
        # The same text on stdout and in a file: Markdown sanitised, JSON with controls escaped.
        text = (
            sanitize(conversation.to_markdown())
            if kind == "md"
            else safe_json(conversation.to_dict(), indent=2) + "\n"
        )
        if output is None:
            echo(text, nl=False)
            return
        # Whole or not at all: a full disk leaves the old file (or none), never a part.
        try:
            write_export(output, text, overwrite=force)
        except FileExistsError:
            raise VibechatError(
                f"{output} already exists: pass --force to overwrite it, or choose another "
                "file with -o."
            ) from None
        except OSError as exc:
            raise VibechatError(f"cannot write {output}: {exc.strerror or exc}.") from None
        echo(
            f"Wrote conversation {conversation_id} to {output} "
            f"({'JSON' if kind == 'json' else 'Markdown'}).",
            err=True,
        )

    guard(go)


@history_app.command()
def fork(conversation_id: IdArg, json_output: JsonOpt = False) -> None:
    """Copy the branch last on screen of a conversation into a new conversation (the original
    keeps every branch); prints the new conversation's id."""

    def go() -> None:
        with _open(reading=False) as history:
            stored = history.get(conversation_id)
            if stored.leaf_id is None:
                from vibechat.engine.errors import VibechatError

                raise VibechatError(f"conversation {conversation_id} has no messages to fork.")
            new = history.fork(conversation_id, stored.leaf_id)
        if json_output:
            _emit_json({"id": new, "forked_from": conversation_id})
        else:
            typer.echo(
                f"Forked conversation {conversation_id} into {new}: "
                f"vibechat run --conversation {new} goes on with it."
            )

    guard(go)


@history_app.command()
def rm(
    conversation_id: IdArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete one conversation and its messages (asks first)."""

    def go() -> None:
        from vibechat.engine.errors import VibechatError

        with _open(reading=False) as history:
            conversation = history.get(conversation_id)
            if not yes:
                if not sys.stdin.isatty():
                    raise VibechatError(
                        f"not deleting conversation {conversation_id} without confirmation "
                        "(stdin is not a terminal, so vibechat cannot ask): pass --yes."
                    )
                # Outside text, quoted for people (not as a Python repr).
                title = plain(conversation.title)
                count = len(conversation.messages)
                if not typer.confirm(
                    f"Delete conversation {conversation_id} (\u201c{title}\u201d, "
                    f"{count} message{'' if count == 1 else 's'})?",
                    default=False,
                ):
                    typer.echo("Kept.", err=True)
                    return
            history.delete(conversation_id)
        typer.echo(f"Deleted conversation {conversation_id}.")

    guard(go)


from .cache import register as _register_cache  # noqa: E402 - ``history cache`` (the KV snapshots)

_register_cache(history_app)
