"""``vibechat history cache``: the KV snapshots on disk (engine/llama/kv_snapshots.py): the
folder, how many files, the bytes they hold against the ``kv_snapshot_cache_mib`` limit;
``--clear`` deletes them (the next reopening evaluates its conversation again, nothing else
is lost). Registered on ``vibechat history`` (app/history_cmd.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from .clitools import echo, guard, safe_json


def cache(
    clear: Annotated[bool, typer.Option("--clear", help="Delete every KV snapshot.")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Show the KV snapshots kept on disk (reopened conversations start from them), or --clear them."""
    def go() -> None:
        from vibechat.engine.llama.kv_files import clear as clear_snapshots
        from vibechat.engine.llama.kv_files import snapshot_folder, summary
        from vibechat.engine.settings.config import load_config
        from vibechat.engine.sizes import human_bytes

        folder = snapshot_folder()
        limit_mib = int(load_config().config.kv_snapshot_cache_mib)
        if clear:
            files, held = clear_snapshots(folder)
            if json_output:
                typer.echo(safe_json({"folder": str(folder), "deleted_files": files, "deleted_bytes": held}))
            else:
                echo(f"Deleted {files} KV snapshot{'' if files == 1 else 's'} ({human_bytes(held)}) from {folder}.")
            return
        found = summary(folder)
        if json_output:
            typer.echo(safe_json({"folder": str(folder), "files": found.files, "bytes": found.bytes,
                                  "limit_bytes": limit_mib << 20, "enabled": limit_mib > 0}))
            return
        limit = (f"{human_bytes(limit_mib << 20)} (kv_snapshot_cache_mib)" if limit_mib
                 else "off (kv_snapshot_cache_mib = 0)")
        echo(f"KV snapshots: {folder}")
        echo(f"  {found.files} file{'' if found.files == 1 else 's'}, {human_bytes(found.bytes)} of {limit}")
        echo("  'vibechat history cache --clear' deletes them.")

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``cache`` to ``vibechat history``."""
    app.command("cache")(cache)
