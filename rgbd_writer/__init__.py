"""Optimized RGB-D HDF5 (rlroverlab.offline_rgbd_v2), no ROS.

The streaming writer (``RgbdWriter``, ``RgbdConfig``; each episode one journaled transaction, ``journal``), the
reader and loaders (``RgbdFile``, ``TransitionDataset``, ``SequenceDataset``, ``split_episodes``), the codecs
(depth quantisation, RGB JPEG, lossless JPEG 2000 profiles), the schema and validation
(``python -m rgbd_writer.validate FILE [--full]``) and the errors it raises.
"""

from .config import RgbdConfig
from .errors import EpisodeStateError, FileStateError, RgbdError, SchemaError
from .reader import RgbdFile, SequenceDataset, TransitionDataset, collate, split_episodes
from .writer import RgbdWriter

__all__ = [
    "EpisodeStateError",
    "FileStateError",
    "RgbdConfig",
    "RgbdError",
    "RgbdFile",
    "RgbdWriter",
    "SchemaError",
    "SequenceDataset",
    "TransitionDataset",
    "collate",
    "split_episodes",
]
