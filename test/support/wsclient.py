"""A minimal browser-side WebSocket client over a raw socket (masked frames, RFC 6455), written apart from
the server's framing so that tests and bench/teleop_latency.py check piper-quest-web independently.
"""

from __future__ import annotations

import base64
import os
import socket
import struct


class WebSocketClient:
    def __init__(self, port: int, origin: str | None = None, host: str | None = None, timeout: float = 5.0):
        host = host or f"127.0.0.1:{port}"
        origin = origin if origin is not None else f"http://{host}"
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.key = base64.b64encode(os.urandom(16)).decode()
        req = (
            f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {self.key}\r\nSec-WebSocket-Version: 13\r\n"
            + (f"Origin: {origin}\r\n" if origin else "")
            + "\r\n"
        )
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                break
            head += chunk
        self.status = int(head.split(b" ", 2)[1]) if head else 0
        self.accept = ""
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("sec-websocket-accept:"):
                self.accept = line.split(":", 1)[1].strip()

    def send(self, data: bytes, opcode: int = 1) -> None:
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            head = bytes([0x80 | opcode, 0x80 | n])
        elif n < 65536:
            head = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack("!H", n)
        else:
            head = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack("!Q", n)
        key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
        body = (int.from_bytes(data, "big") ^ key).to_bytes(n, "big") if n else b""
        self.sock.sendall(head + mask + body)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def recv(self) -> tuple[int, bytes]:
        b0, b1 = self._exact(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._exact(8))
        return b0 & 0x0F, self._exact(n)

    def close(self) -> None:
        self.sock.close()
