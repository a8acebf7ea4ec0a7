"""python-can's ``virtual`` bus without its per-frame overheads, for the emulated arm link.

Both ends of the emulated arm link use it: the emulator (~2,300 feedback frames a second) and
piper_sdk's side (its reader thread takes every one of them; its sending side a few command frames
per control tick). What python-can's ``VirtualBus`` spends per frame and this one does not:

* a defensive ``deepcopy`` of each sent message per receiver (more than encoding the frame). Each
  sender builds a fresh ``can.Message`` per frame and never touches it again (the emulator's
  ``send_frames``, the SDK's ``C_STD_CAN.SendCanMessage``), so the first receiver gets the message
  itself and any further one a plain copy;
* a ``queue.Queue`` per receiver (a Python-level lock and two condition variables per put and per
  get): a ``queue.SimpleQueue`` (C, same ``put``/``get(block, timeout)`` calls) replaces it;
* ``BusABC.recv``'s filter and logging loop on every receive, for a bus that has no filters.

``send_frames`` hands a tick's frames over in one call, in order, with one receive stamp.
Only ever used for ``interface="virtual"``: a real (SocketCAN) bus is the SDK's, untouched.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence

import can
from can.interfaces.virtual import VirtualBus, channels_lock


def _direct_queue(bus: VirtualBus) -> None:
    """Replace the bus's receive queue in its channel by a SimpleQueue, keeping what it held. A frame
    sent at the very instant of the swap may be missed, as by a reader that opens on a busy bus.
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
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        _direct_queue(self)

    def send(self, msg: can.Message, timeout: float | None = None) -> None:
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
        if self._filters is not None:
            return super().recv(timeout)
        self._check_if_open()
        q = self.queue
        try:
            # Non-blocking first, which leaves an empty queue's lock held: Python 3.10's timed get()
            # that finds the lock free waits forever once its deadline has passed (timeout 0: ~1 us).
            return q.get_nowait()
        except queue.Empty:
            if timeout is not None and timeout <= 0:
                return None
        try:
            return q.get(True, timeout)
        except queue.Empty:
            return None


def make_direct(bus: object) -> bool:
    """Turn a python-can ``VirtualBus`` the SDK opened into a ``DirectVirtualBus`` (same object, same
    channel: ``send``/``recv`` change and its receive queue becomes a SimpleQueue); False, and nothing
    changed, for any other kind of bus.
    """
    if type(bus) is VirtualBus:
        bus.__class__ = DirectVirtualBus
        _direct_queue(bus)
        return True
    return isinstance(bus, DirectVirtualBus)
