"""Observations exactly as the policy was trained: the training root's meta, the recorders' assembly.

``TrainingMeta`` reads what a root says about its data (``lerobot.format.root.Root``: features,
modality.json, cameras and image sizes, fps, tasks; then stats, latest provenance). ``ObservationBuilder`` feeds live messages into the
recorders' own ``EpisodeAssembler`` (same grid, same frame pairing, same quaternion order wxyz,
same float32 columns) and turns each assembled row into an ``Observation``: a row is what the
recorder would have written at that tick, so the policy sees what it was trained on. Live inputs
that differ from the root (a camera missing, another image size, another camera rate) are named
by ``problems()`` and refuse the start.

Several arms: the root's action layout (``ActionLayout``, from its info.json) names its arms, and the
builder assembles with the recorders' table of those arms (``features.table.arms_table``): each arm's
joint states and pose feed its own inputs (``arm=`` on ``add_joint_state`` / ``add_eef_pose``), and an
observation carries each arm's columns (``observation.left_arm_eef`` ...) and ``observation.state`` as the
root has them (every column of the first arm, then the second's). Samples of an arm the root does not
have are counted (``foreign_arms``), never assembled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from piper_recorder.assembly import CaptureHistory, window_captures
from piper_recorder.assembly.assembler import AssemblyConfig, EpisodeAssembler, Frame, Row
from piper_recorder.assembly.messages import pose7
from piper_recorder.errors import DatasetError, PiperInputError, SchemaError
from piper_recorder.features.table import STATE, FeatureTable, arms_table
from piper_recorder.lerobot.format.action_layout import ActionLayout
from piper_recorder.lerobot.format.layout import COLLECTION_META, SESSIONS, STATS
from piper_recorder.lerobot.format.root import Root
from piper_recorder.names import EEF_POSE, IMAGES_PREFIX, JOINT_STATES, arm_topic

from .backend import F32, SINGLE_ARM, Observation

CAMERA_RATE_TOL = 0.25  # a camera whose measured rate is off the root's fps by more refuses the start
RATE_SAMPLES = 10


class MetaError(PiperInputError, ValueError):
    """The training root cannot drive this arm (missing file, unsupported features)."""


@dataclass(frozen=True)
class TrainingMeta:
    """What a training root says about its data: rate, cameras and sizes, state columns, tasks, stats and session."""

    root: Path
    fps: float
    cameras: dict[str, tuple[int, int]]  # camera name -> (height, width)
    state_keys: tuple[str, ...]  # observation feature columns the policy was trained on
    tasks: tuple[str, ...]
    modality: dict[str, Any]
    stats: dict[str, Any]
    session: dict[str, Any] | None  # latest collection session record (binding keys)
    layout: ActionLayout = SINGLE_ARM  # each arm's place in the action row (one arm: action.arm_eef + gripper)

    @property
    def arms(self) -> tuple[str, ...]:
        """The arms' names, () for one arm."""
        return self.layout.arm_names

    def table(self) -> FeatureTable:
        """The recorders' feature table of the root's arms: the inputs and row values an observation is cut from."""
        return arms_table(self.arms)

    @classmethod
    def load(cls, root: str | Path) -> TrainingMeta:
        """Read it from the root at ``root``; ``MetaError`` saying what is missing."""
        root = Path(root)
        try:
            model = Root.open(root)
        except (DatasetError, OSError) as e:
            raise MetaError(f"{root}: cannot read its meta files: {e}") from e
        feats = model.info.features
        try:
            layout = ActionLayout.from_features(model.info.to_json()["features"])
        except SchemaError as e:
            raise MetaError(f"{root}: {e}") from e
        observed = _observed(arms_table(layout.arm_names))
        cams: dict[str, tuple[int, int]] = {}
        state: list[str] = []
        unsupported: list[str] = []
        for key, f in feats.items():
            if key.startswith(IMAGES_PREFIX):
                shape = list(f.shape)
                if (f.names or ())[:2] == ("channels", "height") or (
                    len(shape) == 3 and shape[0] == 3 and shape[2] != 3
                ):
                    shape = [shape[1], shape[2], shape[0]]
                cams[key[len(IMAGES_PREFIX) :]] = (shape[0], shape[1])
            elif key.startswith("observation."):
                if key in observed.columns or key in observed.combined:
                    state.append(key)
                else:
                    unsupported.append(key)
        if unsupported:
            raise MetaError(
                f"{root}: observation features the live graph of {layout.describe()} cannot provide: {unsupported}"
            )
        for key, parts in observed.combined.items():
            want = sum(observed.widths[p] for p in parts)
            if key in feats and feats[key].width != want:
                raise MetaError(
                    f"{root}: {key} has {feats[key].width} values; {layout.describe()} give {want} "
                    f"({' + '.join(parts)})"
                )
        tasks = tuple(t.task for t in model.tasks)
        session = None
        try:
            session = json.loads((root / COLLECTION_META).read_text())
        except (OSError, ValueError):
            sessions = [json.loads(line) for line in _lines(root / SESSIONS)]
            session = sessions[-1] if sessions else None
        return cls(
            root,
            float(model.fps),
            cams,
            tuple(state),
            tasks,
            model.modality.to_json() if model.modality else {},
            _json(root / STATS),
            session,
            layout,
        )


@dataclass(frozen=True)
class _Observed:
    """A table's observation columns: column -> row value key and width; combined column -> its parts."""

    columns: dict[str, str]
    widths: dict[str, int]
    combined: dict[str, tuple[str, ...]]


def _observed(table: FeatureTable) -> _Observed:
    feats = [f for f in table.features if f.column is not None and f.combined == STATE]
    return _Observed(
        {str(f.column): f.key for f in feats},
        {str(f.column): f.stop - f.start for f in feats},
        {STATE: tuple(str(f.column) for f in feats)},
    )


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return []


def _json(path: Path) -> dict[str, Any]:
    try:
        out = json.loads(path.read_text())
        return out if isinstance(out, dict) else {}
    except (OSError, ValueError):
        return {}


class _LatestRow:
    """Assembler sink keeping only the newest row (frames ride in the rows: nominal mode)."""

    def __init__(self) -> None:
        self.latest: Row | None = None

    def row(self, row: Row) -> None:
        self.latest = row

    def frame(self, camera: str, frame: Frame, t: float) -> None:
        pass

    def raw_quest(self, line: str) -> None:
        pass


@dataclass
class _CamSeen:
    shape: tuple[int, ...] = ()
    newest_ns: int = 0
    stamps: list[int] = field(default_factory=list)


@dataclass
class ArmFeedback:
    """One arm's newest feedback: stamp (ns), measured pose (position, quaternion xyzw) and gripper (m)."""

    newest_ns: int = 0
    eef: tuple[Sequence[float], Sequence[float]] | None = None
    gripper: float | None = None

    @property
    def complete(self) -> bool:
        """Whether both the pose and the joint states (gripper) arrived."""
        return self.eef is not None and self.gripper is not None


class ObservationBuilder:
    """Live arm/camera samples -> the newest assembled observation. Not thread-safe (one lock in the node)."""

    def __init__(self, meta: TrainingMeta, task: str, fps: float = 0.0, lateness_s: float = 0.02):
        self.meta, self.task = meta, task
        self.fps = fps or meta.fps
        table = meta.table()
        self.asm_cfg = AssemblyConfig(
            fps=self.fps,
            cameras=tuple(meta.cameras),
            timestamp_mode="nominal",
            lateness_s=lateness_s,
            stale_s=1.0,
            table=table,
        )
        self.asm_cfg.validate()
        observed = _observed(table)
        self._row_value = observed.columns  # observation column -> the assembler's row value
        self._combined = {k: parts for k, parts in observed.combined.items() if k in meta.state_keys}
        # (arm, Piper input name) -> the table's input: one arm's joint_states, two arms' left_joint_states ...
        self._inputs = {
            (spec.arm, spec.name.removeprefix(f"{spec.arm}_") if spec.arm else spec.name): spec.name
            for spec in table.inputs
        }
        self._asm: EpisodeAssembler | None = None
        self._latest = _LatestRow()
        self._pre: dict[str, tuple[str, tuple[Any, ...]]] = {}  # input -> newest (method, args): pre-roll
        self.cams: dict[str, _CamSeen] = {c: _CamSeen() for c in meta.cameras}
        # capture stamps kept while stopped, as the recorders keep them: a start's phase estimate (which
        # frame pairs with which row) comes from a window of captures, not from a warm-up after it
        self._captures = {c: CaptureHistory(window_captures(self.fps)) for c in meta.cameras}
        self.feedback: dict[str | None, ArmFeedback] = {a: ArmFeedback() for a in meta.layout.keys}
        self.foreign_arms: dict[str, int] = {}  # samples of an arm the root does not have, by arm
        self.frames_wrong_size: dict[str, int] = {}

    @property
    def arm_newest_ns(self) -> int:
        """The oldest of the arms' newest feedback stamps (the one that goes stale first); 0 before any."""
        return min(fb.newest_ns for fb in self.feedback.values())

    # ---- inputs (stamps in the graph's clock, ns) --------------------------------------------
    def _feed(self, key: str, method: str, *args: Any) -> None:
        self._pre[key] = (method, args)
        if self._asm is not None:
            getattr(self._asm, method)(*args)

    def _arm(self, arm: str | None) -> ArmFeedback | None:
        fb = self.feedback.get(arm)
        if fb is None:
            label = arm or "the unnamed arm"
            self.foreign_arms[label] = self.foreign_arms.get(label, 0) + 1
        return fb

    def _feed_input(self, arm: str | None, name: str, stamp_ns: int, values: Any) -> None:
        full = self._inputs[(arm, name)]
        self._feed(full, "add_input", full, stamp_ns, values)

    def add_joint_state(self, stamp_ns: int, positions: Sequence[float], arm: str | None = None) -> None:
        """6 joints (rad) + gripper (m) of ``arm`` (None: the one arm), the recorders' ``joint_positions`` order."""
        fb = self._arm(arm)
        if fb is None:
            return
        fb.newest_ns = max(fb.newest_ns, stamp_ns)
        fb.gripper = float(positions[6])
        self._feed_input(arm, "joint_states", stamp_ns, np.asarray(positions, dtype=np.float32))
        # the assembler needs a commanded gripper to complete a row; the policy does not use it
        self._feed_input(arm, "commanded_gripper", stamp_ns, np.array([positions[6]], dtype=np.float32))

    def add_eef_pose(
        self, stamp_ns: int, position: Sequence[float], quat_xyzw: Sequence[float], arm: str | None = None
    ) -> None:
        """Add ``arm``'s measured end-effector pose (ROS xyzw quaternion; None: the one arm)."""
        fb = self._arm(arm)
        if fb is None:
            return
        fb.eef = (position, quat_xyzw)
        row = pose7(position, quat_xyzw)
        self._feed_input(arm, "eef_pose", stamp_ns, row)
        self._feed_input(arm, "commanded_pose", stamp_ns, row)

    def add_frame(self, camera: str, stamp_ns: int, rgb: np.ndarray) -> None:
        """Add a camera frame."""
        seen = self.cams.get(camera)
        if seen is None:
            return
        seen.shape = tuple(rgb.shape)
        if rgb.shape != (*self.meta.cameras[camera], 3):
            self.frames_wrong_size[camera] = self.frames_wrong_size.get(camera, 0) + 1
            return
        seen.newest_ns = max(seen.newest_ns, stamp_ns)
        self._captures[camera].add(stamp_ns)
        if len(seen.stamps) < RATE_SAMPLES + 1:
            seen.stamps.append(stamp_ns)
        self._feed(f"frame:{camera}", "add_frame", camera, stamp_ns, rgb)

    # ---- checks ------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """What differs between the live inputs and the training root (empty: ready)."""
        out: list[str] = []
        for cam, (h, w) in self.meta.cameras.items():
            seen = self.cams[cam]
            if not seen.shape:
                out.append(f"camera {cam}: no frames received (the policy was trained with it)")
            elif seen.shape != (h, w, 3):
                out.append(
                    f"camera {cam}: live frames {seen.shape[1]}x{seen.shape[0]} ({seen.shape}), trained on {w}x{h}"
                )
            elif len(seen.stamps) > RATE_SAMPLES:
                dt = float(np.median(np.diff(seen.stamps))) / 1e9
                rate = 1.0 / dt if dt > 0 else float("inf")
                if abs(rate - self.meta.fps) > CAMERA_RATE_TOL * self.meta.fps:
                    out.append(f"camera {cam}: live rate {rate:.1f} fps, trained at {self.meta.fps:g} fps")
        if self.fps != self.meta.fps:
            out.append(f"fps: node {self.fps:g}, trained at {self.meta.fps:g}")
        for arm, fb in self.feedback.items():
            if not fb.complete:
                who = "arm" if arm is None else f"arm {arm}"
                out.append(f"{who}: no {arm_topic(arm, EEF_POSE)} and {arm_topic(arm, JOINT_STATES)} received")
        if self.foreign_arms:
            out.append(
                f"arm feedback of {', '.join(sorted(self.foreign_arms))}: the training root has {self.meta.layout.describe()}"
            )
        return out

    # ---- rows ----------------------------------------------------------------------------------
    def start(self, now_ns: int) -> None:
        """Start assembling on a fresh grid from ``now_ns`` (the newest samples are the pre-roll)."""
        self._latest = _LatestRow()
        self._asm = EpisodeAssembler(
            self.asm_cfg, now_ns, self._latest, history={c: h.before(now_ns) for c, h in self._captures.items()}
        )
        for method, args in self._pre.values():
            getattr(self._asm, method)(*args)

    def stop(self) -> None:
        """Stop assembling (until the next start)."""
        self._asm = None

    def advance(self, now_ns: int) -> Observation | None:
        """Assemble every due row; the newest as an Observation (None before the first row)."""
        if self._asm is None:
            return None
        self._asm.advance(now_ns)
        row = self._latest.latest
        return None if row is None else self.observation(row)

    def observation(self, row: Row) -> Observation:
        """The ``Observation`` of an assembled row: every arm's columns and the combined ones the root has."""
        state: dict[str, F32] = {k: np.asarray(row.values[v], dtype=np.float32) for k, v in self._row_value.items()}
        for key, parts in self._combined.items():
            state[key] = np.concatenate([state[p] for p in parts]).astype(np.float32)
        images = {cam: np.asarray(f.rgb, dtype=np.uint8) for cam, f in row.frames.items()}
        return Observation(task=self.task, state=state, images=images, stamp_ns=row.tick_ns)
