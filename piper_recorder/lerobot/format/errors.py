"""Errors raised by the LeRobot writer; callers catch ``DatasetError`` for any of them.

``DatasetError``, ``SchemaError`` and ``EpisodeStateError`` are the project's (``piper_recorder.errors``, shared
with the RGB-D writer); this module adds the writer's own.
"""

from __future__ import annotations

from piper_recorder.errors import DatasetError, EpisodeStateError, SchemaError

__all__ = ["BindingChangeError", "DatasetError", "EpisodeStateError", "SaveFailedError", "SchemaError"]


class SaveFailedError(DatasetError):
    """A save failed on I/O (e.g. a full disk) before its commit point.

    The dataset is unchanged and the episode stays pending, so ``save_episode`` may be retried once the cause is gone.
    """


class BindingChangeError(DatasetError):
    """A new session's binding keys differ from the previous session and the writer is set to refuse."""

    def __init__(self, message: str, changes: list):
        super().__init__(message)
        self.changes = changes
