"""The HTTP side of ``piper-policy-server``: PiperPilot's ``POST /predict`` and ``GET /info``.

Plain stdlib (``http.server``) so it runs in any trainer virtualenv. Whatever answers the
predictions is a ``Runner``: the LeRobot checkpoint runner in production, a delayed stand-in in
``bench/policy_latency.py``. One request is inferred at a time (a lock: models are not re-entrant);
``/info`` answers while an inference runs.

Bounded work, whatever the clients do (ThreadingHTTPServer gives every connection its own thread with no
socket timeout, so half-sent requests hold threads for as long as the clients like):
- a fixed pool of ``workers`` handler threads; up to ``queued`` accepted connections wait for one,
  and a connection beyond that is answered 503 at once and closed;
- every connection has a socket timeout (``client_timeout_s``, each read and write) and a request body
  must arrive whole within ``body_deadline_s``, so a client that stops sending frees its worker;
- images are checked from their JPEG headers before any is decoded (``protocol.ImageRule``: the
  runner's own cameras and sizes), and decoded in at most ``decoders`` threads at once;
- a client that goes away costs one log line, not a traceback.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from piper_recorder.policy.server.protocol import (
    ACTION_WIDTH,
    MAX_PIXELS,
    ImageRule,
    PredictRequest,
    ProtocolError,
    RequestRefused,
    encode_answer,
    parse_request,
)

LOG = logging.getLogger("piper_policy_server")
MAX_BODY = 64 * 1024 * 1024
WORKERS = 8
QUEUED = 16
DECODERS = 2
CLIENT_TIMEOUT_S = 10.0
BODY_DEADLINE_S = 30.0
_BUSY = b'{"error": "server busy: every worker is serving and the queue is full; retry"}'


class Runner(Protocol):
    """Answers one decoded request with (n, action width) absolute action rows (n may exceed the horizon).

    The width is ``info()["action_width"]`` (one arm's 8 when it says none; two arms 16).
    """

    def info(self) -> dict[str, object]:
        """What ``GET /info`` answers: the checkpoint, its inputs, ``action_width`` and its ``content_hash``."""

    def predict(self, request: PredictRequest) -> npt.NDArray[np.floating]:
        """The (n, action width) absolute action rows answering ``request``."""


class PolicyHTTPServer(HTTPServer):
    """An HTTP server with a fixed pool of handler threads and a bounded queue (see the module doc)."""

    request_queue_size = 64  # the listen backlog: bursts are accepted and answered (503 if full), not lost

    def __init__(
        self,
        address: tuple[str, int],
        runner: Runner,
        *,
        workers: int = WORKERS,
        queued: int = QUEUED,
        decoders: int = DECODERS,
        client_timeout_s: float = CLIENT_TIMEOUT_S,
        body_deadline_s: float = BODY_DEADLINE_S,
    ):
        if workers < 1 or queued < 0 or decoders < 1 or not client_timeout_s > 0 or not body_deadline_s > 0:
            raise ValueError("workers and decoders must be >= 1, queued >= 0, the timeouts > 0")
        self.runner = runner
        self.infer_lock = threading.Lock()
        self.decode_gate = threading.BoundedSemaphore(decoders)
        self.client_timeout_s, self.body_deadline_s = client_timeout_s, body_deadline_s
        info = runner.info()
        self.image_rule = ImageRule.from_inputs(info.get("inputs"))
        width = info.get("action_width", ACTION_WIDTH)
        self.action_width = width if isinstance(width, int) and width > 0 else ACTION_WIDTH
        self.served = 0
        self.refused_busy = 0
        self._pending: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(maxsize=queued + workers)
        self._busy = threading.Semaphore(workers + queued)  # connections held: in a worker or waiting
        super().__init__(address, _Handler)
        self._workers = [
            threading.Thread(target=self._work, name=f"policy-http-{i}", daemon=True) for i in range(workers)
        ]
        for t in self._workers:
            t.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to the pool, or answer 503 and close it when the pool and queue are full."""
        if not self._busy.acquire(blocking=False):
            self.refused_busy += 1
            try:
                request.settimeout(0.5)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: " + str(len(_BUSY)).encode() + b"\r\n\r\n" + _BUSY
                )
                request.shutdown(socket.SHUT_WR)
                request.setblocking(False)  # a timeout would make recv wait for more data
                # what the client already sent, unread, would make close() send a reset that can destroy
                # the 503 on its way: drain it without waiting (the accept loop never blocks on a client)
                for _ in range(16):
                    if not request.recv(1 << 16):
                        break
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self._pending.put((request, client_address))

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, address = item
            try:
                self.finish_request(request, address)
            except Exception:  # noqa: BLE001 - one bad connection never ends a worker
                self.handle_error(request, address)
            finally:
                self.shutdown_request(request)
                self._busy.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line per failed connection (a client that went away), not socketserver's traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            LOG.info("client %s: connection ended (%s)", client_address, exc)
        else:
            LOG.error("client %s: %s: %s", client_address, type(exc).__name__, exc)

    def server_close(self) -> None:
        """Close the socket and stop the worker threads."""
        super().server_close()
        for _ in self._workers:
            self._pending.put(None)
        for t in self._workers:
            t.join(timeout=self.client_timeout_s + 1)


class _Handler(BaseHTTPRequestHandler):
    server: PolicyHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses one connection per query stream

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.client_timeout_s)  # every read and write of this connection

    def log_message(self, format: str, *args: object) -> None:
        LOG.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode("utf-8"))

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/info", "/health"):
            info = dict(self.server.runner.info())
            info["served"] = self.server.served
            self._send(200, json.dumps(info).encode("utf-8"))
        else:
            self._error(404, f"no such endpoint {self.path!r} (POST /predict, GET /info)")

    def _read_body(self, length: int) -> bytes | None:
        """The body, or None (connection closed) when the client stops sending.

        Each read waits at most the socket timeout, all of them together at most ``body_deadline_s``.
        """
        deadline = time.monotonic() + self.server.body_deadline_s
        parts: list[bytes] = []
        left = length
        try:
            while left > 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"body not complete within {self.server.body_deadline_s} s")
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    raise ConnectionError(f"client closed after {length - left} of {length} body bytes")
                parts.append(chunk)
                left -= len(chunk)
        except OSError as e:
            LOG.info("client %s: request dropped (%s)", self.address_string(), e)
            self.close_connection = True
            return None
        return b"".join(parts)

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") != "/predict":
            self._error(404, f"no such endpoint {self.path!r} (POST /predict, GET /info)")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True  # the unread body would be taken for the next request
            self._error(411, "Content-Length required")
            return
        if not 0 < length <= MAX_BODY:
            self.close_connection = True
            self._error(413, f"body must be 1..{MAX_BODY} bytes, got {length}")
            return
        body = self._read_body(length)
        if body is None:
            return
        try:
            request = parse_request(body, self.server.image_rule, self.server.decode_gate)
            del body
            with self.server.infer_lock:
                actions = np.asarray(self.server.runner.predict(request), dtype=np.float64)
                answer = encode_answer(actions[: request.horizon], self.server.action_width)
                self.server.served += 1
        except (ProtocolError, RequestRefused) as e:
            self._error(400, str(e))
            return
        except Exception as e:
            LOG.exception("predict failed")
            self._error(500, f"{type(e).__name__}: {e}")
            return
        self._send(200, answer)


def make_server(runner: Runner, host: str = "127.0.0.1", port: int = 8000, **bounds: Any) -> PolicyHTTPServer:
    """A bound server (port 0 picks a free one: ``server.server_address[1]``); call serve_forever().

    ``bounds``: ``workers``, ``queued``, ``decoders``, ``client_timeout_s``, ``body_deadline_s``. Caps Pillow's
    ``MAX_IMAGE_PIXELS`` for this process too (the server decodes nothing larger).
    """
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    return PolicyHTTPServer((host, port), runner, **bounds)
