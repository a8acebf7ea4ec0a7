"""python-can's ``virtual`` bus without its defensive per-receiver ``deepcopy`` of each sent message.

Both ends of the emulated arm link send through it: the emulator (~2,300 feedback frames a second)
and piper_sdk's sending side (a few command frames per control tick). Each sender builds a fresh
``can.Message`` per frame and never touches it again (the emulator's ``_send``, the SDK's
``C_STD_CAN.SendCanMessage``), so the first receiver gets the message itself and any further one a
plain copy; the deepcopy alone cost more than encoding the frame. Receiving is python-can's own.
Only ever used for ``interface="virtual"``: a real (SocketCAN) bus is the SDK's, untouched.
"""
from __future__ import annotations

import time

import can
from can.interfaces.virtual import VirtualBus


class DirectVirtualBus(VirtualBus):
    def send(self, msg: can.Message, timeout: float | None = None) -> None:
        self._check_if_open()
        stamp = time.time()
        first = True
        for bus_queue in self.channel:
            if bus_queue is self.queue:
                continue
            m = msg if first else can.Message(arbitration_id=msg.arbitration_id, data=msg.data,
                                              is_extended_id=msg.is_extended_id, dlc=msg.dlc)
            first = False
            m.timestamp, m.channel, m.is_rx = stamp, self.channel_id, True
            bus_queue.put(m, block=True, timeout=timeout)


def make_direct(bus: object) -> bool:
    """Turn a python-can ``VirtualBus`` the SDK opened into a ``DirectVirtualBus`` (same object, same
    queues: only ``send`` changes); False, and nothing changed, for any other kind of bus."""
    if type(bus) is VirtualBus:
        bus.__class__ = DirectVirtualBus
        return True
    return isinstance(bus, DirectVirtualBus)
