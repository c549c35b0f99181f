"""``vibechat models``: find, download, list, inspect and remove GGUF models.

Engine modules are imported inside the commands, so ``--help`` stays instant.

Imports inside functions are deliberate: the Hub client, GGUF reading, the model store and the
fit estimate load only when a ``models`` command runs (start-up time).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..progress import human_size, pull_with_progress
from .clitools import echo as _echo
from .clitools import guard as _guard
from .clitools import plain as _plain
from .clitools import safe_json
from .clitools import table as _table

models_app = typer.Typer(
    help="Find, download, list, inspect and remove GGUF models.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
RevisionOpt = Annotated[
    str | None, typer.Option("--revision", metavar="REV", help="A branch, tag or commit.")
]


@models_app.command()
def search(
    query: Annotated[
        str,
        typer.Argument(
            metavar="QUERY", help="Text to look for in repo names, e.g. 'llama 3.2 1b'."
        ),
    ],
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", metavar="N", help="How many repos to show.", min=1, max=200),
    ] = 20,
    json_output: JsonOpt = False,
) -> None:
    """Search the Hugging Face Hub for GGUF repos, most downloaded first."""

    def go() -> None:
        from vibechat.engine.models.hub import Hub

        found = Hub().search(query, limit=limit)
        if json_output:
            typer.echo(safe_json([m.__dict__ for m in found], indent=2))
            return
        if not found:
            _echo(f"No GGUF repos match {query!r}.", err=True)
            return
        _table(
            ["repo", "downloads", "likes", "updated"],
            [
                [
                    m.id + (" (gated)" if m.gated else ""),
                    f"{m.downloads:,}",
                    f"{m.likes:,}",
                    (m.updated or "")[:10],
                ]
                for m in found
            ],
            right={1, 2},
        )
        typer.echo(
            "\nSee a repo's files: vibechat models files OWNER/REPO · "
            "download: vibechat models pull OWNER/REPO",
            err=True,
        )

    _guard(go)


@models_app.command()
def files(
    repo: Annotated[
        str,
        typer.Argument(metavar="REPO", help="A repo, e.g. bartowski/Llama-3.2-1B-Instruct-GGUF."),
    ],
    revision: RevisionOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A repo's GGUF models by quantization, with sizes and whether each fits in memory."""

    def go() -> None:
        from vibechat.engine.errors import ModelRefError
        from vibechat.engine.models.fit import memory_fit
        from vibechat.engine.models.hub import Hub
        from vibechat.engine.settings.refs import parse_hub_ref, pick_quant

        ref = parse_hub_ref(repo)
        if ref is None:
            raise ModelRefError(f"{repo!r} is not a repo id: use OWNER/REPO.")
        listing = Hub().listing(ref.repo, revision)
        # Smallest first, as users scan them.
        options = sorted(listing.options, key=lambda o: o.size)
        default = pick_quant(listing.options, None, ref.repo) if options else None
        fit = memory_fit()
        rows: list[dict[str, Any]] = [
            {
                "quant": o.label,
                "size": o.size,
                "files": [f.path for f in o.files],
                "default": default is not None and o.files == default.files,
                "fits": fit(o.size),
            }
            for o in options
        ]
        # A vision model's projector: pulled with the model chosen (the default's is shown).
        projector = listing.projector_for(default) if default is not None else None
        if json_output:
            typer.echo(
                safe_json(
                    {
                        "repo": ref.repo,
                        "revision": listing.revision,
                        "models": rows,
                        "projector": {"file": projector.path, "size": projector.size}
                        if projector
                        else None,
                    },
                    indent=2,
                )
            )
            return
        if not rows:
            _echo(f"{ref.repo} has no GGUF model files.", err=True)
            return
        _table(
            ["quant", "size", "fits", "file"],
            [
                [
                    r["quant"] + (" *" if r["default"] else ""),
                    human_size(r["size"]),
                    r["fits"],
                    r["files"][0]
                    + (f" (+{len(r['files']) - 1} more)" if len(r["files"]) > 1 else ""),
                ]
                for r in rows
            ],
            right={1},
        )
        if projector is not None:
            _echo(
                f"\nA vision model: its projector {projector.path} "
                f"({human_size(projector.size)}) is pulled with it.",
                err=True,
            )
        _echo(f"\n* the default · download: vibechat models pull {ref.repo}:QUANT", err=True)

    _guard(go)


@models_app.command("pull")
def pull_cmd(
    ref: Annotated[
        str,
        typer.Argument(metavar="REF", help="OWNER/REPO, OWNER/REPO:QUANT or OWNER/REPO/FILE.gguf."),
    ],
    revision: RevisionOpt = None,
) -> None:
    """Download a model (resumes an interrupted download; verifies its sha256)."""
    model = _guard(lambda: pull_with_progress(ref, revision))
    _echo(f"{model.name}  {human_size(model.size)}  {model.path}")
    # A vision model: its projector came with it (--mmproj auto finds it).
    if model.projector is not None:
        try:
            size = human_size(model.projector.stat().st_size) + "  "
        except OSError:
            size = ""
        _echo(f"  projector {model.projector.name}  {size}{model.projector}")


@models_app.command("list")
def list_cmd(json_output: JsonOpt = False) -> None:
    """Models on this machine: vibechat's, the starter, and other tools' (read-only)."""

    def go() -> None:
        from vibechat.engine.models.resolve import all_models

        models = all_models()
        if json_output:
            typer.echo(safe_json([m.to_dict() for m in models], indent=2))
            return
        _table(
            ["name", "quant", "size", "source"],
            [[m.name, m.quant, human_size(m.size), m.source] for m in models],
            right={2},
        )

    _guard(go)


@models_app.command("show")
def show(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="A name from 'vibechat models list', or a path.")
    ],
    json_output: JsonOpt = False,
) -> None:
    """What a model file says about itself: architecture, context, quantization, template."""

    def go() -> None:
        from vibechat.engine.models.gguf import inspect_gguf
        from vibechat.engine.models.local_model import LocalModel
        from vibechat.engine.models.resolve import find_model
        from vibechat.engine.models.starter import starter_header
        from vibechat.engine.settings.refs import parse_hub_ref
        from vibechat.engine.turns.backend import prompt_format_line, prompt_format_name

        path = Path(name).expanduser()
        model: LocalModel | None = None
        unpacked = True
        if not path.exists():
            looks_like_path = path.suffix.lower() == ".gguf" or name.startswith(
                (".", "/", "~", "\\")
            )
            if looks_like_path and parse_hub_ref(name) is None:
                # A path, as with 'run --model': says the file does not exist.
                inspect_gguf(path)
            model = find_model(name)
            path = model.path
        if model is not None and model.source == "starter" and not path.exists():
            # Read from the package: the 250 MB file is unpacked on first use only.
            header = starter_header()
            unpacked = False
        else:
            header = inspect_gguf(path)
        size = header.file_size if model is None or not unpacked else model.size
        choice = _prompt_choice(header)
        data = {
            "name": model.name if model else path.name,
            "path": str(path),
            "architecture": header.architecture,
            "context_length": header.context_length,
            "quant": header.quantization,
            "chat_template": header.chat_template is not None,
            "prompt_format": prompt_format_name(choice.name),
            "prompt_format_reason": choice.reason,
            "size": size,
            "layers": header.block_count,
            "source": model.source if model else "file",
            "repo": model.repo if model else None,
            "sha256": model.sha256 if model else None,
            "projector": _projector_of(path) if unpacked else None,
        }
        if json_output:
            typer.echo(safe_json(data, indent=2))
            return
        labels = {
            "context_length": "context length",
            "chat_template": "chat template",
            "prompt_format": "prompt format",
        }
        for key, value in data.items():
            if key == "size":
                value = human_size(size)
            elif key == "path" and not unpacked:
                value = f"{value} (unpacked there when first used)"
            elif key == "chat_template":
                value = "yes" if value else "no"
            elif key == "prompt_format":
                value = prompt_format_line(choice.name, choice.reason)
            elif key == "prompt_format_reason" or value is None:
                continue
            _echo(f"{labels.get(key, key):>15}  {value}")  # GGUF metadata: outside text

    _guard(go)


# `models info`, the command's name before `show` (ollama's word, beside `list`, `pull` and `rm`):
# kept for scripts that use it, hidden from the command list.
models_app.command("info", hidden=True, help=show.__doc__)(show)


def _prompt_choice(header):
    """How the engine will prompt the model of ``header`` (a ``GGUFInfo``), decided as it
    decides at load (``choose_template``, the config's ``prompt_format``): a ``PromptChoice``,
    shown in the words ``/show info`` and ``run --json`` use (``prompt_format_name``,
    ``prompt_format_line``). The header keeps no vocabulary: a model whose turn format only
    its tokens would name is judged without them."""
    from vibechat.engine.turns.prompt_format import choose_template

    from ..appconfig import load_app_config

    config = load_app_config()
    setting = config.config.prompt_format if not config.problem else None
    choice = choose_template(
        header.chat_template,
        header.architecture,
        lambda token: False,
        header.metadata,
        header.path.name,
        *([setting] if setting else []),
    )
    return choice


def _projector_of(path) -> str | None:
    """The projector ``--mmproj auto`` would give the model at ``path`` (None: text only)."""
    from vibechat.engine.models.projector import find_projector
    from vibechat.engine.models.resolve import known_projector

    found = find_projector(path, known_projector(path))
    return str(found) if found is not None else None


@models_app.command()
def rm(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="A name from 'vibechat models list'.")
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete one of vibechat's downloaded models (asks first); a file opened by path \
(file:NAME) is only
    taken off the list."""

    def go() -> None:
        from vibechat.engine.errors import VibechatError
        from vibechat.engine.models.resolve import find_model
        from vibechat.engine.models.store import check_removable, remove

        model = find_model(name)
        # A file opened by path in the chat: forget it, never delete it.
        if model.source == "file":
            from vibechat.engine.models.opened import forget

            forget(model.path)
            _echo(
                f"Forgot {model.name}: it is no longer listed; "
                f"the file itself stays ({model.path})."
            )
            return
        check_removable(model)
        if not yes:
            if not sys.stdin.isatty():
                raise VibechatError(
                    f"not deleting {model.name} without confirmation (stdin is not a terminal, "
                    "so vibechat cannot ask): pass --yes."
                )
            if not typer.confirm(
                _plain(f"Delete {model.name} ({human_size(model.size)}, {model.path})?"),
                default=False,
            ):
                typer.echo("Kept.", err=True)
                return
        remove(model)
        _echo(f"Deleted {model.name} ({human_size(model.size)} freed).")

    _guard(go)
