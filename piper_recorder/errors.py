"""The error types that mean "this input cannot be used" (a missing, truncated, garbled or wrongly
typed file), as opposed to a bug: the console scripts (``cli.errors``) and the recorder nodes turn
exactly these into a one-line message and exit code 2.

The dataset errors of both formats, OSError (missing or unreadable files, h5py and pyarrow I/O) and
ValueError (JSON, UTF-8, pyarrow's ArrowInvalid, PyAV's InvalidDataError). TypeError, KeyError,
AttributeError and the like stay bugs in the reading code and are never mapped.
"""
from __future__ import annotations

from piper_recorder.lerobot.errors import DatasetError   # also piper-finalize's FinalizeError
from rgbd_writer.errors import RgbdError

PROJECT_ERRORS: tuple[type[Exception], ...] = (DatasetError, RgbdError)
INPUT_ERRORS: tuple[type[Exception], ...] = (*PROJECT_ERRORS, OSError, ValueError)


def describe(exc: BaseException) -> str:
    """The error as one line: the project's errors say what they mean; others get their type name."""
    text = " ".join(str(exc).split()) or "(no details)"
    return text if isinstance(exc, PROJECT_ERRORS) else f"{type(exc).__name__}: {text}"
