"""The server side of RFC 6455 WebSockets on asyncio streams, standard library only (no ROS).

Why hand-written: the headset page needs one bounded, loopback-only socket, and a dependency for it
would add an install for a few dozen lines. What it does: the opening handshake's accept key, reading
masked client frames (a client frame without the mask is a protocol error, as the RFC demands),
reassembling fragmented messages up to ``max_size`` (larger: the connection is closed with 1009),
answering pings, and writing unmasked server frames. It never buffers an unbounded message.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from dataclasses import dataclass

from piper_recorder.errors import PiperError

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CLOSE_NORMAL, CLOSE_PROTOCOL, CLOSE_UNSUPPORTED, CLOSE_POLICY, CLOSE_TOO_BIG = 1000, 1002, 1003, 1008, 1009
MAX_CLOSE_REASON = 123  # a control frame's payload is at most 125 bytes, 2 of them the code


class WebSocketClosed(PiperError):
    """The peer closed, or broke the protocol (``code`` is what the server answers with)."""

    def __init__(self, code: int, reason: str = ""):
        super().__init__(f"{code} {reason}".strip())
        self.code, self.reason = code, reason


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1((key.strip() + GUID).encode()).digest()).decode()


def valid_key(key: str | None) -> bool:
    """A client key is 16 random bytes, base64-encoded."""
    if not key:
        return False
    try:
        return len(base64.b64decode(key.strip(), validate=True)) == 16
    except ValueError:
        return False


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked server frame."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def close_frame(code: int, reason: str = "") -> bytes:
    """A close frame; the reason is cut to ``MAX_CLOSE_REASON`` bytes on a character boundary.

    A browser fails a connection whose close reason is not valid UTF-8.
    """
    text = reason.encode("utf-8", "replace")
    if len(text) > MAX_CLOSE_REASON:
        text = text[:MAX_CLOSE_REASON].decode("utf-8", "ignore").encode()
    return encode_frame(OP_CLOSE, struct.pack("!H", code) + text)


def _unmask(mask: bytes, data: bytes) -> bytes:
    if not data:
        return data
    n = len(data)
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ key).to_bytes(n, "big")


@dataclass
class Message:
    """One data message: text (UTF-8) or binary."""

    text: bool
    data: bytes


class FrameReader:
    """Messages from one client connection; control frames are handled here (ping -> pong)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_size: int):
        self._r, self._w, self.max_size = reader, writer, max_size

    async def _frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = await self._r.readexactly(2)
        if b0 & 0x70:
            raise WebSocketClosed(CLOSE_PROTOCOL, "reserved bits set")
        if not b1 & 0x80:
            raise WebSocketClosed(CLOSE_PROTOCOL, "client frame not masked")
        fin, opcode, n = bool(b0 & 0x80), b0 & 0x0F, b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self._r.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self._r.readexactly(8))
        if opcode >= 0x8 and (n > 125 or not fin):
            raise WebSocketClosed(CLOSE_PROTOCOL, "bad control frame")
        if n > self.max_size:
            raise WebSocketClosed(CLOSE_TOO_BIG, f"frame above {self.max_size} bytes")
        mask = await self._r.readexactly(4)
        return fin, opcode, _unmask(mask, await self._r.readexactly(n))

    async def read(self) -> Message:
        """The next data message.

        Raises :class:`WebSocketClosed` on close or a protocol error and ``asyncio.IncompleteReadError`` when
        the connection drops.
        """
        parts: list[bytes] = []
        first: int | None = None
        size = 0
        while True:
            fin, opcode, payload = await self._frame()
            if opcode == OP_PING:
                self._w.write(encode_frame(OP_PONG, payload))
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else CLOSE_NORMAL
                raise WebSocketClosed(code, "closed by the client")
            if opcode not in (OP_CONT, OP_TEXT, OP_BINARY):
                raise WebSocketClosed(CLOSE_PROTOCOL, f"opcode {opcode}")
            if (opcode == OP_CONT) != (first is not None):
                raise WebSocketClosed(CLOSE_PROTOCOL, "bad fragmentation")
            if first is None:
                first = opcode
            size += len(payload)
            if size > self.max_size:
                raise WebSocketClosed(CLOSE_TOO_BIG, f"message above {self.max_size} bytes")
            parts.append(payload)
            if fin:
                return Message(first == OP_TEXT, b"".join(parts))
