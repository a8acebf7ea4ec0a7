"""A policy backend from its spec string (``make_backend``).

The spec is the ``policy`` parameter of the policy node and the launch argument ``policy:=SPEC``. The one module
that knows every backend; the backends know only the interface (``policy.backend``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from piper_recorder.errors import DatasetError
from piper_recorder.lerobot.format.action_layout import ActionLayout
from piper_recorder.lerobot.format.layout import MODALITY

from .backend import SINGLE_ARM, PolicyBackend
from .builtin import HoldBackend, ReplayBackend
from .http import HttpBackend


def make_backend(spec: str, *, timeout_s: float = 1.0, root: str | None = None) -> PolicyBackend:
    """Backend from a spec string: ``http://host:port[/prefix]``, ``gr00t://host:port``, ``hold``, ``replay:<root>:<episode>``.

    ``root``: the training root, whose action layout (``ActionLayout``: one arm's 8 columns, two arms' 16) every
    backend answers in; without one, one arm's. ``gr00t://`` imports ``piper_recorder.policy.gr00t`` and calls
    ``Gr00tBackend(host, port, timeout_s=..., modality=<root>/meta/modality.json, layout=...)`` (the training root's
    modality map names the GR00T keys; without a root the backend uses its default).
    """
    spec = spec.strip()
    try:
        layout = ActionLayout.load(root) if root else SINGLE_ARM
    except DatasetError as e:
        raise ValueError(f"policy {spec!r}: the training root {root}: {e}") from e
    if spec.startswith(("http://", "https://")):
        return HttpBackend(spec, timeout_s=timeout_s, layout=layout)
    if spec.startswith("gr00t://"):
        try:
            mod = importlib.import_module("piper_recorder.policy.gr00t")
        except ImportError as e:
            raise ValueError(
                f"policy {spec!r}: the gr00t backend (piper_recorder/policy/gr00t.py) is not available: {e}"
            ) from e
        hostport = spec[len("gr00t://") :].rstrip("/")
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"policy {spec!r}: expected gr00t://host:port")
        modality = Path(root) / MODALITY if root else None
        kwargs: dict[str, object] = {"timeout_s": timeout_s, "layout": layout}
        if modality is not None and modality.is_file():
            kwargs["modality"] = modality
        backend: PolicyBackend = mod.Gr00tBackend(host, int(port), **kwargs)
        return backend
    if spec == "hold":
        return HoldBackend(layout)
    if spec.startswith("replay:"):
        rest = spec[len("replay:") :]
        root, sep, episode = rest.rpartition(":")
        if not sep or not root or not episode.isdigit():
            raise ValueError(f"policy {spec!r}: expected replay:<root>:<episode index>")
        return ReplayBackend(root, int(episode))
    raise ValueError(f"policy {spec!r}: expected http://..., gr00t://host:port, hold or replay:<root>:<episode>")
