"""The policy backend interface: one observation in, one action chunk out.

Every backend (``http`` PiperPilot ``/predict``, ``gr00t`` ZeroMQ client, the ``hold`` and
``replay:`` dry-run built-ins) implements ``PolicyBackend``. ``predict`` may block for as long as the
server takes: the chunk executor calls it off the control thread and never waits on it. No ROS and
no torch here.

Action rows are in the training root's combined ``action`` column layout
(``lerobot.format.action_layout.ActionLayout``): one arm's ``action.arm_eef`` (x, y, z, qw, qx, qy, qz;
metres, arm-base frame, absolute) followed by ``action.gripper`` (metres), ``ACTION_DIM`` = 8; two arms
each arm's 8 in the root's order (left, then right: 16). The names below are one arm's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from piper_recorder.errors import PiperError
from piper_recorder.lerobot.format.action_layout import ActionLayout

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

SINGLE_ARM = ActionLayout.single()
ACTION_KEYS: tuple[str, ...] = tuple(SINGLE_ARM.columns())  # action.arm_eef, action.gripper
ACTION_DIM = SINGLE_ARM.dim
STATE_KEYS: tuple[str, ...] = tuple(SINGLE_ARM.arms[0].state_column(k) for k in ("arm_joint", "arm_eef", "gripper"))


class BackendError(PiperError, RuntimeError):
    """A backend could not answer (connection, timeout, malformed answer). The executor pauses."""


class BackendTimeout(BackendError):
    """No answer within the backend's timeout: reported as a query timeout, like the runtime's own deadline.

    Whichever clock fires first, a slow server reads the same in ~/status.
    """


@dataclass(frozen=True)
class Observation:
    """What the policy sees at one instant, as the recorders would have written it.

    ``state``: feature key -> float32 vector (e.g. "observation.arm_eef": 7, quat wxyz).
    ``images``: camera name (e.g. "cam_front", not the feature key) -> HxWx3 uint8 RGB at the
    training root's image size. ``stamp_ns``: the control-grid time this observation stands for
    (the clock the executor uses), so an answer can be placed in time.
    """

    task: str
    state: dict[str, F32]
    images: dict[str, U8]
    stamp_ns: int


@dataclass(frozen=True)
class ActionChunk:
    """A backend's answer: ``rows`` (n, the layout's ``dim``) float32; the runtime checks the width against the root.

    Row k is the target for time ``t0_ns + k * period``, where ``t0_ns`` is normally ``obs_stamp_ns`` (the
    observation it answers).
    """

    rows: F32
    obs_stamp_ns: int
    t0_ns: int
    info: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rows.ndim != 2 or self.rows.shape[1] < 1:
            raise BackendError(f"action chunk must be (n, action width), got {self.rows.shape}")


@runtime_checkable
class PolicyBackend(Protocol):
    """One policy behind one interface."""

    def describe(self) -> dict[str, object]:
        """Provenance: at least ``backend`` and ``url`` or ``checkpoint``; ``content_hash`` if known."""
        ...

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        """At most ``horizon`` rows answering ``obs``. May block; raises ``BackendError``."""
        ...

    def close(self) -> None:
        """Release the backend's connections."""
