"""Errors raised by the RGB-D writer, so callers can tell bad input from wrong call order.

``RgbdError``, ``SchemaError`` and ``EpisodeStateError`` are the project's (``piper_recorder.errors``,
shared with the LeRobot writer); this module adds the writer's own.
"""

from __future__ import annotations

from piper_recorder.errors import EpisodeStateError, RgbdError, SchemaError

__all__ = ["EpisodeStateError", "FileStateError", "RgbdError", "SchemaError"]


class FileStateError(RgbdError, RuntimeError):
    """The file cannot be opened for writing (wrong schema, held by another writer, unrepairable)."""
