"""``http`` backend: PiperPilot's ``POST <url>/predict`` JSON protocol, so its servers work unchanged.

Request ``{"task", "state": {feature key: [floats]}, "images": {camera: base64 JPEG}, "horizon"}``;
answer ``{"actions": [[x, y, z, qw, qx, qy, qz, gripper], ...]}`` (at most ``horizon`` rows,
absolute targets in the arm base frame; a longer answer is cut to ``horizon``). Bodies are built and
checked by ``server.protocol``, the one definition both ends use. Standard library only (urllib), one
connection per query, a hard timeout; any failure (a non-finite action included) is a ``BackendError``.
"""
from __future__ import annotations

import hashlib
import json
import math
import urllib.error
import urllib.request

import PIL.Image  # noqa: F401 - protocol.encode_jpeg imports it lazily: load it with the backend, not in a query

from .backend import ActionChunk, BackendError, BackendTimeout, Observation
from .server.protocol import ProtocolError, encode_request, parse_answer


class HttpBackend:
    def __init__(self, url: str, timeout_s: float = 1.0):
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def describe(self) -> dict[str, object]:
        return {"backend": "http", "url": self.url, "protocol": "PiperPilot /predict",
                "content_hash": self._server_hash()}

    def _server_hash(self) -> str | None:
        """The server's own checkpoint hash if it publishes one (GET /info ``content_hash``)."""
        try:
            with urllib.request.urlopen(self.url + "/info", timeout=self.timeout_s) as r:
                info = json.loads(r.read())
            h = info.get("content_hash") if isinstance(info, dict) else None
            return str(h) if h else None
        except (OSError, ValueError):
            return None

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        body = encode_request(obs.task, obs.state, obs.images, horizon)
        req = urllib.request.Request(self.url + "/predict", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise BackendError(f"{self.url}/predict: HTTP {e.code} {e.reason}") from e
        except (OSError, urllib.error.URLError) as e:   # refused, reset, timeout
            if isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError):
                raise BackendTimeout(f"{self.url}/predict: timed out (no answer within {self.timeout_s} s)") from e
            raise BackendError(f"{self.url}/predict: {type(e).__name__}: {e}") from e
        try:
            rows = parse_answer(raw, horizon, cut=True)
        except ProtocolError as e:
            raise BackendError(f"{self.url}/predict: {e}") from e
        return ActionChunk(rows, obs.stamp_ns, obs.stamp_ns,
                           {"bytes_sent": len(body), "sha1": hashlib.sha1(raw).hexdigest()[:12]})

    def close(self) -> None:
        pass
