"""The simulated graph as a library: start it, drive both recorders through their services, watch them.

``SimSession`` runs config/sim.yaml's graph (``graph.plan.plan_graph``) in a leased loopback ROS domain
plus an rclpy client node; piper-demo, the end-to-end tests and bench/graph_capacity.py use it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from piper_recorder.errors import PiperError
from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.rosenv import lease_domain
from piper_recorder.graph.supervisor import Graph
from piper_recorder.names import (
    COLOR_TOPIC_PATTERN,
    EEF_POSE,
    EPISODE_EVENTS,
    RECORDER_NODES,
    START_EPISODE,
    STATUS,
    STOP_EPISODE,
    arm_topic,
    camera_topic,
    node_topic,
)
from piper_recorder.params.derived import LAUNCH_SECTION
from piper_recorder.params.params_file import read_params_file

if TYPE_CHECKING:  # rclpy is imported when the session starts
    from rclpy.client import Client
    from rclpy.context import Context
    from rclpy.executors import Executor
    from rclpy.node import Node
    from rclpy.task import Future

RESUBSCRIBE_S = 15.0  # _first_messages: a silent topic is subscribed to afresh after this
LOST_ANSWER_S = 3.0  # _await_answer: a response this late after the status showed the answer is lost
CONTINUOUS = "continuous"  # the sim headset's never-pausing script (piper_recorder.quest.scripts)


class DemoError(PiperError, RuntimeError):
    """The simulated graph failed: a node did not come up, a recorder refused or did not answer."""


@dataclass
class EpisodeResult:
    """One episode of every recorder: its "saved" events and stop-to-saved latencies."""

    index: int
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # recorder -> "saved" event
    stop_to_saved_s: dict[str, float] = field(default_factory=dict)


class SimSession:
    """The simulated graph plus an rclpy client node that drives and watches the recorders."""

    def __init__(
        self,
        out: Path,
        config: str | Path | None = None,
        sets: Iterable[str] = (),
        log_dir: Path | None = None,
        cameras: str = "",
        echo: bool = False,
        arms: str = "",
    ):
        self.out = Path(out)
        self.log_dir = Path(log_dir) if log_dir else self.out / "logs"
        sets = [
            f"lerobot_recorder.root={self.out / 'lerobot'}",
            f"rgbd_recorder.path={self.out / 'rgbd.hdf5'}",
            "piper_launch.sim_quest.port=0",
            f"piper_launch.sim_quest.script={CONTINUOUS}",
            *sets,
        ]
        self.plan = plan_graph("sim", config or config_path("sim"), sets, self.log_dir, cameras=cameras, arms=arms)
        self.lease = lease_domain()
        self.graph = Graph(self.plan, self.lease.env(), self.log_dir, echo=echo)
        self.events: list[dict[str, Any]] = []
        self.status: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._ctx: Context | None = None
        self._node: Node | None = None
        self._executor: Executor | None = None
        self._spinner: threading.Thread | None = None
        self._stopping = False
        self._clients: dict[str, Client] = {}
        # service -> recorder -> when its last request was sent / its answer came (monotonic)
        self.answered: dict[str, dict[str, float]] = {}
        self.sent: dict[str, dict[str, float]] = {}

    @property
    def cameras(self) -> list[str]:
        """The graph's camera names."""
        return self.plan.cameras

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> SimSession:
        """Start the graph and the client node; wait until every node and recorder is up."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.lease.apply()
        self.graph.start()
        self._start_client()
        try:
            self.graph.wait_nodes(self._live(), timeout)
            self._wait_inputs(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_client(self) -> None:
        """The session's node (episode events, the recorders' status) spun by a thread of its own."""
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        self._ctx = rclpy.Context()
        rclpy.init(context=self._ctx)
        self._node = rclpy.create_node("piper_demo", context=self._ctx)
        self._node.create_subscription(
            String,
            EPISODE_EVENTS,
            self._on_event,
            QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE),
        )
        for rec in RECORDER_NODES:
            self._node.create_subscription(String, node_topic(rec, STATUS), partial(self._on_status, rec), 10)
        self._executor = MultiThreadedExecutor(num_threads=2, context=self._ctx)
        self._executor.add_node(self._node)
        self._spinner = threading.Thread(target=self._spin, name="demo-executor", daemon=True)
        self._spinner.start()

    def _spin(self) -> None:
        """Spin the session's node until ``stop``.

        An error out of the executor (a callback's, or rclpy's
        ``InvalidHandle`` for an entity destroyed while the executor waited on it) is printed and the spin
        goes on: a session whose executor stopped sees no status and no service response again, and its
        next call waits out its whole timeout.
        """
        assert self._executor is not None and self._ctx is not None
        while not self._stopping and self._ctx.ok():
            try:
                self._executor.spin()
            except Exception as exc:  # noqa: BLE001 - reported; the session's calls depend on this spin
                if self._stopping or not self._ctx.ok():
                    break
                print(f"piper-demo: the session's executor raised {exc!r}; spinning on", file=sys.stderr, flush=True)

    @contextmanager
    def _probe(self) -> Iterator[tuple[Node, Executor]]:
        """A node and executor of its own, spun by the calling thread, for a wait's own subscriptions.

        Destroying an entity of the session's node while its MultiThreadedExecutor waits on
        it in the spinner thread makes rclpy raise ``InvalidHandle`` there (``test_sim_session_spin``); here
        creation, spinning and destruction share one thread.
        """
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        node = rclpy.create_node("piper_demo_probe", context=self._ctx)
        executor = SingleThreadedExecutor(context=self._ctx)
        executor.add_node(node)
        try:
            yield node, executor
        finally:
            executor.shutdown(timeout_sec=1.0)
            node.destroy_node()

    def _on_event(self, msg: Any) -> None:
        with self._cond:
            self.events.append(json.loads(msg.data))
            self._cond.notify_all()

    def _on_status(self, rec: str, msg: Any) -> None:
        with self._cond:
            self.status[rec] = json.loads(msg.data)
            self._cond.notify_all()

    def _first_message(self, msg_type: type, topic: str, timeout: float) -> Any:
        """The next message on ``topic`` (best-effort QoS: matches reliable and best-effort publishers)."""
        return self._first_messages(msg_type, [topic], timeout)[topic]

    def _first_messages(self, msg_type: type, topics: list[str], timeout: float) -> dict[str, Any]:
        """The next message on each of ``topics``, subscribed to all at once.

        A topic still silent after ``RESUBSCRIBE_S`` is subscribed to afresh (and said so on stderr, with
        the publishers this node sees on it): a reader whose match with a publisher was lost in discovery
        (once in CI: no frame of one camera reached this node in 90 s while the arm's pose did) gets a
        new match instead of failing the whole session. The graph's consumers are counted on their own
        (``images_received`` in their status); this wait is only the session's own precondition.
        """
        from rclpy.qos import qos_profile_sensor_data

        got: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        with self._probe() as (node, executor):  # its subscriptions end with it
            subs: dict[str, Any] = {}

            def subscribe(topic: str) -> None:
                if topic in subs:
                    node.destroy_subscription(subs.pop(topic))
                subs[topic] = node.create_subscription(
                    msg_type, topic, partial(got.setdefault, topic), qos_profile_sensor_data
                )

            for t in topics:
                subscribe(t)
            while True:
                until = min(time.monotonic() + RESUBSCRIBE_S, deadline)
                while len(got) < len(topics) and time.monotonic() < until:
                    executor.spin_once(timeout_sec=0.05)
                done = {t: got[t] for t in topics if t in got}
                for t in done:  # images are large: stop receiving at once
                    if t in subs:
                        node.destroy_subscription(subs.pop(t))
                missing = [t for t in topics if t not in done]
                if not missing:
                    return done
                seen = {t: node.count_publishers(t) for t in missing}
                if time.monotonic() >= deadline:
                    raise DemoError(
                        f"no message on {', '.join(missing)} within {timeout:.0f}s "
                        f"(publishers seen: {seen}; recorders' images_received: "
                        f"{self._images_received()})\n{self.graph.logs()}"
                    )
                print(
                    f"piper-demo: no message yet on {missing} (publishers seen: {seen}); subscribing afresh",
                    file=sys.stderr,
                    flush=True,
                )
                for t in missing:
                    subscribe(t)

    def _images_received(self) -> dict[str, Any]:
        with self._cond:
            return {r: (st.get("images_received") or {}) for r, st in self.status.items()}

    def _wait_inputs(self, timeout: float) -> None:
        """Arm feedback, a frame from every camera, both recorders' services and status."""
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import Image

        deadline = time.monotonic() + timeout
        left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
        self._first_messages(PoseStamped, self._arm_topics(EEF_POSE), left())
        self._first_messages(Image, [camera_topic(COLOR_TOPIC_PATTERN, cam) for cam in self.cameras], left())
        for rec in RECORDER_NODES:
            for srv in (START_EPISODE, STOP_EPISODE):
                self._client(rec, srv).wait_for_service(timeout_sec=left()) or self._fail(
                    f"{node_topic(rec, srv)} not up"
                )
        with self._cond:
            if not self._cond.wait_for(lambda: all(r in self.status for r in RECORDER_NODES), left()):
                silent = [r for r in RECORDER_NODES if r not in self.status]
                seen = {r: self._live().count_publishers(node_topic(r, STATUS)) for r in silent}
                self._fail(
                    f"no status from {silent} (status publishers this node sees: {seen}: 0 is a "
                    f"discovery failure, 1 a recorder that does not publish or a lost match)"
                )

    def _arm_topics(self, name: str) -> list[str]:
        """``name`` of every arm of the graph (``/left/arm/eef_pose``, ...; one arm: ``name``)."""
        return [arm_topic(a, name) for a in self.plan.arms] or [name]

    def wait_motion(self, min_m: float = 0.005, timeout: float = 30.0) -> float:
        """Wait until every arm's EEF has moved ``min_m`` (teleop engaged, the arm follows); returns the least motion."""
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import qos_profile_sensor_data

        points: dict[str, list[tuple[float, float, float]]] = {t: [] for t in self._arm_topics(EEF_POSE)}

        def cb(topic: str, m: Any) -> None:
            p = m.pose.position
            points[topic].append((p.x, p.y, p.z))

        def moved() -> float:
            if not all(points.values()):
                return 0.0
            return min(
                max(sum((x - y) ** 2 for x, y in zip(seen[0], b)) ** 0.5 for b in seen[-50:])
                for seen in points.values()
            )

        deadline = time.monotonic() + timeout
        with self._probe() as (node, executor):
            for topic in points:
                node.create_subscription(PoseStamped, topic, partial(cb, topic), qos_profile_sensor_data)
            while moved() < min_m and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.05)
            return moved()

    def _live(self) -> Node:
        if self._node is None:
            raise DemoError("the session is not started")
        return self._node

    def _fail(self, what: str) -> NoReturn:
        raise DemoError(f"{what}\n{self.graph.logs()}")

    def stop(self) -> dict[str, int | None]:
        """Stop the client node and the graph; returns each process's exit code."""
        self._stopping = True
        if self._node is not None:
            if self._executor is not None:
                self._executor.shutdown(timeout_sec=2.0)
            self._node.destroy_node()
            import rclpy

            rclpy.shutdown(context=self._ctx)
            self._node = None
        codes = self.graph.stop()
        self.lease.release()
        return codes

    def __enter__(self) -> SimSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- services -----------------------------------------------------------------------------
    def _client(self, rec: str, srv: str) -> Client:
        from std_srvs.srv import Trigger

        key = node_topic(rec, srv)
        if key not in self._clients:
            self._clients[key] = self._live().create_client(Trigger, key)
        return self._clients[key]

    @staticmethod
    def _wait(fut: Future, timeout: float) -> bool:
        done = threading.Event()
        fut.add_done_callback(lambda _f: done.set())
        return done.wait(timeout)

    def _answers(self, rec: str) -> int:
        with self._cond:
            return int((self.status.get(rec) or {}).get("answers", 0))

    def _await_answer(self, rec: str, srv: str, fut: Future, answers0: int, timeout: float) -> tuple[bool, str]:
        """The recorder's answer to one call: the response, or, if that is lost, what its ``~/status`` says.

        rmw_fastrtps drops a response whose reader the server has not matched within
        100 ms of sending it (ros2/rmw_fastrtps#390): a loaded machine's discovery can lose the first
        answer of a fresh client although the recorder acted on the request. The status's ``answers``
        count rising past ``answers0`` (its value when the request went) shows the answer was given;
        ``LOST_ANSWER_S`` later without the response, the status's ok/message stand for it.
        """
        deadline = time.monotonic() + timeout
        seen_at: float | None = None
        done = threading.Event()
        fut.add_done_callback(lambda _f: done.set())
        while not done.is_set():
            now = time.monotonic()
            if now >= deadline:
                raise DemoError(f"{node_topic(rec, srv)}: no answer within {timeout:.0f}s\n{self.graph.logs()}")
            with self._cond:
                st = dict(self.status.get(rec) or {})
            if seen_at is None and int(st.get("answers", 0)) > answers0:
                seen_at = now
            if seen_at is not None and now - seen_at >= LOST_ANSWER_S:
                print(
                    f"piper-demo: {node_topic(rec, srv)}: the response was lost; the recorder's status shows it "
                    f"answered {'ok' if st.get('ok') else 'refused'}: {st.get('message')!r}",
                    file=sys.stderr,
                    flush=True,
                )
                return bool(st.get("ok")), str(st.get("message", ""))
            done.wait(min(0.2, deadline - now))
        res = fut.result()
        if res is None:
            raise DemoError(f"{node_topic(rec, srv)}: the call failed\n{self.graph.logs()}")
        return bool(res.success), str(res.message)

    def call_all(
        self, srv: str, timeout: float = 30.0, at: dict[str, float] | None = None
    ) -> dict[str, tuple[bool, str]]:
        """Call ``srv`` on every recorder at once and wait for every answer.

        At once: one after the other, the second recorder's episode would start or end a whole save later
        than the first's. A lost response is read from the recorder's status (``_await_answer``).

        ``at``: recorder -> monotonic time to send its request (the calls still overlap). When each
        request went and each answer came are kept in ``sent[srv][rec]`` and ``answered[srv][rec]``.
        """
        from std_srvs.srv import Trigger

        answered: dict[str, float] = {}
        sent: dict[str, float] = {}
        self.answered[srv], self.sent[srv] = answered, sent
        futs, answers0 = {}, {}
        for rec in sorted(RECORDER_NODES, key=lambda r: (at or {}).get(r, 0.0)):
            if at and rec in at:
                time.sleep(max(0.0, at[rec] - time.monotonic()))
            answers0[rec] = self._answers(rec)
            sent[rec] = time.monotonic()
            futs[rec] = self._client(rec, srv).call_async(Trigger.Request())
            futs[rec].add_done_callback(partial(_note_answer, answered, rec))
        out = {}
        for rec, fut in futs.items():
            out[rec] = self._await_answer(rec, srv, fut, answers0[rec], timeout)
            answered.setdefault(rec, time.monotonic())  # its done callback may not have run yet
        return out

    def set_parameter(self, node: str, name: str, value: Any, timeout: float = 10.0) -> None:
        """Set one parameter on a running node (e.g. a camera's fault injection)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        with self._probe() as (probe, executor):  # a client of its own, destroyed with it (``_probe``)
            cli: Client = probe.create_client(SetParameters, node_topic(node, "set_parameters"))
            if not cli.wait_for_service(timeout_sec=timeout):
                raise DemoError(f"{node_topic(node, 'set_parameters')} not available")
            req = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
            fut = cli.call_async(req)
            executor.spin_until_future_complete(fut, timeout_sec=timeout)
            res = fut.result() if fut.done() else None
            if res is None or not res.results[0].successful:
                raise DemoError(f"setting {node}.{name}={value!r} failed")

    def start_episode(self) -> None:
        """Start an episode in every recorder; DemoError if one refuses."""
        for rec, (ok, msg) in self.call_all(START_EPISODE).items():
            if not ok:
                self._fail(f"{rec} {START_EPISODE} refused: {msg}")

    def stop_episode(self, timeout: float = 120.0, at: dict[str, float] | None = None) -> EpisodeResult:
        """Stop both recorders and wait for their "saved" events.

        Each stops at ``at[rec]`` (monotonic) if given. Returns the events and the stop-to-saved latencies.
        """
        with self._cond:
            seen = len(self.events)
        t_stop = {rec: max(time.monotonic(), (at or {}).get(rec, 0.0)) for rec in RECORDER_NODES}
        for rec, (ok, msg) in self.call_all(STOP_EPISODE, timeout=timeout, at=at).items():
            if not ok:
                self._fail(f"{rec} {STOP_EPISODE} refused: {msg}")
        result = EpisodeResult(index=-1)

        def saved() -> bool:
            for ev in self.events[seen:]:
                rec = ev.get("recorder")
                if rec in RECORDER_NODES and rec not in result.events:
                    if ev.get("event") == "saved":
                        result.events[rec] = ev
                        result.stop_to_saved_s[rec] = time.monotonic() - t_stop[rec]
                    elif ev.get("event") == "discarded":
                        raise DemoError(f"{rec} discarded the episode: {ev.get('reason')}")
            return all(r in result.events for r in RECORDER_NODES)

        with self._cond:
            if not self._cond.wait_for(saved, timeout):
                self._fail(f"no saved event from {[r for r in RECORDER_NODES if r not in result.events]}")
        result.index = int(result.events[RECORDER_NODES[0]]["episode_index"])
        return result

    def record(self, seconds: float) -> EpisodeResult:
        """One episode of ``seconds`` in each recorder.

        Each one's stop is sent ``seconds`` after its episode started (the ``start_ns`` of its "started" event; a first start that waited for /arm/provenance
        or for the writer does not shorten the episode).
        """
        with self._cond:
            seen = len(self.events)
        self.start_episode()
        return self.stop_episode(at=self._stop_times(seen, seconds))

    def _stop_times(self, seen: int, seconds: float, timeout: float = 10.0) -> dict[str, float]:
        """Monotonic send time of each recorder's stop.

        That is ``seconds`` after its "started" event's start_ns (ROS time = system time here), or after the
        start request's send time if the event did not come.
        """
        starts: dict[str, int] = {}

        def started() -> bool:
            for ev in self.events[seen:]:
                if ev.get("event") == "started" and ev.get("recorder") in RECORDER_NODES and ev.get("start_ns"):
                    starts[str(ev["recorder"])] = int(ev["start_ns"])
            return all(r in starts for r in RECORDER_NODES)

        with self._cond:
            self._cond.wait_for(started, timeout)
        sent = self.sent.get(START_EPISODE, {})
        now_wall, now_mono = time.time_ns(), time.monotonic()
        return {
            rec: now_mono + (starts[rec] - now_wall) / 1e9 + seconds
            if rec in starts
            else sent.get(rec, now_mono) + seconds
            for rec in RECORDER_NODES
        }


def _note_answer(answered: dict[str, float], rec: str, _fut: object) -> None:
    answered[rec] = time.monotonic()


def size_overrides(config: str | Path, size: str) -> list[str]:
    """``WxH`` -> --set items giving every camera that image size.

    The recorders follow the cameras' sizes (``params.derived``).
    """
    try:
        w, h = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size expects WxH, got {size!r}") from None
    cams = read_params_file(config).get(LAUNCH_SECTION, {}).get("cameras", [])
    return [f"{cam}.{k}={v}" for cam in cams for k, v in (("width", w), ("height", h))]
