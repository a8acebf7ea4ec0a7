"""The dashboard's HTTP server: the page, the JSON view model, thumbnails and reference frames.

Standard library only (``ThreadingHTTPServer``), GET/HEAD only, nothing that changes state: the page
can watch the robot but never drive it. Bound to 127.0.0.1 by default; when a token is set (required
for any other address, ``DashboardConfig.validate``) every request must carry it (``?token=`` or
``Authorization: Bearer``), else 401. Everything the page needs is served from here (no CDN).

Hardened for a network nobody vets:
- ``Host`` is checked before anything else (``host_allowed``): a page on another site that re-binds its
  DNS name to this address sends its own name and gets 421, so it cannot read the state or the frames.
- The CSP allows scripts and styles only from this server (no ``'unsafe-inline'``).
- Each connection has a socket timeout (``request_timeout_s``) and at most ``max_connections`` are
  served at once (one thread each); a connection beyond that gets 503 at once and is closed. A client
  that goes away or times out is no error: nothing is printed for it.
"""

from __future__ import annotations

import hmac
import io
import ipaddress
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from piper_recorder.dashboard.frames import FrameStore, ReferenceFrames
from piper_recorder.dashboard.model import DashboardConfig, DashboardModel
from piper_recorder.dashboard.page import render_page, static_file
from piper_recorder.lerobot.format.errors import DatasetError

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 18\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many requests\n"
)


def _host_name(header: str) -> str | None:
    """The host of a ``Host`` header without its port, lower case; None if it is not well formed."""
    h = header.strip().lower()
    if h.startswith("["):  # [::1]:8740
        end = h.find("]")
        rest = h[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return None
        return h[1:end]
    if h.count(":") > 1:
        return None  # a bare IPv6 address is not a valid Host
    name = h.split(":", 1)[0].rstrip(".")
    return name or None


def host_allowed(header: str | None, bound: str, local_addr: str, names: Iterable[str]) -> bool:
    """Whether a request's ``Host`` names this server; a DNS-rebinding page sends its own name: refused.

    Allowed: a loopback name or address, the bound address, the address the client connected to (an IP
    literal: a page reached by the robot's address), or one of ``names`` (the ``allowed_hosts`` parameter).
    """
    if not header:
        return False
    name = _host_name(header)
    if name is None:
        return False
    if name == "localhost" or name in {n.strip().lower().rstrip(".") for n in names}:
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return name == bound.lower()
    if ip.is_loopback:
        return True
    addrs = set()
    for a in (bound, local_addr):
        try:
            addrs.add(ipaddress.ip_address(a.split("%", 1)[0]))
        except ValueError:
            pass
    return ip in addrs and not ip.is_unspecified


@dataclass
class Dashboard:
    """What the server reads: the model, the frames, the reference frames and the clock."""

    cfg: DashboardConfig
    model: DashboardModel
    frames: FrameStore
    refs: ReferenceFrames
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def create(cls, cfg: DashboardConfig, clock: Callable[[], float] = time.monotonic) -> Dashboard:
        """The dashboard of a validated ``cfg``: an empty model, frame store and reference frames."""
        cfg.validate()
        return cls(
            cfg,
            DashboardModel(cfg),
            FrameStore(cfg.thumb_width, cfg.thumb_hz, cfg.jpeg_quality, cfg.watch_timeout_s),
            ReferenceFrames(cfg.roots, cfg.thumb_width, cfg.jpeg_quality),
            clock,
        )


class _DeadlineReader(io.RawIOBase):
    """The connection's input with a deadline per request.

    A socket timeout alone is per ``recv``, so a client sending one byte every few seconds would hold its
    thread (and a slot) for ever.
    """

    def __init__(self, sock: socket.socket, limit_s: float):
        self._sock, self._limit = sock, limit_s
        self._deadline = time.monotonic() + limit_s

    def restart(self) -> None:
        self._deadline = time.monotonic() + self._limit

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not complete in time")
        self._sock.settimeout(min(left, self._limit))
        return self._sock.recv_into(buf)


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "piper-dashboard"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # every read and write of this connection: a client silent this long is dropped (the base
        # class reports the timeout to log_message, i.e. nowhere) ...
        limit = self.server.dashboard.cfg.request_timeout_s
        self.connection.settimeout(limit)
        # ... and a request must arrive whole within it, however the client trickles its bytes
        self.rfile.close()
        self._reader = _DeadlineReader(self.connection, limit)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.restart()  # the next request (or the wait for it, on a kept-alive connection)
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:  # the base class's argument name
        pass  # one line per poll would flood the node's log (timeouts land here too: a slow client, no error)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _refuse_method(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET only\n", "text/plain", {"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method

    def _authorized(self, query: dict[str, list[str]]) -> bool:
        token = self.server.dashboard.cfg.token
        if not token:
            return True
        given = query.get("token", [""])[0]
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = given or auth[len("Bearer ") :].strip()
        return hmac.compare_digest(given.encode(), token.encode())

    def _host_ok(self) -> bool:
        cfg = self.server.dashboard.cfg
        local = self.connection.getsockname()[0] if self.connection is not None else ""
        return host_allowed(self.headers.get("Host"), cfg.host, str(local), cfg.allowed_hosts)

    def _serve(self, head: bool) -> None:
        if not self._host_ok():
            self._send(
                HTTPStatus.MISDIRECTED_REQUEST,
                b"unknown Host (see the dashboard's allowed_hosts)\n",
                "text/plain",
                {"Connection": "close"},
                head,
            )
            self.close_connection = True
            return
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        asset = static_file(url.path)
        if asset is not None:  # the page's own script and stylesheet: code, no data; served without the token
            self._send(HTTPStatus.OK, asset[0], asset[1], head=head)
            return
        if not self._authorized(query):
            self._send(
                HTTPStatus.UNAUTHORIZED,
                b"token required\n",
                "text/plain",
                {"WWW-Authenticate": 'Bearer realm="piper-dashboard"'},
                head,
            )
            return
        d = self.server.dashboard
        try:
            if url.path == "/":
                self._send(HTTPStatus.OK, render_page().encode(), "text/html; charset=utf-8", head=head)
            elif url.path == "/api/state":
                view = d.model.view(d.clock())
                self._json({**view, "roots": [str(r) for r in d.refs.roots]}, head)
            elif url.path == "/api/thumb":
                thumb = d.frames.thumbnail(self._arg(query, "camera"), d.clock())
                if thumb is None:
                    self._send(HTTPStatus.NO_CONTENT, b"", "image/jpeg", head=head)
                else:
                    self._send(HTTPStatus.OK, thumb.jpeg, "image/jpeg", {"X-Frame-Stamp": str(thumb.stamp_ns)}, head)
            elif url.path == "/api/roots":
                self._json({"roots": d.refs.listing()}, head)
            elif url.path == "/api/reference":
                jpeg = d.refs.first_frame(
                    int(self._arg(query, "root") or 0),
                    int(self._arg(query, "episode") or 0),
                    self._arg(query, "camera"),
                )
                self._send(HTTPStatus.OK, jpeg, "image/jpeg", head=head)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head=head)
        except (KeyError, ValueError) as exc:
            self._send(HTTPStatus.NOT_FOUND, f"{exc}\n".encode(), "text/plain", head=head)
        except DatasetError as exc:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, f"{exc}\n".encode(), "text/plain", head=head)
        except OSError:
            raise  # the client went away: handle_error drops it silently
        except Exception as exc:  # noqa: BLE001 - a bug must cost one answer, not the connection
            self.server.report(f"dashboard: {self.path.split('?', 1)[0]}: {type(exc).__name__}: {exc}")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n", "text/plain", head=head)

    @staticmethod
    def _arg(query: dict[str, list[str]], key: str) -> str:
        return query.get(key, [""])[0]

    def _json(self, obj: Any, head: bool) -> None:
        self._send(HTTPStatus.OK, json.dumps(obj, allow_nan=False, default=str).encode(), "application/json", head=head)

    def _send(
        self, status: HTTPStatus, body: bytes, ctype: str, headers: dict[str, str] | None = None, head: bool = False
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)


class DashboardServer(ThreadingHTTPServer):
    """The HTTP server: one thread per connection, at most ``max_connections`` of them (503 beyond)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, dashboard: Dashboard, log: Callable[[str], object] | None = None):
        self.dashboard = dashboard
        self._log = log
        self._slots = threading.BoundedSemaphore(dashboard.cfg.max_connections)
        self.refused_busy = 0
        if ":" in dashboard.cfg.host:
            self.address_family = socket.AF_INET6
        super().__init__((dashboard.cfg.host, dashboard.cfg.port), _Handler)
        self._thread: threading.Thread | None = None

    def report(self, line: str) -> None:
        """One line for the node's log (stderr without one)."""
        if self._log is not None:
            self._log(line)
        else:
            print(line, file=sys.stderr)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve on a thread of its own if a slot is free, else answer 503 at once and close."""
        if not self._slots.acquire(blocking=False):
            # every slot busy (slow or many clients): answer at once rather than queue a thread
            self.refused_busy += 1
            try:
                request.setblocking(False)
                request.send(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve the connection, then free its slot."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed, reset or timed out is routine: nothing printed. Anything else: one line."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        self.report(f"dashboard: connection from {client_address[0]}: {type(exc).__name__}: {exc}")

    @property
    def url(self) -> str:
        """The page's address as bound (the port resolved when 0 was asked)."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> DashboardServer:
        """Serve on a daemon thread; returns the server."""
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="dashboard-http", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, close the socket and wait (up to 2 s) for the serving thread."""
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
