"""The HTTP side of ``piper-policy-server``: PiperPilot's ``POST /predict`` and ``GET /info``.

Plain stdlib (``http.server``) so it runs in any trainer virtualenv. Whatever answers the
predictions is a ``Runner``: the LeRobot checkpoint runner in production, a delayed stand-in in
``bench/policy_latency.py``. One request is inferred at a time (a lock: models are not re-entrant);
``/info`` answers while an inference runs.
"""
from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

import numpy as np
import numpy.typing as npt

from piper_recorder.policy.server.protocol import (PredictRequest, ProtocolError, RequestRefused, encode_answer,
                                                   parse_request)

LOG = logging.getLogger("piper_policy_server")
MAX_BODY = 64 * 1024 * 1024


class Runner(Protocol):
    """Answers one decoded request with (n, 8) absolute action rows (n may exceed the horizon)."""

    def info(self) -> dict[str, object]:
        ...

    def predict(self, request: PredictRequest) -> npt.NDArray[np.floating]:
        ...


class PolicyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], runner: Runner):
        super().__init__(address, _Handler)
        self.runner = runner
        self.infer_lock = threading.Lock()
        self.served = 0


class _Handler(BaseHTTPRequestHandler):
    server: PolicyHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses one connection per query stream

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        LOG.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode("utf-8"))

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/info", "/health"):
            info = dict(self.server.runner.info())
            info["served"] = self.server.served
            self._send(200, json.dumps(info).encode("utf-8"))
        else:
            self._error(404, f"no such endpoint {self.path!r} (POST /predict, GET /info)")

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        if self.path.split("?", 1)[0].rstrip("/") != "/predict":
            self._error(404, f"no such endpoint {self.path!r} (POST /predict, GET /info)")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "Content-Length required")
            return
        if not 0 < length <= MAX_BODY:
            self._error(413, f"body must be 1..{MAX_BODY} bytes, got {length}")
            return
        body = self.rfile.read(length)
        try:
            request = parse_request(body)
            with self.server.infer_lock:
                actions = np.asarray(self.server.runner.predict(request), dtype=np.float64)
                answer = encode_answer(actions[: request.horizon])
                self.server.served += 1
        except (ProtocolError, RequestRefused) as e:
            self._error(400, str(e))
            return
        except Exception as e:  # noqa: BLE001 - any model failure is answered, the server keeps serving
            LOG.exception("predict failed")
            self._error(500, f"{type(e).__name__}: {e}")
            return
        self._send(200, answer)


def make_server(runner: Runner, host: str = "127.0.0.1", port: int = 8000) -> PolicyHTTPServer:
    """A bound server (port 0 picks a free one: ``server.server_address[1]``); call serve_forever()."""
    return PolicyHTTPServer((host, port), runner)
