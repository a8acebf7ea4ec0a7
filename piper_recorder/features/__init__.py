"""The one feature table (``table``): plain data, read by the assembler, the recorders, the converter and the LeRobot format.

It says which stamped inputs the assembler samples and which dataset columns (LeRobot features, RGB-D state,
action and reward terms) they become.
"""

from .table import ACTOR_FEATURE, ACTOR_INPUT, OPT_IN, PIPER_TABLE, Feature, FeatureTable, InputSpec

__all__ = ["ACTOR_FEATURE", "ACTOR_INPUT", "OPT_IN", "PIPER_TABLE", "Feature", "FeatureTable", "InputSpec"]
