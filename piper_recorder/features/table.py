"""The feature table: which inputs the assembler samples and which dataset columns they become.

An ``InputSpec`` is one stamped vector input (a topic read by a message adapter, ``assembly.messages``);
a ``Feature`` is one slice of an input that every row carries, named for the LeRobot writer (column,
element names, ``modality.json`` slices, combined column) and the RGB-D writer (observation state
term, part of the action, the reward). Everything else derives from the table: the assembler's inputs
and row values, the LeRobot columns, modality and stats, the RGB-D state terms, the topics the recorder
nodes subscribe and the bag converter maps. Adding a sensor is one ``InputSpec`` plus its ``Feature``
(``FeatureTable.extended``; from config: a mapping file's ``inputs:`` entry, ``recording.inputs``) and,
for a new message type, its adapter. No ROS, no numpy: plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# (sub-modality name, start, end, is_rotation): one modality.json slice of a column
Slice = tuple[str, int, int, bool]
FORMATS = ("lerobot", "rgbd")
RGBD_ROLES = ("state", "action", "reward")


@dataclass(frozen=True)
class InputSpec:
    """One assembler input: a float32 vector of ``dim`` values sampled at each row time.

    ``required``: rows wait for a first sample (none before it: the start ticks are skipped); an
    optional input is zeros until its first sample. ``topic_param``: the recorder parameter naming its
    default topic (``RecorderConfig``); ``formats``: the datasets whose recorder subscribes it;
    ``latched``: its topic is latched (transient local), so the recorders subscribe it that way and get
    the current value on joining. ``stream``: its topic is a high-rate stream in which each sample supersedes
    the last (the arm's 100 Hz feedback and commands), so the recorders subscribe it best-effort: a reliable
    reader costs the publishing process a timed event per sample, and a sample lost on the way only leaves a
    row the one before it, whose age the assembler checks (older than ``stale_s``: counted in ``values_stale``).
    ``arm``: the arm whose namespace the topic is under (several arms: ``names.arm_topic``), None for one arm.
    """

    name: str
    adapter: str  # message adapter kind (assembly.messages.ADAPTERS)
    dim: int
    required: bool = True
    topic_param: str = ""
    formats: tuple[str, ...] = FORMATS
    latched: bool = False
    stream: bool = False
    arm: str | None = None


@dataclass(frozen=True)
class Feature:
    """Row value ``key`` = ``input``'s values [start:stop].

    ``column``: its LeRobot column (None: not one); ``rgbd``: its RGB-D role (state term, part of the action, the
    reward), in table order within one ``rgbd_rank`` (lower ranks first: several arms' actions put every pose
    before the grippers).
    """

    key: str
    input: str
    start: int
    stop: int
    column: str | None
    names: tuple[str, ...]
    modality: tuple[Slice, ...] = ()
    rgbd: str | None = None
    combined: str | None = None  # the LeRobot combined column this joins, in table order
    rgbd_rank: int = 0


@dataclass(frozen=True)
class FeatureTable:
    """The stamped inputs and the row values and dataset columns cut from them."""

    inputs: tuple[InputSpec, ...]
    features: tuple[Feature, ...]
    arms: tuple[str, ...] = ()  # the arms' names (several arms), () for one arm

    def input(self, name: str) -> InputSpec:
        """The input named ``name``; ``KeyError`` listing the inputs otherwise."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(f"no input {name!r} (inputs: {[s.name for s in self.inputs]})")

    @property
    def required(self) -> tuple[str, ...]:
        """The inputs every row waits for."""
        return tuple(s.name for s in self.inputs if s.required)

    def rgbd_keys(self, role: str) -> tuple[str, ...]:
        """Row value keys with an RGB-D role, by ``rgbd_rank`` then in table order."""
        return tuple(f.key for f in sorted((f for f in self.features if f.rgbd == role), key=lambda f: f.rgbd_rank))

    def rgbd_names(self, role: str) -> tuple[str, ...]:
        """The element names of the RGB-D values of ``role`` concatenated, named as their LeRobot column's last part.

        E.g. ``left_arm_eef.x`` ... ``right_gripper.width`` for several arms' action.
        """
        by_key = {f.key: f for f in self.features}
        label = {k: (f.column.split(".", 1)[1] if f.column else k) for k, f in by_key.items()}
        return tuple(f"{label[k]}.{n}" for k in self.rgbd_keys(role) for n in by_key[k].names)

    def columns(self) -> dict[str, str]:
        """LeRobot column -> row value key, in column order."""
        return {f.column: f.key for f in self.features if f.column is not None}

    def extended(self, spec: InputSpec, *features: Feature) -> FeatureTable:
        """This table plus one input and the features cut from it (appended: existing columns keep their order)."""
        table = FeatureTable((*self.inputs, spec), (*self.features, *features), self.arms)
        table.validate()
        return table

    def validate(self) -> None:
        """Raise ``ValueError`` for duplicate names, bad dimensions or slices, or unknown formats and roles."""
        names = [s.name for s in self.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate input names in {names}")
        dims = {s.name: s.dim for s in self.inputs}
        for s in self.inputs:
            if s.dim <= 0 or not set(s.formats) <= set(FORMATS):
                raise ValueError(f"input {s.name!r}: dim must be > 0 and formats in {FORMATS}")
        keys = [f.key for f in self.features]
        cols = [f.column for f in self.features if f.column is not None]
        if len(set(keys)) != len(keys) or len(set(cols)) != len(cols):
            raise ValueError(f"duplicate feature keys or columns in {keys} / {cols}")
        for f in self.features:
            if f.input not in dims or not 0 <= f.start < f.stop <= dims[f.input]:
                raise ValueError(f"feature {f.key!r}: [{f.start}:{f.stop}] is not a slice of an input {names}")
            if len(f.names) != f.stop - f.start:
                raise ValueError(f"feature {f.key!r}: {len(f.names)} names for {f.stop - f.start} values")
            if f.rgbd is not None and f.rgbd not in RGBD_ROLES:
                raise ValueError(f"feature {f.key!r}: rgbd role must be one of {RGBD_ROLES}, got {f.rgbd!r}")


JOINTS = tuple(f"joint{i}" for i in range(1, 7))
POSE = ("x", "y", "z", "qw", "qx", "qy", "qz")
POSE_SLICES: tuple[Slice, ...] = (("eef_pos", 0, 3, False), ("eef_rot", 3, 7, True))
STATE, ACTION = "observation.state", "action"

# The spec's Piper set: joints (rad), flange pose (m + quat wxyz), gripper width (m); the commanded pose
# and gripper as the action; the RGB-D reward. Column order is the dataset's: do not reorder.
PIPER_TABLE = FeatureTable(
    inputs=(
        # 6 joints + gripper
        InputSpec("joint_states", "joint_state", 7, topic_param="joint_states_topic", stream=True),
        InputSpec("eef_pose", "pose", 7, topic_param="eef_topic", stream=True),
        InputSpec("commanded_pose", "pose", 7, topic_param="commanded_pose_topic", stream=True),
        InputSpec("commanded_gripper", "gripper", 1, topic_param="commanded_gripper_topic", stream=True),
        InputSpec("reward", "float32", 1, required=False, topic_param="reward_topic", formats=("rgbd",)),
    ),
    features=(
        Feature(
            "arm_joint",
            "joint_states",
            0,
            6,
            "observation.arm_joint",
            JOINTS,
            (("arm_joint", 0, 6, False),),
            rgbd="state",
            combined=STATE,
        ),
        Feature("arm_eef", "eef_pose", 0, 7, "observation.arm_eef", POSE, POSE_SLICES, rgbd="state", combined=STATE),
        Feature(
            "gripper",
            "joint_states",
            6,
            7,
            "observation.gripper",
            ("width",),
            (("gripper", 0, 1, False),),
            rgbd="state",
            combined=STATE,
        ),
        Feature("cmd_eef", "commanded_pose", 0, 7, "action.arm_eef", POSE, POSE_SLICES, rgbd="action", combined=ACTION),
        Feature(
            "cmd_gripper",
            "commanded_gripper",
            0,
            1,
            "action.gripper",
            ("width",),
            (("gripper", 0, 1, False),),
            rgbd="action",
            combined=ACTION,
        ),
        Feature("reward", "reward", 0, 1, None, ("reward",), rgbd="reward"),
    ),
)
PIPER_TABLE.validate()


def arm_column(arm: str | None, column: str | None) -> str | None:
    """``observation.arm_joint`` of arm ``left``: ``observation.left_arm_joint``; unchanged for one arm (None)."""
    if column is None or not arm:
        return column
    group, _, rest = column.partition(".")
    return f"{group}.{arm}_{rest}"


def arms_table(arms: tuple[str, ...]) -> FeatureTable:
    """The feature table of several arms (``names.parse_arms``), or ``PIPER_TABLE`` for one arm (``()``).

    Each arm has the Piper inputs and columns with its name in front (input ``left_joint_states`` on
    ``/left/arm/joint_states``, column ``observation.left_arm_joint``, modality slice ``left_eef_pos``, RGB-D state
    term ``left_arm_eef``); the combined columns concatenate the arms in the order given (every observation of
    the first arm, then the second's; the same for the actions). The RGB-D action is every arm's pose, then every
    arm's gripper: ``left_cmd_eef`` (7), ``right_cmd_eef`` (7), ``left_cmd_gripper``, ``right_cmd_gripper``. One
    reward input for the scene.
    """
    if not arms:
        return PIPER_TABLE
    per_arm = [s for s in PIPER_TABLE.inputs if s.name != "reward"]
    inputs = [replace(s, name=f"{a}_{s.name}", arm=a) for a in arms for s in per_arm]
    arm_inputs = {s.name for s in per_arm}

    def of(arm: str, f: Feature) -> Feature:
        return replace(
            f,
            key=f"{arm}_{f.key}",
            input=f"{arm}_{f.input}",
            column=arm_column(arm, f.column),
            modality=tuple((f"{arm}_{n}", a, b, rot) for n, a, b, rot in f.modality),
            rgbd_rank=1 if f.rgbd == "action" and f.input == "commanded_gripper" else 0,
        )

    arm_features = [f for f in PIPER_TABLE.features if f.input in arm_inputs]
    observed = [of(a, f) for a in arms for f in arm_features if f.combined != ACTION]
    acted = [of(a, f) for a in arms for f in arm_features if f.combined == ACTION]
    rest = [f for f in PIPER_TABLE.features if f.input not in arm_inputs]
    table = FeatureTable(
        (*inputs, *(s for s in PIPER_TABLE.inputs if s.name not in arm_inputs)),
        (*observed, *acted, *rest),
        tuple(arms),
    )
    table.validate()
    return table


# Opt-in entries: appended to the table only when their topic is set (the recorder's ``topic_param``, or
# the input's key in a mapping file), so datasets recorded without them keep the Piper columns exactly.
# ``actor``: who acted at each row, from the policy node's latched /policy/actor (std_msgs/String, the
# ``actor`` adapter's codes: 0 = none/teleop recording, 1 = policy, 2 = operator takeover), held from
# the last message at or before the row (0 before the first). Its column sits outside observation.* and
# action.*, where LeRobot's HIL-SERL keeps its per-frame ``complementary_info.is_intervention``: no
# policy takes it as an input; not named is_intervention because it is a code (policy = 1 is not an
# intervention): interventions are the rows where it is 2. LeRobot only (RGB-D has no role for it).
ACTOR_INPUT = InputSpec(
    "actor", "actor", 1, required=False, topic_param="actor_topic", formats=("lerobot",), latched=True
)
ACTOR_FEATURE = Feature("actor", "actor", 0, 1, "complementary_info.actor", ("actor",))
OPT_IN: tuple[tuple[InputSpec, tuple[Feature, ...]], ...] = ((ACTOR_INPUT, (ACTOR_FEATURE,)),)
