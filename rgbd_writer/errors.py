"""Errors raised by the RGB-D writer, so callers can tell bad input from wrong call order."""


class RgbdError(Exception):
    """Base class for every rgbd_writer error."""


class SchemaError(RgbdError, ValueError):
    """An array has the wrong shape, dtype or non-finite values (the message names the field)."""


class EpisodeStateError(RgbdError, RuntimeError):
    """A call does not fit the episode state (e.g. end_episode with obs != transitions + 1)."""


class FileStateError(RgbdError, RuntimeError):
    """The file cannot be opened for writing (wrong schema, held by another writer, unrepairable)."""
