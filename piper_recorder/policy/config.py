"""One typed config for the inference runtime: backend, chunking, safety bounds, binding check.

Flat scalar fields are the ``policy`` node's ROS parameters (``declare_config``); the envelope is
teleop's own ``LimitsConfig`` (parameters ``limits.*``), so policy and operator share one envelope.
Two arms (``arms: [left, right]``, as the recorders take it): each arm's topics under its namespace
(``arm_topics``), each arm taken over by the hand of its name; ``hand`` is then unused, and every arm takes
the one ``limits.*`` envelope in its own base frame, as teleop does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from piper_recorder.names import (
    BIMANUAL_ARMS,
    COLOR_TOPIC_PATTERN,
    QUEST_HANDS,
    arm_topic,
    check_topic_pattern,
    parse_arms,
)
from piper_recorder.teleop.limits import LimitsConfig

MODES = ("receding", "ensemble")
BINDING_ACTIONS = ("warn", "refuse")


@dataclass
class PolicyConfig:
    """The policy node's parameters: backend, chunking, safety bounds and the binding check."""

    policy: str = "hold"  # http://host:port | gr00t://host:port | hold | replay:<root>:<episode>
    root: str = ""  # training root (meta/ is read for features, cameras, fps, provenance)
    task: str = ""  # task string sent with every query ("" = the root's first task)
    horizon: int = 30  # rows asked per query
    mode: str = "receding"  # receding: newest chunk wins | ensemble: ACT temporal ensembling
    ensemble_m: float = 0.01  # ACT weights w_i = exp(-m * i), i = 0 the oldest prediction
    replan_every: int = 10  # steps executed from a chunk before the next query is sent ...
    query_ahead: int = 10  # ... or earlier, once the newest chunk has this few rows left ...
    lead_margin_s: float = 0.05  # ... or the time p99 query latency + one tick + this margin
    control_rate_hz: float = 30.0  # targets published at this rate, whatever the server does
    fps: float = 0.0  # observation grid; 0 = the training root's fps
    timeout_s: float = 1.0  # one query longer than this: pause and hold
    arm_stale_s: float = 0.5  # newest arm feedback older than this: pause and hold
    camera_stale_s: float = 0.5  # newest frame of any camera older than this: pause and hold
    max_duration_s: float = 0.0  # stop after this long running (0 = no limit)
    on_binding_mismatch: str = "refuse"  # warn | refuse (training root's provenance vs the live arm)
    lateness_s: float = 0.02  # observation rows assembled this long after their grid time
    gripper_max_width: float = 0.07  # m; gripper targets are clamped into [0, this]
    arms: list[str] = field(default_factory=list)  # [] one arm; [left, right]: each arm's topics under its namespace
    hand: str = "right"  # the headset hand whose grip takes over (teleop's hand); two arms: each arm's own hand
    takeover_above: float = 0.7  # grip (squeeze) above this = operator takeover (teleop's engage_above)
    takeover_release_below: float = 0.3  # ... held until it falls below this (teleop's release_below)
    arm_frame: str = "arm_base"
    image_topic_pattern: str = COLOR_TOPIC_PATTERN  # the recorders' parameter: each camera's colour topic
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    @property
    def period_s(self) -> float:
        """The control period (s)."""
        return 1.0 / self.control_rate_hz

    def arm_names(self) -> tuple[str, ...]:
        """The live arms' names (``names.parse_arms``): () for one arm."""
        return parse_arms(self.arms)

    def arm_topics(self, name: str) -> dict[str | None, str]:
        """Each live arm's topic ``name`` (``/arm/joint_states`` -> ``/left/arm/joint_states``); key None for one arm."""
        return {a: arm_topic(a, name) for a in (self.arm_names() or (None,))}

    def validate(self) -> None:
        """Raise ``ValueError`` naming the parameter for a bad value."""
        arms = self.arm_names()
        if arms and set(arms) != set(BIMANUAL_ARMS):
            raise ValueError(
                f"arms must be empty (one arm) or name the arms {', '.join(BIMANUAL_ARMS)}, each taken over by "
                f"the hand of its name; got {list(arms)}"
            )
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.on_binding_mismatch not in BINDING_ACTIONS:
            raise ValueError(f"on_binding_mismatch must be one of {BINDING_ACTIONS}, got {self.on_binding_mismatch!r}")
        if self.hand not in QUEST_HANDS:
            raise ValueError(f"hand must be 'left' or 'right', got {self.hand!r}")
        if self.horizon < 1 or self.replan_every < 1 or self.query_ahead < 0:
            raise ValueError("horizon and replan_every must be >= 1, query_ahead >= 0")
        for name in ("control_rate_hz", "timeout_s", "arm_stale_s", "camera_stale_s", "gripper_max_width"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        for name in ("fps", "max_duration_s", "lateness_s", "ensemble_m", "lead_margin_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {v}")
        if not 0.0 < self.takeover_above <= 1.0:
            raise ValueError(f"takeover_above must be in (0, 1], got {self.takeover_above}")
        if not 0.0 <= self.takeover_release_below < self.takeover_above:
            raise ValueError(
                f"takeover_release_below must be in [0, takeover_above), got {self.takeover_release_below}"
            )
        check_topic_pattern("image_topic_pattern", self.image_topic_pattern)
        if not self.policy.strip():
            raise ValueError("policy must name a backend (http://..., gr00t://..., hold, replay:<root>:<ep>)")
        self.limits.validate()

    def chunk_settings(self) -> dict[str, object]:
        """What the rollout provenance records about execution."""
        return {
            "horizon": self.horizon,
            "mode": self.mode,
            "ensemble_m": self.ensemble_m,
            "replan_every": self.replan_every,
            "query_ahead": self.query_ahead,
            "lead_margin_s": self.lead_margin_s,
            "control_rate_hz": self.control_rate_hz,
            "timeout_s": self.timeout_s,
        }
