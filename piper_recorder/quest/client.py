"""TCP client for the headset stream (the headset is the server; the host reaches it via adb forward).

Runs in its own thread: connect, read, parse, deliver each accepted message with its host receive
time (``time.time_ns()``, the ROS clock) to a callback, or, with ``on_batch``, every message that was
waiting in the socket at once as one list (a backlog, when the reader fell behind, arrives as one
batch the consumer can coalesce). Reconnects with exponential back-off (:mod:`.reconnect`, from
``reconnect_s``, as the reference client's 1 s, doubling up to ``reconnect_max_s``; back to the start
after a connection that delivered a message) and forces a reconnect after ``silence_timeout_s``
without any accepted line. Commands to the headset (haptic) go over the same socket.

A headset that can show it (``NOTICE_CLIENTS``: the WebXR page, whose hello says ``"client": "web"``;
the native app has no place for it) is told why its lines are refused: ``{"cmd": "rejected", "by":
"quest_bridge", "lines": N refused since the last notice, "total": T, "reason": "non_finite", "detail":
"left.pos[0]"}`` (the parser's latest reason), at most one every ``NOTICE_PERIOD_S``; refusals in
between go with the next.
"""

from __future__ import annotations

import json
import math
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .protocol import HANDS, MAX_LINE_BYTES, QUAT_TOLERANCE, Hello, Message, StreamParser, encode
from .reconnect import Backoff, try_connect, validate_link

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8735
NOTICE_CLIENTS = ("web",)  # hello "client" values of headsets shown why their lines are refused
NOTICE_PERIOD_S = 1.0  # at most one such notice a second


@dataclass
class ClientConfig:
    """The headset link's settings."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    reconnect_s: float = 1.0
    reconnect_max_s: float = 5.0
    silence_timeout_s: float = 6.0
    connect_timeout_s: float = 2.0
    max_line_bytes: int = MAX_LINE_BYTES
    quat_tolerance: float = QUAT_TOLERANCE

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        validate_link(
            self.port,
            self.reconnect_s,
            self.reconnect_max_s,
            silence_timeout_s=self.silence_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
        )
        if self.max_line_bytes < 256:
            raise ValueError("max_line_bytes must be >= 256")
        if not 0 < self.quat_tolerance < 1:
            raise ValueError("quat_tolerance must be in (0, 1)")


@dataclass
class ClientStats:
    """The link's state and counters (read by diagnostics)."""

    state: str = "idle"  # idle | connecting | connected | backoff | stopped
    connects: int = 0
    connect_failures: int = 0
    disconnects: int = 0
    silence_reconnects: int = 0
    bytes_received: int = 0
    commands_sent: int = 0
    notices_sent: int = 0  # "rejected" notices (not among commands_sent)
    commands_failed: int = 0
    last_message_ns: int = 0  # host time of the last accepted message (0 = never)
    last_error: str = ""


MessageCallback = Callable[[Message, int], None]
BatchCallback = Callable[[list[Message], int], None]
EventCallback = Callable[[str], None]
DRAIN_MAX_BYTES = 1 << 20  # read at most this much of a backlog into one batch


class QuestClient:
    """Threaded headset client. ``on_message(msg, recv_ns)`` runs on the client thread.

    ``on_event(name)`` is called with "connected" / "disconnected" (e.g. to reset the clock mapper).
    ``parser.rejected`` holds the drop counters (cumulative over reconnects).
    """

    def __init__(
        self,
        config: ClientConfig,
        on_message: MessageCallback,
        on_event: EventCallback | None = None,
        on_batch: BatchCallback | None = None,
    ):
        config.validate()
        self._on_batch = on_batch
        self.config = config
        self.parser = StreamParser(config.max_line_bytes, config.quat_tolerance)
        self.stats = ClientStats()
        self._on_message = on_message
        self._on_event = on_event or (lambda _e: None)
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._hello_client: object = None  # the connected headset's hello "client" (client thread only)
        self._noticed = 0  # parser.rejected_total already told
        self._notice_t = -math.inf

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> QuestClient:
        """Start the client's thread; returns the client."""
        self._thread = threading.Thread(target=self._run, name="quest-client", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the thread and close the socket."""
        self._stop.set()
        self._close()
        if self._thread is not None:
            self._thread.join(timeout)
        self.stats.state = "stopped"

    @property
    def connected(self) -> bool:
        """Whether a headset is connected now."""
        return self.stats.state == "connected"

    # -- commands ----------------------------------------------------------------------------
    def send_command(self, cmd: dict[str, Any]) -> bool:
        """Send one JSON command line; False when not connected or the send fails."""
        ok = self._send(cmd)
        if ok:
            self.stats.commands_sent += 1
        else:
            self.stats.commands_failed += 1
        return ok

    def _send(self, cmd: dict[str, Any]) -> bool:
        try:
            line = encode(cmd)
        except (TypeError, ValueError):
            return False
        with self._send_lock:
            sock = self._sock
            if sock is None or not self.connected:
                return False
            try:
                sock.sendall(line)
            except OSError as exc:
                self.stats.last_error = f"send: {exc}"
                return False
        return True

    def _notice_rejections(self, now: float) -> None:
        """Tell a headset that shows it why its lines were refused (module docstring); client thread."""
        total = self.parser.rejected_total
        if total <= self._noticed or now - self._notice_t < NOTICE_PERIOD_S or self._hello_client not in NOTICE_CLIENTS:
            return
        reason, _, detail = self.parser.last_rejection.partition(": ")
        if self._send(
            {
                "cmd": "rejected",
                "by": "quest_bridge",
                "lines": total - self._noticed,
                "total": total,
                "reason": reason,
                "detail": detail[:160],
            }
        ):
            self.stats.notices_sent += 1
        self._noticed, self._notice_t = total, now

    def haptic(self, hand: str, amp: float, ms: int) -> bool:
        """Vibrate one controller: amp clamped to [0, 1], ms to [0, 10000]."""
        if hand not in HANDS or not math.isfinite(amp):
            self.stats.commands_failed += 1
            return False
        return self.send_command(
            {
                "cmd": "haptic",
                "hand": hand,
                "amp": min(max(float(amp), 0.0), 1.0),
                "ms": int(min(max(int(ms), 0), 10_000)),
            }
        )

    # -- thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.config
        backoff = Backoff(cfg.reconnect_s, cfg.reconnect_max_s)
        while not self._stop.is_set():
            self.stats.state = "connecting"
            sock = try_connect(cfg.host, cfg.port, cfg.connect_timeout_s, self.stats)
            if sock is None:
                self._stop.wait(backoff.failed())
                continue
            delivered = self._serve(sock)
            if self._stop.is_set():
                break
            self.stats.state = "backoff"
            if delivered:
                backoff.reset()
                self._stop.wait(backoff.delay_s)  # the short wait, and it stays short
            else:
                self._stop.wait(backoff.failed())
        self.stats.state = "stopped"

    def _serve(self, sock: socket.socket) -> bool:
        """Read one connection until EOF, error, silence or stop; True if any message arrived."""
        cfg = self.config
        self.parser.reset()
        with self._send_lock:
            self._sock = sock
        self._hello_client, self._noticed = None, self.parser.rejected_total  # another headset, maybe
        self.stats.connects += 1
        self.stats.state = "connected"
        self._on_event("connected")
        delivered = False
        last_ok = time.monotonic()
        sock.settimeout(min(0.2, cfg.silence_timeout_s))
        try:
            while not self._stop.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    data = None
                except OSError as exc:
                    self.stats.last_error = f"recv: {exc}"
                    break
                if data == b"":
                    self.stats.last_error = "closed by headset"
                    break
                now_mono = time.monotonic()
                if data:
                    recv_ns = time.time_ns()
                    data += self._drain(sock)
                    self.stats.bytes_received += len(data)
                    msgs = self.parser.feed(data)
                    for msg in msgs:
                        if isinstance(msg, Hello):
                            self._hello_client = msg.info.get("client")
                    if self._on_batch is not None:
                        if msgs:
                            self._deliver_batch(msgs, recv_ns)
                    else:
                        for msg in msgs:
                            self._deliver(msg, recv_ns)
                    if msgs:
                        delivered = True
                        last_ok = now_mono
                        self.stats.last_message_ns = recv_ns
                self._notice_rejections(now_mono)
                if now_mono - last_ok > cfg.silence_timeout_s:
                    self.stats.silence_reconnects += 1
                    self.stats.last_error = f"silence > {cfg.silence_timeout_s} s"
                    break
        finally:
            self._close()
            self.stats.disconnects += 1
            self.stats.state = "backoff"
            self._on_event("disconnected")
        return delivered

    @staticmethod
    def _drain(sock: socket.socket) -> bytes:
        """Whatever else is already waiting in the socket (no wait): the rest of a backlog."""
        chunks, total = [], 0
        while total < DRAIN_MAX_BYTES:
            try:
                # readable now? (MSG_DONTWAIT is no help: a socket with a timeout polls before recv, and
                # a stream that keeps coming would keep this loop reading past the backlog)
                if not select.select([sock], [], [], 0)[0]:
                    break
                chunk = sock.recv(65536)
            except (OSError, ValueError):
                break  # the next blocking recv reports it
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)

    def _deliver_batch(self, msgs: list[Message], recv_ns: int) -> None:
        try:
            self._on_batch(msgs, recv_ns)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - a consumer bug must not kill the stream
            self.stats.last_error = f"callback: {exc!r}"[:200]

    def _deliver(self, msg: Message, recv_ns: int) -> None:
        try:
            self._on_message(msg, recv_ns)
        except Exception as exc:  # noqa: BLE001 - a consumer bug must not kill the stream
            self.stats.last_error = f"callback: {exc!r}"[:200]

    def _close(self) -> None:
        with self._send_lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def haptic_from_json(text: str) -> tuple[str, float, int] | None:
    """Parse a /quest/haptic request {"hand","amp","ms"}; None when malformed (caller counts it)."""
    try:
        obj = json.loads(text, parse_constant=lambda _c: float("nan"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    hand, amp, ms = obj.get("hand"), obj.get("amp"), obj.get("ms")
    if hand not in HANDS:
        return None
    if isinstance(amp, bool) or not isinstance(amp, (int, float)) or not math.isfinite(amp):
        return None
    if not 0.0 <= amp <= 1.0:
        return None
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= 10_000:
        return None
    return hand, float(amp), ms
