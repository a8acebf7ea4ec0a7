"""python-can's ``virtual`` bus without its per-frame overheads, for the emulated arm link.

Both ends of the emulated link use it: the emulator's feedback stream, piper_sdk's reader and its command
side. Against ``VirtualBus`` it drops, per frame: the defensive ``deepcopy`` per receiver (every sender
builds a fresh ``can.Message`` and never touches it again, so the first receiver gets the message itself,
any further one a plain copy); the ``queue.Queue`` per receiver (a C ``queue.SimpleQueue``, same calls,
replaces it); and ``BusABC.recv``'s filter and logging loop, on a bus without filters. ``send_frames``
hands a tick's frames over in one call, in order, with one receive stamp. Only for
``interface="virtual"``: a real (SocketCAN) bus is the SDK's, untouched.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence

import can
from can.interfaces.virtual import VirtualBus, channels_lock


def _direct_queue(bus: VirtualBus) -> None:
    """Replace the bus's receive queue in its channel by a SimpleQueue, keeping what it held.

    A frame sent at the very instant of the swap may be missed, as by a reader that opens on a busy bus.
    """
    old = bus.queue
    if isinstance(old, queue.SimpleQueue):
        return
    new: queue.SimpleQueue[can.Message] = queue.SimpleQueue()
    with channels_lock:
        for i, q in enumerate(bus.channel):
            if q is old:
                bus.channel[i] = new  # type: ignore[call-overload]  # same put/get as a Queue
        while True:
            try:
                new.put(old.get_nowait())
            except queue.Empty:
                break
        bus.queue = new  # type: ignore[assignment]


class DirectVirtualBus(VirtualBus):
    """A ``VirtualBus`` with a SimpleQueue per receiver and no per-frame deepcopy (module docstring)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        _direct_queue(self)

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        """Deliver ``msg`` to every other end: the message itself to the first, a plain copy to the rest."""
        self._check_if_open()
        stamp = time.time()
        first = True
        for bus_queue in self.channel:
            if bus_queue is self.queue:
                continue
            m = (
                msg
                if first
                else can.Message(
                    arbitration_id=msg.arbitration_id, data=msg.data, is_extended_id=msg.is_extended_id, dlc=msg.dlc
                )
            )
            first = False
            m.timestamp, m.channel, m.is_rx = stamp, self.channel_id, True
            bus_queue.put(m, block=True, timeout=timeout)

    def send_frames(self, frames: Sequence[tuple[int, bytes]]) -> None:
        """Send standard-id data frames ``(id, payload)`` in order; each receiver gets its own messages."""
        self._check_if_open()
        stamp, ch = time.time(), self.channel_id
        for bus_queue in self.channel:
            if bus_queue is self.queue:
                continue
            put = bus_queue.put
            for fid, data in frames:
                put(can.Message(stamp, fid, False, False, False, ch, None, data, False, True))

    def recv(self, timeout: float | None = None) -> can.Message | None:
        """The next frame, waiting up to ``timeout`` s (None: for ever); None on timeout."""
        if self._filters is not None:
            return super().recv(timeout)
        self._check_if_open()
        q = self.queue
        try:
            # Non-blocking first, which leaves an empty queue's lock held: Python 3.10's timed get()
            # that finds the lock free waits forever once its deadline has passed.
            return q.get_nowait()
        except queue.Empty:
            if timeout is not None and timeout <= 0:
                return None
        try:
            return q.get(True, timeout)
        except queue.Empty:
            return None


def make_direct(bus: object) -> bool:
    """Turn a python-can ``VirtualBus`` the SDK opened into a ``DirectVirtualBus``; False for any other bus.

    The same object on the same channel: ``send``/``recv`` change and its receive queue becomes a
    SimpleQueue. Any other kind of bus is left unchanged.
    """
    if type(bus) is VirtualBus:
        bus.__class__ = DirectVirtualBus
        _direct_queue(bus)
        return True
    return isinstance(bus, DirectVirtualBus)
