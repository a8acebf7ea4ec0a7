"""The LeRobot v2.x format; imports nothing else of ``piper_recorder.lerobot``.

Where files live (``layout``), columns (``features``), the typed read model of a root (``Root``, ``read_info``;
``metacheck``, ``raw_read``), per-episode statistics (``episode_stats``), provenance, crash-safe file primitives
(``fsutil``) and the errors a reader or writer raises.
"""

from .errors import BindingChangeError, DatasetError, EpisodeStateError, SaveFailedError, SchemaError
from .features import FeatureSpec, lerobot_features, piper_features
from .root import Episode, Info, Modality, Root, Task, read_info

__all__ = [
    "BindingChangeError",
    "DatasetError",
    "Episode",
    "EpisodeStateError",
    "FeatureSpec",
    "Info",
    "Modality",
    "Root",
    "SaveFailedError",
    "SchemaError",
    "Task",
    "lerobot_features",
    "piper_features",
    "read_info",
]
