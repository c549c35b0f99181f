"""A vision model's multimodal projector (``mmproj-*.gguf``): recognising one by its name,
choosing the one that goes with a model, and checking a file given with ``--mmproj``.

Repos and folders that hold a vision model also hold its projector, named ``mmproj-*.gguf``
(``mmproj-model-f16.gguf``, ``mmproj-google_gemma-3-4b-it-f16.gguf``, ``Model.mmproj-Q8_0.gguf``),
often in several precisions. ``pick_projector`` chooses among them the way llama.cpp's
``-hf`` does: the one whose name best matches the model's, then f16 > bf16 > q8_0 > the rest.
A projector is never a chat model (``refs.is_model_file`` leaves it out of every listing).

Names come from other tools' folders and from the Hub: outside data. The folder scan is
bounded (``MAX_SCAN`` entries), and a file is only read through ``inspect_gguf``, which
checks its header before anything trusts it.

Imports inside functions are deliberate: GGUF reading loads only when a projector file is
checked (start-up time).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from ..errors import ModelFileError
from ..settings.refs import quant_from_filename

log = logging.getLogger("vibechat.models")

# general.architecture of every projector llama.cpp's mtmd loads.
PROJECTOR_ARCHITECTURE = "clip"
# Preferred first, as llama.cpp picks; others after.
PRECISION_ORDER = ("F16", "BF16", "Q8_0")
# Folder entries looked at when searching beside a model.
MAX_SCAN = 10_000
_WORDS = re.compile(r"[a-z0-9]+")


def is_projector_name(name: str) -> bool:
    """A ``.gguf`` file named as a multimodal projector (``mmproj`` anywhere in its name)."""
    lower = PurePosixPath(name).name.lower()
    return lower.endswith(".gguf") and "mmproj" in lower


def _words(name: str) -> set[str]:
    """The words of a file name that say which model it is: no extension, no quantization or
    precision, no ``mmproj``, no shard counter."""
    stem = PurePosixPath(name).name.lower()
    stem = re.sub(r"(-\d{5}-of-\d{5})?\.gguf$", "", stem)
    quant = quant_from_filename(stem + ".gguf")
    if quant:
        stem = re.sub(re.escape(quant.lower()) + r"(?![a-z0-9])", " ", stem)
    return {w for w in _WORDS.findall(stem) if w != "mmproj"}


def _precision_rank(name: str) -> int:
    quant = quant_from_filename(PurePosixPath(name).name) or ""
    return PRECISION_ORDER.index(quant) if quant in PRECISION_ORDER else len(PRECISION_ORDER)


def pick_projector(model_name: str, candidates: Iterable[str]) -> str | None:
    """The projector among ``candidates`` (file names or paths) that goes with ``model_name``:
    most words in common with the model's name, then f16 > bf16 > q8_0 > others, then the
    shortest name (the generic ``mmproj-F16.gguf`` over a variant); None when there is none."""
    wanted = _words(model_name)
    projectors = [c for c in candidates if is_projector_name(c)]
    if not projectors:
        return None
    return min(projectors, key=lambda c: (-len(wanted & _words(c)), _precision_rank(c), len(c), c))


def projectors_beside(model_path: Path) -> list[Path]:
    """The projector files in ``model_path``'s folder (regular files, a symlink's target
    included: the Hugging Face cache links its snapshots to blobs), at most ``MAX_SCAN``
    entries looked at."""
    folder = Path(model_path).parent
    found: list[Path] = []
    try:
        with os.scandir(folder) as entries:
            for index, entry in enumerate(entries):
                if index >= MAX_SCAN:
                    log.info(
                        "%s has more than %d entries: looked for a projector among the first",
                        folder,
                        MAX_SCAN,
                    )
                    break
                if not is_projector_name(entry.name):
                    continue
                try:
                    if stat.S_ISREG(os.stat(entry.path).st_mode):
                        found.append(Path(entry.path))
                except OSError:
                    # A dangling link, a file that went away.
                    continue
    except OSError:
        return []
    return found


def find_projector(model_path: Path, recorded: Path | None = None) -> Path | None:
    """The projector for the model at ``model_path``, for ``mmproj = "auto"``: ``recorded``
    (the one downloaded with it) when that is still there, else the best match beside the
    model that is a readable projector. None when there is none (the model is text only):
    a bad candidate is passed over (logged), never an error."""
    beside = projectors_beside(model_path)
    if recorded is not None and Path(recorded).is_file():
        beside = [Path(recorded)] + [p for p in beside if p != Path(recorded)]
        first: str | None = str(recorded)
    else:
        first = None
    names = {str(p): p for p in beside}
    while names:
        chosen = first if first in names else pick_projector(Path(model_path).name, names)
        first = None
        if chosen is None:
            return None
        try:
            check_projector(names[chosen])
            return names[chosen]
        except ModelFileError as exc:
            log.info("passed over %s as a projector: %s", chosen, exc)
            del names[chosen]
    return None


def check_projector(path: Path, *, given_as: str = "--mmproj") -> Path:
    """``path``, checked to be a projector llama.cpp can be given: a regular GGUF file (its
    header sound) of the projector architecture. Raises ``ModelFileError`` with one line
    naming the problem and the fix (``given_as``: the flag or key the user gave it with)."""
    from .gguf import inspect_gguf

    path = Path(path).expanduser()
    fix = f"pass the model's mmproj-*.gguf file with {given_as}, or {given_as} off for text only"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ModelFileError(f"the projector {path} does not exist: {fix}.") from None
    except OSError as exc:
        raise ModelFileError(
            f"the projector {path} cannot be read ({exc.strerror or exc}): check its permissions."
        ) from None
    if not stat.S_ISREG(mode):
        kind = (
            "a folder"
            if stat.S_ISDIR(mode)
            else "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a device or socket"
        )
        raise ModelFileError(f"the projector {path} is {kind}, not a file: {fix}.")
    try:
        header = inspect_gguf(path)
    except ModelFileError as exc:
        raise ModelFileError(
            f"the projector is unusable: {str(exc).rstrip('.')} ({fix})."
        ) from None
    if header.architecture != PROJECTOR_ARCHITECTURE:
        raise ModelFileError(
            f"{path} is not a vision projector (its GGUF is a {header.architecture!s} model, "
            f"not a {PROJECTOR_ARCHITECTURE} projector): {fix}."
        )
    return path


def refuse_projector_as_model(path: Path) -> None:
    """A projector given where a chat model goes (``--model mmproj-….gguf``): one line saying
    what to do instead. Only a file named as a projector has its header read here."""
    if not is_projector_name(Path(path).name):
        return
    from .gguf import inspect_gguf

    try:
        architecture = inspect_gguf(path).architecture
    except ModelFileError:
        # The model's own load says what is wrong with the file.
        return
    if architecture == PROJECTOR_ARCHITECTURE:
        raise ModelFileError(
            f"{path} is a vision projector (mmproj), not a chat model: load the model it belongs "
            f"to, and this file with --mmproj {path} (or let --mmproj auto find it beside the "
            "model)."
        )
