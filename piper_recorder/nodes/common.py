"""Shared rclpy plumbing for the thin nodes: stamps, typed parameters, and a clean spin/shutdown.

Every node declares its parameters from one typed dataclass (``declare_config``), so the config
class is the single place that names, types and defaults a parameter, and a bad value fails at
start-up with a message naming it.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import os
import sys
import threading
import time
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import rclpy
from builtin_interfaces.msg import Time
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from piper_recorder.cdr.decode import decode, warm_decoder
from piper_recorder.assembly.messages import stamp_to_ns  # noqa: F401 - the nodes' name for it
from piper_recorder.errors import PiperInputError
from piper_recorder.process.nodehelp import argument_problem, node_usage, rcl_message, wants_help
from piper_recorder.recording.config import coerce_param
from piper_recorder.process.supervision import TeardownWatchdog, on_stop_signals, watch_parent

C = TypeVar("C")

#: Frames a live (best-effort) image subscriber keeps while its process is off the CPU: a third of a second
#: at 30 fps. With 2 (the policy node) or 5 (``qos_profile_sensor_data``: quest_video, the dashboard) a
#: busy 2-core machine overwrote 1.8 % of 3 cameras' frames in the reader history before the executor took
#: them; history slots hold a frame only while it waits, so a deeper one costs nothing when the process keeps up.
LIVE_IMAGE_DEPTH = 10


#: Seconds of frames a recorder's (reliable) image subscription keeps while its process is off the CPU.
#: With 10 frames (a third of a second) a recorder descheduled for ~0.4 s beside two busy loops lost the two
#: oldest of 12 frames that reached its reader history meanwhile (reliable delivery ends at the reader's
#: history), and a row repeated a frame; a second covers the stalls seen there. Slots hold a frame only while
#: it waits, so a deeper history costs memory only while the recorder is behind.
RECORDER_IMAGE_SLACK_S = 1.0


def recorder_image_qos(fps: float, reliable: bool = True) -> QoSProfile:
    """QoS of a recorder's image subscription: reliable (every frame is a row's; ``image_reliability`` may
    choose best-effort), keep-last ``RECORDER_IMAGE_SLACK_S`` of frames at ``fps`` (at least
    ``LIVE_IMAGE_DEPTH``)."""
    return QoSProfile(depth=max(LIVE_IMAGE_DEPTH, math.ceil(RECORDER_IMAGE_SLACK_S * fps)),
                      history=HistoryPolicy.KEEP_LAST,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT)


def live_image_qos() -> QoSProfile:
    """QoS of a subscriber that shows or acts on the newest frames (quest_video, the policy node, the
    dashboard): best-effort, so a slow one never holds the camera's writer back (the recorders, which must
    keep every frame, subscribe reliable: ``recorder_base``), keep-last ``LIVE_IMAGE_DEPTH``."""
    return QoSProfile(depth=LIVE_IMAGE_DEPTH, history=HistoryPolicy.KEEP_LAST,
                      reliability=ReliabilityPolicy.BEST_EFFORT)


class ParameterError(PiperInputError, ValueError):
    """A node parameter has a wrong type or value; the message names the parameter."""


def ns_to_stamp(ns: int) -> Time:
    ns = int(ns)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


# Message types whose subscriptions take the serialized bytes and decode them with ``assembly.cdr``
# (the bag converter's decoder) instead of rclpy's conversion: the graph's hot topics.
DECODED_TYPES = frozenset({"sensor_msgs/msg/Image", "sensor_msgs/msg/JointState", "geometry_msgs/msg/PoseStamped",
                           "sensor_msgs/msg/Joy", "std_msgs/msg/String"})


def type_name(msg_class: Any) -> str:
    """"pkg/msg/Type" of an rclpy message class."""
    return f"{msg_class.__module__.split('.')[0]}/msg/{msg_class.__name__}"


class DecodeErrors:
    """Serialized messages that did not decode (never expected from a matched DDS type): counted per
    topic and logged at most every 10 s, never raised into the executor."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, node: Node, topic: str, exc: Exception, what: str = "did not decode") -> None:
        self.counts[topic] = self.counts.get(topic, 0) + 1
        node.get_logger().error(f"{topic}: a message {what} ({exc!r}); dropped "
                                f"({self.counts[topic]} so far)", throttle_duration_sec=10.0)


def create_decoded_subscription(node: Node, msg_class: Any, topic: str, callback: Callable[[Any], None],
                                qos: Any, errors: DecodeErrors | None = None, **kwargs: Any) -> Any:
    """``node.create_subscription`` whose callback gets the message decoded by ``assembly.cdr`` (a
    rosbags object with the ROS field names, ``uint8[]`` as numpy) for ``DECODED_TYPES``, and rclpy's
    own message otherwise. rclpy hands over the serialized bytes, so each message skips its C
    struct and the generated classes' per-field setters: about a quarter of a recorder's executor
    thread (``bench/executor_overhead.py``: ``events`` against ``decoded``). The graph's hot inputs
    are taken by ``PolledInputs`` instead (half that again); this is the executor form, for a
    subscription an executor must serve, and the bench's baseline."""
    name = type_name(msg_class)
    if name not in DECODED_TYPES:
        return node.create_subscription(msg_class, topic, callback, qos, **kwargs)
    bad = errors if errors is not None else DecodeErrors()
    # the type store and this type's decoder are built here, before the subscription exists: on the first
    # message they held the executor for ~0.35 s of CPU (seconds on a loaded machine) with images queuing
    warm_decoder(name)

    def on_serialized(data: bytes) -> None:
        try:
            msg = decode(data, name)
        except Exception as exc:  # a payload the store cannot read: a counted drop, the executor goes on
            bad.add(node, topic, exc)
            return
        callback(msg)
    return node.create_subscription(msg_class, topic, on_serialized, qos, raw=True, **kwargs)


class PolledInputs:
    """Subscriptions no executor serves: the thread that uses their messages takes them in batches
    (``poll``) at its own pace, instead of the executor waking for each one.

    Why: an executor wakes, dispatches and hands over each message alone, and in this graph every
    wake-up runs cold. A recorder's input (800 arm messages/s, two 640x480 cameras at 30 fps) cost its
    process 0.17-0.18 CPU-s/s through the EventsExecutor (with this decoder) and 0.09-0.11 taken every
    33 ms (``bench/executor_overhead.py``, interleaved runs). The recorders take theirs on the tick
    thread before each row, piper_arm its targets in its control loop, a sim camera the arm's pose
    when it renders. A subscription's history (its QoS depth) must hold what
    arrives between two polls.

    The subscriptions live on a node of their own, ``<node>_inputs`` (an executor serves a node's
    every entity), under the owner's topic names as resolved by the owner (its remappings apply).
    Each message is decoded by ``assembly.cdr`` for ``DECODED_TYPES`` (rclpy's message otherwise)
    and handed over with its DDS reception time (system time; the owner's ROS clock under
    ``use_sim_time``). A payload that does not decode, or whose handler raises, is a counted drop
    (``errors``, logged at most every 10 s): the thread that polls goes on (a control loop, the
    rows). ``poll`` may be called from several threads: one takes at a time, so each topic's messages
    are handled in order.
    """

    def __init__(self, owner: Node, errors: DecodeErrors | None = None):
        self.owner = owner
        self.node = Node(f"{owner.get_name()}_inputs", namespace=owner.get_namespace(), context=owner.context,
                         use_global_arguments=False, start_parameter_services=False)
        self.errors = errors if errors is not None else DecodeErrors()
        self._subs: list[tuple[Any, str | None, str, Callable[[Any, int], None]]] = []
        self._lock = threading.Lock()
        self._sim_time = bool(owner.get_parameter("use_sim_time").value)
        self._wake = self.node.create_guard_condition(lambda: None)   # ``interrupt``: ends a ``wait`` at once
        self._wait_set: tuple[Any, int] | None = None   # rclpy's wait set and how many subscriptions it holds

    def wait(self, timeout_s: float) -> bool:
        """Block until a message is waiting in any subscription (True), ``interrupt`` is called or the
        timeout passes (False). One thread waits at a time. rclpy's wait set, as ``rclpy.wait_for_message``
        uses it: a loop that acts on its inputs as they come (piper_arm's position control) sleeps here."""
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        with self._lock:
            subs = [sub for sub, *_ in self._subs]
        if self._wait_set is None or self._wait_set[1] != len(subs):
            self._wait_set = (_rclpy.WaitSet(len(subs), 1, 0, 0, 0, 0, self._context_handle()), len(subs))
        ws = self._wait_set[0]
        ws.clear_entities()
        for sub in subs:
            ws.add_subscription(sub.handle)
        ws.add_guard_condition(self._wake.handle)
        ws.wait(max(0, round(timeout_s * 1e9)))
        return bool(ws.get_ready_entities("subscription"))

    def _context_handle(self) -> Any:
        handle = self.node.context.handle
        if handle is None:
            raise RuntimeError("the inputs' context is shut down")
        return handle

    def interrupt(self) -> None:
        """End a ``wait`` in progress (a stop)."""
        self._wake.trigger()

    def subscribe(self, msg_class: Any, topic: str, handler: Callable[[Any, int], None], qos: Any) -> Any:
        """``handler(message, received_ns)`` for each message of ``topic`` taken by ``poll``."""
        name = type_name(msg_class)
        decoded = name in DECODED_TYPES
        if decoded:
            warm_decoder(name)   # the store is built now, not while the first batch waits
        resolved = self.owner.resolve_topic_name(topic)
        sub = self.node.create_subscription(msg_class, resolved, _never_called, qos, raw=decoded)
        with self._lock:   # a poller may be running already
            self._subs.append((sub, name if decoded else None, resolved, handler))
        return sub

    def poll(self) -> int:
        """Take and hand over every message waiting in every subscription; returns how many."""
        n = 0
        with self._lock:
            for sub, name, topic, handler in self._subs:
                h = sub.handle
                while True:
                    with h:
                        got = h.take_message(sub.msg_type, name is not None)
                    if got is None:
                        break
                    data, info = got
                    if name is not None:
                        try:
                            data = decode(data, name)
                        except Exception as exc:  # noqa: BLE001 - a counted drop, the batch goes on
                            self.errors.add(self.owner, topic, exc)
                            continue
                    received = now_ns(self.owner) if self._sim_time else int(info["received_timestamp"])
                    try:
                        handler(data, received)
                    except Exception as exc:  # noqa: BLE001 - a counted drop: the poller's loop must go on
                        self.errors.add(self.owner, topic, exc, "could not be handled")
                        continue
                    n += 1
        return n

    def destroy(self) -> None:
        self._wait_set = None
        self.node.destroy_node()


def _never_called(_msg: Any) -> None:
    raise AssertionError("a polled subscription's callback ran: its node was added to an executor")


def now_ns(node: Node) -> int:
    return node.get_clock().now().nanoseconds


_ROS_TYPES: dict[Any, Parameter.Type] = {
    bool: Parameter.Type.BOOL,
    int: Parameter.Type.INTEGER,
    float: Parameter.Type.DOUBLE,
    str: Parameter.Type.STRING,
    list[str]: Parameter.Type.STRING_ARRAY,
    list[float]: Parameter.Type.DOUBLE_ARRAY,
    list[int]: Parameter.Type.INTEGER_ARRAY,
    list[bool]: Parameter.Type.BOOL_ARRAY,
}


def _coerce(name: str, typ: Any, value: Any) -> Any:
    try:
        return coerce_param(name, typ, value)
    except ValueError as exc:
        raise ParameterError(str(exc)) from exc


def _descriptor(name: str, typ: Any, settable: bool) -> ParameterDescriptor:
    return ParameterDescriptor(
        name=name, type=_ROS_TYPES[typ].value, read_only=not settable,
        description="may change at run time" if settable else "read at start-up; restart the node to change it")


def declare_config(node: Node, cls: type[C], prefix: str = "") -> C:
    """Declare one statically typed ROS parameter per dataclass field (defaults from the class) and
    return the filled config.

    Fields of type bool/int/float/str and list[...] of those map to ROS parameters of that type; a
    field named ``foo`` with ``prefix='bar.'`` becomes parameter ``bar.foo``. A start-up value (``-p``,
    ``--params-file``) is read with ``coerce_param`` (an int passes for a float, anything else of the
    wrong type is a ParameterError naming it). Every parameter is read-only (the node reads it once)
    except the class's ``runtime_params``; a change to one of those is checked by the config's
    ``check_runtime(name, value)`` (a reason string refuses it). If the class has ``validate()``, it
    runs last and its ValueError is re-raised as ParameterError.
    """
    hints = typing.get_type_hints(cls)
    runtime: frozenset[str] = getattr(cls, "runtime_params", frozenset())
    values: dict[str, Any] = {}
    fields: dict[str, str] = {}   # parameter name -> field name
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        typ = hints[f.name]
        if typ not in _ROS_TYPES:
            continue  # not a ROS parameter (e.g. nested config filled by the node itself)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        name = prefix + f.name
        # Declared untyped first to receive the start-up value as rcl parsed it (30 for a float field,
        # [] without a type), then typed by set_descriptor with the coerced value.
        given = node.declare_parameter(name, None, ParameterDescriptor(dynamic_typing=True)).value
        value = default if given is None else _coerce(name, typ, given)
        if value is not None:
            node.set_descriptor(name, _descriptor(name, typ, f.name in runtime),
                                Parameter(name, _ROS_TYPES[typ], value).get_parameter_value())
        values[f.name] = value
        fields[name] = f.name
    try:
        cfg = cls(**values)
        validate = getattr(cfg, "validate", None)
        if callable(validate):
            validate()
    except ParameterError:
        raise
    except (ValueError, TypeError) as exc:
        raise ParameterError(f"{node.get_name()}: {exc}") from exc
    check = getattr(cfg, "check_runtime", None)
    if runtime and callable(check):
        def _on_set(params: list[Parameter]) -> SetParametersResult:
            for p in params:
                field_name = fields.get(p.name)
                if field_name in runtime:
                    reason = check(field_name, p.value)
                    if reason:
                        return SetParametersResult(successful=False, reason=f"{p.name}: {reason}")
            return SetParametersResult(successful=True)

        node.add_on_set_parameters_callback(_on_set)
    return cfg


def message_callback(fn: Callable[..., None]) -> Callable[[Any], None]:
    """``fn`` itself, typed as a subscription callback taking any message, for a lambda passed to
    ``create_subscription`` (which may bind loop variables as defaults: ``lambda m, c=cam: ...``). Jazzy's and
    Humble's rclpy declare the callback's parameter with a type variable no argument binds, so a bare lambda's
    parameter cannot be inferred there; Kilted's binds it to the message class, which is untyped: ``Any``
    either way."""
    return fn


_NO_PARAMETERS = inspect.Signature()


def timer_callback(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` as a timer callback whose signature is stated (no parameters). rclpy's executors look for a
    ``TimerInfo`` parameter in a timer callback's ``inspect.signature`` on every call; for a bound method
    that is pure Python costing tens of microseconds (a 50 Hz timer: ~3 ms of CPU a second on a busy
    machine), for a function carrying ``__signature__`` one attribute read. The call itself is ``fn()``."""
    def call() -> None:
        fn()
    call.__signature__ = _NO_PARAMETERS  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "timer_callback")
    return call


class FixedRateLoop:
    """``tick()`` every ``period_s`` on its own daemon thread (teleop's and the policy's control loops).

    The schedule advances by whole periods on the monotonic clock (no drift from the tick's own
    duration); a late tick runs at once; a stall of more than a period resyncs rather than bursting
    catch-up ticks at the arm. ``stop()`` wakes the wait at once and joins. An exception from
    ``tick`` goes to ``on_error`` and the loop goes on; without ``on_error`` it ends the loop.
    """

    def __init__(self, period_s: float, tick: Callable[[], None], name: str,
                 on_error: Callable[[Exception], None] | None = None):
        self.period_s, self.tick, self.on_error = period_s, tick, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = self.period_s
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                if self._stop.wait(delay):
                    break
            elif delay < -period:
                next_t = time.monotonic()   # fell behind (machine stalled): resync, never burst
            if self.on_error is None:
                self.tick()
                continue
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the owner decides (the policy pauses and holds)
                self.on_error(exc)

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)


def spin_until(executor: Executor, stop: threading.Event) -> None:
    # spin_once in a loop rather than spin(): rclpy's EventsExecutor.spin() runs no timers when it is
    # spun from a thread other than the main one (Kilted wheels); spin_once does. spin_once runs one
    # callback: rclpy.ok() (the context's lock, ~1 us) is asked after a wait of 50 ms or more (nothing came:
    # a shut-down context delivers nothing, its spin_once waits out the timeout) and every 256 callbacks,
    # not after every one of a recorder's ~500 messages a second.
    ok, clock = rclpy.ok, time.monotonic
    n = 0
    try:
        while not stop.is_set():
            t = clock()
            executor.spin_once(timeout_sec=0.1)
            n += 1
            if (n & 255 == 0 or clock() - t >= 0.05) and not ok():
                break
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


EXECUTORS = ("events", "single", "multi")
# The first rclpy release of each line whose EventsExecutor awaits a coroutine service callback (ros2/rclpy
# pull 1478 and its Jazzy backport; before it the coroutine went to send_response, a TypeError, and the
# call never got an answer): Jazzy 7.1.11 (PyPI has 7.1.6), Kilted from 9.1.2 on as checked here, Rolling
# 10.0.1. A line or release not listed is taken not to (a single-threaded executor always does).
EVENTS_AWAIT_SERVICES_FROM = {7: (7, 1, 11), 9: (9, 1, 2), 10: (10, 0, 1)}


def rclpy_version() -> tuple[int, ...] | None:
    """The installed rclpy's release (PyPI's ``ros-rclpy`` or a ROS install's ``rclpy`` metadata)."""
    from importlib import metadata

    for dist in ("ros-rclpy", "rclpy"):
        try:
            text = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        parts = [int(p) for p in text.split(".")[:3] if p.isdigit()]
        return tuple(parts) if len(parts) == 3 else None
    return None


def events_executor_awaits_services(version: tuple[int, ...] | None = None) -> bool:
    """Whether this rclpy's EventsExecutor runs a coroutine service callback to its answer."""
    version = rclpy_version() if version is None else version
    first = EVENTS_AWAIT_SERVICES_FROM.get(version[0]) if version else None
    return first is not None and version is not None and version >= first


def executor_for(node: Node, kind: str = "events") -> str:
    """``kind``, unless it is ``events`` and the node answers a service with a coroutine this rclpy's
    EventsExecutor cannot await: then ``single`` (the node's services are what it spins for)."""
    if kind == "events" and not events_executor_awaits_services() and any(
            inspect.iscoroutinefunction(srv.callback) for srv in node.services):
        return "single"
    return kind


def executor_class(kind: str = "events") -> Callable[..., Executor]:
    """What makes the executor of ``kind``: its class, or for ``events`` rclpy's EventsExecutor (a factory
    function, not a class). ``events`` (default): single-threaded, lowest cost per callback and the
    only one that kept up with a recorder's input in ``bench/executor_overhead.py`` (the
    MultiThreadedExecutor delivered half the 200 Hz arm messages and lost images); an rclpy without it
    (Humble's) gets the SingleThreadedExecutor instead. ``single``: the classic SingleThreadedExecutor;
    ``multi``: MultiThreadedExecutor (4 threads).
    Callbacks must not block on single-threaded executors: long work goes to a thread and a service
    callback awaits it as a coroutine (see ``run_in_thread``).
    """
    if kind == "events":
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError:
            return SingleThreadedExecutor
        return EventsExecutor
    if kind == "single":
        return SingleThreadedExecutor
    if kind == "multi":
        return MultiThreadedExecutor
    raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")


def make_executor(kind: str = "events") -> Executor:
    """A new executor of ``executor_class(kind)`` (rclpy initialised)."""
    cls = executor_class(kind)
    return cls(num_threads=4) if cls is MultiThreadedExecutor else cls()


class ArrivalExecutor(SingleThreadedExecutor):
    """A single-threaded executor that notes each service request's arrival before its callback runs.

    ``arrival_ns``: the DDS reception time of the request whose callback is running
    (``rmw_service_info_t.received_timestamp``, system time), read by a callback as its first
    statement: on a single thread nothing else runs between the take and that read. A recorder ends an
    episode there, however long the request then waited for the GIL or the CPU. rclpy's executors give
    a callback the request only, so the take is done here: the Jazzy-and-later shape
    (``_take_service`` returns the coroutine to run) or the Humble/Iron one (``_execute_service``).
    With neither, or no timestamp, ``arrival_ns`` stays None and callers use their clock's now.
    """

    def __init__(self, context: Any = None) -> None:
        super().__init__(context=context)
        self.arrival_ns: int | None = None

    def _note(self, header: Any) -> None:
        stamp = getattr(header, "received_timestamp", None)
        self.arrival_ns = int(stamp) if isinstance(stamp, int) and stamp > 0 else None

    if hasattr(Executor, "_execute_service"):   # Humble/Iron: take, then execute with the header
        async def _execute_service(self, srv: Any, request_and_header: Any) -> None:
            if request_and_header is not None:
                self._note(request_and_header[1])
            await super()._execute_service(srv, request_and_header)  # type: ignore[misc]
    else:
        def _take_service(self, srv: Any) -> Any:
            from rclpy.exceptions import InvalidHandle
            from rclpy.executors import await_or_execute

            try:
                with srv.handle:
                    request, header = srv.handle.service_take_request(srv.srv_type.Request)
            except InvalidHandle:
                return None

            async def _execute() -> None:
                if header is None:
                    return
                self._note(header)
                response = await await_or_execute(srv.callback, request, srv.srv_type.Response())
                srv.send_response(response, header)
            return _execute


def arrival_or_now(executor: Executor, node: Node, max_age_s: float = 5.0) -> int:
    """The arrival time (ROS ns) of the request being served on ``executor`` if it is an
    ``ArrivalExecutor`` and the node runs on system time (no ``use_sim_time``); else now."""
    now = now_ns(node)
    arrival = getattr(executor, "arrival_ns", None)
    if arrival is None or node.get_parameter("use_sim_time").value:
        return now
    return arrival if 0 <= now - arrival <= max_age_s * 1e9 else now


async def run_in_thread(fn: Callable[[], Any]) -> Any:
    """Await ``fn()`` run on a short-lived thread, from a coroutine callback, without blocking the executor."""
    from rclpy.task import Future

    fut: Future = Future()

    def _run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the awaiting callback
            fut.set_exception(typing.cast(Exception, exc))  # rclpy re-raises any (Kilted's stub says Exception)

    threading.Thread(target=_run, name="service-work", daemon=True).start()
    return await fut


def run_node(factory: Callable[[], Node], args: Sequence[str] | None = None, executor: str = "events") -> int:
    """Create the node, spin it (``make_executor(executor_for(node, executor))``) until SIGINT, SIGTERM or
    SIGHUP, or until the process that started it is gone (``supervision.watch_parent``: a SIGKILLed
    launcher), then shut down cleanly.

    The node's ``on_shutdown()`` (if any) runs while rclpy is still up, so a recorder can save or
    discard the episode in flight and publish its last event before the process exits.
    """
    argv = list(sys.argv if args is None else args)
    if wants_help(argv):   # rcl would ignore --help and start the node: print usage, start nothing
        module = sys.modules.get(getattr(factory, "__module__", ""))
        print(node_usage(argv[0] if argv else "", getattr(module, "__doc__", None)), end="")
        return 0
    prog = os.path.basename(argv[0]) if argv else "node"
    problem = argument_problem(argv)   # rclpy.init refuses with a traceback, or ignores what is not its own
    if problem:
        print(f"{prog}: error: {problem}", file=sys.stderr)
        return 2
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    except rclpy_implementation.RCLError as exc:   # e.g. an invalid ROS_DOMAIN_ID in the environment
        print(f"{prog}: error: cannot start ROS: {rcl_message(exc)}", file=sys.stderr)
        return 2
    stop = threading.Event()
    on_stop_signals(lambda _sig: stop.set())
    watch_parent(stop.set)
    node: Node | None = None
    code = 0
    teardown = TeardownWatchdog(argv[0] if argv else "node")
    try:
        try:
            node = factory()
        except ParameterError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
        teardown.what = node.get_name()

        spin = make_executor(executor_for(node, executor))
        spin.add_node(node)
        stop_spin = threading.Event()
        spinner = threading.Thread(target=spin_until, args=(spin, stop_spin), name="executor", daemon=True)
        spinner.start()
        while not stop.wait(0.1):
            if not rclpy.ok() or not spinner.is_alive():
                break
        hook = getattr(node, "on_shutdown", None)
        if callable(hook):
            hook()  # the executor still spins: the hook may publish and call services
        teardown.start()   # the node's work is done; what is left is the middleware's
        stop_spin.set()
        spinner.join(timeout=2.0)
        spin.shutdown(timeout_sec=2.0)
    finally:
        teardown.start()
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        teardown.finish()
    return code
