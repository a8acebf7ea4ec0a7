"""One feature table and one input router: an input added through config alone
reaches both datasets, live and from a bag; the live node reads a mapping as the converter does.

The extra input is a 6-D wrench from a geometry_msgs/WrenchStamped topic, declared only in a mapping
file (``inputs:``): a recorder node takes it with ``-p mapping:=FILE``, the converter with
``--mapping FILE``. Rows are checked against what was published: row k holds the newest sample
stamped at or before its grid time ``start_ns + floor(k * 1e9 / fps)``.
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from piper_recorder.bag.synth import SynthScenario, T, header, image, joint_state, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.features.table import PIPER_TABLE
from piper_recorder.lerobot.format.features import piper_features
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.recording.config import (
    LeRobotRecorderConfig,
    RgbdRecorderConfig,
    lerobot_writer_config,
    rgbd_writer_config,
)
from piper_recorder.recording.inputs import topic_map
from piper_recorder.recording.router import InputRouter
from rgbd_writer.validate import validate_file

pytestmark = pytest.mark.timeout(120)
W, H = 64, 48
WRENCH_TOPIC = "/ft_sensor/wrench"
WRENCH_TYPE = "geometry_msgs/msg/WrenchStamped"
WRENCH_NAMES = ["fx", "fy", "fz", "tx", "ty", "tz"]
FPS = 30


def wrench_values(n: int) -> list[float]:
    """Sample n's six values: distinct per sample and per element, exact in float32."""
    return [n * 0.25, -n * 0.5, 1.0 + n, n * 0.125, -2.0 - n, n * 0.0625]


def write_mapping(path: Path, **extra: object) -> Path:
    doc = {"inputs": {"wrench": {"topic": WRENCH_TOPIC, "adapter": "wrench"}}, **extra}
    path.write_text(yaml.safe_dump(doc))
    return path


def expected_rows(start_ns: int, n_rows: int, stamps: list[int]) -> np.ndarray:
    """Per row, the values of the newest sample stamped at or before the row's grid time."""
    st = np.asarray(stamps, dtype=np.int64)
    out = []
    for k in range(n_rows):
        i = int(np.searchsorted(st, start_ns + k * 1_000_000_000 // FPS, side="right")) - 1
        assert i >= 0, f"row {k} precedes every sample"
        out.append(wrench_values(i))
    return np.asarray(out, dtype=np.float32)


# ---- the table alone -----------------------------------------------------------------------------
def test_piper_table_gives_the_dataset_columns_of_earlier_releases():
    """Names, order, modality and combined columns as the spec (and every dataset so far) has them."""
    cols = [(f.key, f.names, f.slices(), f.combined) for f in piper_features()]
    assert cols == [
        (
            "observation.arm_joint",
            tuple(f"joint{i}" for i in range(1, 7)),
            (("arm_joint", 0, 6, False),),
            "observation.state",
        ),
        (
            "observation.arm_eef",
            ("x", "y", "z", "qw", "qx", "qy", "qz"),
            (("eef_pos", 0, 3, False), ("eef_rot", 3, 7, True)),
            "observation.state",
        ),
        ("observation.gripper", ("width",), (("gripper", 0, 1, False),), "observation.state"),
        (
            "action.arm_eef",
            ("x", "y", "z", "qw", "qx", "qy", "qz"),
            (("eef_pos", 0, 3, False), ("eef_rot", 3, 7, True)),
            "action",
        ),
        ("action.gripper", ("width",), (("gripper", 0, 1, False),), "action"),
    ]
    assert PIPER_TABLE.rgbd_keys("state") == ("arm_joint", "arm_eef", "gripper")
    assert PIPER_TABLE.rgbd_keys("action") == ("cmd_eef", "cmd_gripper")


def test_one_mapping_entry_adds_the_input_to_every_layer(tmp_path):
    m = write_mapping(tmp_path / "m.yaml")
    tm = topic_map("lerobot", LeRobotRecorderConfig(mapping=str(m)))
    assert tm.topic("wrench") == WRENCH_TOPIC and tm.required(depth=False)[WRENCH_TOPIC] == WRENCH_TYPE
    wcfg = lerobot_writer_config(LeRobotRecorderConfig(), tm.cameras, table=tm.table)
    assert [f.key for f in wcfg.features] == [f.key for f in piper_features()] + ["observation.wrench"]
    assert wcfg.features[-1].names == tuple(WRENCH_NAMES) and wcfg.features[-1].combined is None
    asm = LeRobotRecorderConfig().assembly(None, tm.table)
    assert "wrench" in asm.table.required
    r = topic_map("rgbd", RgbdRecorderConfig(), m)
    assert rgbd_writer_config(RgbdRecorderConfig(), r.cameras, table=r.table).env_args["state_terms"] == [
        "arm_joint",
        "arm_eef",
        "gripper",
        "wrench",
    ]
    assert tm.to_dict()["inputs"] == {"wrench": {"topic": WRENCH_TOPIC, "adapter": "wrench"}}
    for bad, why in (
        ({"topic": WRENCH_TOPIC, "adapter": "nope"}, "unknown adapter"),
        ({"topic": WRENCH_TOPIC}, "needs at least"),
        ({"topic": WRENCH_TOPIC, "adapter": "wrench", "column": "timestamp"}, "reserved"),
        ({"topic": WRENCH_TOPIC, "adapter": "wrench", "column": "observation.gripper"}, "duplicate"),
        ({"topic": WRENCH_TOPIC, "adapter": "wrench", "column": "observation.ft.gripper"}, "is taken"),
    ):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"inputs": {"wrench": bad}}))
        with pytest.raises(ValueError, match=why):
            topic_map("lerobot", LeRobotRecorderConfig(), tmp_path / "bad.yaml")


class _Inputs:
    """Records what the router hands the controller."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def add_input(self, name, stamp_ns, values):
        self.calls.append(("input", name, stamp_ns, np.asarray(values).tolist()))

    def add_frame(self, camera, stamp_ns, rgb, depth=None):
        self.calls.append(("frame", camera, stamp_ns))

    def add_color(self, camera, stamp_ns, rgb):
        self.calls.append(("color", camera, stamp_ns))

    def add_depth(self, camera, stamp_ns, depth):
        self.calls.append(("depth", camera, stamp_ns))

    def add_raw_quest(self, stamp_ns, line):
        self.calls.append(("raw", stamp_ns, line))


def test_router_applies_the_mapping_and_checks_images(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text(
        yaml.safe_dump(
            {
                "joint_states": {"topic": "/js", "names": ["b", "c", "d", "e", "f", "g", "a"], "gripper_scale": 0.5},
                "commanded_gripper": {"topic": "/cg", "name": "j7", "scale": 0.001},
                "reward": "/r",
            }
        )
    )
    warned: list[str] = []
    sink = _Inputs()
    cfg = RgbdRecorderConfig(camera_width=W, camera_height=H)
    router = InputRouter(topic_map("rgbd", cfg, m), sink, depth=True, warn=warned.append)
    assert {r.topic: r.msg_type for r in router.routes}["/r"] == "std_msgs/msg/Float32"
    router.route("/js", joint_state(5, list("abcdefg"), np.arange(7.0)), 99)
    router.route("/js", joint_state(6, ["a"], np.zeros(1)), 99)  # names missing: ignored
    router.route("/cg", joint_state(7, ["j1", "j7"], np.array([1.0, 40.0])), 99)
    router.route("/r", T["std_msgs/msg/Float32"](data=2.0), 123)  # no header: the receive time
    router.route("/cam_front/color/image_raw", image(8, np.zeros((H, W, 3), np.uint8), "rgb8"), 0)
    for _ in range(2):
        router.route("/cam_front/aligned_depth_to_color/image_raw", image(9, np.zeros((4, 4), np.uint16), "16UC1"), 0)
    assert sink.calls == [
        ("input", "joint_states", 5, [1, 2, 3, 4, 5, 6, 0]),
        ("input", "commanded_gripper", 7, [pytest.approx(0.04)]),
        ("input", "reward", 123, [2.0]),
        ("color", "cam_front", 8),
    ]
    assert router.rejected == {"cam_front": 2} and len(warned) == 1 and "configured 48x64" in warned[0]


def test_receivers_read_the_clock_only_for_unstamped_topics_and_route_alike(tmp_path):
    """The nodes' callbacks (``InputRouter.receiver``) give the sink what ``route`` gives it, reading the
    receive time (the ROS clock: a few us a call) only on topics whose handlers use it: the unstamped
    /r (Float32) and the headset lines, never for the stamped arm inputs and images.
    """
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"joint_states": "/js", "reward": "/r"}))
    msgs = [
        ("/js", joint_state(5, [f"joint{i}" for i in range(1, 7)] + ["gripper"], np.arange(7.0))),
        ("/r", T["std_msgs/msg/Float32"](data=2.0)),
        ("/cam_front/color/image_raw", image(8, np.zeros((H, W, 3), np.uint8), "rgb8")),
        ("/cam_front/aligned_depth_to_color/image_raw", image(8, np.zeros((H, W), np.uint16), "16UC1")),
    ]
    via_route, via_receiver = _Inputs(), _Inputs()
    cfg = RgbdRecorderConfig(camera_width=W, camera_height=H)
    routed = InputRouter(topic_map("rgbd", cfg, m), via_route, depth=True)
    received = InputRouter(topic_map("rgbd", cfg, m), via_receiver, depth=True)
    reads: list[str] = []
    for topic, msg in msgs:
        routed.route(topic, msg, 123)
        received.receiver(topic, lambda topic=topic: reads.append(topic) or 123)(msg)
    assert via_receiver.calls == via_route.calls and ("input", "reward", 123, [2.0]) in via_route.calls
    assert reads == ["/r"]
    assert [t for t, _ in msgs if received.uses_receive_time(t)] == ["/r"]
    quest = InputRouter(topic_map("lerobot", LeRobotRecorderConfig(raw_quest_topic="/q")), via_receiver, depth=False)
    assert quest.uses_receive_time("/q") and not quest.uses_receive_time("/arm/joint_states")
    quest.receiver("/q", lambda: 77)(T["std_msgs/msg/String"](data="line"))
    assert via_receiver.calls[-1] == ("raw", 77, "line")


def test_nodes_and_converter_share_one_router():
    pytest.importorskip("rclpy")
    from piper_recorder.bag import convert
    from piper_recorder.nodes import recorder_base

    assert recorder_base.InputRouter is convert.InputRouter is InputRouter
    assert not hasattr(convert, "_Feeder")


# ---- from a bag ------------------------------------------------------------------------------------
def wrench_messages(t0_ns: int, duration_s: float, hz: float = 100.0):
    """(topic, type, receive_ns, msg) of a 100 Hz wrench sensor, 2 ms transport delay; and the stamps."""
    stamps, out = [], []
    for n in range(int(duration_s * hz)):
        stamp = t0_ns + int(n * 1e9 / hz) + 1_000_000
        v = wrench_values(n)
        wrench = T["geometry_msgs/msg/Wrench"](
            force=T["geometry_msgs/msg/Vector3"](x=v[0], y=v[1], z=v[2]),
            torque=T["geometry_msgs/msg/Vector3"](x=v[3], y=v[4], z=v[5]),
        )
        out.append(
            (
                WRENCH_TOPIC,
                WRENCH_TYPE,
                stamp + 2_000_000,
                T[WRENCH_TYPE](header=header(stamp, "ft_sensor"), wrench=wrench),
            )
        )
        stamps.append(stamp)
    return out, stamps


def test_extra_input_from_a_bag_through_config_alone(tmp_path):
    scen = SynthScenario(duration_s=3.0, episodes=[(0.5, 2.5)], cameras=("cam_front",))
    extra, stamps = wrench_messages(scen.t0_ns, scen.duration_s)
    bag = write_bag(tmp_path / "bag", heapq.merge(scenario_messages(scen), extra, key=lambda m: m[2]))
    cfg = tmp_path / "recorders.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {"cameras": ["cam_front"], "camera_width": W, "camera_height": H}
                },
                "rgbd_recorder": {"ros__parameters": {"camera": "cam_front", "camera_width": W, "camera_height": H}},
            }
        )
    )
    mapping = write_mapping(tmp_path / "wrench.yaml")
    root = tmp_path / "lerobot"
    assert (
        bag2dataset(
            [
                str(bag),
                "--format",
                "lerobot",
                "--out",
                str(root),
                "--config",
                str(cfg),
                "--mapping",
                str(mapping),
                "--no-progress",
            ]
        )
        == 0
    )
    (ep,) = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
    t = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
    assert t.column_names[:6] == [f.key for f in piper_features()] + ["observation.wrench"]
    got = np.stack(t.column("observation.wrench").to_numpy(zero_copy_only=False))
    assert ep["skipped_start_ticks"] == 0 and got.dtype == np.float32
    start = ep["source"]["start_ns"]
    assert np.array_equal(got, expected_rows(start, t.num_rows, stamps))
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"]["observation.wrench"] == {"dtype": "float32", "shape": [6], "names": WRENCH_NAMES}
    assert info["features"]["observation.state"]["shape"] == [14]  # extras join no combined column
    modality = json.loads((root / "meta/modality.json").read_text())
    assert modality["state"]["wrench"]["original_key"] == "observation.wrench"
    stats = json.loads((root / "meta/stats.json").read_text())["observation.wrench"]
    assert np.allclose(stats["min"], got.min(axis=0)) and np.allclose(stats["max"], got.max(axis=0))
    assert validate_root(root) == []
    # the RGB-D file: an observation state term, row k's values in observation k
    h5 = tmp_path / "rgbd.hdf5"
    assert (
        bag2dataset(
            [
                str(bag),
                "--format",
                "rgbd",
                "--out",
                str(h5),
                "--config",
                str(cfg),
                "--mapping",
                str(mapping),
                "--no-progress",
            ]
        )
        == 0
    )
    assert validate_file(h5, full=True) == []
    with h5py.File(h5, "r") as f:
        obs = f["observations/state/wrench"][()]
        joint = f["observations/state/arm_joint"][()]
    assert obs.shape == (t.num_rows, 6) and joint.shape == (t.num_rows, 6)
    assert np.array_equal(obs, expected_rows(start, t.num_rows, stamps))


# ---- live ------------------------------------------------------------------------------------------
def test_live_nodes_take_the_extra_input_and_the_mappings_joint_names(ros_domain, tmp_path):
    """Real recorder processes given only a mapping file: the LeRobot wrench column and the RGB-D wrench
    state term hold the published values on the grid, and the joint names / gripper scales of the
    mapping apply as in the converter.
    """
    from geometry_msgs.msg import WrenchStamped
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from piper_recorder.nodes.plumbing.stamps import ns_to_stamp

    from support.proc import ProcGroup
    from support.recorder_rig import Rig
    from support.waiting import wait_for

    reversed_names = [f"joint{i}" for i in range(6, 0, -1)] + ["gripper"]
    mapping = write_mapping(
        tmp_path / "map.yaml",
        joint_states={"topic": "/arm/joint_states", "names": reversed_names, "gripper_scale": 2.0},
        commanded_gripper={"topic": "/arm/commanded_gripper", "name": "gripper", "scale": 0.5},
    )
    root, h5 = tmp_path / "ds", tmp_path / "rgbd.hdf5"
    rig = Rig(ros_domain, depth=True)
    pub = rig.node.create_publisher(
        WrenchStamped, WRENCH_TOPIC, QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    )
    stamps: list[int] = []
    stop = threading.Event()

    def publish() -> None:
        while not stop.is_set():
            now = time.time_ns()
            msg = WrenchStamped()
            msg.header.stamp = ns_to_stamp(now)
            v = wrench_values(len(stamps))
            f, tq = msg.wrench.force, msg.wrench.torque
            f.x, f.y, f.z, tq.x, tq.y, tq.z = v
            stamps.append(now)
            pub.publish(msg)
            stop.wait(0.01)

    th = threading.Thread(target=publish, daemon=True)
    th.start()
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            common = [
                "-p",
                "task:=wrench",
                "-p",
                f"camera_width:={W}",
                "-p",
                f"camera_height:={H}",
                "-p",
                "provenance_wait_s:=3.0",
                "-p",
                "lateness_s:=3.0",
                "-p",
                f"mapping:={mapping}",
            ]
            procs = [
                g.start("piper-lerobot-recorder", "--ros-args", "-p", f"root:={root}", *common),
                g.start("piper-rgbd-recorder", "--ros-args", "-p", f"path:={h5}", *common),
            ]
            recorders = ("lerobot_recorder", "rgbd_recorder")
            for rec in recorders:
                resp = rig.call(rec, "start_episode")
                assert resp.success, resp.message
            # the recorders' subscriptions as the graph sees them (plumbing.qos): the arm's streams best-effort,
            # the mapping's own input reliable
            readers = {f"{rec}_inputs" for rec in recorders}
            expected = {
                "/arm/joint_states": ReliabilityPolicy.BEST_EFFORT,
                "/arm/commanded_gripper": ReliabilityPolicy.BEST_EFFORT,
                WRENCH_TOPIC: ReliabilityPolicy.RELIABLE,
            }
            wait_for(
                lambda: all(
                    {i.node_name for i in rig.node.get_subscriptions_info_by_topic(t)} >= readers for t in expected
                ),
                timeout=10,
                what="the recorders' subscriptions in the graph",
            )
            for topic, reliability in expected.items():
                seen = {
                    i.node_name: i.qos_profile.reliability
                    for i in rig.node.get_subscriptions_info_by_topic(topic)
                    if i.node_name in readers
                }
                assert seen == dict.fromkeys(readers, reliability), (topic, seen)
            time.sleep(1.5)
            for rec in recorders:
                resp = rig.call(rec, "stop_episode")
                assert resp.success, resp.message
            saved = {e["recorder"]: e for e in rig.wait_events(4) if e["event"] == "saved"}
            # lateness 3 s: on a loaded shared machine every message still reaches its row, so rows are exact
            assert [p.stop() for p in procs] == [0, 0]
    finally:
        stop.set()
        th.join(2)
        rig.close()
    (ep,) = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
    t = pq.read_table(root / "data/chunk-000/episode_000000.parquet")
    live = saved["lerobot_recorder"]
    assert t.num_rows == live["rows"] == ep["length"] >= 40
    got = np.stack(t.column("observation.wrench").to_numpy(zero_copy_only=False))
    assert ep["messages_late"].get("wrench", 0) == 0, ep["messages_late"]
    assert np.array_equal(got, expected_rows(live["start_ns"], t.num_rows, stamps))
    rgbd = saved["rgbd_recorder"]
    assert validate_file(h5, full=True) == []
    with h5py.File(h5, "r") as f:
        obs = f["observations/state/wrench"][()]
        rgbd_joints = f["observations/state/arm_joint"][()]
    assert len(obs) == rgbd["rows"] >= 40
    assert np.array_equal(obs, expected_rows(rgbd["start_ns"], rgbd["rows"], stamps))
    assert np.allclose(rgbd_joints[:, 0] - rgbd_joints[:, 5], 5.0, atol=1e-4)
    # the rig publishes joint k at v + k - 1 and the gripper at 0.05 m, commands 0.03 m
    joints = np.stack(t.column("observation.arm_joint").to_numpy(zero_copy_only=False))
    assert np.allclose(joints[:, 0] - joints[:, 5], 5.0, atol=1e-4)  # joint6 first: the mapping's order
    assert np.allclose(np.stack(t.column("observation.gripper").to_numpy(zero_copy_only=False)), 0.1)
    assert np.allclose(np.stack(t.column("action.gripper").to_numpy(zero_copy_only=False)), 0.015)
    assert validate_root(root) == []
