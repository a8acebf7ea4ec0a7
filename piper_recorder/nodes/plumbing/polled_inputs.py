"""Subscriptions no executor serves, taken in batches by the thread that uses them (``PolledInputs``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.qos import HistoryPolicy

from piper_recorder.cdr.decode import decode, warm_decoder

from .decoded_subscription import DECODED_TYPES, DecodeErrors, type_name
from .stamps import now_ns

BOUNDLESS_TAKE = 1000  # a poll's most from a KEEP_ALL subscription (its history has no depth)


class PolledInputs:
    """Subscriptions no executor serves: the thread that uses their messages takes them in batches (``poll``).

    Why: an executor wakes, dispatches and hands over each message alone, and in this graph every wake-up
    runs cold; taking a batch at the user's own pace costs about half (``bench/executor_overhead.py``). The
    recorders take theirs on the tick thread before each row, piper_arm its targets in its control loop, a
    sim camera the arm's pose when it renders. A subscription's history (its QoS depth) must hold what
    arrives between two polls.

    The subscriptions live on a node of their own, ``<node>_inputs`` (an executor serves a node's
    every entity), under the owner's topic names as resolved by the owner (its remappings apply).
    Each message is decoded by ``cdr.decode`` for ``DECODED_TYPES`` (rclpy's message otherwise)
    and handed over with its DDS reception time (system time; the owner's ROS clock under
    ``use_sim_time``). A payload that does not decode, or whose handler raises, is a counted drop
    (``errors``, logged at most every 10 s): the thread that polls goes on (a control loop, the
    rows). ``poll`` may be called from several threads: one takes at a time, so each topic's messages
    are handled in order. A poll takes at most a subscription's history depth from it (what it can hold:
    ``BOUNDLESS_TAKE`` for KEEP_ALL): a topic whose handler is slower than its messages come (piper_arm
    solving IK for targets it refuses) must not keep the poll taking its newest forever, while the other
    topics (the gripper) and the poller's own work (the control tick) wait.
    """

    def __init__(self, owner: Node, errors: DecodeErrors | None = None):
        self.owner = owner
        self.node = Node(
            f"{owner.get_name()}_inputs",
            namespace=owner.get_namespace(),
            context=owner.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        self.errors = errors if errors is not None else DecodeErrors()
        self._subs: list[tuple[Any, str | None, str, Callable[[Any, int], None], int]] = []
        self._lock = threading.Lock()
        self._sim_time = bool(owner.get_parameter("use_sim_time").value)
        self._wake = self.node.create_guard_condition(lambda: None)  # ``interrupt``: ends a ``wait`` at once
        self._wait_set: tuple[Any, int] | None = None  # rclpy's wait set and how many subscriptions it holds

    def wait(self, timeout_s: float) -> bool:
        """Block until a message is waiting in any subscription (True), or ``interrupt`` or the timeout (False).

        One thread waits at a time. rclpy's wait set, as ``rclpy.wait_for_message``
        uses it: a loop that acts on its inputs as they come (piper_arm's position control) sleeps here.
        """
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
            warm_decoder(name)  # the store is built now, not while the first batch waits
        resolved = self.owner.resolve_topic_name(topic)
        sub = self.node.create_subscription(msg_class, resolved, _never_called, qos, raw=decoded)
        profile = sub.qos_profile
        keep_last = profile.history != HistoryPolicy.KEEP_ALL and profile.depth > 0
        most = profile.depth if keep_last else BOUNDLESS_TAKE
        with self._lock:  # a poller may be running already
            self._subs.append((sub, name if decoded else None, resolved, handler, most))
        return sub

    def poll(self) -> int:
        """Take and hand over the messages waiting in every subscription (at most its depth each); returns how many."""
        n = 0
        with self._lock:
            for sub, name, topic, handler, most in self._subs:
                h = sub.handle
                for _ in range(most):
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
        """Destroy the inputs' node and its subscriptions."""
        self._wait_set = None
        self.node.destroy_node()


def _never_called(_msg: Any) -> None:
    raise AssertionError("a polled subscription's callback ran: its node was added to an executor")
