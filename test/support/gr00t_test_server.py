"""A GR00T N1.5 inference service stand-in, written from the published schema (reference-facts §7,
``gr00t/eval/service.py`` at n1.5-release), not from its code and not from our client's codec:

- ZeroMQ REP; each message msgpack; arrays ``{"__ndarray_class__": True, "as_npy": np.save bytes}``;
- request ``{"endpoint", "data", "api_token"}``; endpoints ``ping``, ``get_modality_config``
  (ModalityConfig objects as ``{"__ModalityConfig_class__": True, "as_json": ...}``), ``get_action``;
- a wrong token answers ``{"error": "Unauthorized: Invalid API token"}``; any exception in a handler
  answers ``{"error": str(e)}`` and the server keeps serving.

``policy`` is a callable (observation dict -> action dict); ``delay_s`` delays every get_action.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import zmq

Policy = Callable[[dict[str, Any]], dict[str, np.ndarray]]


def _to_wire(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        out = io.BytesIO()
        np.save(out, obj, allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": out.getvalue()}
    return obj


def _from_wire(obj: dict) -> Any:
    if obj.get("__ndarray_class__"):
        return np.load(io.BytesIO(obj["as_npy"]), allow_pickle=False)
    return obj


class Gr00tTestServer:
    def __init__(
        self,
        policy: Policy,
        modality_config: dict[str, tuple[list[str], list[int]]] | None = None,
        api_token: str | None = None,
        delay_s: float = 0.0,
    ):
        self.policy = policy
        self.modality_config = modality_config
        self.api_token = api_token
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self.port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _handle(self, request: dict[str, Any]) -> Any:
        endpoint = request.get("endpoint", "get_action")
        if endpoint == "ping":
            return {"status": "ok", "message": "Server is running"}
        if endpoint == "get_modality_config":
            if self.modality_config is None:
                raise ValueError("Unknown endpoint: get_modality_config")
            return {
                group: {
                    "__ModalityConfig_class__": True,
                    "as_json": json.dumps({"delta_indices": delta, "modality_keys": keys}),
                }
                for group, (keys, delta) in self.modality_config.items()
            }
        if endpoint == "get_action":
            if self.delay_s:
                self._stop.wait(self.delay_s)
            return self.policy(request["data"])
        raise ValueError(f"Unknown endpoint: {endpoint}")

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            request = msgpack.unpackb(self._sock.recv(), object_hook=_from_wire)
            self.requests.append(request)
            if self.api_token is not None and request.get("api_token") != self.api_token:
                reply: Any = {"error": "Unauthorized: Invalid API token"}
            else:
                try:
                    reply = self._handle(request)
                except Exception as e:  # noqa: BLE001 - the service answers every failure
                    reply = {"error": str(e)}
            self._sock.send(msgpack.packb(reply, default=_to_wire))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close(0)
        self._ctx.term()
