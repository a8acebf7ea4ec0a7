"""The headset app's second channel: camera panels and the HUD as JPEG frames over TCP (no ROS).

Why a channel of its own: the app listens on a second port (8736, reached through its own
``adb forward``) and decodes on its own thread, so video can only lower its own frame rate and
never delays the pose stream on 8735 (reference-facts §8).

Framing, little endian, 12 bytes then the JPEG: ``u32 magic`` (0x31564350, the bytes ``PCV1``),
``u8 panel`` (0..2 camera panels left to right, 3 the HUD), three zero bytes, ``u32 length``. The app
drops the connection on a wrong magic, a panel >= 4, a zero length or one above 4 MiB, so
``frame_header`` refuses those before anything is sent.

``PanelSender`` is the host side: non-blocking and latest-frame-only. A frame that does not fit
in the socket's send buffer right now is dropped and counted (never queued, so no latency builds
up); a frame whose first bytes went out is finished (a bounded blocking send) because a half frame
would desynchronise the stream. It reconnects like the pose client (back-off doubling from
``reconnect_s`` up to ``reconnect_max_s``, back to the start once a frame went through: an
``adb forward`` accepts connections while the app is not running and closes them at once).

``FrameReader`` is the headset side (the simulated headset and tests): bytes in, whole frames out,
and a framing error ends the connection as in the app.

Commands on the pose socket (JSON lines) that belong to the panels: ``color_command`` (the view
tint over passthrough), ``panel_command`` (place one panel) and ``PANELS_FRONT`` (re-place all in
front of the head). ``ui_command_from_json`` validates a request before the bridge forwards it.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from piper_recorder.errors import PiperInputError

from .reconnect import Backoff, try_connect, validate_link

VIDEO_PORT = 8736
MAGIC = 0x31564350  # b"PCV1" read as a little-endian u32
HEADER = struct.Struct("<IB3xI")  # magic, panel, 3 pad bytes, payload length
HUD_PANEL = 3  # panels 0..2 are cameras (left to right), 3 is the HUD strip
MAX_CAMERA_PANELS = 3
MAX_PAYLOAD = 4 * 1024 * 1024  # the app refuses larger frames (and drops the connection)
HUD_SIZE = (640, 140)  # what the app's HUD quad is laid out for (width, height)

# The view tint the app applies over passthrough, (r, g, b, a): transparent when idle, red while recording.
TINT_IDLE = (0.0, 0.0, 0.0, 0.0)
TINT_RECORDING = (0.6, 0.02, 0.02, 0.25)
UI_COMMANDS = ("color", "panel", "panels_front")


class FramingError(PiperInputError, ValueError):
    """A frame the app would refuse (and drop the connection for)."""


def frame_header(panel: int, length: int) -> bytes:
    """The 12-byte header of a frame; FramingError for what the app would drop the connection on."""
    if not 0 <= panel <= HUD_PANEL:
        raise FramingError(f"panel {panel} outside 0..{HUD_PANEL}")
    if not 0 < length <= MAX_PAYLOAD:
        raise FramingError(f"payload of {length} bytes outside 1..{MAX_PAYLOAD}")
    return HEADER.pack(MAGIC, panel, length)


def encode_frame(panel: int, jpeg: bytes) -> bytes:
    """A whole frame: header and JPEG."""
    return frame_header(panel, len(jpeg)) + jpeg


@dataclass
class Frame:
    """One received frame: its panel and JPEG."""

    panel: int
    payload: bytes


class FrameReader:
    """Incremental parser of the channel (the app's receiving side).

    ``feed`` returns whole frames;
    after a framing error ``error`` is set and the connection must be closed (as the app does).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.error = ""

    def feed(self, data: bytes) -> list[Frame]:
        """The frames completed by ``data``; none once ``error`` is set."""
        if self.error:
            return []
        self._buf += data
        out: list[Frame] = []
        while len(self._buf) >= HEADER.size:
            magic, panel, length = HEADER.unpack_from(self._buf)
            if magic != MAGIC or panel > HUD_PANEL or length == 0 or length > MAX_PAYLOAD:
                self.error = f"framing error (magic={magic:08x} panel={panel} len={length})"
                self._buf.clear()
                break
            if len(self._buf) < HEADER.size + length:
                break
            out.append(Frame(panel, bytes(self._buf[HEADER.size : HEADER.size + length])))
            del self._buf[: HEADER.size + length]
        return out


# ---- commands on the pose socket ----------------------------------------------------------------
def _unit(v: float) -> float:
    return min(max(float(v), 0.0), 1.0)


def color_command(rgba: tuple[float, float, float, float]) -> dict[str, Any]:
    """The command tinting the view over passthrough (components in [0, 1])."""
    r, g, b, a = rgba
    return {"cmd": "color", "r": _unit(r), "g": _unit(g), "b": _unit(b), "a": _unit(a)}


def panel_command(panel: int, x: float, y: float, z: float, width: float, yaw_deg: float = 0.0) -> dict[str, Any]:
    """Place one panel (metres in the headset's reporting space; the app clamps width to 0.1..3 m)."""
    if not 0 <= panel <= HUD_PANEL:
        raise ValueError(f"panel {panel} outside 0..{HUD_PANEL}")
    return {
        "cmd": "panel",
        "cam": int(panel),
        "x": float(x),
        "y": float(y),
        "z": float(z),
        "width": float(width),
        "yaw": float(yaw_deg),
    }


PANELS_FRONT: dict[str, Any] = {"cmd": "panels_front"}


def ui_command_from_json(text: str) -> dict[str, Any] | None:
    """A /quest/command request, checked: one of ``UI_COMMANDS`` with finite numbers in range, or None."""
    try:
        obj = json.loads(text, parse_constant=lambda _c: float("nan"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.get("cmd") not in UI_COMMANDS:
        return None

    def num(key: str, lo: float, hi: float) -> float | None:
        v = obj.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            return None
        return float(v)

    cmd = obj["cmd"]
    if cmd == "panels_front":
        return dict(PANELS_FRONT)
    if cmd == "color":
        vals = [num(k, 0.0, 1.0) for k in "rgba"]
        if any(v is None for v in vals):
            return None
        return color_command((vals[0], vals[1], vals[2], vals[3]))  # type: ignore[arg-type]
    cam = obj.get("cam")
    pos = [num(k, -100.0, 100.0) for k in ("x", "y", "z")]
    width, yaw = num("width", 0.1, 3.0), num("yaw", -360.0, 360.0) if "yaw" in obj else 0.0
    if isinstance(cam, bool) or not isinstance(cam, int) or any(v is None for v in pos) or width is None or yaw is None:
        return None
    try:
        return panel_command(cam, pos[0], pos[1], pos[2], width, yaw)  # type: ignore[arg-type]
    except ValueError:
        return None


# ---- host side ----------------------------------------------------------------------------------
@dataclass
class SenderConfig:
    """The panel sender's settings."""

    host: str = "127.0.0.1"
    port: int = VIDEO_PORT
    reconnect_s: float = 1.0
    reconnect_max_s: float = 5.0
    connect_timeout_s: float = 1.0
    sndbuf_bytes: int = 256 * 1024  # small: back-pressure shows at once and frames drop instead of queueing
    finish_timeout_s: float = 1.0  # bound on finishing a frame whose first bytes went out

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        validate_link(
            self.port,
            self.reconnect_s,
            self.reconnect_max_s,
            connect_timeout_s=self.connect_timeout_s,
            finish_timeout_s=self.finish_timeout_s,
        )
        if self.sndbuf_bytes < 4096:
            raise ValueError("sndbuf_bytes must be >= 4096")


@dataclass
class SenderStats:
    """The sender's state and counters, frames sent and dropped per panel."""

    state: str = "idle"  # idle | connected | backoff | stopped
    connects: int = 0
    connect_failures: int = 0
    disconnects: int = 0
    sent: dict[int, int] = field(default_factory=dict)  # frames per panel
    dropped: dict[int, int] = field(default_factory=dict)  # frames per panel dropped (socket busy / down)
    bytes_sent: int = 0
    last_error: str = ""


class PanelSender:
    """Non-blocking, dropping sender of PCV1 frames; call ``send`` from one thread (the stream loop)."""

    def __init__(self, config: SenderConfig, clock: Callable[[], float] = time.monotonic) -> None:
        config.validate()
        self.config = config
        self.stats = SenderStats()
        self._clock = clock
        self._sock: socket.socket | None = None
        self._backoff = Backoff(config.reconnect_s, config.reconnect_max_s)
        self._next_attempt = 0.0

    @property
    def connected(self) -> bool:
        """Whether the channel is connected now."""
        return self._sock is not None

    def ensure_connected(self) -> bool:
        """Connect when due (back-off between attempts); True when a connection is up."""
        if self._sock is not None:
            return True
        now = self._clock()
        if now < self._next_attempt:
            return False
        cfg = self.config
        sock = try_connect(cfg.host, cfg.port, cfg.connect_timeout_s, self.stats)
        if sock is None:
            self._next_attempt = now + self._backoff.failed()
            return False
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, cfg.sndbuf_bytes)
        sock.setblocking(False)
        self._sock = sock
        self.stats.connects += 1
        self.stats.state = "connected"
        return True

    def send(self, panel: int, jpeg: bytes) -> bool:
        """Send one frame now or drop it; True when it went out whole."""
        data = encode_frame(panel, jpeg)
        if not self.ensure_connected():
            self._count(self.stats.dropped, panel)
            return False
        sock = self._sock
        assert sock is not None
        try:
            n = sock.send(data)
        except BlockingIOError:
            self._count(self.stats.dropped, panel)  # the link is busy: drop, never queue
            return False
        except OSError as exc:
            self._fail(f"send: {exc}")
            self._count(self.stats.dropped, panel)
            return False
        if n < len(data) and not self._finish(sock, data[n:]):
            self._count(self.stats.dropped, panel)
            return False
        self._count(self.stats.sent, panel)
        self.stats.bytes_sent += len(data)
        self._backoff.reset()  # back to the short back-off once a frame went through
        return True

    def _finish(self, sock: socket.socket, rest: bytes) -> bool:
        """Complete a partly sent frame (a half frame would desync the stream), bounded in time."""
        try:
            sock.settimeout(self.config.finish_timeout_s)
            sock.sendall(rest)
            sock.setblocking(False)
            return True
        except OSError as exc:
            self._fail(f"send (finishing a frame): {exc}")
            return False

    def _fail(self, why: str) -> None:
        self.stats.last_error = why
        self.close()
        self.stats.disconnects += 1
        self.stats.state = "backoff"
        self._next_attempt = self._clock() + self._backoff.failed()

    @staticmethod
    def _count(counter: dict[int, int], panel: int) -> None:
        counter[panel] = counter.get(panel, 0) + 1

    def close(self) -> None:
        """Close the connection."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
