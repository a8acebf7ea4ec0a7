"""Names, attributes, dtypes and chunking of ``rlroverlab.offline_rgbd_v2`` (the reference schema)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

if TYPE_CHECKING:
    from .config import RgbdConfig

SCHEMA_NAME = "rlroverlab.offline_rgbd_v2"
FORMAT_VERSION = 2
VISUAL_PROFILE = "rgb_jpeg_depth_u16_jpeg2000"
DEPTH_CODEC_ATTR = "jpeg2000_u16_mm"
DEPTH_PROFILE_ATTR = "depth_jpeg2000_profile"  # our addition: a codecs.DEPTH_PROFILES name
STATUSES = ("incomplete", "closing", "complete", "failed")
VLEN_CHUNK = 1024
INDEX_CHUNK = 1024
STORED_AS = "variable_length_uint8_encoded_bytes"

RGB = "observations/rgb_jpeg"
DEPTH = "observations/depth_jp2"
STATE = "observations/state"
TRANSITIONS = "transitions"
EXTRA = "transitions/extra"
ACTIONS = "transitions/actions"
REWARDS = "transitions/rewards"
FLAGS = ("dones", "terminals", "timeouts")
PER_TRANSITION_INDEX = ("obs_index", "next_obs_index", "episode_id", "episode_transition_index")
PER_EPISODE_INDEX = ("episode_lengths", "obs_offsets", "transition_offsets")
AttrValue = str | float  # a scalar attribute as this schema writes it (bool and int included)


def numeric_chunks(row_shape: tuple[int, ...], dtype: DTypeLike) -> tuple[int, ...]:
    """Reference rule: rows = max(1, min(1024, 1 MiB // bytes_per_row)), chunks (rows, *row_shape)."""
    bytes_per_row = int(np.dtype(dtype).itemsize * int(np.prod(row_shape, dtype=np.int64)))
    rows = max(1, min(1024, (1 << 20) // max(1, bytes_per_row)))
    return (rows, *row_shape)


def root_attrs(cfg: RgbdConfig) -> dict[str, AttrValue]:
    """Root attributes fixed at creation (totals start at 0; camera_* come with the first episode)."""
    return {
        "schema_name": SCHEMA_NAME,
        "format_version": FORMAT_VERSION,
        "writer_status": "incomplete",
        "visual_profile": VISUAL_PROFILE,
        "storage_contract_version": 1,
        "visual_storage_contract": "raw_sensor_values_compressed",
        "training_normalization_applied": False,
        "normalization_contract": "loader_applies_normalization_after_decode",
        "recommended_rgb_scale": 1.0 / 255.0,
        "rgb_training_scale": 1.0 / 255.0,
        "recommended_depth_scale_m": 0.001,
        "depth_training_scale_m": 0.001,
        "depth_unit_m": 0.001,
        "zero_structural_duplication": True,
        "rgb_codec": "jpeg",
        "rgb_jpeg_quality": int(cfg.rgb_jpeg_quality),
        "rgb_source": cfg.rgb_source,
        "rgb_storage_dtype": "uint8",
        "rgb_storage_range_min": 0,
        "rgb_storage_range_max": 255,
        "depth_codec": DEPTH_CODEC_ATTR,
        DEPTH_PROFILE_ATTR: cfg.depth_codec,
        "depth_source": cfg.depth_source,
        "depth_source_unit": "meters",
        "depth_storage_dtype": "uint16",
        "depth_storage_unit": "millimeters",
        "depth_psnr_target_db": 50.0,
        "depth_min_m": float(cfg.depth_min_m),
        "depth_max_m": float(cfg.depth_max_m),
        "depth_invalid_sentinel": 0,
        "total_episodes": 0,
        "total_transitions": 0,
        "total_observations": 0,
    }


def rgb_attrs(cfg: RgbdConfig) -> dict[str, AttrValue]:
    """The attrs of the RGB dataset for ``cfg`` (the reference schema's names)."""
    return {
        "source": cfg.rgb_source,
        "source_space": "raw_sensor",
        "codec": "jpeg",
        "jpeg_quality": int(cfg.rgb_jpeg_quality),
        "stored_as": STORED_AS,
        "decoded_dtype": "uint8",
        "decoded_channel_order": "RGB",
        "decoded_range_min": 0,
        "decoded_range_max": 255,
        "training_normalization_applied": False,
        "recommended_training_scale": 1.0 / 255.0,
        "recommended_training_dtype": "float32",
        "width": int(cfg.width),
        "height": int(cfg.height),
        "channels": 3,
    }


def depth_attrs(cfg: RgbdConfig) -> dict[str, AttrValue]:
    """The attrs of the depth dataset for ``cfg`` (the reference schema's names)."""
    return {
        "source": cfg.depth_source,
        "source_space": "raw_sensor",
        "source_unit": "meters",
        "codec": "jpeg2000",
        "codec_input_dtype": "uint16",
        "stored_as": STORED_AS,
        "decoded_dtype": "uint16",
        "decoded_unit": "millimeters",
        "decoded_valid_min": int(round(cfg.depth_min_m * 1000.0)),
        "decoded_valid_max": int(round(cfg.depth_max_m * 1000.0)),
        "invalid_sentinel": 0,
        "source_valid_min_m": float(cfg.depth_min_m),
        "source_valid_max_m": float(cfg.depth_max_m),
        "recommended_training_scale_m": 0.001,
        "recommended_training_dtype": "float32",
        "width": int(cfg.width),
        "height": int(cfg.height),
        "channels": 1,
        DEPTH_PROFILE_ATTR: cfg.depth_codec,
    }
