"""Typed callbacks for rclpy: a subscription callback taking any message, and a cheap timer callback."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def message_callback(fn: Callable[..., None]) -> Callable[[Any], None]:
    """``fn`` itself, typed as a subscription callback taking any message.

    For a lambda passed to ``create_subscription`` (which may bind loop variables as defaults: ``lambda m, c=cam: ...``). Jazzy's and
    Humble's rclpy declare the callback's parameter with a type variable no argument binds, so a bare lambda's
    parameter cannot be inferred there; Kilted's binds it to the message class, which is untyped: ``Any``
    either way.
    """
    return fn


_NO_PARAMETERS = inspect.Signature()


def timer_callback(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` as a timer callback whose signature is stated (no parameters).

    rclpy's executors look for a ``TimerInfo`` parameter in a timer callback's ``inspect.signature`` on every
    call: for a bound method that is costly pure Python, for a function carrying ``__signature__`` one
    attribute read. The call itself is ``fn()``.
    """

    def call() -> None:
        fn()

    call.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "timer_callback")
    return call
