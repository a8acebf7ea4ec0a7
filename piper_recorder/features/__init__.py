"""The one feature table: which stamped inputs the assembler samples and which dataset columns (LeRobot features,
RGB-D state, action and reward terms) they become; plain data, read by the assembler, the recorders, the bag
converter and the LeRobot format alike (``table``).
"""

from .table import ACTOR_FEATURE, ACTOR_INPUT, OPT_IN, PIPER_TABLE, Feature, FeatureTable, InputSpec

__all__ = ["ACTOR_FEATURE", "ACTOR_INPUT", "Feature", "FeatureTable", "InputSpec", "OPT_IN", "PIPER_TABLE"]
