"""Errors raised by the LeRobot writer. Callers catch ``DatasetError`` for any of them."""
from __future__ import annotations


class DatasetError(Exception):
    """Base class: the dataset operation failed; the message says why and what state the root is in."""


class SchemaError(DatasetError):
    """A row or frame does not match the configured features (shape, dtype, non-finite); names the column."""


class SaveFailedError(DatasetError):
    """A save failed on I/O (e.g. a full disk) before its commit point: the dataset is unchanged and the
    episode stays pending, so ``save_episode`` may be retried once the cause is gone."""


class EpisodeStateError(DatasetError):
    """A call came in the wrong order (e.g. ``add_row`` with no episode started)."""


class BindingChangeError(DatasetError):
    """A new session's binding keys differ from the previous session and the writer is set to refuse."""

    def __init__(self, message: str, changes: list):
        super().__init__(message)
        self.changes = changes
