"""Errors the engine raises for the user to read.

Every ``VibechatError`` carries a one-line message that names the problem and the
fix; the CLI and the TUI show ``str(error)`` and never a traceback.
"""

from __future__ import annotations


class VibechatError(Exception):
    """A problem the user can act on; ``str()`` is a complete one-line message."""


class InvalidParameterError(VibechatError, ValueError):
    """A sampling or engine parameter is out of range or of the wrong type."""


class ModelFileError(VibechatError):
    """A model path is missing or is not a usable GGUF file."""


class ModelLoadError(VibechatError):
    """llama.cpp could not load a file that looked like a valid GGUF."""


class LoadCancelled(ModelLoadError):
    """``cancel()`` was called while the model was loading (Ctrl-C in the CLI)."""


class ContextOverflowError(VibechatError):
    """A single message (with the system prompt) cannot fit in the context window."""


class GenerationError(VibechatError):
    """llama.cpp (or a remote server) failed while evaluating or generating."""


class ChatTemplateError(GenerationError):
    """A chat template is broken, refused the conversation, or went past a bound while it
    rendered (too slow, too much text): the message names the template and what to do."""


class TemplateCancelled(ChatTemplateError):
    """``cancel()`` was called while a chat template was rendering (Ctrl-C in the CLI)."""


class StreamInterrupted(GenerationError):
    """A reply stopped mid-stream for a reason other than the user (a remote server's
    connection dropped, or went silent): ``partial`` is the text received before, which
    was streamed already and is kept (saved with status 'interrupted')."""

    def __init__(self, message: str, partial: str) -> None:
        super().__init__(message)
        self.partial = partial


class EngineCrashed(GenerationError):
    """The engine's process ended (a signal or a non-zero exit) during a call: the message
    says which signal, while doing what, and names the crash report (``report``, or None
    when it could not be written). The next call starts a fresh engine."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class EngineCrashLoop(EngineCrashed):
    """A freshly restarted engine crashed again during its load or its first request:
    it is not restarted with the same settings; the message names the setting to change."""


class RemoteServerError(VibechatError):
    """A remote (OpenAI-compatible) server could not be reached, or refused or failed a request."""


class ModelRefError(VibechatError):
    """A model reference (``owner/repo:QUANT``, a name) does not match anything usable."""


class ModelNotDownloadedError(ModelRefError):
    """A Hub reference with no local copy yet; ``ref`` says what to download."""

    def __init__(self, message: str, ref: object) -> None:
        super().__init__(message)
        self.ref = ref


class HubError(VibechatError):
    """The Hugging Face Hub (or the mirror in ``HF_ENDPOINT``) refused or failed a request."""


class DownloadError(VibechatError):
    """A download failed; what was downloaded so far is kept for the next attempt."""


class DownloadCancelled(DownloadError):
    """The user stopped a download; it resumes where it stopped on the next attempt."""


class ModelStoreError(VibechatError):
    """The local model registry could not be read or changed."""


class ConfigError(VibechatError):
    """The config file (or a ``VIBECHAT_*`` variable) is malformed, or could not be saved."""


class GpuOffloadUnavailableError(VibechatError):
    """GPU layers were asked for, but the installed llama-cpp-python cannot offload."""
