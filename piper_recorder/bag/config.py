"""Topic mapping for the converter: the recorder nodes' own (``piper_recorder.recording.inputs``).

The recorder settings are the live recorders' own config classes (``piper_recorder.recording.config``,
loaded from the same parameter file with ``load_config``, e.g. config/sim.yaml or config/robot.yaml),
and the topic map is built by the same ``topic_map`` the nodes use, so bags of either graph map
directly; ``--mapping FILE.yaml`` (the format is documented in ``recording.inputs``) maps other topic
layouts (e.g. AgileX's) and adds extra inputs, exactly as a recorder node's ``mapping`` parameter does.
"""

from __future__ import annotations

from piper_recorder.recording.inputs import EVENTS_TOPIC, InputBinding, TopicMap, apply_mapping, topic_map

__all__ = ["EVENTS_TOPIC", "InputBinding", "TopicMap", "apply_mapping", "topic_map"]
