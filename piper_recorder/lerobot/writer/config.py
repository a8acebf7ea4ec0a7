"""The LeRobot writer's configuration.

A leaf of the writer: meta builders, repair and recover take a ``WriterConfig`` without importing the writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from piper_recorder.names import CAMERA

from ..format.features import FeatureSpec, piper_features
from ..format.layout import CODEBASE_VERSION, CODEBASE_VERSIONS, DEFAULT_CHUNKS_SIZE, ROTATION_TYPES
from .video_encoder import VideoConfig


@dataclass
class CameraSpec:
    """One camera's frame size."""

    height: int = CAMERA.height
    width: int = CAMERA.width


@dataclass
class WriterConfig:
    """Dataset layout and encoding. A resumed root must use the same fps, features and cameras."""

    fps: int = CAMERA.fps
    robot_type: str = "agilex_piper"
    cameras: dict[str, CameraSpec] = field(default_factory=dict)
    features: tuple[FeatureSpec, ...] = field(default_factory=piper_features)
    video: VideoConfig = field(default_factory=VideoConfig)
    chunks_size: int = DEFAULT_CHUNKS_SIZE
    save_raw_quest: bool = True
    rotation_type: str = "quat_wxyz"  # "quaternion" (w-first) is the name GR00T N1.5 accepts
    combined_columns: bool = True  # observation.state / action for LeRobot policies
    on_binding_change: str = "warn"  # or "refuse"
    lerobot_version: str = CODEBASE_VERSION  # "v2.1" adds meta/episodes_stats.jsonl

    def validate(self) -> None:
        """Raise ``ValueError`` for a configuration the writer cannot record with."""
        if self.fps <= 0 or self.chunks_size <= 0:
            raise ValueError("WriterConfig: fps and chunks_size must be positive")
        if self.rotation_type not in ROTATION_TYPES:
            raise ValueError(f"WriterConfig.rotation_type must be one of {ROTATION_TYPES}")
        if self.on_binding_change not in ("warn", "refuse"):
            raise ValueError('WriterConfig.on_binding_change must be "warn" or "refuse"')
        if self.lerobot_version not in CODEBASE_VERSIONS:
            raise ValueError(
                f"WriterConfig.lerobot_version must be one of {CODEBASE_VERSIONS}, got {self.lerobot_version!r}"
            )
        keys = [f.key for f in self.features]
        if not keys or len(set(keys)) != len(keys):
            raise ValueError("WriterConfig.features: need at least one feature, unique keys")
        for f in self.features:
            f.validate()
        for cam, spec in self.cameras.items():
            if not cam or "/" in cam or spec.height <= 0 or spec.width <= 0:
                raise ValueError(f"WriterConfig.cameras: bad camera {cam!r} {spec}")
        self.video.validate()
