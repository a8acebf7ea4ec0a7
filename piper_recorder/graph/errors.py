"""The launch's own error: the graph could not be configured, started, or did not become ready."""

from __future__ import annotations

from piper_recorder.errors import PiperError


class LaunchError(PiperError, RuntimeError):
    """The graph could not be configured, started, or did not become ready."""
