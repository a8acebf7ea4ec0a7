"""Everything the dashboard shows, aggregated from what the node hears, as one JSON view model.

The node calls the ``on_*`` methods from its callbacks with the arrival time on the monotonic clock;
the HTTP server calls ``view(now)``. One lock guards the state, so both may run on any thread. No ROS
here: the tests feed it plain dicts.

Two arms (``arms``, as the graph derives it): each arm's feedback and commands are watched under its namespace
(``rate_topics``), the expected ``piper_arm`` is each arm's (``left/piper_arm``), and the view adds ``arms``: per
arm its joints, feedback age and rate, commanded pose rate and age, and its clutch from teleop's status. One arm's
view has exactly the keys it always had.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from piper_recorder.dashboard.rates import RateMeter
from piper_recorder.names import (
    COLOR_TOPIC_PATTERN,
    COMMANDED_POSE,
    JOINT_STATES,
    PIPER_ARM_NODE,
    QUEST_HANDS,
    QUEST_POSE_PATTERN,
    arm_topic,
    camera_info_pattern,
    camera_topic,
    check_topic_pattern,
    node_key,
    parse_arms,
    quest_topic,
)
from piper_recorder.piper.kinematics import SDK_JOINT_MAX, SDK_JOINT_MIN
from piper_recorder.process.delivery import link_health
from piper_recorder.teleop.limits import LIMIT_NAMES
from piper_recorder.viewer.counters import INFO, PROBLEMS, total

JsonDict = dict[str, Any]
DEFAULT_NODES = ["quest_bridge", "teleop", PIPER_ARM_NODE, "lerobot_recorder", "rgbd_recorder"]
DEFAULT_RECORDERS = ["lerobot_recorder", "rgbd_recorder"]
NEAR_LIMIT = 0.05  # a joint within 5 % of its range from a limit is flagged
HEADSET_DIAG = "quest_bridge: headset"
SHOWN_INFO = ("rows", "frames_received", "frames_written", "frame_offset_max_ms")
TELEOP_COUNTERS = (
    "published",
    "refused_engages",
    "forced_releases",
    "unsafe_targets",
    "rejected_inputs",
    "out_of_order_inputs",
)
IMAGE_CONSUMERS = ("quest_video", "policy")  # besides the recorders: their ~/status carries images_received
JOINTS, POSE = "joints", "pose"  # what a rate topic carries (the node subscribes a JointState, a PoseStamped)


def rate_topics(arms: tuple[str, ...] = ()) -> list[tuple[str, str, bool]]:
    """(topic, what it carries, required) of the topics whose rate shows: one per link of the chain.

    Headset -> bridge (a hand's pose), each arm's feedback, each arm's commands (only sent while something
    drives the arm: their silence is no fault). ``/arm/eef_pose`` would only repeat joint_states' 200 Hz at the
    same cost. Two arms: each arm's topics under its namespace and each hand that drives an arm.
    """
    each: tuple[str | None, ...] = arms or (None,)
    hands = [h for h in QUEST_HANDS if h in arms] or ["right"]
    return [
        *((arm_topic(a, JOINT_STATES), JOINTS, True) for a in each),
        *((quest_topic(QUEST_POSE_PATTERN, h), POSE, True) for h in hands),
        *((arm_topic(a, COMMANDED_POSE), POSE, False) for a in each),
    ]


@dataclass
class DashboardConfig:
    """The ``dashboard`` node's parameters (also the plain-Python server's settings)."""

    host: str = "127.0.0.1"  # anything but loopback needs ``token``
    port: int = 8740  # 0: any free port (logged)
    token: str = ""  # required in every request when set (``?token=``, or Bearer header)
    nodes: list[str] = field(default_factory=lambda: list(DEFAULT_NODES))  # with arms: piper_arm is each arm's
    arms: list[str] = field(default_factory=list)  # [] one arm; [left, right]: each arm shown under its name
    cameras: list[str] = field(default_factory=list)  # empty: every camera of image_topic_pattern in the graph
    image_topic_pattern: str = COLOR_TOPIC_PATTERN  # the recorders' parameter: each camera's colour topic
    recorders: list[str] = field(default_factory=lambda: list(DEFAULT_RECORDERS))
    roots: list[str] = field(default_factory=list)  # LeRobot roots offered for the re-alignment view
    thumb_width: int = 320
    thumb_hz: float = 2.0  # thumbnails encoded at most this often per camera
    jpeg_quality: int = 70
    watch_timeout_s: float = 5.0  # images are subscribed only while a page fetched one this recently
    joint_min: list[float] = field(default_factory=lambda: [float(v) for v in SDK_JOINT_MIN])
    joint_max: list[float] = field(default_factory=lambda: [float(v) for v in SDK_JOINT_MAX])
    gripper_max: float = 0.07  # m (teleop's gripper_max_width)
    stale_s: float = 3.0  # a status older than this is shown as stale
    silent_s: float = 1.5  # a required topic silent this long (or 2 periods) degrades the graph
    rate_window_s: float = 2.0
    # Host header names accepted besides loopback names, the bound address and the address a client
    # connected to (a page reached through a DNS name, e.g. "robot.local"); any other Host gets 421, so
    # a page on another site cannot read the dashboard through DNS rebinding.
    allowed_hosts: list[str] = field(default_factory=list)
    request_timeout_s: float = 5.0  # a client silent this long mid-request (or idle between requests) is dropped
    max_connections: int = 32  # connections served at once (one thread each); beyond: 503 at once

    def validate(self) -> None:
        """ValueError naming the first parameter out of range (a non-loopback host needs a token)."""
        check_topic_pattern("image_topic_pattern", self.image_topic_pattern)
        parse_arms(self.arms)
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if not is_loopback(self.host) and not self.token:
            raise ValueError(
                f"host {self.host!r} is not a loopback address: set a token (parameter token) "
                "so that only those given it can read the dashboard"
            )
        if self.thumb_width < 16 or not 1 <= self.jpeg_quality <= 95:
            raise ValueError("thumb_width must be >= 16 and jpeg_quality 1..95")
        if not 1 <= self.max_connections <= 1024:
            raise ValueError(f"max_connections must be 1..1024, got {self.max_connections}")
        for name in (
            "thumb_hz",
            "watch_timeout_s",
            "stale_s",
            "silent_s",
            "rate_window_s",
            "gripper_max",
            "request_timeout_s",
        ):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        if len(self.joint_min) != len(self.joint_max) or any(a >= b for a, b in zip(self.joint_min, self.joint_max)):
            raise ValueError("joint_min and joint_max need the same length and min < max")

    def arm_names(self) -> tuple[str, ...]:
        """The arms' names (``names.parse_arms``): () for one arm."""
        return parse_arms(self.arms)

    def expected_nodes(self) -> list[str]:
        """``nodes``, ``piper_arm`` standing for each arm's (``left/piper_arm``) with several arms."""
        arms = self.arm_names()
        out: list[str] = []
        for n in self.nodes:
            out += [node_key(n, a) for a in arms] if arms and n == PIPER_ARM_NODE else [n]
        return out


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (another host name may resolve anywhere)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def _float(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


# ---- validation where a status enters ------------------------------------------------------------
# Statuses are JSON from any node in the graph: a field of the wrong type (a string for a count, a list
# for a map, NaN) must not reach the view, where it would break the JSON (NaN), the arithmetic or the
# page. Each status is rebuilt here from the fields the dashboard shows, each of its expected type;
# a field that is not is dropped (shown as unknown) and named in ``invalid_fields``.
MAX_TEXT = 400  # characters of a text field shown
MAX_ITEMS = 64  # entries of a list or map kept


class _Fields:
    """Reads typed fields out of one untrusted JSON object, remembering the ones that were malformed."""

    def __init__(self, data: Any):
        self.data: JsonDict = data if isinstance(data, dict) else {}
        self.invalid: list[str] = [] if isinstance(data, dict) else ["(not an object)"]

    def _get(self, key: str, conv: Any) -> Any:
        if key not in self.data or self.data[key] is None:
            return None
        value = conv(self.data[key])
        if value is None:
            self.invalid.append(key)
        return value

    def text(self, key: str) -> str | None:
        return self._get(key, _text)

    def number(self, key: str) -> float | None:
        return self._get(key, _number)

    def count(self, key: str) -> int | None:
        return self._get(key, _count)

    def flag(self, key: str) -> bool | None:
        return self._get(key, lambda v: v if isinstance(v, bool) else None)

    def texts(self, key: str) -> list[str] | None:
        return self._get(key, _texts)

    def counts(self, key: str) -> dict[str, int] | None:
        return self._get(key, _counts)

    def counters(self, key: str) -> JsonDict | None:
        return self._get(key, _counters)

    def rates(self, key: str, keys: tuple[str, ...]) -> dict[str, JsonDict] | None:
        return self._get(key, lambda v: _rates(v, keys))


def _text(v: Any) -> str | None:
    return v[:MAX_TEXT] if isinstance(v, str) else None


def _number(v: Any) -> float | None:
    """A finite JSON number (not a bool, not a numeric string)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)  # JSON integers are unbounded: 10**400 does not fit a float
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _count(v: Any) -> int | None:
    """A non-negative whole number (3 or 3.0)."""
    f = _number(v)
    return int(f) if f is not None and f >= 0 and f == int(f) else None


def _texts(v: Any) -> list[str] | None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return None
    return [x[:MAX_TEXT] for x in v[:MAX_ITEMS]]


def _counts(v: Any) -> dict[str, int] | None:
    if not isinstance(v, dict) or len(v) > MAX_ITEMS:
        return None
    out = {str(k)[:MAX_TEXT]: _count(x) for k, x in v.items()}
    return None if any(x is None for x in out.values()) else {k: x for k, x in out.items() if x is not None}


def _counter_value(v: Any, depth: int = 0) -> Any:
    """A counter: a number, a short text (``timestamp_mode``) or a map of those (per camera, per topic)."""
    if isinstance(v, str):
        return v[:MAX_TEXT]
    if isinstance(v, dict) and depth < 2 and len(v) <= MAX_ITEMS:
        out = {str(k)[:MAX_TEXT]: _counter_value(x, depth + 1) for k, x in v.items()}
        return None if any(x is None for x in out.values()) else out
    return _number(v)


def _counters(v: Any) -> JsonDict | None:
    if not isinstance(v, dict) or len(v) > 4 * MAX_ITEMS:
        return None
    out = {str(k)[:MAX_TEXT]: _counter_value(x) for k, x in v.items()}
    return {k: x for k, x in out.items() if x is not None}  # a malformed counter alone is dropped


def clean_recorder_status(status: Any) -> JsonDict:
    """The recorder status fields the dashboard shows, each of its type (see ``_Fields``)."""
    f = _Fields(status)
    saved = f.data.get("saved_this_session")
    n_saved = len(saved) if isinstance(saved, list) else _count(saved)
    if saved is not None and n_saved is None:
        f.invalid.append("saved_this_session")
    out: JsonDict = {
        "state": f.text("state"),
        "episode_index": f.count("episode_index"),
        "task": f.text("task"),
        "elapsed_s": f.number("elapsed_s"),
        "rows": f.count("rows"),
        "saved_this_session": n_saved or 0,
        "writer_backlog": f.count("writer_backlog"),
        "message": f.text("message"),
        "waiting_for": f.texts("waiting_for"),
        "tick_delay_ms": f.counters("tick_delay_ms"),
        "counters": f.counters("counters"),
        "writer_lag_s": f.number("writer_lag_s"),
        "falling_behind": f.flag("falling_behind"),
        "frames_dropped_writer_behind": f.counts("frames_dropped_writer_behind"),
        **clean_delivery(f),
    }
    out["invalid_fields"] = f.invalid
    return out


def _rates(v: Any, keys: tuple[str, ...]) -> dict[str, JsonDict] | None:
    """Per camera, a few numbers (``images_received``, ``panels``); a malformed entry alone is dropped."""
    if not isinstance(v, dict) or len(v) > MAX_ITEMS:
        return None
    return {str(cam)[:MAX_TEXT]: {k: _number(e.get(k)) for k in keys} for cam, e in v.items() if isinstance(e, dict)}


def clean_delivery(f: _Fields) -> JsonDict:
    """An image consumer's delivery fields (``piper_recorder.process.delivery``), each of its type."""
    need = f.data.get("images_required")
    return {
        "images_received": f.rates("images_received", ("count", "fps", "stamp_fps")),
        "images_required": {k: _number(need.get(k)) for k in ("min_delivery", "min_fps")}
        if isinstance(need, dict)
        else None,
        "panels": f.rates("panels", ("fps", "target_fps", "min_fps")),
    }


def clean_teleop_status(status: Any) -> JsonDict:
    """The teleop status fields the dashboard shows, each of its type."""
    f = _Fields(status)
    out: JsonDict = {
        "engaged": f.flag("engaged"),
        "recording": f.flag("recording"),
        "limits_active": f.texts("limits_active"),
        "limit_hits": f.counts("limit_hits"),
        "calls_in_flight": f.count("calls_in_flight"),
        "last_release": f.text("last_release"),
    }
    for key in TELEOP_COUNTERS:
        out[key] = f.count(key)
    per_arm = f.data.get("arms")
    if isinstance(per_arm, dict) and len(per_arm) <= MAX_ITEMS:  # two arms: each arm's clutch (teleop.session)
        out["arms"] = {}
        for arm, entry in per_arm.items():
            a = _Fields(entry)
            name = str(arm)[:MAX_TEXT]
            out["arms"][name] = {
                "engaged": a.flag("engaged"),
                "limits_active": a.texts("limits_active"),
                "last_release": a.text("last_release"),
                "forced_releases": a.count("forced_releases"),
            }
            f.invalid += [f"arms.{name}.{k}" for k in a.invalid]
    elif per_arm is not None:
        f.invalid.append("arms")
    alarm = f.data.get("last_alarm")
    if isinstance(alarm, dict):
        a = _Fields(alarm)
        out["last_alarm"] = {k: a.text(k) or "" for k in ("recorder", "action", "outcome", "message")}
        f.invalid += [f"last_alarm.{k}" for k in a.invalid]
    else:
        out["last_alarm"] = None
        if alarm is not None:
            f.invalid.append("last_alarm")
    out["invalid_fields"] = f.invalid
    return out


def clean_event(event: Any) -> JsonDict:
    """An ``/episode_events`` line: the fields shown."""
    f = _Fields(event)
    out = {
        "recorder": f.text("recorder"),
        "event": f.text("event"),
        "episode_index": f.count("episode_index"),
        "rows": f.count("rows"),
        "reason": f.text("reason"),
        # curation (docs/curation.md): a saved episode's integrity verdict and reasons, a label's outcome
        "outcome": f.text("outcome"),
        "verdict": f.text("verdict"),
        "verdict_reasons": [],
        "invalid_fields": f.invalid,
    }
    reasons = f.data.get("verdict_reasons") if isinstance(f.data, dict) else None
    if isinstance(reasons, list) and all(isinstance(r, str) for r in reasons):
        out["verdict_reasons"] = [r[:200] for r in reasons[:20]]
    elif reasons is not None:
        f.invalid.append("verdict_reasons")
    return out


@dataclass
class _Stamped:
    data: JsonDict
    t: float


class DashboardModel:
    """The dashboard's state: fed by the node's ``on_*`` callbacks, read as one JSON ``view``; thread-safe."""

    def __init__(self, cfg: DashboardConfig):
        self.cfg = cfg
        self._lock = threading.Lock()
        self._rates: dict[str, RateMeter] = {}
        self._required: dict[str, bool] = {}
        self._nodes: set[str] = set()
        self._nodes_t: float | None = None
        self._cameras: list[str] = list(cfg.cameras)
        self._recorders: dict[str, _Stamped] = {}
        self._teleop: _Stamped | None = None
        self._headset: _Stamped | None = None
        self._offset0: tuple[tuple[str, str], float] | None = None  # (connection, first clock offset ns)
        self._joints: _Stamped | None = None
        self._arms = cfg.arm_names()  # () for one arm
        self._arm_joints: dict[str, _Stamped] = {}  # two arms: each arm's joint states
        self._consumers: dict[str, _Stamped] = {}  # quest_video, policy: ~/status (images_received)
        self._camera_status: dict[str, _Stamped] = {}  # sim_camera ~/status (published fps)
        self._events: deque[JsonDict] = deque(maxlen=8)

    # ---- inputs -------------------------------------------------------------------------------
    def watch_topic(self, topic: str, required: bool = True) -> None:
        """Show ``topic``'s rate; ``required``: silence is a problem (not e.g. targets, only sent while engaged)."""
        with self._lock:
            self._rates.setdefault(topic, RateMeter(self.cfg.rate_window_s))
            self._required[topic] = required

    def tick(self, topic: str, t: float) -> None:
        """A message of a watched ``topic`` arrived at ``t`` (others are ignored)."""
        with self._lock:
            meter = self._rates.get(topic)
            if meter is not None:
                meter.tick(t)

    def set_nodes(self, names: set[str], t: float) -> None:
        """The node names seen in the graph at ``t``."""
        with self._lock:
            self._nodes, self._nodes_t = set(names), t

    def camera_info_topic(self, camera: str) -> str:
        """The ``camera_info`` topic beside ``camera``'s colour image (its rate is the camera's rate)."""
        return camera_topic(camera_info_pattern(self.cfg.image_topic_pattern), camera)

    def set_cameras(self, cameras: list[str]) -> None:
        """The cameras shown (discovered in the graph when not configured)."""
        with self._lock:
            self._cameras = list(cameras)

    @property
    def cameras(self) -> list[str]:
        """The cameras shown."""
        with self._lock:
            return list(self._cameras)

    def on_recorder_status(self, recorder: str, status: JsonDict, t: float) -> None:
        """A recorder's ``~/status``; validated here (``clean_recorder_status``), so one bad one hides nothing."""
        clean = clean_recorder_status(status)
        with self._lock:
            self._recorders[recorder] = _Stamped(clean, t)

    def on_consumer_status(self, node: str, status: JsonDict, t: float) -> None:
        """An image consumer other than the recorders (quest_video, policy): its per-camera delivery."""
        clean = clean_delivery(_Fields(status))
        with self._lock:
            self._consumers[node] = _Stamped(clean, t)

    def on_camera_status(self, camera: str, status: JsonDict, t: float) -> None:
        """A camera's own status (sim_camera): its published rate, the reference of every delivery."""
        clean = {"fps": _number(status.get("fps")) if isinstance(status, dict) else None}
        with self._lock:
            self._camera_status[camera] = _Stamped(clean, t)

    def on_teleop_status(self, status: JsonDict, t: float) -> None:
        """Teleop's ``~/status``, validated here (``clean_teleop_status``)."""
        clean = clean_teleop_status(status)
        with self._lock:
            self._teleop = _Stamped(clean, t)

    def on_diagnostic(self, name: str, level: int, message: str, values: dict[str, str], t: float) -> None:
        """A ``/diagnostics`` entry; only the headset link's (``HEADSET_DIAG``) is kept."""
        if name != HEADSET_DIAG:
            return
        values = {str(k)[:MAX_TEXT]: str(v)[:MAX_TEXT] for k, v in list(values.items())[: 4 * MAX_ITEMS]}
        with self._lock:
            self._headset = _Stamped({"level": int(level), "message": str(message)[:MAX_TEXT], "values": values}, t)
            # The offset itself (host clock - headset clock) is an arbitrary large number; its drift since
            # the connection (or the bridge's last clock reset) is what tells a link going bad.
            key = (values.get("connects", ""), values.get("clock_resets", ""))
            offset = _float(values.get("clock_offset_ns"))
            if offset is not None and (self._offset0 is None or self._offset0[0] != key):
                self._offset0 = (key, offset)

    def on_joints(self, names: list[str], positions: list[float], t: float, arm: str | None = None) -> None:
        """The arm's joint states (rad; the gripper in m); a non-finite position is kept as None.

        ``arm``: whose (two arms); an arm not configured is ignored.
        """
        joints = _Stamped({"names": [str(n)[:MAX_TEXT] for n in names], "positions": [_float(p) for p in positions]}, t)
        with self._lock:
            if arm is None:
                self._joints = joints
            elif arm in self._arms:
                self._arm_joints[arm] = joints

    def on_event(self, event: JsonDict, t: float) -> None:
        """An ``/episode_events`` line; the newest few are shown."""
        clean = clean_event(event)
        with self._lock:
            self._events.appendleft({**clean, "_t": t})

    # ---- the view model ---------------------------------------------------------------------------
    def view(self, now: float) -> JsonDict:
        """The whole view model at ``now`` (monotonic s), as the page reads it from ``/api/state``."""
        with self._lock:
            recorders = [self._recorder_view(n, now) for n in self.cfg.recorders]
            timers = [r for r in recorders if r["state"] == "recording"]
            view: JsonDict = {
                "t": round(now, 3),  # the dashboard's clock (monotonic s) when this view was made
                "graph": self._graph_view(now),
                "recorders": recorders,
                "episode": {
                    "recording": bool(timers),
                    "elapsed_s": max((r["elapsed_s"] or 0.0 for r in timers), default=None),
                    "episode_index": timers[0]["episode_index"] if timers else None,
                    "saved_this_session": max((r["saved_this_session"] for r in recorders), default=0),
                },
                "cameras": [{"name": c, **self._rate_view(self.camera_info_topic(c), now)} for c in self._cameras],
                "joints": self._joints_view(now, self._joints),
                "teleop": self._teleop_view(now),
                "headset": self._headset_view(now),
                "events": [
                    {k: v for k, v in e.items() if k != "_t"} | {"age_s": round(now - e["_t"], 1)} for e in self._events
                ],
            }
            if self._arms:  # two arms: each one under its name (one arm: the keys it always had)
                view["arms"] = [self._arm_view(a, now) for a in self._arms]
            return view

    def _rate_view(self, topic: str, now: float) -> JsonDict:
        meter = self._rates.get(topic)
        if meter is None:
            return {"rate_hz": None, "age_s": None}
        age = meter.age(now)
        return {"rate_hz": round(meter.rate(now), 1), "age_s": None if age is None else round(age, 2)}

    def _graph_view(self, now: float) -> JsonDict:
        expected = list(dict.fromkeys([*self.cfg.expected_nodes(), *self._cameras]))
        nodes = [{"name": n, "present": n in self._nodes} for n in expected]
        nodes += [{"name": n, "present": True, "extra": True} for n in sorted(self._nodes - set(expected))]
        topics = []
        for topic in self._rates:
            r = self._rate_view(topic, now)
            allowed = max(self.cfg.silent_s, 2.0 / max(r["rate_hz"] or 0.5, 0.5))
            fresh = r["age_s"] is not None and r["age_s"] < allowed
            topics.append({"topic": topic, **r, "required": self._required[topic], "ok": fresh})
        delivery = self._delivery_view(now)
        # a recorder whose writer is behind real time (recording.worker) says so in its status: degraded
        behind = sorted(r for r, st in self._recorders.items() if st.data.get("falling_behind"))
        healthy = (
            all(n["present"] for n in nodes)
            and all(t["ok"] for t in topics if t["required"])
            and all(d["ok"] for d in delivery)
            and not behind
        )
        return {
            "nodes": nodes,
            "topics": topics,
            "healthy": healthy,
            "delivery": delivery,
            "falling_behind": behind,
            "nodes_age_s": None if self._nodes_t is None else round(now - self._nodes_t, 1),
        }

    def _published_fps(self, camera: str, now: float, best_received: float | None) -> float | None:
        """A camera's published rate: its own status (sim_camera, by capture stamp: exact).

        A realsense2_camera publishes no status: then the best capture-stamp rate any consumer received
        (exact too, and demonstrably published), else the camera_info rate measured here (a 2 s window:
        +-1 frame, too coarse alone to judge 99 %).
        """
        st = self._camera_status.get(camera)
        if st is not None and now - st.t <= self.cfg.stale_s:
            fps = _float(st.data.get("fps"))
            if fps is not None:
                return fps
        if best_received is not None:
            return best_received
        meter = self._rates.get(self.camera_info_topic(camera))
        if meter is not None and meter.total:
            return meter.rate(now)
        return None

    def _delivery_view(self, now: float) -> list[JsonDict]:
        """Per (consumer, camera): frames received vs published and panels sent vs their target.

        Judged by ``delivery.link_health`` from fresh statuses only (a stale one is the topic check's job).
        """
        statuses = {
            n: s.data for n, s in (*self._recorders.items(), *self._consumers.items()) if now - s.t <= self.cfg.stale_s
        }
        best: dict[str, float | None] = {}
        for d in statuses.values():
            received = d.get("images_received")
            for cam, entry in received.items() if isinstance(received, dict) else ():
                rate = _float(entry.get("stamp_fps")) if isinstance(entry, dict) else None
                best[str(cam)] = max((r for r in (best.get(str(cam)), rate) if r is not None), default=None)
        published = {c: self._published_fps(c.split("/")[0], now, rate) for c, rate in best.items()}
        return [link.to_dict() for link in link_health(statuses, published)]

    def _recorder_view(self, name: str, now: float) -> JsonDict:
        st = self._recorders.get(name)
        if st is None:
            # not published yet: every field the page reads, empty (the page draws this like any other)
            return {
                "name": name,
                "state": "unknown",
                "stale": True,
                "age_s": None,
                "episode_index": None,
                "task": None,
                "elapsed_s": None,
                "rows": None,
                "saved_this_session": 0,
                "writer_backlog": None,
                "message": "",
                "waiting_for": [],
                "tick_delay_ms": None,
                "writer_lag_s": None,
                "falling_behind": False,
                "frames_dropped_writer_behind": {},
                "counters": [],
                "invalid_fields": [],
            }
        d, age = st.data, now - st.t
        state = d["state"] or "unknown"
        elapsed = d["elapsed_s"]
        if elapsed is not None and state == "recording":
            elapsed += age  # the status is published at status_hz: the timer runs on between them
        counters: JsonDict = d["counters"] or {}
        shown = []
        for key, label in PROBLEMS.items():
            if key in counters:
                shown.append(
                    {
                        "key": key,
                        "label": label,
                        "total": total(counters[key]),
                        "problem": True,
                        "detail": counters[key] if isinstance(counters[key], dict) else None,
                    }
                )
        for key in SHOWN_INFO:
            if key in counters and key != "rows":
                value = counters[key]
                tot = (
                    max((total(x) for x in value.values()), default=0)
                    if key == "frame_offset_max_ms" and isinstance(value, dict)
                    else total(value)
                )
                shown.append(
                    {
                        "key": key,
                        "label": INFO.get(key, key),
                        "total": tot,
                        "problem": False,
                        "detail": value if isinstance(value, dict) else None,
                    }
                )
        rows = d["rows"] if d["rows"] is not None else _count(counters.get("rows"))
        return {
            "name": name,
            "state": state,
            "stale": age > self.cfg.stale_s,
            "age_s": round(age, 1),
            "episode_index": d["episode_index"],
            "task": d["task"],
            "elapsed_s": None if elapsed is None else round(elapsed, 2),
            "rows": rows,
            "saved_this_session": d["saved_this_session"],
            "writer_backlog": d["writer_backlog"],
            "message": d["message"] or "",
            "waiting_for": d["waiting_for"] or [],
            "tick_delay_ms": d["tick_delay_ms"],
            "writer_lag_s": d["writer_lag_s"],
            "falling_behind": bool(d["falling_behind"]),
            "frames_dropped_writer_behind": d["frames_dropped_writer_behind"] or {},
            "counters": shown,
            "invalid_fields": list(d["invalid_fields"]),
        }

    def _arm_view(self, arm: str, now: float) -> JsonDict:
        """Arm ``arm``'s part of a two-arm view: its joints, feedback, commands and clutch."""
        feedback = self._rate_view(arm_topic(arm, JOINT_STATES), now)
        commanded = self._rate_view(arm_topic(arm, COMMANDED_POSE), now)
        clutch: JsonDict | None = None
        if self._teleop is not None:
            entry = (self._teleop.data.get("arms") or {}).get(arm)
            if entry is not None:
                clutch = {**entry, "stale": now - self._teleop.t > self.cfg.stale_s}
        return {
            "name": arm,
            **self._joints_view(now, self._arm_joints.get(arm)),
            "feedback_topic": arm_topic(arm, JOINT_STATES),
            "feedback_rate_hz": feedback["rate_hz"],
            "commanded": commanded,
            "clutch": clutch,
        }

    def _joints_view(self, now: float, joints_in: _Stamped | None) -> JsonDict:
        """An arm's joints, each with its range, and their age."""
        if joints_in is None:
            return {"joints": [], "gripper": None, "age_s": None}
        names, pos = joints_in.data["names"], joints_in.data["positions"]
        lo, hi = self.cfg.joint_min, self.cfg.joint_max
        joints: list[JsonDict] = []
        gripper: JsonDict | None = None
        for n, p in zip(names, pos):
            if p is None:
                continue  # a non-finite value: not shown (the arm node counts it)
            if n == "gripper":
                gripper = {"position": p, "min": 0.0, "max": self.cfg.gripper_max}
                continue
            k = len(joints)
            if k >= len(lo):
                continue
            frac = (p - lo[k]) / (hi[k] - lo[k])
            joints.append(
                {
                    "name": n,
                    "position": p,
                    "min": lo[k],
                    "max": hi[k],
                    "fraction": frac,
                    "near_limit": frac <= NEAR_LIMIT or frac >= 1.0 - NEAR_LIMIT,
                }
            )
        return {"joints": joints, "gripper": gripper, "age_s": round(now - joints_in.t, 2)}

    def _teleop_view(self, now: float) -> JsonDict:
        if self._teleop is None:
            return {"present": False, "limits": [{"name": n, "active": False, "hits": 0} for n in LIMIT_NAMES]}
        d, age = self._teleop.data, now - self._teleop.t
        stale = age > self.cfg.stale_s
        active = set(d["limits_active"] or []) if not stale else set()
        hits: dict[str, int] = d["limit_hits"] or {}
        names = list(dict.fromkeys([*LIMIT_NAMES, *sorted(active), *hits]))
        counters = {k: d[k] for k in TELEOP_COUNTERS if d[k] is not None}
        return {
            "present": True,
            "stale": stale,
            "age_s": round(age, 1),
            "engaged": bool(d["engaged"]),
            "recording": bool(d["recording"]),
            "limits": [{"name": n, "active": n in active, "hits": hits.get(n, 0)} for n in names],
            "counters": counters,
            "last_alarm": d["last_alarm"],
            "calls_in_flight": d["calls_in_flight"],
            "invalid_fields": list(d["invalid_fields"]),
            "last_release": d["last_release"],
        }

    def _headset_view(self, now: float) -> JsonDict:
        if self._headset is None:
            return {"present": False}
        d, age = self._headset.data, now - self._headset.t
        v = d["values"]
        offset = _float(v.get("clock_offset_ns"))
        rejected = {k.split(".", 1)[1]: int(_float(x) or 0) for k, x in v.items() if k.startswith("rejected.")}
        return {
            "present": True,
            "stale": age > self.cfg.stale_s,
            "age_s": round(age, 1),
            "level": d["level"],
            "message": d["message"],
            "state": v.get("state"),
            "rate_hz": _float(v.get("frame_rate_hz")),
            "clock_offset_ms": None if offset is None else round(offset / 1e6, 3),
            "clock_drift_ms": None
            if offset is None or self._offset0 is None
            else round((offset - self._offset0[1]) / 1e6, 3),
            "arrival_delay_ms": _float(v.get("arrival_delay_ms")),
            "last_frame_age_s": _float(v.get("last_frame_age_s")),
            "rejected_total": int(_float(v.get("rejected_total")) or 0),
            "rejected": rejected,
            "last_rejection": v.get("last_rejection") or "",
            "connects": v.get("connects"),
        }
