"""The project's error root and the one rule for exit codes.

Every project exception derives from ``PiperError``; those meaning "this input cannot be used" (a missing,
truncated or garbled file, a parameter out of range, an unconvertible bag, a peer's malformed message)
derive from ``PiperInputError``. The console scripts (``cli.errors``) and the recorder nodes turn these,
``OSError`` and the third-party decoders' own errors (``is_input_error``: by type, never ValueError as a
whole) into a one-line message and exit code 2; anything else is a bug in the reading code: exit 1 with
the traceback, so it is not mistaken for bad input.

``SchemaError`` and ``EpisodeStateError`` are raised by both the LeRobot and the RGB-D writer, so each is a
``DatasetError`` and an ``RgbdError``. A leaf: imports nothing of the project.
"""

from __future__ import annotations

import json
import sys


class PiperError(Exception):
    """Base of every error the project raises on purpose."""


class PiperInputError(PiperError):
    """The input cannot be used; the message says which input and why (exit code 2 in the commands)."""


class DatasetError(PiperInputError):
    """A LeRobot dataset operation failed; the message says why and what state the root is in."""


class RgbdError(PiperInputError):
    """An RGB-D HDF5 file cannot be written or read as asked."""


class SchemaError(DatasetError, RgbdError, ValueError):
    """A row, frame or array does not match the configured features.

    The message names the column or field and what is wrong (shape, dtype, non-finite values).
    """


class EpisodeStateError(DatasetError, RgbdError, RuntimeError):
    """A call does not fit the episode state.

    For example ``add_row`` with no episode started, an episode ended with too few observations, or a
    writer already closed.
    """


def _decoder_errors() -> tuple[type[BaseException], ...]:
    """The decoders' own error types, from the modules already loaded (one that raised is loaded)."""
    out: list[type[BaseException]] = [json.JSONDecodeError, UnicodeDecodeError]
    lib = sys.modules.get("pyarrow.lib")
    if lib is not None:
        out.append(lib.ArrowInvalid)
    av_error = sys.modules.get("av.error")
    if av_error is not None:
        out.append(av_error.FFmpegError)
    return tuple(out)


def is_input_error(exc: BaseException) -> bool:
    """Whether ``exc`` means unusable input (exit 2) rather than a bug (exit 1)."""
    return isinstance(exc, (PiperInputError, OSError, *_decoder_errors()))


# What the commands and the recorder nodes catch as input errors. The decoders' errors join at the
# catch site through ``is_input_error`` (their modules load lazily); this tuple is the project's part.
INPUT_ERRORS: tuple[type[Exception], ...] = (PiperInputError, OSError)


def describe(exc: BaseException) -> str:
    """The error as one line: the project's errors say what they mean; others get their type name."""
    text = " ".join(str(exc).split()) or "(no details)"
    return text if isinstance(exc, PiperError) else f"{type(exc).__name__}: {text}"
