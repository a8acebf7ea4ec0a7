"""The RGB-D writer's configuration.

A leaf module: schema, validate and writer all read it, so it imports none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from piper_recorder.names import CAMERA

from . import codecs


@dataclass
class RgbdConfig:
    """Camera geometry, codecs and pipeline sizing. Attributes recorded in the file must match on append."""

    width: int = CAMERA.width
    height: int = CAMERA.height
    rgb_jpeg_quality: int = 88
    depth_codec: str = "jpeg2000"  # "jpeg2000" (default), "jpeg2000_strict", "htj2k": see codecs.py
    depth_min_m: float = 0.1
    depth_max_m: float = 6.0
    rgb_source: str = ""
    depth_source: str = ""
    env_args: dict = field(default_factory=dict)
    workers: int = 2  # encoder threads
    queue_size: int = 24  # frames in flight (encoding or waiting for the sink) before back-pressure
    durable: bool = True  # fsync journal records and commits (power-loss safety, not just SIGKILL)

    def validate(self) -> None:
        """Raise ``ValueError`` for a size, quality, codec or depth range the writer cannot use."""
        if self.width <= 0 or self.height <= 0:
            raise ValueError("width and height must be positive")
        if not 1 <= self.rgb_jpeg_quality <= 100:
            raise ValueError("rgb_jpeg_quality must be in 1..100")
        if self.depth_codec not in codecs.DEPTH_PROFILES:
            raise ValueError(f"depth_codec must be one of {codecs.DEPTH_PROFILES}")
        if not 0.0 < self.depth_min_m < self.depth_max_m or self.depth_max_m * 1000.0 > 65535:
            raise ValueError("need 0 < depth_min_m < depth_max_m <= 65.535 (0 mm is the invalid sentinel)")
        if self.workers < 1 or self.queue_size < 1:
            raise ValueError("workers and queue_size must be >= 1")
        json.dumps(self.env_args)
