"""A bag recorded during a live session converts to the dataset the live recorders wrote in that run.

One session: the synthetic arm/camera rig publishes, the real lerobot_recorder and rgbd_recorder
processes record (same parameter file the converter reads), and a raw-mode subscriber in this process
writes every topic into a sqlite3 bag and an MCAP bag with rosbags (receive time = time.time_ns()).
Episodes: saved, discarded, saved, and (LeRobot) saved-then-deleted. Each bag must convert to the
live datasets: same episodes and row counts, equal row values, same video frame counts / frames.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path

import av
import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from support.proc import ProcGroup

rclpy = pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from piper_recorder.assembly.frame_assign import window_captures  # noqa: E402
from piper_recorder.cli.bag2dataset import main as bag2dataset  # noqa: E402

from support.recorder_rig import H, Rig, W  # noqa: E402

pytestmark = pytest.mark.timeout(150)

from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from piper_recorder.bag.synth import TYPESTORE  # noqa: E402

CAMS = ("cam_front", "cam_wrist")
# Both sides read this from the same parameter file. Generous, because a live row can only equal the
# bag's if the recorder process received every message before its row was assembled, and this box is
# shared (the converter is exact regardless: it replays the receive times the bag recorded).
LATENESS = 1.0
# Rows/frames the live recorder may still have assembled before a message reached it on a loaded box
# (it then used the previous sample); the converted dataset has the message's bag receive time instead.
MAX_LIVE_MISSES = 0.03
MAX_LIVE_FRAME_MISSES = 0.15


def assert_rows_close(conv: np.ndarray, live: np.ndarray, what: str) -> None:
    assert conv.shape == live.shape, f"{what}: {conv.shape} vs {live.shape}"
    bad = np.abs(conv - live).reshape(len(live), -1).max(axis=1) > 1e-6
    assert bad.mean() <= MAX_LIVE_MISSES, f"{what}: {int(bad.sum())} of {len(live)} rows differ: {np.flatnonzero(bad)}"


TOPICS = {
    "/arm/joint_states": JointState,
    "/arm/eef_pose": PoseStamped,
    "/arm/commanded_pose": PoseStamped,
    "/arm/commanded_gripper": JointState,
    "/arm/provenance": String,
    "/episode_events": String,
    **{f"/{c}/color/image_raw": Image for c in CAMS},
    **{f"/{c}/aligned_depth_to_color/image_raw": Image for c in CAMS},
}
MSGTYPE = {
    JointState: "sensor_msgs/msg/JointState",
    PoseStamped: "geometry_msgs/msg/PoseStamped",
    Image: "sensor_msgs/msg/Image",
    String: "std_msgs/msg/String",
}


class BagRecorder:
    """``ros2 bag record`` stand-in: raw subscriptions stamped at receive, one thread writing rosbags
    bags (sqlite3 + MCAP; sqlite objects must stay on the thread that opened them).
    """

    def __init__(self, ros_domain, paths: dict[str, Path]):
        ros_domain.apply()
        self.paths = paths
        self.q: queue.Queue = queue.Queue()
        self.opened = threading.Event()
        self.error: BaseException | None = None
        self._writer = threading.Thread(target=self._write_loop, daemon=True)
        self._writer.start()
        assert self.opened.wait(10)
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.node = Node("bag_recorder", context=self.ctx)
        self.subs = {}
        self.status_from: set[str] = set()
        for topic, typ in TOPICS.items():
            latched = topic == "/arm/provenance"
            qos = QoSProfile(
                depth=1 if latched else 100,
                reliability=ReliabilityPolicy.RELIABLE,
                durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
            )
            self.subs[topic] = self.node.create_subscription(
                typ, topic, lambda raw, t=topic: self.q.put((t, time.time_ns(), raw)), qos, raw=True
            )
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._spin = threading.Thread(target=self.executor.spin, daemon=True)
        self._spin.start()

    def wait_matched(self, recorders: tuple[str, ...], timeout: float = 30.0) -> None:
        """Wait until every recorder's /episode_events writer is matched, a status from each recorder has
        arrived here, and each has received a phase window of every camera's frames (``window_captures``).

        ``ros2 bag record`` started after a recorder can miss its first events: a VOLATILE writer only sends
        to readers it has matched, and discovery on a loaded box can take seconds. And the bag holds every
        capture from before the recorders started: an episode started within 2 s of a recorder's start has
        its camera phase estimated from fewer captures live (what the recorder saw) than in the conversion
        (the bag's full window), and may rightly pick a frame a slot apart (seen: every row one capture
        earlier live, when the first episode started 0.22 s after the recorder's first frame).
        """
        need = window_captures(30.0) + 5
        seen: dict[str, int] = {}

        def on_status(msg, rec: str) -> None:
            counts = [c.get("count", 0) for c in json.loads(msg.data).get("images_received", {}).values()]
            seen[rec] = min(counts, default=0)
            self.status_from.add(rec)

        for rec in recorders:
            self.node.create_subscription(String, f"/{rec}/status", lambda m, r=rec: on_status(m, r), 10)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if (
                self.subs["/episode_events"].get_publisher_count() >= len(recorders)
                and self.status_from >= set(recorders)
                and all(seen.get(r, 0) >= need for r in recorders)
            ):
                return
            time.sleep(0.05)
        raise AssertionError(
            f"bag recorder: /episode_events matched {self.subs['/episode_events'].get_publisher_count()}"
            f" publishers, status from {sorted(self.status_from)} of {recorders}, "
            f"frames received {seen} (need {need} each)"
        )

    def _write_loop(self) -> None:
        writers, conns = {}, {}
        try:
            for storage, path in self.paths.items():
                plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
                w = writers[storage] = Writer(path, version=9, storage_plugin=plugin)
                w.open()
                conns[storage] = {
                    t: w.add_connection(t, MSGTYPE[typ], typestore=TYPESTORE) for t, typ in TOPICS.items()
                }
            self.opened.set()
            while (item := self.q.get()) is not None:
                topic, t, raw = item
                for storage, w in writers.items():
                    w.write(conns[storage][topic], t, raw)
        except BaseException as exc:  # noqa: BLE001 - reported by close()
            self.error = exc
            self.opened.set()
        finally:
            for w in writers.values():
                w.close()

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2)
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)
        self.q.put(None)
        self._writer.join(30)
        assert self.error is None, self.error


def bag_events(bag: Path) -> list[dict]:
    from rosbags.highlevel import AnyReader

    with AnyReader([bag], default_typestore=TYPESTORE) as r:
        conns = [c for c in r.connections if c.topic == "/episode_events"]
        return [json.loads(r.deserialize(raw, c.msgtype).data) for c, _, raw in r.messages(connections=conns)]


def ok(resp, what: str) -> None:
    assert resp.success, f"{what}: {resp.message}"


def lerobot_episodes(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]


def frame_count(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


def compare_lerobot(live: Path, conv: Path) -> None:
    le, ce = lerobot_episodes(live), lerobot_episodes(conv)
    assert [e["length"] for e in ce] == [e["length"] for e in le]
    assert [e["tasks"] for e in ce] == [e["tasks"] for e in le]
    for x, y in zip(le, ce):  # same frames, unless the live recorder's own counters show it lost some
        for cam in CAMS:
            lost = y["frames_received"][cam] - x["frames_received"][cam]
            assert 0 <= y["video_frame_lengths"][cam] - x["video_frame_lengths"][cam] <= max(0, lost), (cam, x, y)
    info = json.loads((live / "meta" / "info.json").read_text())
    cols = [
        "timestamp",
        "observation.arm_joint",
        "observation.arm_eef",
        "observation.gripper",
        "action.arm_eef",
        "action.gripper",
        "observation.state",
        "action",
        "frame_index",
        "index",
    ]
    for e in le:
        i = e["episode_index"]
        rel = info["data_path"].format(episode_chunk=0, episode_index=i)
        a, b = pq.read_table(live / rel).to_pydict(), pq.read_table(conv / rel).to_pydict()
        for col in cols:
            assert_rows_close(np.asarray(b[col], np.float64), np.asarray(a[col], np.float64), f"episode {i} {col}")
        for cam in CAMS:
            rel_v = info["video_path"].format(episode_chunk=0, episode_index=i, video_key=f"observation.images.{cam}")
            assert frame_count(live / rel_v) == e["video_frame_lengths"][cam]
            assert frame_count(conv / rel_v) == ce[i]["video_frame_lengths"][cam]
    sessions = [json.loads(x) for x in (conv / "meta" / "collection_sessions.jsonl").read_text().splitlines()]
    assert sessions[-1]["source"]["fingerprints"][0] and sessions[-1]["arm"]["firmware"] == "S-V1.6-3"


def compare_rgbd(live: Path, conv: Path) -> None:
    with h5py.File(live, "r") as a, h5py.File(conv, "r") as b:
        assert a.attrs["total_episodes"] == b.attrs["total_episodes"] >= 2
        for k in ("total_observations", "total_transitions"):
            assert a.attrs[k] == b.attrs[k], k
        for name in ("transitions/terminals", "transitions/timeouts", "index/episode_lengths", "index/obs_offsets"):
            assert np.array_equal(a[name][()], b[name][()]), name
        for name in (
            "transitions/actions",
            "transitions/rewards",
            "observations/state/arm_joint",
            "observations/state/arm_eef",
            "observations/state/gripper",
        ):
            assert_rows_close(b[name][()].astype(np.float64), a[name][()].astype(np.float64), name)
        # the same capture picked for every observation (byte-identical JPEG / JPEG 2000 payloads), except
        # where the live recorder repeated its previous frame: the next capture reached it late or not at
        # all (image QoS keeps 10 per topic, so a stalled process on a loaded box loses frames)
        for ds in ("observations/rgb_jpeg", "observations/depth_jp2"):
            la, lb = [bytes(x) for x in a[ds]], [bytes(x) for x in b[ds]]
            differ = [i for i, (x, y) in enumerate(zip(la, lb)) if x != y]
            assert len(differ) <= MAX_LIVE_FRAME_MISSES * len(la), f"{ds}: {len(differ)} of {len(la)} differ"
            assert all(i > 0 and la[i] == la[i - 1] for i in differ), f"{ds}: {differ} are not live repeats"
        for name in a["episodes"]:
            src = json.loads(b["episodes"][name].attrs["source"])
            assert src["episodes_from"] == "events" and len(src["fingerprint"]) == 64


def test_live_session_bag_converts_to_the_live_datasets(ros_domain, tmp_path, capsys):
    params = {
        "lerobot_recorder": {
            "ros__parameters": {
                "root": str(tmp_path / "live_lerobot"),
                "task": "pick the cube",
                "cameras": list(CAMS),
                "camera_width": W,
                "camera_height": H,
                "provenance_wait_s": 3.0,
                "lateness_s": LATENESS,
            }
        },
        "rgbd_recorder": {
            "ros__parameters": {
                "path": str(tmp_path / "live_rgbd.hdf5"),
                "task": "pick the cube",
                "camera": "cam_front",
                "camera_width": W,
                "camera_height": H,
                "provenance_wait_s": 3.0,
                "lateness_s": LATENESS,
            }
        },
    }
    cfg = tmp_path / "recorders.yaml"
    cfg.write_text(yaml.safe_dump(params))
    bags = {"sqlite3": tmp_path / "bag_sqlite3", "mcap": tmp_path / "bag_mcap"}
    bagrec = BagRecorder(ros_domain, bags)
    rig = Rig(ros_domain, cams=CAMS, depth=True)
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            procs = [
                g.start(exe, "--ros-args", "-r", f"__node:={name}", "--params-file", str(cfg), name=name)
                for exe, name in (
                    ("piper-lerobot-recorder", "lerobot_recorder"),
                    ("piper-rgbd-recorder", "rgbd_recorder"),
                )
            ]
            both = ("lerobot_recorder", "rgbd_recorder")
            bagrec.wait_matched(both)
            for seconds, end in ((1.4, "stop_episode"), (0.5, "discard_episode"), (1.1, "stop_episode")):
                for rec in both:
                    ok(rig.call(rec, "start_episode"), f"{rec} start")
                time.sleep(seconds)
                for rec in both:
                    ok(rig.call(rec, end), f"{rec} {end}")
                time.sleep(0.3)
            ok(rig.call("lerobot_recorder", "start_episode"), "start 4")
            time.sleep(0.6)
            ok(rig.call("lerobot_recorder", "stop_episode"), "stop 4")
            ok(rig.call("lerobot_recorder", "delete_last_episode"), "delete 4")
            events = rig.wait_events(12)
            assert sum(e["event"] == "saved" for e in events) == 5, events
            time.sleep(0.5)
            for p in procs:
                assert p.stop(timeout=20) == 0, p.output()[-3000:]
    finally:
        bagrec.close()
        seen = list(rig.events)  # every event, now that the recorders have exited
        rig.close()
    assert len(lerobot_episodes(tmp_path / "live_lerobot")) == 2
    for storage, bag in bags.items():  # a bag that lost an event cannot convert to the live dataset
        key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731 - two subscribers may interleave recorders
        assert sorted(map(key, bag_events(bag))) == sorted(map(key, seen)), (
            f"{storage} bag: /episode_events differ from what the rig received"
        )

    for storage, bag in bags.items():
        out = tmp_path / f"conv_{storage}"
        assert (
            bag2dataset([str(bag), "--format", "lerobot", "--out", str(out), "--config", str(cfg), "--no-progress"])
            == 0
        )
        compare_lerobot(tmp_path / "live_lerobot", out)
        out_h5 = tmp_path / f"conv_{storage}.hdf5"
        assert (
            bag2dataset([str(bag), "--format", "rgbd", "--out", str(out_h5), "--config", str(cfg), "--no-progress"])
            == 0
        )
        compare_rgbd(tmp_path / "live_rgbd.hdf5", out_h5)
    err = capsys.readouterr().err
    assert "differs from the live" not in err and "the live recorder saved" not in err, err
