"""The one input router: a received message -> the episode controller's inputs (no ROS imports).

The recorder nodes subscribe ``router.routes`` and pass every message to ``route``; the bag converter
passes each decoded bag message the same way (with its log time as the receive time). So joint names,
gripper scales, extra inputs of a mapping, image checks and the stamps (header, or the receive time for
unstamped messages) are applied identically live and offline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from piper_recorder.assembly.messages import Adapter, image_to_numpy, stamp_ns

from .inputs import TopicMap

# route kinds: the nodes pick a QoS per kind (LATCHED: an input whose topic is latched, ``InputSpec.latched``;
# STREAM: one whose samples supersede each other at a high rate, ``InputSpec.stream``)
IMAGE, INPUT, LATCHED, STREAM, TEXT = "image", "input", "latched", "stream", "text"
Handler = Callable[[Any, int], None]


class InputSink(Protocol):
    """What the router feeds (``EpisodeController``)."""

    def add_input(self, name: str, stamp_ns: int, values: np.ndarray) -> None:
        """Add a sample of a table input."""

    def add_frame(self, camera: str, stamp_ns: int, rgb: np.ndarray, depth: np.ndarray | None = None) -> None:
        """Add a camera frame (with its depth when already paired)."""

    def add_color(self, camera: str, stamp_ns: int, rgb: np.ndarray) -> None:
        """Add a colour image to pair with its depth image."""

    def add_depth(self, camera: str, stamp_ns: int, depth: np.ndarray) -> None:
        """Add a depth image to pair with its colour image."""

    def add_raw_quest(self, stamp_ns: int, line: str) -> None:
        """Add one raw headset line."""


@dataclass(frozen=True)
class Route:
    """One subscription a recorder makes: topic, message type and how its messages are handled."""

    topic: str
    msg_type: str  # "pkg/msg/Type"
    kind: str  # IMAGE | INPUT | LATCHED | STREAM | TEXT


class InputRouter:
    """Topic -> handlers for one recorder format (``depth``: RGB-D, colour and depth paired by the sink).

    Frames of the wrong size or encoding are dropped, counted in ``rejected`` per camera, and ``warn``
    is called once per camera with the reason.
    """

    def __init__(
        self, topics: TopicMap, sink: InputSink, *, depth: bool, warn: Callable[[str], object] = lambda m: None
    ):
        self.sink, self.depth, self._warn = sink, depth, warn
        self.rejected: dict[str, int] = {}
        self._handlers: dict[str, list[Handler]] = {}
        self._types: dict[str, tuple[str, str]] = {}
        self._timed: set[str] = set()  # topics with a handler that reads the receive time
        for spec, b in topics.active():
            assert b.topic is not None
            self._on(
                b.topic,
                b.adapter.msg_type,
                LATCHED if spec.latched else STREAM if spec.stream else INPUT,
                self._vector(spec.name, b.adapter),
                timed=not b.adapter.stamped,
            )
        self._sizes = {cam: (ct.height, ct.width) for cam, ct in topics.cameras.items()}
        for cam, ct in topics.cameras.items():
            self._on(ct.color, "sensor_msgs/msg/Image", IMAGE, self._image_handler(cam, False))
            if depth and ct.depth:
                self._on(ct.depth, "sensor_msgs/msg/Image", IMAGE, self._image_handler(cam, True))
        if not depth and topics.raw_quest:
            self._on(
                topics.raw_quest,
                "std_msgs/msg/String",
                TEXT,
                lambda m, now: sink.add_raw_quest(now, m.data),
                timed=True,
            )

    @property
    def routes(self) -> list[Route]:
        """The subscriptions the recorder makes, one per topic."""
        return [Route(t, typ, kind) for t, (typ, kind) in self._types.items()]

    def route(self, topic: str, msg: Any, now_ns: int) -> None:
        """One message received on ``topic`` at ``now_ns`` (the ROS clock, or the bag's log time)."""
        for fn in self._handlers[topic]:
            fn(msg, now_ns)

    def uses_receive_time(self, topic: str) -> bool:
        """Whether a message on ``topic`` needs its receive time (an unstamped input, the headset lines).

        The others are stamped by their header alone.
        """
        return topic in self._timed

    def handler(self, topic: str) -> Handler:
        """``route`` for ``topic`` as one call ``(message, receive_ns)`` (its only handler, when it has one)."""
        fns = self._handlers[topic]
        if len(fns) == 1:
            return fns[0]
        return lambda msg, now: self.route(topic, msg, now)

    def receiver(self, topic: str, now: Callable[[], int]) -> Callable[[Any], None]:
        """An executor's subscription callback for ``topic``: ``route`` with the receive time from ``now()``.

        ``now()`` is read only for a topic that uses it (``uses_receive_time``): reading the ROS clock has a cost per
        message that stamped messages never need. The recorders take their inputs with the reception time instead
        (``nodes.plumbing.polled_inputs.PolledInputs``: ``handler``).
        """
        fn = self.handler(topic)
        if topic in self._timed:
            return lambda msg: fn(msg, now())
        return lambda msg: fn(msg, 0)  # 0: no handler of this topic reads it

    def _on(self, topic: str, msg_type: str, kind: str, fn: Handler, timed: bool = False) -> None:
        have = self._types.setdefault(topic, (msg_type, kind))
        if have[0] != msg_type:
            raise ValueError(f"topic {topic} is mapped as {have[0]} and as {msg_type}")
        self._handlers.setdefault(topic, []).append(fn)
        if timed:
            self._timed.add(topic)

    def _vector(self, name: str, adapter: Adapter) -> Handler:
        add, read = self.sink.add_input, adapter.read
        if adapter.stamped:

            def handle(msg: Any, now: int) -> None:
                v = read(msg)
                if v is not None:
                    add(name, stamp_ns(msg), v)
        else:

            def handle(msg: Any, now: int) -> None:
                v = read(msg)
                if v is not None:
                    add(name, now, v)

        return handle

    def _image_handler(self, cam: str, depth: bool) -> Handler:
        sink = self.sink
        add = sink.add_frame if not self.depth else sink.add_depth if depth else sink.add_color
        size, image = self._sizes[cam], self._image

        def handle(msg: Any, now: int) -> None:
            img = image(cam, msg, depth, size)
            if img is not None:
                add(cam, stamp_ns(msg), img)

        return handle

    def _image(self, cam: str, msg: Any, depth: bool, size: tuple[int, int]) -> np.ndarray | None:
        try:
            img = image_to_numpy(msg)
        except ValueError as exc:
            self._reject(cam, str(exc))
            return None
        if img.shape[:2] != size or (not depth and img.ndim != 3):
            self._reject(cam, f"got {img.shape} frames, configured {size[0]}x{size[1]}")
            return None
        return img

    def _reject(self, cam: str, why: str) -> None:
        n = self.rejected.get(cam, 0) + 1
        self.rejected[cam] = n
        if n == 1:
            self._warn(f"{cam}: dropping frames: {why}")
