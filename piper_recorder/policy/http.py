"""``http`` backend: PiperPilot's ``POST <url>/predict`` JSON protocol, so its servers work unchanged.

Request ``{"task", "state": {feature key: [floats]}, "images": {camera: base64 JPEG}, "horizon"}``;
answer ``{"actions": [[x, y, z, qw, qx, qy, qz, gripper], ...]}`` (at most ``horizon`` rows,
absolute targets in the arm base frame; a longer answer is cut to ``horizon``). Two arms: the state holds
each arm's columns and every row is the training root's whole action (``layout``: 16 values, left's 8 then
right's), a row of another width is refused with both widths in the message. Bodies are built and
checked by ``server.protocol``, the one definition both ends use. Standard library only (urllib), one
connection per query, a hard timeout; any failure (a non-finite action included) is a ``BackendError``
whose text says what the server did, in the operator's terms (it becomes the pause reason).

Redirects are refused, for ``/predict`` and ``/info`` alike: urllib's default opener follows a 3xx to
any origin, which would make the arm execute another server's rows and record that server's
``content_hash`` as the provenance of a policy it is not. The configured URL is the policy.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import urllib.error
import urllib.request
from typing import IO, NoReturn

import PIL.Image  # noqa: F401 - protocol.encode_jpeg imports it lazily: load it with the backend, not in a query

from piper_recorder.lerobot.format.action_layout import ActionLayout

from .backend import SINGLE_ARM, ActionChunk, BackendError, BackendTimeout, Observation
from .server.protocol import ProtocolError, encode_request, parse_answer

MAX_ANSWER = 32 * 1024 * 1024  # bytes; 10,000 rows of 16 numbers are ~4 MB: more is not an answer
ERROR_BODY = 4096  # bytes of an error answer read for its {"error": ...} text


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """No 3xx is followed: ``redirect_request`` returning None makes urllib raise the 3xx HTTPError."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> None:
        return None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_RefuseRedirects)


def _error_text(e: urllib.error.HTTPError) -> str:
    """The server's own ``{"error": ...}`` text of an error answer, if it sent one (bounded read)."""
    try:
        doc = json.loads(e.read(ERROR_BODY))
    except (OSError, ValueError, http.client.HTTPException, RecursionError):
        return ""
    err = doc.get("error") if isinstance(doc, dict) else None
    return f": {' '.join(str(err).split())[:300]}" if err else ""


def explain(where: str, e: BaseException, timeout_s: float) -> BackendError:
    """One failure of a request to the policy server as a BackendError saying what happened."""
    if isinstance(e, urllib.error.HTTPError):
        if 300 <= e.code < 400:
            to = e.headers.get("Location") if e.headers is not None else None
            return BackendError(
                f"{where}: the policy server answered HTTP {e.code} redirecting to {to or '?'}; "
                f"redirects are refused (the policy is the configured URL; set policy:= to the "
                f"server that answers)"
            )
        return BackendError(f"{where}: the policy server answered HTTP {e.code} {e.reason}{_error_text(e)}")
    reason = getattr(e, "reason", None) if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, TimeoutError):
        return BackendTimeout(f"{where}: timed out (no answer within {timeout_s} s)")
    if isinstance(reason, http.client.IncompleteRead):
        got = len(reason.partial)
        want = f" of {got + reason.expected} announced" if reason.expected is not None else ""
        return BackendError(f"{where}: the policy server closed the connection mid-answer (got {got}{want} bytes)")
    if isinstance(reason, http.client.RemoteDisconnected):
        return BackendError(f"{where}: the policy server closed the connection without answering")
    if isinstance(reason, http.client.LineTooLong):
        return BackendError(f"{where}: the policy server sent an over-long HTTP header or status line")
    if isinstance(reason, http.client.BadStatusLine):
        line = " ".join(str(reason).split())[:80]
        return BackendError(f"{where}: the policy server answered with a malformed HTTP status line ({line!r})")
    if isinstance(reason, http.client.HTTPException):
        return BackendError(f"{where}: the policy server broke the HTTP protocol ({type(reason).__name__}: {reason})")
    if isinstance(reason, ConnectionRefusedError):
        return BackendError(f"{where}: connection refused (no policy server listening there)")
    if isinstance(reason, ConnectionResetError):
        return BackendError(f"{where}: the policy server reset the connection")
    if isinstance(reason, OSError):
        return BackendError(f"{where}: cannot reach the policy server ({reason.strerror or reason})")
    return BackendError(f"{where}: {type(e).__name__}: {e}")


def _read(r: http.client.HTTPResponse, where: str) -> bytes:
    """The whole answer, at most MAX_ANSWER bytes.

    With a Content-Length, ``read()`` raises IncompleteRead when the server closes early (``read(n)`` would hand back
    the part silently).
    """
    announced = r.getheader("Content-Length")
    if announced is not None and announced.strip().isdigit():
        if int(announced) > MAX_ANSWER:
            raise BackendError(f"{where}: the answer announces {announced} bytes, more than {MAX_ANSWER}")
        return bytes(r.read())
    raw = bytes(r.read(MAX_ANSWER + 1))
    if len(raw) > MAX_ANSWER:
        raise BackendError(f"{where}: the answer is larger than {MAX_ANSWER} bytes")
    return raw


class HttpBackend:
    """A PiperPilot ``/predict`` server at ``url``: one connection per query, redirects refused."""

    def __init__(self, url: str, timeout_s: float = 1.0, layout: ActionLayout = SINGLE_ARM):
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.layout = layout
        self._open = _opener().open

    def describe(self) -> dict[str, object]:
        """Provenance: the backend, its URL and the server's ``content_hash`` when it publishes one."""
        out: dict[str, object] = {"backend": "http", "url": self.url, "protocol": "PiperPilot /predict"}
        h, problem = self._server_hash()
        out["content_hash"] = h
        if problem:
            out["content_hash_error"] = problem
        return out

    def _get(self, path: str) -> bytes:
        try:
            with self._open(self.url + path, timeout=self.timeout_s) as r:
                return _read(r, self.url + path)
        except (OSError, http.client.HTTPException) as e:
            raise explain(f"{self.url}{path}", e, self.timeout_s) from e

    def _server_hash(self) -> tuple[str | None, str]:
        """The server's own checkpoint hash if it publishes one (GET /info ``content_hash``), and why there is none.

        The reason is given when asking failed (a redirect is refused, never followed).
        """
        try:
            info = json.loads(self._get("/info"))
        except BackendError as e:
            return None, str(e)
        except (ValueError, RecursionError):
            return None, f"{self.url}/info: the answer is not JSON"
        h = info.get("content_hash") if isinstance(info, dict) else None
        return (str(h) if h else None), ""

    def _fail(self, e: BaseException) -> NoReturn:
        raise explain(f"{self.url}/predict", e, self.timeout_s) from e

    def predict(self, obs: Observation, horizon: int) -> ActionChunk:
        """At most ``horizon`` rows answering ``obs``; ``BackendError`` saying what the server did."""
        body = encode_request(obs.task, obs.state, obs.images, horizon)
        req = urllib.request.Request(
            self.url + "/predict", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with self._open(req, timeout=self.timeout_s) as r:
                raw = _read(r, self.url + "/predict")
        except (OSError, http.client.HTTPException) as e:  # refused, reset, timeout, HTTP errors, redirects
            self._fail(e)
        try:
            rows = parse_answer(raw, horizon, cut=True, width=self.layout.dim)
        except ProtocolError as e:
            raise BackendError(f"{self.url}/predict: {e}") from e
        return ActionChunk(
            rows, obs.stamp_ns, obs.stamp_ns, {"bytes_sent": len(body), "sha1": hashlib.sha1(raw).hexdigest()[:12]}
        )

    def close(self) -> None:
        """Nothing to release (one connection per query)."""
