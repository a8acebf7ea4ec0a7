"""``gr00t://host:port``: a client for GR00T N1.5's inference service (reference-facts §7).

Protocol (``gr00t/eval/service.py``, tag n1.5-release): ZeroMQ REQ/REP; every message is msgpack;
numpy arrays travel as ``{"__ndarray_class__": True, "as_npy": <np.save bytes, no pickle>}``;
requests are ``{"endpoint": "get_action" | "get_modality_config" | "ping", "data": {...},
"api_token": optional}``; a failure comes back as ``{"error": str}``; modality configs as
``{"__ModalityConfig_class__": True, "as_json": ...}``.

Keys come from the training root's ``meta/modality.json`` (``lerobot.format.root.Modality``; default: the recorder's own Piper layout):
``video.<cam>`` (1, H, W, 3) uint8, ``state.<name>`` (1, D) = the slice ``[start:end]`` of its
``original_key`` column, the language key(s) ``[task]``; the answer's ``action.<name>`` (horizon, D)
arrays go back into their slices of the ``action`` columns, placed in the row by the training root's
action layout (``layout``; one arm ``action.arm_eef`` + ``action.gripper``; two arms each arm's columns,
whose modality.json slices are ``left_eef_pos``, ``left_eef_rot``, ``left_gripper``, ``right_...``).
The server's own ``get_modality_config`` (asked once) says which keys it wants; an observation
history longer than the current step is refused rather than faked.

A timeout leaves a REQ socket unusable (it still awaits the lost reply), so the socket is closed
and reopened, as GR00T's own client does.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import msgpack
import numpy as np
import numpy.typing as npt
import zmq

from piper_recorder.errors import PiperInputError
from piper_recorder.lerobot.format.action_layout import ActionLayout
from piper_recorder.lerobot.format.features import COMBINED
from piper_recorder.lerobot.format.root import Modality, Slice
from piper_recorder.policy.backend import (
    SINGLE_ARM,
    ActionChunk,
    BackendError,
    BackendTimeout,
    Observation,
)

TOKEN_ENV = "PIPER_GR00T_API_TOKEN"


class ServerError(BackendError):
    """The service answered ``{"error": ...}`` (it is up; the request was refused or failed)."""


def _encode(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, obj, allow_pickle=False)
        return {"__ndarray_class__": True, "as_npy": buf.getvalue()}
    return obj


class AnswerError(PiperInputError, ValueError):
    """An answer that cannot be decoded; the text says what is wrong with it in the service's terms."""


def _decode(obj: dict[object, object]) -> object:
    if "__ndarray_class__" in obj:
        raw = obj.get("as_npy")
        if not isinstance(raw, bytes):
            raise AnswerError("an array in the answer carries no np.save bytes (as_npy)")
        try:
            return np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:  # truncated, not .npy, an object array (pickle)
            raise AnswerError(
                f"an array in the answer is not a readable .npy ({' '.join(str(e).split())[:120]})"
            ) from None
    if "__ModalityConfig_class__" in obj:  # a pydantic model on their side; plain dict here
        text = obj.get("as_json")
        try:
            return json.loads(cast(str, text))
        except (TypeError, ValueError, RecursionError):
            raise AnswerError("a modality config in the answer is not JSON (as_json)") from None
    return obj


def pack(message: Mapping[str, object]) -> bytes:
    """One message as msgpack, numpy arrays as GR00T's ``__ndarray_class__`` entries."""
    return cast(bytes, msgpack.packb(message, default=_encode))


def unpack(raw: bytes) -> object:
    """Decode one reply; AnswerError says why it cannot be.

    msgpack's own exceptions often carry no text (a FormatError or StackError reads ``()``).
    """
    try:
        return msgpack.unpackb(raw, object_hook=_decode)
    except AnswerError:
        raise
    except msgpack.StackError:
        raise AnswerError("answer nested too deeply") from None
    except RecursionError:
        raise AnswerError("answer nested too deeply") from None
    except msgpack.ExtraData:
        raise AnswerError("answer has bytes after its msgpack message") from None
    except msgpack.FormatError:
        raise AnswerError("answer is not msgpack (a byte no msgpack message starts with)") from None
    except ValueError as e:
        if "incomplete" in str(e):
            raise AnswerError(f"answer is truncated ({len(raw)} bytes end inside a msgpack message)") from None
        raise AnswerError(f"answer is not msgpack ({' '.join(str(e).split())[:120] or type(e).__name__})") from None
    except (TypeError, OverflowError) as e:  # e.g. an unhashable map key, an integer beyond 64 bits
        raise AnswerError(f"answer is not msgpack this client reads ({type(e).__name__}: {e})") from None


def _field_problem(name: str, value: object) -> str:
    """Why an answer field is not an action array, in the answer's own terms."""
    if isinstance(value, msgpack.ExtType):
        return f"answer field {name} has an unsupported msgpack extension type (code {value.code})"
    if value is None:
        return f"answer field {name} is nil"
    return f"answer field {name} is a msgpack {type(value).__name__}, not an array"


def _column(obs: Observation, key: str) -> npt.NDArray[np.float32] | None:
    """An observation column, or a combined one (observation.state) from its parts."""
    if key in obs.state:
        return np.asarray(obs.state[key], dtype=np.float32).reshape(-1)
    parts = COMBINED.get(key)
    if parts and all(p in obs.state for p in parts):
        return np.concatenate([np.asarray(obs.state[p], dtype=np.float32).reshape(-1) for p in parts])
    return None


class Gr00tBackend:
    """``PolicyBackend`` over a GR00T N1.5 inference service. Thread-safe (one request at a time)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float = 1.0,
        api_token: str | None = None,
        modality: Mapping[str, object] | str | Path | None = None,
        layout: ActionLayout = SINGLE_ARM,
    ):
        self.host, self.port = host, int(port)
        self.layout = layout
        self.timeout_ms = max(1, int(timeout_s * 1000))
        self.api_token = api_token if api_token is not None else os.environ.get(TOKEN_ENV) or None
        self.modality = Modality.load(modality)
        self._modality_source = (
            "default" if modality is None else ("dict" if isinstance(modality, Mapping) else str(modality))
        )
        self._ctx = zmq.Context()
        self._sock: zmq.Socket[bytes] | None = None
        self._lock = threading.Lock()
        self._server_keys: dict[str, tuple[list[str], int]] | None = None  # group -> (keys, steps)

    # -- transport ---------------------------------------------------------------------------------
    def _socket(self) -> zmq.Socket[bytes]:
        if self._sock is None:
            s: zmq.Socket[bytes] = self._ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
            s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
            s.connect(f"tcp://{self.host}:{self.port}")
            self._sock = s
        return self._sock

    def _reset_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def call(self, endpoint: str, data: Mapping[str, object] | None = None) -> dict[str, object]:
        """One request/reply; BackendError on timeout, transport failure, ``{"error"}`` or garbage."""
        request: dict[str, object] = {"endpoint": endpoint}
        if data is not None:
            request["data"] = dict(data)
        if self.api_token:
            request["api_token"] = self.api_token
        with self._lock:
            sock = self._socket()
            try:
                sock.send(pack(request))
                raw = sock.recv()
            except zmq.Again as e:
                self._reset_socket()
                raise BackendTimeout(
                    f"gr00t://{self.host}:{self.port} {endpoint}: no answer within {self.timeout_ms} ms"
                ) from e
            except zmq.ZMQError as e:
                self._reset_socket()
                raise BackendError(f"gr00t://{self.host}:{self.port} {endpoint}: {e}") from e
        try:
            reply = unpack(raw)
        except AnswerError as e:
            raise BackendError(f"gr00t {endpoint}: {e}") from e
        if not isinstance(reply, dict):
            raise BackendError(f"gr00t {endpoint}: answer is not a map")
        if "error" in reply:
            raise ServerError(f"gr00t {endpoint}: server error: {reply['error']}")
        return cast(dict[str, object], reply)

    def ping(self) -> bool:
        """Whether the server answers a ping."""
        try:
            self.call("ping")
            return True
        except BackendError:
            return False

    # -- modality ----------------------------------------------------------------------------------
    def server_keys(self) -> dict[str, tuple[list[str], int]]:
        """The server's modality config: group -> (modality keys, observation steps). Asked once."""
        if self._server_keys is None:
            reply = self.call("get_modality_config")
            keys: dict[str, tuple[list[str], int]] = {}
            for group, cfg in reply.items():
                if isinstance(cfg, Mapping) and isinstance(cfg.get("modality_keys"), list):
                    steps = len(cfg.get("delta_indices") or [0])
                    keys[str(group)] = ([str(k) for k in cfg["modality_keys"]], steps)
            self._server_keys = keys
        return self._server_keys

    def observation_message(self, obs: Observation) -> dict[str, object]:
        """The ``get_action`` data for one observation (only the keys the server asks for)."""
        m = self.modality
        video = m.video or {cam: cam for cam in obs.images}
        msg: dict[str, object] = {}
        for name, cam in video.items():
            if cam not in obs.images:
                raise BackendError(
                    f"gr00t: video.{name} needs camera {cam!r}, the observation has {sorted(obs.images)}"
                )
            msg[f"video.{name}"] = np.ascontiguousarray(obs.images[cam], dtype=np.uint8)[None]
        for s in m.state:
            col = _column(obs, s.original_key)
            if col is None:
                raise BackendError(
                    f"gr00t: state.{s.name} needs {s.original_key}, the observation has {sorted(obs.state)}"
                )
            if s.end > col.shape[0]:
                raise BackendError(
                    f"gr00t: state.{s.name} slices [{s.start}:{s.end}] of the {col.shape[0]}-wide {s.original_key}"
                )
            msg[f"state.{s.name}"] = col[s.start : s.end][None]
        language = list(m.language)
        try:
            wanted = self.server_keys()
        except ServerError:
            wanted = {}  # a server without get_modality_config: send everything we have
        if "language" in wanted:
            language = wanted["language"][0]
        for lang in language:
            msg[lang] = [obs.task]
        for group in ("video", "state"):
            if group not in wanted:
                continue
            keys, steps = wanted[group]
            if steps != 1:
                raise BackendError(
                    f"gr00t: the server wants {steps} {group} steps per key; this client sends "
                    f"only the current observation"
                )
            missing = [k for k in keys if k not in msg]
            if missing:
                raise BackendError(
                    f"gr00t: the server wants {missing}, the training modality gives "
                    f"{sorted(k for k in msg if k.startswith(group + '.'))}"
                )
            for k in [k for k in msg if k.startswith(group + ".") and k not in keys]:
                del msg[k]
        return msg

    def rows_from_answer(self, answer: Mapping[str, object], horizon: int) -> npt.NDArray[np.float32]:
        """``action.<name>`` arrays -> (n, the layout's dim) rows in the action columns' layout."""
        offsets = {"action": 0, **self.layout.columns()}  # the combined column, or each arm's columns
        width = self.layout.dim
        widths = {"action": width, **self.layout.widths()}
        parts: list[tuple[Slice, npt.NDArray[np.float32]]] = []
        for s in self.modality.action:
            key = f"action.{s.name}"
            if key not in answer:
                raise BackendError(f"gr00t: answer lacks {key} (got {sorted(map(str, answer))})")
            arr = answer[key]
            if not isinstance(arr, np.ndarray):
                raise BackendError(f"gr00t: {_field_problem(key, arr)}")
            if arr.dtype.kind not in "fiu":  # complex: astype would drop the imaginary part silently
                kind = {"c": "complex-valued", "b": "boolean"}.get(arr.dtype.kind, f"of dtype {arr.dtype}")
                raise BackendError(f"gr00t: answer field {key} is {kind}; actions must be real numbers")
            wide = arr.astype(np.float64)
            if np.isfinite(wide).all() and (np.abs(wide) > np.finfo(np.float32).max).any():
                raise BackendError(f"gr00t: answer field {key}: action value out of range (beyond float32)")
            a = wide.astype(np.float32)
            if a.ndim == 3 and a.shape[0] == 1:  # a batched answer
                a = a[0]
            if a.ndim == 1 and s.end - s.start == 1:
                a = a[:, None]
            if a.ndim != 2 or a.shape[1] != s.end - s.start or a.shape[0] < 1:
                raise BackendError(
                    f"gr00t: action.{s.name} has shape {arr.shape}, expected (horizon, {s.end - s.start})"
                )
            parts.append((s, a))
        n = min(min(a.shape[0] for _, a in parts), horizon)
        rows = np.full((n, width), np.nan, dtype=np.float32)
        for s, a in parts:
            if s.original_key not in offsets or s.end > widths[s.original_key]:
                raise BackendError(
                    f"gr00t: action.{s.name} maps to {s.original_key}[{s.start}:{s.end}], outside "
                    f"the {width} action columns ({', '.join(offsets)})"
                )
            o = offsets[s.original_key]
            rows[:, o + s.start : o + s.end] = a[:n]
        if not np.isfinite(rows).all():
            raise BackendError("gr00t: answer leaves action columns unset or non-finite")
        return rows

    # -- PolicyBackend -----------------------------------------------------------------------------
    def describe(self) -> dict[str, object]:
        """Provenance: the backend, its address, the modality map in use and the keys the server asked for."""
        out: dict[str, object] = {
            "backend": "gr00t",
            "url": f"gr00t://{self.host}:{self.port}",
            "modality": self._modality_source,
            "api_token": bool(self.api_token),
        }
        if self._server_keys is not None:
            out["server_modality"] = {g: k for g, (k, _) in self._server_keys.items()}
        return out

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        """At most ``horizon`` rows answering ``obs`` from the server's ``get_action``."""
        answer = self.call("get_action", self.observation_message(obs))
        rows = self.rows_from_answer(answer, horizon)
        return ActionChunk(rows=rows, obs_stamp_ns=obs.stamp_ns, t0_ns=obs.stamp_ns, info={"backend": "gr00t"})

    def close(self) -> None:
        """Close the socket."""
        with self._lock:
            self._reset_socket()
        self._ctx.term()
