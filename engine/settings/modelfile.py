"""Ollama's Modelfile read as a preset: ``vibechat presets import Modelfile``.

``parse_modelfile`` reads a Modelfile (untrusted text: bounded, sanitised) into a preset's
table (engine/settings/presets.py checks it with ``parse_preset`` before it is written): its
FROM (a Hugging Face reference, a GGUF file's path, or an Ollama model name, opened from
Ollama's folder), SYSTEM and PARAMETER lines (each sampling parameter's Ollama name is its
``ParamSpec.modelfile_name``); what has no counterpart is named in notes. ``read_modelfile``
reads the file, bounded; ``default_name`` names the preset after it.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError, VibechatError
from ..files import FileTooLarge, UnreadableFile, kind_of, read_file
from ..sanitize import sanitize
from .config_check import bare_message
from .params import PARAM_SPECS
from .presets import spelled
from .refs import parse_hub_ref

# Modelfiles are a few lines (a long TEMPLATE: a few KB).
MAX_MODELFILE_BYTES = 256 * 1024


def modelfile_params() -> dict[str, str]:
    """The ``PARAMETER`` names vibechat takes, as [params] keys (or context_size): each sampling
    parameter's Ollama name (``ParamSpec.modelfile_name``), the stop strings and the context."""
    return {
        **{spec.modelfile_name: name for name, spec in PARAM_SPECS.items()},
        "stop": "stop",
        "num_ctx": "context_size",
    }


IGNORED = {
    "template": (
        "TEMPLATE ignored: vibechat prompts with the GGUF's own chat template (or --prompt-format)"
    ),
    "adapter": "ADAPTER ignored: vibechat does not apply LoRA adapters",
    "license": "LICENSE ignored (it is the model's licence text)",
    "message": "MESSAGE ignored: a preset holds no example conversation",
    "requires": "REQUIRES ignored (an Ollama version requirement)",
}
_INSTRUCTION = re.compile(r"\s*([A-Za-z]+)(?:\s+(.*))?$", re.S)


@dataclass(frozen=True)
class ModelfileImport:
    """A Modelfile read as a preset's table (checked by ``parse_preset`` before it is
    written), and what could not be carried over, one note a line."""

    table: dict[str, Any]
    notes: list[str]


def _unquote(text: str) -> str:
    """A Modelfile argument: ``"quoted"`` loses its quotes (and ``\\"`` its backslash)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def _instructions(text: str) -> list[tuple[str, str, int, bool]]:
    """``(instruction, argument, line, triple_quoted)`` for each instruction; a ``\"\"\"``
    argument runs to the closing ``\"\"\"``, across lines (``MESSAGE user \"\"\"...``: one
    word may come first); comments and blank lines are skipped."""
    out: list[tuple[str, str, int, bool]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, raw = i + 1, lines[i]
        i += 1
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        match = _INSTRUCTION.match(raw)
        if not match:
            out.append(("", raw.strip(), number, False))
            continue
        word, arg = match.group(1).lower(), (match.group(2) or "")
        start = arg.find('"""')
        if start < 0 or len(arg[:start].split()) > 1:
            out.append((word, arg.strip(), number, False))
            continue
        head, rest = arg[:start], arg[start + 3 :]
        end = rest.find('"""')
        if end >= 0:
            content = rest[:end]
        else:
            parts = [rest]
            # Bounded by the file, itself bounded.
            while i < len(lines):
                line = lines[i]
                i += 1
                end = line.find('"""')
                if end >= 0:
                    parts.append(line[:end])
                    break
                parts.append(line)
            content = "\n".join(parts)
        out.append((word, head + content.strip(), number, True))
    return out


def _model_ref(ref: str, folder: Path, notes: list[str]) -> str | None:
    """FROM's reference as a vibechat model reference (None: none fits, with a note)."""
    ref = ref.strip()
    if not ref:
        notes.append("FROM is empty: the preset keeps the model in use")
        return None
    lowered = ref.lower()
    for prefix in ("https://hf.co/", "hf.co/", "https://huggingface.co/", "huggingface.co/"):
        if lowered.startswith(prefix):
            hub = ref[len(prefix) :]
            try:
                parsed = parse_hub_ref(hub)
            except VibechatError:
                parsed = None
            if parsed is None:
                notes.append(
                    f"FROM {ref}: not a Hugging Face model reference vibechat reads; "
                    "the preset keeps the model in use"
                )
                return None
            notes.append(
                f"FROM {ref}: the Hugging Face model {hub} "
                f"('vibechat models pull {hub}' downloads it)"
            )
            return hub
    if (
        ref.startswith((".", "/", "~"))
        or lowered.endswith((".gguf", ".bin", ".safetensors"))
        or "\\" in ref
    ):
        path = Path(ref).expanduser()
        path = path if path.is_absolute() else folder / path
        return _from_path(ref, path, lowered, notes)
    # An Ollama model name: model[:tag], namespace/model[:tag], host/namespace/model[:tag].
    name, _, tag = ref.partition(":")
    parts = name.split("/")
    if (
        not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts)
        or len(parts) > 3
        or (tag and not re.fullmatch(r"[A-Za-z0-9._-]+", tag))
    ):
        notes.append(
            f"FROM {ref}: not a model reference vibechat reads; the preset keeps the model in use"
        )
        return None
    tag = tag or "latest"
    if len(parts) == 3 and parts[0] == "registry.ollama.ai":
        parts = parts[1:]
    if len(parts) == 2 and parts[0] == "library":
        parts = parts[1:]
    mapped = f"ollama:{'/'.join(parts)}:{tag}"
    notes.append(
        f"FROM {ref}: Ollama's model, opened from Ollama's folder as {mapped} (pull it with Ollama "
        "first)"
    )
    return mapped


def parse_modelfile(text: str, folder: Path) -> ModelfileImport:
    """An Ollama Modelfile's FROM, SYSTEM and PARAMETER lines as a preset's table;
    ``folder``: the Modelfile's own (FROM ./file.gguf is relative to it). Values are checked
    where the table is (``parse_preset``); a PARAMETER value that is no number raises
    ``InvalidParameterError`` naming its line."""
    # Outside text: no control sequences.
    text = sanitize(text.replace("\r\n", "\n"))
    table: dict[str, Any] = {}
    params: dict[str, Any] = {}
    stops: list[str] = []
    notes: list[str] = []
    froms = 0
    for word, arg, number, quoted in _instructions(text):
        if word == "from":
            froms += 1
            model = _model_ref(_unquote(arg), folder, notes)
            if model is not None:
                table["model"] = model
            else:
                table.pop("model", None)
        elif word == "system":
            table["system"] = arg if quoted else _unquote(arg)
        elif word == "parameter":
            name, _, value = arg.strip().partition(" ")
            key, value = name.lower(), _unquote(value)
            ours = modelfile_params().get(key)
            if ours is None:
                notes.append(
                    f"PARAMETER {sanitize(name)[:40]} (line {number}) "
                    "skipped: vibechat has no such setting"
                )
            elif ours == "stop":
                if value:
                    stops.append(value)
            elif ours == "context_size":
                try:
                    table["context_size"] = int(value)
                except ValueError:
                    raise InvalidParameterError(
                        f"line {number}: PARAMETER num_ctx must be a whole number "
                        f"(got {spelled(value[:40])})."
                    ) from None
            else:
                # Ollama's words for ours (num_predict -2: none).
                value = dict(PARAM_SPECS[ours].ollama_words).get(value.strip(), value)
                try:
                    parsed = PARAM_SPECS[ours].parse(value)
                except InvalidParameterError as exc:
                    raise InvalidParameterError(
                        f"line {number}: PARAMETER {key}: {bare_message(exc)}."
                    ) from None
                # None: auto, or a random seed, as without the line.
                if parsed is not None:
                    params[ours] = parsed
        elif word in IGNORED:
            note = IGNORED[word]
            if note not in notes:
                notes.append(note)
        else:
            notes.append(
                f"line {number} skipped: {sanitize(word or arg)[:40]!r} is no "
                "Modelfile instruction vibechat reads"
            )
    if froms > 1:
        notes.append("FROM is given more than once: the last one counts")
    if stops:
        params["stop"] = stops
    if params:
        table["params"] = params
    return ModelfileImport(table, notes)


def _from_path(ref: str, path: Path, lowered: str, notes: list[str]) -> str | None:
    """FROM naming a file: its path when it is (or may yet be) a GGUF file, with a note that
    says truly what is there (nothing yet, a folder, a device, a FIFO); None when it cannot be
    a model vibechat opens (the preset then keeps the model in use)."""
    try:
        mode: int | None = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        notes.append(
            f"FROM {ref}: {path} cannot be checked ({exc.strerror or exc}); kept as written"
        )
        return str(path)
    kind = kind_of(mode) if mode is not None else None
    if stat.S_ISDIR(mode or 0) or lowered.endswith((".safetensors", ".bin")):
        what = "a folder" if stat.S_ISDIR(mode or 0) else "a safetensors or .bin model"
        notes.append(
            f"FROM {ref}: {what}, not a GGUF file: vibechat opens GGUF files only; "
            "the preset keeps the model in use"
        )
        return None
    if kind is not None:
        notes.append(
            f"FROM {ref}: {path} is {kind}, not a GGUF file; the preset keeps the model in use"
        )
        return None
    if mode is None:
        notes.append(f"FROM {ref}: {path} does not exist (yet); kept as written")
    return str(path)


def read_modelfile(path: Path) -> str:
    """A Modelfile's text, bounded; a missing, unreadable or oversized file raises
    ``VibechatError`` in one line."""
    try:
        # A FIFO or a device is refused at once.
        data = read_file(path, MAX_MODELFILE_BYTES)
    except FileNotFoundError:
        raise VibechatError(f"{path} does not exist: give the Modelfile's path.") from None
    except FileTooLarge as exc:
        raise VibechatError(f"{path} {exc.reason}: not a Modelfile.") from None
    except UnreadableFile as exc:
        raise VibechatError(f"{path} {exc.reason}: give the Modelfile's path.") from None
    except OSError as exc:
        raise VibechatError(f"{path} cannot be read ({exc.strerror or exc}).") from None
    if b"\0" in data:
        raise VibechatError(f"{path} is a binary file, not a Modelfile.")
    return data.decode("utf-8", "replace")


def default_name(path: Path) -> str:
    """A preset name for a Modelfile: its file's name (the folder's, for a plain ``Modelfile``),
    made a bare TOML key."""
    stem = (
        path.stem
        if path.name.lower() not in ("modelfile", "modelfile.txt")
        else path.resolve().parent.name
    )
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-")[:64]
    return name or "imported"
