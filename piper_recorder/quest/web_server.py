"""``piper-quest-web``: the headset as a WebXR page in the Quest Browser, no app to build or sideload (no ROS).

Why a relay and not a second bridge: the page must reach the graph through exactly the paths the
native app uses, so that one parser, one clock mapper, one haptics path and one video channel serve
both. This process therefore *plays the native app's two servers* towards the graph and speaks
WebSocket towards the page:

- ``bridge_host:bridge_port`` (8735): quest_bridge connects here as it connects to the app through
  ``adb forward``. Every text message of the page (one protocol JSON line: the hello, frames,
  heartbeats) is written to it as one line; every command line the bridge sends (haptic, colour,
  panel placement) goes to the page as a text message. The page's hello is kept and re-sent to each
  new bridge connection; ``"client": "web"`` is set in it here, whatever the page said. A hello the
  bridge's parser would refuse (``protocol.parse_line``: non-finite, too deep, unencodable) is not
  relayed: the page is closed (1008) with the reason.
- ``bridge_host:video_port`` (8736): quest_video connects here and sends its PCV1 frames (panels and
  HUD, ``quest.video``); each frame goes to the page as one binary message (``panel byte + JPEG``),
  latest-only: a frame that finds more than ``max_pending_bytes`` still unsent to the page is dropped
  and counted, never queued (a slow page lowers its own frame rate, never the pose path's latency).
- ``host:port`` (8737): the page itself (``quest/web/``: HTML + hand-written JS, every asset in the
  package) and its WebSocket at ``/ws``. In the Quest Browser ``http://localhost:PORT`` through
  ``adb reverse tcp:PORT tcp:PORT`` is a secure context (WebXR needs one), so no certificate is
  needed; ``cert``/``key`` serve HTTPS for LAN use with a certificate the user supplies.

Safe by default: bound to 127.0.0.1 (another address only with a certificate, or ``insecure_http``);
the ``Host`` header is checked before anything else (``dashboard.server.host_allowed``: a
DNS-rebinding page gets 421); the WebSocket upgrade is refused (403) unless its ``Origin`` is this
server itself; one page at a time (a reloaded page replaces the old one, and each new page starts with
a hello of the relay's own that numbers it: a new input source to the graph); a request must arrive
whole within ``request_timeout_s``; a page silent for ``page_timeout_s`` (it sends a heartbeat every
second) is dropped; a page message is at most ``max_message_bytes`` and must be one line; the CSP
allows nothing but this server.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import math
import os
import ssl
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from piper_recorder.dashboard.model import is_loopback
from piper_recorder.dashboard.server import host_allowed
from piper_recorder.process.supervision import on_stop_signals, watch_parent
from piper_recorder.storage.outpaths import file_problem

from .client import DEFAULT_PORT, NOTICE_PERIOD_S
from .protocol import MAX_LINE_BYTES, Hello, Rejected, parse_line
from .video import VIDEO_PORT
from .video import FrameReader as VideoFrameReader
from .websocket import (
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_PROTOCOL,
    CLOSE_TOO_BIG,
    OP_BINARY,
    OP_TEXT,
    FrameReader,
    WebSocketClosed,
    accept_key,
    close_frame,
    encode_frame,
    valid_key,
)

APP_NAME = "piper-quest-web"
WEB_PORT = 8737
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
MAX_REQUEST_BYTES = 16 * 1024


def csp(host: str) -> str:
    """Nothing but this server: its script, its style, its WebSocket, images made from its own frames."""
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
        f"connect-src 'self' ws://{host} wss://{host}; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


@dataclass
class WebConfig:
    """The relay's settings (``piper-quest-web``'s arguments)."""

    host: str = "127.0.0.1"  # the page's server (adb reverse reaches it on the headset's localhost)
    port: int = WEB_PORT  # 0 = any free port (printed)
    bridge_host: str = "127.0.0.1"  # where quest_bridge and quest_video connect (the app's two servers)
    bridge_port: int = DEFAULT_PORT
    video_port: int = VIDEO_PORT  # -1: no video channel
    cert: str = ""  # PEM certificate and key: serve HTTPS (LAN use); both or neither
    key: str = ""
    allowed_hosts: list[str] = field(default_factory=list)  # extra Host names (a LAN name for HTTPS)
    max_message_bytes: int = MAX_LINE_BYTES
    max_pending_bytes: int = 1 << 20  # unsent bytes to the page above which a video frame is dropped
    max_buffer_bytes: int = 8 << 20  # ... above which the page is too slow and is dropped
    request_timeout_s: float = 5.0
    page_timeout_s: float = 5.0
    # plain HTTP on a non-loopback host: anyone on that network can open the page and drive the arm, and it
    # is no secure context (WebXR only where the browser is told to treat the origin as one)
    insecure_http: bool = False

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        if not is_loopback(self.host) and not self.cert and not self.insecure_http:
            raise ValueError(
                f"host {self.host!r} is not a loopback address: give cert and key (HTTPS: the secure "
                "context WebXR needs), or insecure_http (--insecure-http) to serve plain HTTP on that "
                "network anyway (anyone on it can open the page and drive the arm)"
            )
        for name in ("port", "bridge_port"):
            if not 0 <= getattr(self, name) < 65536:
                raise ValueError(f"{name} {getattr(self, name)} out of range")
        if not -1 <= self.video_port < 65536:
            raise ValueError(f"video_port {self.video_port} out of range")
        ends = {"port": (self.host, self.port), "bridge_port": (self.bridge_host, self.bridge_port)}
        if self.video_port >= 0:
            ends["video_port"] = (self.bridge_host, self.video_port)
        clash = port_clash(ends)
        if clash:
            raise ValueError(f"{clash[0]} and {clash[1]} are both {ends[clash[0]][1]}: the relay binds each of them")
        if bool(self.cert) != bool(self.key):
            raise ValueError("cert and key: give both (HTTPS) or neither")
        for path in (self.cert, self.key):
            if path and not Path(path).is_file():
                raise ValueError(f"not a file: {path}")
        if not 256 <= self.max_message_bytes <= 1 << 20:
            raise ValueError("max_message_bytes must be in [256, 1 MiB]")
        if not 0 < self.max_pending_bytes < self.max_buffer_bytes:
            raise ValueError("need 0 < max_pending_bytes < max_buffer_bytes")
        for name in ("request_timeout_s", "page_timeout_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.1 <= v <= 600):
                raise ValueError(f"{name} must be in [0.1, 600] s")

    @property
    def scheme(self) -> str:
        """``https`` with a certificate, else ``http``."""
        return "https" if self.cert else "http"


_ANY_ADDRESS = {"", "0.0.0.0", "::"}


def port_clash(endpoints: dict[str, tuple[str, int]]) -> tuple[str, str] | None:
    """The first two of ``endpoints`` (name -> (host, port)) that would bind the same port, or None.

    The same port is one nonzero port on the same address, or on an address and the wildcard that covers it.
    """
    names = list(endpoints)
    norm = {n: ("127.0.0.1" if h == "localhost" else h, p) for n, (h, p) in endpoints.items()}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (ha, pa), (hb, pb) = norm[a], norm[b]
            if pa and pa == pb and (ha == hb or ha in _ANY_ADDRESS or hb in _ANY_ADDRESS):
                return a, b
    return None


def asset(name: str) -> bytes:
    """One of the page's files, from the installed package (package_data)."""
    return resources.files("piper_recorder.quest").joinpath("web").joinpath(name).read_bytes()


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """Whether the WebSocket's ``Origin`` is this server (scheme http/https, same host and port as ``Host``).

    So a page of another site open in the headset's browser cannot drive the arm.
    """
    if not origin or not host_header:
        return False
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and parts.netloc.lower() == host_header.strip().lower()
        and not parts.path.strip("/")
    )


class NotAHello(Rejected):
    """A valid line that is no hello (a frame or heartbeat that happens to carry a ``"hello"`` key)."""


def web_hello(data: bytes, page: int = 0) -> bytes:
    """The page's hello line with ``client: web`` and the relay's number of the page set, whatever the page said.

    A line the bridge would refuse, or one that could not be re-encoded (a NaN, 1e999, an
    unpaired surrogate, nesting past ``protocol.MAX_DEPTH``), raises
    :class:`~piper_recorder.quest.protocol.Rejected` with the parser's reason (``bad_type``: not a hello).
    """
    msg = parse_line(data)
    if not isinstance(msg, Hello):
        raise NotAHello("bad_type", "not a hello line")
    obj = json.loads(msg.raw)  # validated: finite, bounded, encodable
    obj["hello"]["client"] = "web"
    obj["hello"]["page"] = page
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


class _Page:
    def __init__(self, writer: asyncio.StreamWriter, peer: str):
        self.writer, self.peer = writer, peer
        self.closed = False
        self.refused, self.noticed = 0, 0  # lines refused here, and how many the page was told of
        self.last_refusal = ("", "")
        self.notice_t = -math.inf

    def refuse(self, reason: str, detail: str) -> None:
        """A message of the page refused here: it is told (``notice``)."""
        self.refused += 1
        self.last_refusal = (reason, detail)
        self.notice(time.monotonic())

    def notice(self, now: float) -> None:
        """Tell the page why its lines were refused here, as quest_bridge tells it of its parser's refusals.

        At most one notice every ``client.NOTICE_PERIOD_S``; what comes in between goes with the next.
        """
        if self.refused > self.noticed and now - self.notice_t >= NOTICE_PERIOD_S:
            reason, detail = self.last_refusal
            self.send(
                OP_TEXT,
                json.dumps(
                    {
                        "cmd": "rejected",
                        "by": "quest_web",
                        "lines": self.refused - self.noticed,
                        "total": self.refused,
                        "reason": reason,
                        "detail": detail,
                    }
                ).encode(),
            )
            self.noticed, self.notice_t = self.refused, now

    def pending(self) -> int:
        return self.writer.transport.get_write_buffer_size()

    def send(self, opcode: int, payload: bytes) -> None:
        if not self.closed:
            self.writer.write(encode_frame(opcode, payload))

    def close(self, code: int, reason: str = "") -> None:
        if not self.closed:
            self.closed = True
            try:
                self.writer.write(close_frame(code, reason))
            except (OSError, RuntimeError):
                pass
            self.writer.close()


class WebRelay:
    """The three servers on one asyncio loop in a thread of its own (``start``/``stop``)."""

    def __init__(self, cfg: WebConfig, log: Any = None):
        cfg.validate()
        self.cfg = cfg
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.counters: Counter[str] = Counter()
        self.panels_sent: Counter[int] = Counter()
        self.panels_dropped: Counter[int] = Counter()
        self.page: _Page | None = None
        self.bridge: asyncio.StreamWriter | None = None
        self.hello: bytes | None = None
        self.ports: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread: threading.Thread | None = None
        self._heartbeat: asyncio.Task[None]
        self._writers: set[asyncio.StreamWriter] = set()  # every open connection, closed on stop
        for name, _ctype in ASSETS.values():
            asset(name)  # every asset must be there before anything is served

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> dict[str, int]:
        """Start the relay's loop on a thread; returns the bound ports by name."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._open())
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                errors.append(exc)
                self._loop.close()
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="quest-web", daemon=True)
        self._thread.start()
        ready.wait(10.0)
        if errors:
            raise errors[0]
        return dict(self.ports)

    async def _open(self) -> None:
        cfg = self.cfg
        tls = None
        if cfg.cert:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(cfg.cert, cfg.key)
        web = await asyncio.start_server(self._http, cfg.host, cfg.port, ssl=tls, limit=MAX_REQUEST_BYTES)
        bridge = await asyncio.start_server(
            self._bridge_conn, cfg.bridge_host, cfg.bridge_port, limit=cfg.max_message_bytes
        )
        self._servers = [web, bridge]
        self.ports = {"web": web.sockets[0].getsockname()[1], "bridge": bridge.sockets[0].getsockname()[1]}
        if cfg.video_port >= 0:
            video = await asyncio.start_server(self._video_conn, cfg.bridge_host, cfg.video_port)
            self._servers.append(video)
            self.ports["video"] = video.sockets[0].getsockname()[1]
        self._heartbeat = self._loop.create_task(self._idle_heartbeat())

    def stop(self) -> None:
        """Close the servers and connections and end the loop."""

        async def close() -> None:
            for s in self._servers:
                s.close()
            if self.page is not None:
                self.page.close(CLOSE_NORMAL, "server stopping")
            if self.bridge is not None:
                self.bridge.close()
            for w in list(self._writers):  # each handler then ends on its own (EOF), none is cancelled
                w.close()
            self._heartbeat.cancel()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if tasks:
                await asyncio.wait(tasks, timeout=2.0)

        if self._thread is not None and self._thread.is_alive():  # a loop that runs: close what it serves
            done = asyncio.run_coroutine_threadsafe(close(), self._loop)
            try:
                done.result(3.0)
            except Exception:  # noqa: BLE001 - stopping anyway
                done.cancel()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(3.0)
        if not (self._thread is not None and self._thread.is_alive()) and not self._loop.is_closed():
            self._loop.close()  # never started, failed to start, or stopped: nothing may be left to run on it

    def report(self) -> dict[str, Any]:
        """The relay's state and counters."""
        return {
            "page_connected": self.page is not None,
            "bridge_connected": self.bridge is not None,
            "hello": json.loads(self.hello) if self.hello else None,
            "ports": self.ports,
            "counters": dict(self.counters),
            "panels_sent": dict(self.panels_sent),
            "panels_dropped": dict(self.panels_dropped),
        }

    def write_report(self, path: str) -> None:
        """Write the report atomically.

        It is taken on the relay's loop while it runs (its counters change
        there), directly once ``stop`` ended it (a stopped loop runs nothing handed to it).
        """
        if self._thread is not None and self._thread.is_alive():
            taken: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

            def take() -> None:
                try:
                    taken.set_result(self.report())
                except Exception as exc:  # noqa: BLE001 - handed to the waiting thread
                    taken.set_exception(exc)

            try:
                self._loop.call_soon_threadsafe(take)
                report = taken.result(2.0)
            except (RuntimeError, concurrent.futures.TimeoutError):  # the loop is stopping: the next will do
                return
        else:
            report = self.report()
        tmp = f"{path}.tmp"
        Path(tmp).write_text(json.dumps(report))
        os.replace(tmp, path)

    # -- the page's HTTP server ---------------------------------------------------------------------
    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.cfg.request_timeout_s)
            except (
                asyncio.TimeoutError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
                ConnectionError,
                ssl.SSLError,
            ):
                self.counters["http_incomplete"] += 1
                return None
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                k, sep, v = line.partition(":")
                if sep:
                    headers[k.strip().lower()] = v.strip()
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                return self._respond(writer, 400, b"bad request\n")
            method, target = parts[0], parts[1]
            host = headers.get("host")
            local = writer.get_extra_info("sockname")
            if not host_allowed(host, self.cfg.host, str(local[0]) if local else "", self.cfg.allowed_hosts):
                self.counters["refused_host"] += 1
                return self._respond(writer, 421, b"unknown Host\n")
            path = urlsplit(target).path
            if method not in ("GET", "HEAD"):
                return self._respond(writer, 405, b"GET only\n", {"Allow": "GET, HEAD"})
            if path == "/ws":
                await self._websocket(reader, writer, headers, str(host))
                return None
            entry = ASSETS.get(path)
            if entry is None:
                return self._respond(writer, 404, b"not found\n", host=str(host))
            self.counters["http_" + entry[0]] += 1
            self._respond(
                writer, 200, asset(entry[0]), {"Content-Type": entry[1]}, head=method == "HEAD", host=str(host)
            )
        finally:
            if not writer.is_closing():
                try:
                    await asyncio.wait_for(writer.drain(), self.cfg.request_timeout_s)
                except (asyncio.TimeoutError, ConnectionError, RuntimeError):
                    pass
                writer.close()
            self._writers.discard(writer)

    def _respond(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        head: bool = False,
        host: str = "",
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            403: "Forbidden",
            404: "Not Found",
            405: "Method Not Allowed",
            409: "Conflict",
            421: "Misdirected Request",
            426: "Upgrade Required",
        }.get(status, "Error")
        hdrs = {
            "Content-Type": "text/plain",
            "Content-Length": str(len(body)),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": csp(host or "127.0.0.1"),
            "Connection": "close",
            **(headers or {}),
        }
        out = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        writer.write(out.encode("latin-1") + (b"" if head else body))

    # -- the page's WebSocket -----------------------------------------------------------------------
    async def _websocket(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str], host: str
    ) -> None:
        if not origin_allowed(headers.get("origin"), host):
            self.counters["refused_origin"] += 1
            return self._respond(writer, 403, b"WebSocket from another origin\n")
        key = headers.get("sec-websocket-key")
        if (
            headers.get("upgrade", "").lower() != "websocket"
            or "upgrade" not in headers.get("connection", "").lower()
            or headers.get("sec-websocket-version") != "13"
            or not valid_key(key)
        ):
            return self._respond(writer, 426, b"WebSocket upgrade expected\n", {"Sec-WebSocket-Version": "13"})
        writer.write(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept_key(str(key))}\r\n\r\n"
            ).encode()
        )
        peer = str(writer.get_extra_info("peername"))
        page = _Page(writer, peer)
        if self.page is not None:
            self.page.close(CLOSE_NORMAL, "replaced by a newer page")
            self.counters["pages_replaced"] += 1
        self.page = page
        self.counters["pages"] += 1
        # a new page is a new input source, announced before any line of its own by a hello with its number
        # (the page's own hellos carry the same number): the bridge marks the change, and teleop releases
        # the clutch until this page's grip opens (a reload or a second tab never inherits a grip)
        self.hello = json.dumps({"hello": {"client": "web", "page": self.counters["pages"]}}).encode()
        if self.bridge is not None:
            self.bridge.write(self.hello + b"\n")
        self._log(f"{APP_NAME}: page connected from {peer}")
        frames = FrameReader(reader, writer, self.cfg.max_message_bytes)
        try:
            while not page.closed:
                try:
                    msg = await asyncio.wait_for(frames.read(), self.cfg.page_timeout_s)
                except asyncio.TimeoutError:
                    self.counters["page_timeouts"] += 1
                    page.close(CLOSE_NORMAL, "silent")
                    break
                page.notice(time.monotonic())
                if not msg.text:
                    self.counters["page_binary_refused"] += 1
                    page.refuse("binary", "the page sends text messages only")
                    continue
                refusal = self._from_page(page, msg.data)
                if refusal:
                    page.close(CLOSE_POLICY, refusal)
                    break
        except WebSocketClosed as exc:
            if exc.code in (CLOSE_PROTOCOL, CLOSE_TOO_BIG):  # the page broke the protocol: it is told how
                self.counters[f"page_closed_{exc.code}"] += 1
                page.close(exc.code, exc.reason)
            else:
                page.close(CLOSE_NORMAL)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            page.close(CLOSE_NORMAL)
        finally:
            page.closed = True
            if self.page is page:
                self.page = None
                self._log(f"{APP_NAME}: page disconnected")

    def _from_page(self, page: _Page, data: bytes) -> str | None:
        """Relay one protocol line from the page to the bridge (whose parser validates it).

        A hello the bridge
        would refuse is not relayed (the last good one stays): the page is closed, the reason returned.
        """
        if b"\n" in data or b"\r" in data or not data.strip():
            self.counters["page_not_one_line"] += 1
            page.refuse("not_one_line", "a message is one protocol line, without a newline")
            return None
        hello: bytes | None = None
        if b'"hello"' in data:  # a hello however it is spaced (frames carry no such key, and pay nothing)
            try:
                hello = web_hello(data, self.counters["pages"])
            except NotAHello:
                pass  # a frame or heartbeat with a stray "hello" key: the bridge's parser takes it as what it is
            except Rejected as exc:
                self.counters["page_bad_hello"] += 1
                self.counters[f"page_bad_hello.{exc.reason}"] += 1
                self._log(f"{APP_NAME}: page's hello refused: {exc}")
                return f"bad hello: {exc}"
        if hello is not None:
            self.hello = data = hello
            self.counters["hellos"] += 1
        self.counters["from_page"] += 1
        bridge = self.bridge
        if bridge is None:
            self.counters["no_bridge"] += 1
            return None
        bridge.write(data + b"\n")
        return None

    # -- quest_bridge's connection (the app's pose server) ------------------------------------------
    async def _bridge_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.bridge is not None:
            self.bridge.close()
        self.bridge = writer
        self._writers.add(writer)
        self.counters["bridge_connects"] += 1
        if self.hello is not None:
            writer.write(self.hello + b"\n")
        try:
            while True:
                try:
                    line = await reader.readline()
                except (asyncio.LimitOverrunError, ValueError):
                    self.counters["bridge_line_too_long"] += 1
                    break
                if not line:
                    break
                line = line.strip()
                if not line:
                    continue
                self.counters["commands"] += 1
                page = self.page
                if page is not None:
                    page.send(OP_TEXT, line)
                    self.counters["commands_to_page"] += 1
        except ConnectionError:
            pass
        finally:
            if self.bridge is writer:
                self.bridge = None
            writer.close()
            self._writers.discard(writer)

    async def _idle_heartbeat(self) -> None:
        """Send heartbeats to the bridge while no page is connected.

        The bridge still hears a heartbeat (its diagnostics say "connected, no frames"
        instead of reconnecting every ``silence_timeout_s``); the state says why.
        """
        n = 0
        while True:
            await asyncio.sleep(1.0)
            if self.page is None and self.bridge is not None:
                n += 1
                self.bridge.write(json.dumps({"heartbeat": n, "state": "NO_PAGE"}).encode() + b"\n")

    # -- quest_video's connection (the app's video server) ------------------------------------------
    async def _video_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = VideoFrameReader()
        self._writers.add(writer)
        self.counters["video_connects"] += 1
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                for f in frames.feed(data):
                    self._panel_to_page(f.panel, f.payload)
                if frames.error:
                    self.counters["video_framing_errors"] += 1
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()
            self._writers.discard(writer)

    def _panel_to_page(self, panel: int, jpeg: bytes) -> None:
        page = self.page
        if page is None or page.closed:
            self.panels_dropped[panel] += 1
            return
        pending = page.pending()
        if pending > self.cfg.max_buffer_bytes:
            self.counters["page_too_slow"] += 1
            page.close(CLOSE_NORMAL, "too slow")
            return
        if pending > self.cfg.max_pending_bytes:
            self.panels_dropped[panel] += 1
            return
        page.send(OP_BINARY, bytes([panel]) + jpeg)
        self.panels_sent[panel] += 1


def _parser() -> argparse.ArgumentParser:
    d = WebConfig()
    p = argparse.ArgumentParser(
        prog=APP_NAME,
        description="The headset as a WebXR page: serves the page and "
        "relays it to quest_bridge / quest_video as the native app would.",
    )
    p.add_argument("--host", default=d.host, help="the page's address (default: loopback; adb reverse reaches it)")
    p.add_argument("--port", type=int, default=d.port, help="the page's port (0 = any free port, printed)")
    p.add_argument("--bridge-host", default=d.bridge_host, help="where quest_bridge / quest_video connect")
    p.add_argument("--bridge-port", type=int, default=d.bridge_port, help="quest_bridge's port (0 = any free)")
    p.add_argument("--video-port", type=int, default=d.video_port, help="quest_video's port (0 = any free, -1 = off)")
    p.add_argument("--cert", default=d.cert, help="PEM certificate: serve HTTPS (LAN use), with --key")
    p.add_argument("--key", default=d.key, help="PEM private key of --cert")
    p.add_argument("--allowed-host", action="append", default=[], help="another Host name to accept (repeatable)")
    p.add_argument(
        "--insecure-http",
        action="store_true",
        help="serve plain HTTP on a non-loopback --host (refused otherwise without --cert/--key): "
        "anyone on that network can open the page and drive the arm",
    )
    p.add_argument("--report", default="", metavar="FILE.json", help="write the relay's counters here twice a second")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``piper-quest-web`` until SIGINT/SIGTERM; returns the exit status."""
    args = _parser().parse_args(argv)
    cfg = WebConfig(
        host=args.host,
        port=args.port,
        bridge_host=args.bridge_host,
        bridge_port=args.bridge_port,
        video_port=args.video_port,
        cert=args.cert,
        key=args.key,
        allowed_hosts=args.allowed_host,
        insecure_http=args.insecure_http,
    )
    try:
        problem = file_problem(args.report) if args.report else None
        if problem:
            raise ValueError(f"--report: {problem}")
        relay = WebRelay(cfg)
        ports = relay.start()
    except (ValueError, OSError, ssl.SSLError) as exc:
        print(f"{APP_NAME}: error: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    on_stop_signals(lambda _sig: done.set())
    watch_parent(done.set)
    print(
        f"{APP_NAME}: page at {cfg.scheme}://{cfg.host}:{ports['web']}/ (headset: adb reverse tcp:{ports['web']} "
        f"tcp:{ports['web']}, then open {cfg.scheme}://localhost:{ports['web']}/); bridge {cfg.bridge_host}:"
        f"{ports['bridge']}" + (f" video {cfg.bridge_host}:{ports['video']}" if "video" in ports else ""),
        flush=True,
    )
    while not done.wait(0.5):
        if args.report:
            relay.write_report(args.report)
    relay.stop()
    if args.report:
        relay.write_report(args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
