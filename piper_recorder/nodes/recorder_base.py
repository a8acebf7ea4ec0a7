"""Shared rclpy shell of both recorders: inputs, services, status, events, provenance.

Services: the four Trigger ones, ``label_episode`` (docs/curation.md), ``stop_episode_at`` (a stop at a given time).

Threads (why encoding never blocks taking a message):
- No executor serves the inputs: the tick thread takes what arrived before each row (``PolledInputs``, on
  a node of their own, ``<name>_inputs``), each message with its DDS reception time as its receive time.
  A message only wraps its buffer (no copy for rgb8/16UC1) into the assembler under a short lock. The QoS
  histories hold more than arrives between two polls: images a second, arm topics 0.5 s.
- ``run_node``'s executor serves the rest: the latched provenance, hello and policy topics.
- The services live on a message-free node (``<name>_control``, services named under the recorder's own
  name) spun by its own thread, so a stop is taken when it arrives, not behind queued images; its DDS
  arrival (``ArrivalExecutor``) is the episode's end (no row after it is assembled).
- The tick thread sleeps until the next grid tick plus the lateness allowance (from the grid, not a
  periodic timer, so late wake-ups never shift rows), takes the inputs and calls ``controller.tick``.
- One writer thread (``WriterWorker``) owns every writer call; the writers encode in their own threads.
Inputs are what the input router (``recording.router``, shared with the bag converter) lists for the
recorder's topic map, turned into the controller's inputs exactly as the converter does. A latched input
is subscribed transient-local, so a recorder started after its publisher still gets the current value.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from diagnostic_msgs.srv import AddDiagnostics
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from piper_recorder.errors import describe, is_input_error
from piper_recorder.names import (
    EPISODE_EVENTS,
    LABEL_EPISODE,
    POLICY_ACTOR,
    POLICY_PROVENANCE,
    RECORDER_SERVICES,
    STATUS,
    STOP_EPISODE_AT,
)
from piper_recorder.nodes.plumbing.callbacks import message_callback
from piper_recorder.nodes.plumbing.decoded_subscription import DecodeErrors
from piper_recorder.nodes.plumbing.executors import ArrivalExecutor, arrival_or_now, run_in_thread, spin_until
from piper_recorder.nodes.plumbing.parameters import ParameterError, declare_config
from piper_recorder.nodes.plumbing.polled_inputs import PolledInputs
from piper_recorder.nodes.plumbing.qos import recorder_input_qos
from piper_recorder.nodes.plumbing.stamps import now_ns
from piper_recorder.process.delivery import RECORDER_MIN_DELIVERY, ImageCounts
from piper_recorder.recording.config import RecorderConfig, session_record, task_problem
from piper_recorder.recording.controller import Answer, EpisodeController, parse_stop_at
from piper_recorder.recording.inputs import TopicMap, topic_map
from piper_recorder.recording.policy_log import PolicyLog, episode_fields
from piper_recorder.recording.router import LATCHED, InputRouter, Route
from piper_recorder.recording.targets import EpisodeTarget
from piper_recorder.recording.verdict import VerdictConfig


def message_class(msg_type: str) -> Any:
    """The rclpy message class of a "pkg/msg/Type" name; ParameterError if it is not installed."""
    pkg, _, name = msg_type.split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.msg"), name)
    except (ImportError, AttributeError) as exc:
        raise ParameterError(f"message type {msg_type} is not installed ({exc})") from exc


class RecorderNode(Node):
    """Base node; subclasses name their config class and format and build the writer target."""

    config_class: type[RecorderConfig]
    fmt: str  # "lerobot" | "rgbd": which inputs of the feature table it records

    def make_target(self, topics: TopicMap) -> EpisodeTarget[Any]:
        """The writer target for these topics (each recorder builds its own)."""
        raise NotImplementedError

    def __init__(self, name: str):
        super().__init__(name)
        self.cfg = cfg = declare_config(self, self.config_class)
        cfg.verdict = self.verdict_cfg = declare_config(self, VerdictConfig, "verdict.")  # the verdict's thresholds
        try:
            self.topics = topics = topic_map(self.fmt, cfg)
        except (OSError, ValueError) as exc:  # the mapping file: missing, unreadable, wrong
            raise ParameterError(f"{name}: mapping {cfg.mapping!r}: {exc}") from exc
        try:
            target = self.make_target(topics)
        except Exception as exc:  # unwritable path, another writer holds it, a damaged root, ...
            if not is_input_error(exc):
                raise  # a bug: the traceback, not a parameter message
            raise ParameterError(f"{name}: cannot open the dataset: {describe(exc)}") from exc
        self._images_received: dict[str, dict[str, Any]] = {}  # the last snapshot (status timer only)
        # each arm's /arm/provenance JSON (key None for one arm); the event is set once every arm's arrived
        self._arm_provenance: dict[str | None, dict[str, Any]] = {}
        self._prov_topics = topics.provenance_topics() if topics.table.arms else {None: cfg.provenance_topic}
        self._hello: dict[str, Any] | None = None
        self._prov_event = threading.Event()
        self._prov_waited = False
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_status = self.create_publisher(String, STATUS, 10)
        self.pub_events = self.create_publisher(String, EPISODE_EVENTS, reliable)
        self.policy_log = PolicyLog()  # every policy that acted in an episode, and when (episodes.jsonl)
        self.controller = EpisodeController(
            target,
            cfg.assembly(tuple(topics.cameras), topics.table),
            recorder=self.get_name(),
            max_episode_s=cfg.max_episode_s,
            publish_event=self._publish_event,
            session_record=self._session_record,
            on_change=self._publish_status,
            log=lambda m: self.get_logger().info(m),
            max_lag_s=cfg.writer_max_lag_s,
            episode_fields=lambda origin, end: episode_fields(self.policy_log, origin, end),
            stop_reach_s=cfg.stop_reach_s,
            drain=lambda: self.inputs.poll(),
        )
        self.router = InputRouter(
            topics, self.controller, depth=target.depth, warn=lambda m: self.get_logger().error(m)
        )
        # frames received per camera (delivery health, piper_recorder.process.delivery): colour, and depth for RGB-D
        streams = [(cam, ct.color) for cam, ct in topics.cameras.items()]
        if target.depth:
            streams += [(f"{cam}/depth", ct.depth) for cam, ct in topics.cameras.items() if ct.depth]
        self.image_counts = ImageCounts([name for name, _ in streams])
        self._image_index = {topic: i for i, (_, topic) in enumerate(streams)}
        self.decode_errors = DecodeErrors()
        # taken on the tick thread before each row, not by the executor (PolledInputs; module doc), and
        # decoded as the bag converter decodes (cdr.decode): the same objects into the router
        self.inputs = PolledInputs(self, self.decode_errors)
        image_reliable = cfg.image_reliability == "reliable"
        for r in self.router.routes:
            qos = recorder_input_qos(r.kind, cfg.fps, image_reliable)
            self.inputs.subscribe(message_class(r.msg_type), r.topic, self._receiver(r), qos)
        for arm, topic in self._prov_topics.items():
            self.create_subscription(String, topic, self._provenance_receiver(arm, topic), latched)
        if not self._prov_topics:  # a mapping without provenance topics: nothing to wait for
            self._prov_event.set()
        self.create_subscription(String, cfg.hello_topic, self._on_hello, latched)
        self._policy: dict[str, Any] | None = None  # the running policy (policy node), named in the provenance
        self.create_subscription(String, POLICY_PROVENANCE, self._on_policy, latched)
        self.create_subscription(
            String,
            POLICY_ACTOR,
            message_callback(lambda m: self.policy_log.on_actor(now_ns(self), m.data)),
            recorder_input_qos(LATCHED, cfg.fps),
        )
        # services on their own node and executor thread (module doc): answered however busy the inputs are
        self._control = Node(
            f"{self.get_name()}_control",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        base = self.get_fully_qualified_name()
        for srv, fn in zip(
            RECORDER_SERVICES, (self._srv_start, self._srv_stop, self._srv_discard, self._srv_delete), strict=True
        ):
            self._control.create_service(Trigger, f"{base}/{srv}", fn)
        # the label: a JSON string in, success + message out (no installed interface has a typed payload
        # for it; AddDiagnostics is the one string -> (bool, string) service): see docs/curation.md
        self._control.create_service(AddDiagnostics, f"{base}/{LABEL_EPISODE}", self._srv_label)
        # a stop at a given time (teleop: the headset press's capture stamp), JSON in the same way
        self._control.create_service(AddDiagnostics, f"{base}/{STOP_EPISODE_AT}", self._srv_stop_at)
        self._control_exec = ArrivalExecutor()  # a stop ends the episode at its request's arrival
        self._control_exec.add_node(self._control)
        self._control_stop = threading.Event()
        self._control_thread = threading.Thread(
            target=spin_until, args=(self._control_exec, self._control_stop), name="control", daemon=True
        )
        self._control_thread.start()
        # ~/status is published by the tick thread (_tick_loop), not an executor timer, so it keeps coming
        # whatever the executor does, and the executor carries only messages and nothing periodic
        self._status_period_s = 1.0 / cfg.status_hz
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="tick", daemon=True)
        self._ticker.start()
        self._shutdown_done = False

    # ---- inputs -----------------------------------------------------------------------------
    def _receiver(self, r: Route) -> Any:
        """``(message, reception ns)`` -> the router (and the delivery count of an image)."""
        handle = self.router.handler(r.topic)
        idx = self._image_index.get(r.topic)
        if idx is None:
            return handle
        count = self.image_counts.on_image

        def on_image(msg: Any, received_ns: int) -> None:
            count(idx, msg.header)  # the only per-frame cost of the delivery health: a counter bump
            handle(msg, received_ns)

        return on_image

    def _provenance_receiver(self, arm: str | None, topic: str) -> Callable[[String], None]:
        def on_provenance(msg: String) -> None:
            try:
                prov = json.loads(msg.data)
            except ValueError:
                prov = None
            if not isinstance(prov, dict):
                self.get_logger().warning(f"ignoring a {topic} that is no JSON object: {msg.data[:80]!r}")
                return
            self._arm_provenance[arm] = prov
            if set(self._arm_provenance) >= set(self._prov_topics):
                self._prov_event.set()

        return on_provenance

    def _on_hello(self, msg: String) -> None:
        try:
            self._hello = json.loads(msg.data)
        except ValueError:
            self._hello = {"raw": msg.data}

    def _on_policy(self, msg: String) -> None:
        try:
            prov = json.loads(msg.data)
        except ValueError:
            return
        self._policy = prov if isinstance(prov, dict) and prov.get("active") else None
        self.policy_log.on_provenance(now_ns(self), prov)

    # ---- provenance -------------------------------------------------------------------------
    def _session_record(self) -> dict[str, Any]:
        """The shared session record (recording.config), once /arm/provenance arrived or the wait ran out."""
        if not self._prov_event.wait(0.0 if self._prov_waited else self.cfg.provenance_wait_s):
            self._prov_waited = True  # wait once per process, not at every start
            missing = [t for a, t in self._prov_topics.items() if a not in self._arm_provenance]
            self.get_logger().warning(
                f"no {', '.join(missing)} within {self.cfg.provenance_wait_s} s; "
                "recording control/arm provenance as 'unknown'"
            )
        got = dict(self._arm_provenance)
        prov = {a: p for a, p in got.items() if a is not None} if self.topics.table.arms else got.get(None)
        record = session_record(self.cfg, self.get_name(), prov, self._hello, self.topics.cameras)
        if self._policy is not None:  # a rollout: the episode names the policy that drove the arm
            record["policy"] = self._policy
        return record

    # ---- services ---------------------------------------------------------------------------
    def _answer(self, response: Trigger.Response, ans: Answer) -> Trigger.Response:
        response.success, response.message = bool(ans.ok), ans.message
        if not ans.ok:
            self.get_logger().warning(ans.message)
        return response

    async def _srv_start(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        task = self.get_parameter("task").value
        problem = task_problem(task)
        if problem:
            return self._answer(
                res,
                Answer(
                    False,
                    f"parameter {problem}; set it first: ros2 param set {self.get_fully_qualified_name()} task '...'",
                ),
            )
        # the episode starts once the writer is ready (samples of that moment seed it); its stop, when the
        # request arrives. Starting at the request's arrival makes test_frame_jitter_live repeat a frame for
        # some grid phases (cause not understood), so the start is not taken at the arrival.
        return self._answer(res, await run_in_thread(lambda: self.controller.start(task, lambda: now_ns(self))))

    async def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        end = arrival_or_now(self._control_exec, self)  # when the request arrived, not when it got its turn
        self.controller.request_stop(end)
        return self._answer(res, await run_in_thread(lambda: self.controller.stop(end)))

    async def _srv_stop_at(self, req: AddDiagnostics.Request, res: AddDiagnostics.Response) -> AddDiagnostics.Response:
        """Stop the episode at a given time.

        ``load_namespace`` carries ``{"end_ns": <int>}`` (ROS-clock ns): the episode ends there
        (``EpisodeController.stop_at``: refused before the episode's start, never after the arrival).
        """
        arrival = arrival_or_now(self._control_exec, self)  # first: the arrival of this request
        try:
            end = parse_stop_at(req.load_namespace)
        except ValueError as exc:
            ans = Answer(False, str(exc))
        else:
            ans = await run_in_thread(lambda: self.controller.stop_at(end, arrival))
        res.success, res.message = bool(ans.ok), ans.message
        if not ans.ok:
            self.get_logger().warning(ans.message)
        return res

    async def _srv_discard(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        return self._answer(res, await run_in_thread(self.controller.discard))

    async def _srv_label(self, req: AddDiagnostics.Request, res: AddDiagnostics.Response) -> AddDiagnostics.Response:
        """Label an episode's outcome.

        ``load_namespace`` carries ``{"outcome": "success"|"failure", "note": "...", "episode": N}``
        (note and episode optional: the episode in flight, else the last one saved this session).
        """
        try:
            arg = json.loads(req.load_namespace)
        except ValueError:
            arg = None
        if not isinstance(arg, dict) or set(arg) - {"outcome", "note", "episode"}:
            ans = Answer(
                False,
                'label_episode wants a JSON object {"outcome": "success"|"failure", '
                '"note": "...", "episode": N} (note, episode optional), got '
                f"{req.load_namespace[:80]!r}",
            )
        else:
            ep = arg.get("episode")
            if ep is not None and not (isinstance(ep, int) and not isinstance(ep, bool)):
                ans = Answer(False, f"label_episode: episode must be an integer, got {ep!r}")
            else:
                ans = await run_in_thread(
                    lambda: self.controller.label(str(arg.get("outcome")), arg.get("note", ""), ep)
                )
        res.success, res.message = bool(ans.ok), ans.message
        if not ans.ok:
            self.get_logger().warning(ans.message)
        return res

    async def _srv_delete(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        return self._answer(res, await run_in_thread(self.controller.delete_last))

    # ---- status / events --------------------------------------------------------------------
    def _publish_event(self, event: dict[str, Any]) -> None:
        self.pub_events.publish(String(data=json.dumps(event)))

    def _status_tick(self) -> None:
        """Publish the periodic status (tick thread).

        The delivery snapshot is taken here only; the controller also publishes the status on changes, from
        other threads, which reuse the last snapshot.
        """
        self._images_received = self.image_counts.snapshot(time.monotonic())
        self._publish_status()

    def _publish_status(self) -> None:
        st = self.controller.status(now_ns(self))
        st["images_received"] = self._images_received
        st["images_required"] = {"min_delivery": RECORDER_MIN_DELIVERY}
        actor = self.policy_log.actor()
        if actor is not None:  # who drives the arm, as this recorder has heard it (the rows' actor column)
            st["actor"] = actor
        if self.router.rejected:
            st["frames_wrong_size"] = dict(self.router.rejected)
        if self.decode_errors.counts:
            st["messages_undecodable"] = dict(self.decode_errors.counts)
        try:
            self.pub_status.publish(String(data=json.dumps(st, default=str)))
        except Exception:  # noqa: BLE001 - publisher gone during shutdown
            pass

    # ---- tick thread / shutdown -------------------------------------------------------------
    def _tick_loop(self) -> None:
        """Assemble rows as they fall due, and publish the status every ``1 / status_hz``.

        The status schedule advances by whole periods: a late one is published at once, never twice in a row
        to catch up.
        """
        c = self.controller
        clock, period = time.monotonic, self._status_period_s
        next_status = clock()
        while not self._stop.is_set():
            try:
                self.inputs.poll()  # what arrived since the last wake-up, before rows are assembled
            except Exception as exc:  # noqa: BLE001 - a failing take (a context shutting down) must not end the rows
                self.get_logger().error(f"inputs failed: {type(exc).__name__}: {exc}", throttle_duration_sec=10.0)
            now = clock()
            if now >= next_status:
                next_status = max(next_status + period, now)
                try:
                    self._status_tick()
                except Exception as exc:  # noqa: BLE001 - the rows go on; say it once a status period
                    self.get_logger().error(f"status failed: {type(exc).__name__}: {exc}", throttle_duration_sec=10.0)
            due = c.next_tick_ns()
            if due is None:
                self._stop.wait(min(0.02, max(0.0, next_status - clock())))
                continue
            delay = (due - time.time_ns()) / 1e9
            if delay > 0:
                self._stop.wait(min(delay, 0.05, max(0.0, next_status - clock())))
                continue
            try:
                c.tick(now_ns(self))
            except Exception as exc:  # noqa: BLE001 - keep ticking; the save reports writer errors
                self.get_logger().error(f"tick failed: {type(exc).__name__}: {exc}")
                self._stop.wait(0.01)

    def on_shutdown(self) -> None:
        """Stop the tick thread, save or discard the episode in flight (``on_shutdown``), stop the services."""
        if self._shutdown_done:
            return
        self._shutdown_done = True
        self._stop.set()
        self._ticker.join(2.0)
        ans = self.controller.shutdown(save=self.cfg.on_shutdown == "save")
        self.get_logger().info(f"shutdown: {ans.message}")
        self._control_stop.set()
        self._control_thread.join(2.0)
        self._control_exec.shutdown(timeout_sec=2.0)
        self._control.destroy_node()
        self.inputs.destroy()
