"""``vibechat history cache``: the KV snapshots on disk (engine/llama/kv_snapshots.py): the
folder, how many files, the bytes they hold against the ``kv_snapshot_cache_mib`` limit;
``--clear`` deletes them (the next reopening evaluates its conversation again, nothing else
is lost). Registered on ``vibechat history`` (app/commands/history.py).

Imports inside functions are deliberate: the config, the KV snapshot files and the size helpers
load only when a ``history cache`` command runs (start-up time of every other command)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from .clitools import echo, guard, safe_json

if TYPE_CHECKING:
    from pathlib import Path


def cache(
    clear: Annotated[bool, typer.Option("--clear", help="Delete every KV snapshot.")] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of text.")
    ] = False,
) -> None:
    """Show the KV snapshots kept on disk (reopened conversations start from them), or \
--clear them."""

    def go() -> None:
        from vibechat.engine.llama.kv_files import snapshot_folder

        folder = snapshot_folder()
        if clear:
            _clear(folder, json_output)
            return
        limit_mib = _limit_mib()
        # A bound lowered since the files were written holds now.
        if limit_mib:
            from vibechat.engine.llama.kv_files import prune

            pruned = prune(folder, limit_mib << 20)
            if pruned.failed:
                _say_failed(pruned.failed, "to keep within kv_snapshot_cache_mib")
        _show(folder, limit_mib, json_output)

    guard(go)


def _limit_mib() -> int:
    """The ``kv_snapshot_cache_mib`` setting; a bad value is the one-line problem it is (the
    default is not shown in its place)."""
    from vibechat.engine.errors import ConfigError
    from vibechat.engine.settings.config import load_config

    loaded = load_config()
    for problem in loaded.problems:
        if problem.key == "kv_snapshot_cache_mib" or (problem.key is None and problem.blocking):
            raise ConfigError(str(problem))
    return int(loaded.config.kv_snapshot_cache_mib)


def _show(folder: Path, limit_mib: int, json_output: bool) -> None:
    from vibechat.engine.llama.kv_files import summary
    from vibechat.engine.sizes import human_bytes

    found = summary(folder)
    if json_output:
        typer.echo(
            safe_json(
                {
                    "folder": str(folder),
                    "files": found.files,
                    "bytes": found.bytes,
                    "limit_bytes": limit_mib << 20,
                    "enabled": limit_mib > 0,
                }
            )
        )
        return
    held = f"{found.files} file{'' if found.files == 1 else 's'}, {human_bytes(found.bytes)}"
    echo(f"KV snapshots: {folder}")
    if limit_mib:
        echo(f"  {held} of {human_bytes(limit_mib << 20)} (kv_snapshot_cache_mib)")
    else:
        echo(f"  off (kv_snapshot_cache_mib = 0): none are taken or used; {held} left from before")
    if found.files:
        echo("  'vibechat history cache --clear' deletes them.")


def _clear(folder: Path, json_output: bool) -> None:
    from vibechat.engine.llama.kv_files import clear as clear_snapshots
    from vibechat.engine.sizes import human_bytes

    done = clear_snapshots(folder)
    if json_output:
        typer.echo(
            safe_json(
                {
                    "folder": str(folder),
                    "deleted_files": done.files,
                    "deleted_bytes": done.bytes,
                    "not_deleted": [{"name": name, "reason": why} for name, why in done.failed],
                }
            )
        )
    else:
        echo(
            f"Deleted {done.files} KV snapshot{'' if done.files == 1 else 's'} "
            f"({human_bytes(done.bytes)}) from {folder}."
        )
    if done.failed:
        _say_failed(done.failed, "")
        raise typer.Exit(1)


def _say_failed(failed: list[tuple[str, str]], why: str) -> None:
    """One stderr line: what could not be deleted, and the reason."""
    first, reason = failed[0]
    more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    echo(
        f"vibechat: could not delete {first} ({reason}){more}{' ' + why if why else ''}: "
        "check the folder's permissions, or remove it by hand.",
        err=True,
    )


def register(app: typer.Typer) -> None:
    """Add ``cache`` to ``vibechat history``."""
    app.command("cache")(cache)
