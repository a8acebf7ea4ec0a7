"""The dashboard's HTTP server: the page, the JSON view model, thumbnails and reference frames.

Standard library only (``ThreadingHTTPServer``), GET/HEAD only, nothing that changes state: the page
can watch the robot but never drive it. Bound to 127.0.0.1 by default; when a token is set (required
for any other address, ``DashboardConfig.validate``) every request must carry it (``?token=`` or
``Authorization: Bearer``), else 401. Everything the page needs is served from here (no CDN).
"""
from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from piper_recorder.dashboard.frames import FrameStore, ReferenceFrames
from piper_recorder.dashboard.model import DashboardConfig, DashboardModel
from piper_recorder.dashboard.page import render_page
from piper_recorder.lerobot.errors import DatasetError

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' blob: data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


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
        cfg.validate()
        return cls(cfg, DashboardModel(cfg), FrameStore(cfg.thumb_width, cfg.thumb_hz, cfg.jpeg_quality,
                                                        cfg.watch_timeout_s),
                   ReferenceFrames(cfg.roots, cfg.thumb_width, cfg.jpeg_quality), clock)


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "piper-dashboard"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # the base class's argument name
        pass   # one line per poll would flood the node's log

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
            given = given or auth[len("Bearer "):].strip()
        return hmac.compare_digest(given.encode(), token.encode())

    def _serve(self, head: bool) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if not self._authorized(query):
            self._send(HTTPStatus.UNAUTHORIZED, b"token required\n", "text/plain",
                       {"WWW-Authenticate": 'Bearer realm="piper-dashboard"'}, head)
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
                jpeg = d.refs.first_frame(int(self._arg(query, "root") or 0), int(self._arg(query, "episode") or 0),
                                          self._arg(query, "camera"))
                self._send(HTTPStatus.OK, jpeg, "image/jpeg", head=head)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head=head)
        except (KeyError, ValueError) as exc:
            self._send(HTTPStatus.NOT_FOUND, f"{exc}\n".encode(), "text/plain", head=head)
        except DatasetError as exc:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, f"{exc}\n".encode(), "text/plain", head=head)

    @staticmethod
    def _arg(query: dict[str, list[str]], key: str) -> str:
        return query.get(key, [""])[0]

    def _json(self, obj: Any, head: bool) -> None:
        self._send(HTTPStatus.OK, json.dumps(obj, allow_nan=False, default=str).encode(), "application/json", head=head)

    def _send(self, status: HTTPStatus, body: bytes, ctype: str, headers: dict[str, str] | None = None,
              head: bool = False) -> None:
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
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, dashboard: Dashboard):
        self.dashboard = dashboard
        super().__init__((dashboard.cfg.host, dashboard.cfg.port), _Handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> DashboardServer:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="dashboard-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
