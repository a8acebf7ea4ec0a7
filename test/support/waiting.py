"""The one polling wait of the suite: graph tests, emulators and sockets all wait through it, so that a wait
that times out always says what it waited for, and with the processes' logs where there are any.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _source(cond: Callable[[], object]) -> str:
    """The condition as written (a lambda's source line), for a wait that was given no words."""
    try:
        return inspect.getsource(cond).strip()
    except (OSError, TypeError):
        return repr(cond)


def wait_for(
    cond: Callable[[], T],
    timeout: float,
    what: str | None = None,
    logs: Callable[[], str] | None = None,
    *,
    step: float = 0.02,
) -> T:
    """``cond()``'s first truthy value, polled every ``step`` s for ``timeout`` s; else an AssertionError
    naming ``what`` (default: the condition's source) followed by ``logs()`` (e.g. ``ProcGroup.logs``: every
    process's output, or a node's state). ``cond`` is asked once more at the deadline, so a poll that a
    starved thread slept through still counts.
    """
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= end:
            break
        time.sleep(min(step, max(0.0, end - time.monotonic())))
    if v:
        return v
    detail = f"\n{logs()}" if logs is not None else ""
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or _source(cond)}{detail}")
