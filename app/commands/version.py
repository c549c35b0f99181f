"""``vibechat --version``: vibechat's version, llama-cpp-python's, the llama.cpp backends it
was built with, whether it can offload to a GPU, and what CPU weight repacking does here.

Imports inside functions are deliberate: llama_cpp and the engine's repack probe load only
when ``--version`` is asked for (start-up time: ``--help`` stays instant)."""

from __future__ import annotations

import typer

from vibechat.engine.settings.choices import DEFAULT_REPACK, check_repack


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
    lines.append(
        f"llama-cpp-python {llama or getattr(llama_cpp, '__version__', '?')}"
        + (f" (llama.cpp backends: {', '.join(backends)})" if backends else "")
    )
    lines.append(
        "GPU offload: yes"
        if gpu
        else "GPU offload: no (a CPU-only build; GPU in docs/USAGE.md says how to rebuild it)"
    )
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
    return repack.setting_summary(
        setting, system_info, repack.cpu_flags(), cache_dir() / repack.VERDICT_FILE, key
    )


def print_version(value: bool) -> None:
    """``--version``'s eager callback: the text, then the command ends."""
    if value:
        typer.echo(version_text())
        raise typer.Exit()
