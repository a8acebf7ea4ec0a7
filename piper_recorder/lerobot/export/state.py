"""The state of a previous export (``meta/piper_export.json``).

It says what the output holds, is checked against the source before an append (``load_state``,
``check_prefix``), and keeps the camera histograms for stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from piper_recorder import __version__

from ..format import layout
from ..format.raw_read import read_json
from .source import ExportError, Source


@dataclass
class State:
    """``meta/piper_export.json``: what the output holds (plus layout-specific ``extra``)."""

    to: str
    source: str
    fingerprints: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The state as the JSON object written to ``meta/piper_export.json``."""
        return {
            "tool": "piper-export",
            "version": __version__,
            "to": self.to,
            "source": self.source,
            "episodes": len(self.fingerprints),
            "fingerprints": self.fingerprints,
            "extra": self.extra,
        }


@dataclass
class CameraTotals:
    """Summed sample histograms per camera, for the stats.json camera entries the source lacks.

    ``episode_stats.image_entry`` gives mean/std/min/max/q01/q99; kept in the export state so a re-run only adds the
    new episodes' samples.
    """

    hist: dict[str, np.ndarray] = field(default_factory=dict)
    frames: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def from_json(obj: dict | None) -> CameraTotals:
        """The totals read back from the export state (empty for ``None``)."""
        t = CameraTotals()
        for key, v in (obj or {}).items():
            t.hist[key] = np.asarray(v["hist"], np.int64)
            t.frames[key] = int(v["frames"])
        return t

    def to_json(self) -> dict:
        """The totals as JSON for the export state."""
        return {k: {"hist": self.hist[k].tolist(), "frames": self.frames[k]} for k in self.hist}

    def add(self, hists: dict[str, tuple[np.ndarray, int]]) -> None:
        """Add the sample histograms and frame counts of more episodes."""
        for key, (h, n) in hists.items():
            self.hist[key] = self.hist.get(key, np.zeros((3, 256), np.int64)) + np.asarray(h, np.int64)
            self.frames[key] = self.frames.get(key, 0) + int(n)

    def entries(self) -> dict[str, dict]:
        """The stats.json entry of each camera from its summed histogram."""
        from ..format.episode_stats import image_entry, to_jsonable

        return {k: to_jsonable({k: image_entry(self.hist[k], self.frames[k])})[k] for k in self.hist}


def camera_totals(src: Source, state: State | None, own: dict[int, dict]) -> CameraTotals:
    """Totals of the exported episodes for the cameras without stats (recomputed if the state lacks them)."""
    cams = src.cameras_without_stats()
    totals = CameraTotals.from_json((state.extra if state else {}).get("camera_hist"))
    totals.hist = {k: v for k, v in totals.hist.items() if k in cams}
    totals.frames = {k: v for k, v in totals.frames.items() if k in cams}
    lacking = [k for k in cams if k not in totals.hist]
    if state is not None and lacking:
        for i in range(len(state.fingerprints)):
            totals.add(src.episode_stats(i, own, lacking)[1])
    return totals


def load_state(out: Path, to: str) -> State | None:
    """The previous export's state; None for a missing or empty ``out``."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a directory")
    path = out / layout.EXPORT_STATE
    if not path.is_file():
        if any(out.iterdir()):
            raise ExportError(
                f"{out} is not empty and holds no piper-export output "
                f"({layout.EXPORT_STATE} missing); choose an empty or new directory"
            )
        return None
    try:
        raw = read_json(path)
        state = State(raw["to"], raw["source"], list(raw["fingerprints"]), dict(raw.get("extra") or {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{path} is unreadable ({e}); export to a fresh directory") from None
    if state.to != to:
        raise ExportError(f"{out} holds a {state.to} export; cannot add {to} episodes to it")
    return state


def check_prefix(src: Source, state: State) -> None:
    """The exported episodes must still be the source's first episodes, unchanged."""
    n = len(state.fingerprints)
    if n > len(src.episodes):
        raise ExportError(
            f"the export holds {n} episodes but {src.root} has only "
            f"{len(src.episodes)} (episodes deleted since); export to a fresh directory"
        )
    for i in range(n):
        if src.fingerprint(i) != state.fingerprints[i]:
            raise ExportError(
                f"episode {i} of {src.root} changed since it was exported "
                "(re-recorded, repaired or edited); export to a fresh directory"
            )
