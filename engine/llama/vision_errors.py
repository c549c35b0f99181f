"""The vision path's one-line errors (engine/llama/vision.py), apart from it so that the chat's
process can rebuild them from the engine process's answer (worker.py) without loading libllama
or libmtmd."""

from __future__ import annotations

from ..errors import GenerationError, ModelLoadError

NO_PROJECTOR = "this model takes no images: load a vision model with its projector (--mmproj FILE)"


class ImagesNotSupported(GenerationError):
    """Images came to a model loaded without a projector (nothing was evaluated)."""


class ImageUnreadable(GenerationError):
    """A message's image could not be read back or decoded (missing, changed, too large)."""


class ProjectorError(ModelLoadError):
    """The projector (--mmproj) is not one, does not fit the model, or llama.cpp refused it."""
