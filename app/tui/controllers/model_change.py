"""What the chat says when a saved conversation opens on another model than the one it was had
with (the conversations controller posts it with ``OwnModelWanted``; the models controller
switches to the conversation's own model where it can, else shows it): one line, naming both
models (and their servers) and how to go on with the conversation's own.

Imports inside functions are deliberate: the remote server's options load only when a
conversation of a server is opened (start-up time).
"""

from __future__ import annotations

from pathlib import Path

from vibechat.engine.settings.refs import quant_from_filename
from vibechat.engine.turns.backend import ModelInfo

from ...conversation_backend import OwnBackend


def model_change_note(name: str | None, path: str | None, loaded: ModelInfo) -> str | None:
    """What to say, in one line, when an opened conversation was had with another model than
    the one the chat runs, and how to go on with its own: nothing when it is the same model
    (same name, and the same file name or quantization: the file moved or was downloaded
    again; on a server, the same model id on the same server); the file names when only the
    file differs (another quantization); else both models, with their servers."""
    if not path or path == loaded.path:
        return None
    own = OwnBackend.of(name, path)
    assert own is not None
    if own.server is not None or loaded.server:
        return _server_note(own, loaded)
    old_file, new_file = Path(path).name, Path(loaded.path).name
    how = "F3 loads another model; then open this conversation again to go on with it"
    if name and name != loaded.name:
        return f"This conversation was with {name}; it continues with {loaded.name} ({how})."
    old_quant = quant_from_filename(old_file)
    if old_file == new_file or (old_quant and old_quant == loaded.quantization.upper()):
        return None
    return (
        f"This conversation was with {old_file}; it continues with {new_file}, another file of "
        f"{loaded.name} ({how})."
    )


def _server_note(own: OwnBackend, loaded: ModelInfo) -> str | None:
    """:func:`model_change_note` where a server is involved: the conversation's, the chat's, or
    both."""
    from vibechat.engine.remote.options import api_root

    root = api_root(loaded)
    if own.server == root and own.name == loaded.name:
        return None
    if own.server is not None and own.server == root:
        how = f"F3 picks {own.name}; then open this conversation again to go on with it"
    elif own.server is not None:
        how = (
            f"to go on with it, start vibechat --base-url {own.server} --model {own.name} "
            "and open it there"
        )
    else:
        how = "to go on with it, start vibechat --backend llama and open it there"
    running = f"{loaded.name} on {root}" if root else loaded.name
    return f"This conversation was with {own.describe()}; replies here come from {running} ({how})."
