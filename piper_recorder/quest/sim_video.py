"""The simulated headset's video channel: accepts PCV1 frames as the app does and decodes them (no ROS).

Like the app it listens on its own port, serves one sender at a time, ends a connection on a framing
error, and decodes every JPEG (Pillow here, at 1/8 scale; stb_image there). It keeps, per panel, the frame count,
decode failures, the receive rate over the last ``RATE_WINDOW_S``, the last image size and, for the
HUD, the state the frame was rendered from (``hud.hud_state_from_jpeg``) plus the history of distinct
HUD states, so tests can check what the operator would have read. ``on_hud`` (optional) is called
with each decoded HUD state on the receiving thread: the simulated headset reads the HUD as an
operator would (a clutch release teleop made: re-grip).
"""

from __future__ import annotations

import io
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from .hud import hud_state_from_jpeg
from .video import HUD_PANEL, FrameReader

RATE_WINDOW_S = 2.0
HUD_HISTORY = 500


@dataclass
class PanelStats:
    """One panel's frames, decode failures, bytes, last size and receive times."""

    frames: int = 0
    decode_errors: int = 0
    bytes: int = 0
    size: tuple[int, int] = (0, 0)
    recv: deque[float] = field(default_factory=lambda: deque(maxlen=400))

    def rate(self, now: float) -> float:
        """Frames a second over the last ``RATE_WINDOW_S``."""
        recent = [t for t in self.recv if now - t <= RATE_WINDOW_S]
        if len(recent) < 2:
            return 0.0
        return (len(recent) - 1) / max(recent[-1] - recent[0], 1e-6)


class SimVideoServer:
    """Threaded listener; ``start()`` binds and returns the port."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, on_hud: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.host, self.port = host, port
        self.on_hud = on_hud
        self.connections = 0
        self.framing_errors = 0
        self.panels: dict[int, PanelStats] = {}
        self.hud: dict[str, Any] | None = None
        self.hud_history: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Listen and serve on a thread; returns the bound port."""
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self.host, self.port))
        ls.listen(1)
        ls.settimeout(0.2)
        self._listener = ls
        self.port = ls.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, name="sim-quest-video", daemon=True)
        self._thread.start()
        return self.port

    def stop(self) -> None:
        """Stop serving and close the connection."""
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        conn = self._conn
        if conn is not None:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(2.0)

    def _loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            with self._lock:
                self.connections += 1
            self._conn = conn
            try:
                self._serve(conn)
            finally:
                self._conn = None
                conn.close()

    def _serve(self, conn: socket.socket) -> None:
        reader = FrameReader()
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = conn.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for frame in reader.feed(data):
                self._on_frame(frame.panel, frame.payload)
            if reader.error:
                with self._lock:
                    self.framing_errors += 1
                return  # as the app: a framing error ends the connection

    def _on_frame(self, panel: int, jpeg: bytes) -> None:
        now = time.monotonic()
        try:
            with Image.open(io.BytesIO(jpeg)) as im:
                if im.format != "JPEG":
                    raise ValueError(f"not a JPEG: {im.format}")
                size = im.size
                # decoded at 1/8 scale (libjpeg's DCT scaling): every entropy-coded block is still read,
                # so a truncated or corrupt frame fails as at full size, for a fraction of the CPU (the
                # simulated headset shares the graph's machine; the app decodes on its own)
                im.draft("RGB", (max(1, size[0] // 8), max(1, size[1] // 8)))
                im.load()
        except (OSError, ValueError, Image.DecompressionBombError):
            with self._lock:
                self.panels.setdefault(panel, PanelStats()).decode_errors += 1
            return
        hud = hud_state_from_jpeg(jpeg) if panel == HUD_PANEL else None
        with self._lock:
            st = self.panels.setdefault(panel, PanelStats())
            st.frames += 1
            st.bytes += len(jpeg)
            st.size = size
            st.recv.append(now)
            if hud is not None:
                self.hud = hud
                key = {k: v for k, v in hud.items() if k not in ("elapsed_s", "input_hz", "lines")}
                last = self.hud_history[-1] if self.hud_history else None
                if last is None or {k: v for k, v in last.items() if k in key} != key:
                    self.hud_history.append({**hud, "t": time.time()})
                    del self.hud_history[:-HUD_HISTORY]
        if hud is not None and self.on_hud is not None:
            self.on_hud(hud)

    def report(self) -> dict[str, Any]:
        """Per panel counters and rates, and the HUD states seen."""
        now = time.monotonic()
        with self._lock:
            return {
                "port": self.port,
                "connections": self.connections,
                "framing_errors": self.framing_errors,
                "panels": {
                    str(p): {
                        "frames": s.frames,
                        "decode_errors": s.decode_errors,
                        "bytes": s.bytes,
                        "size": list(s.size),
                        "rate_hz": round(s.rate(now), 2),
                    }
                    for p, s in sorted(self.panels.items())
                },
                "hud": self.hud,
                "hud_history": list(self.hud_history),
            }
