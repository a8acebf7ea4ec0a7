"""Read rosbag2 bags (sqlite3 or MCAP) with the ``rosbags`` library: no ROS runtime needed.

Every failure a user can meet (not a bag, truncated or corrupt storage, a message type we cannot
decode) surfaces as one ``BagError`` naming the bag and the cause, so the converter can report that
bag and go on with the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.highlevel import AnyReader
from rosbags.typesys import get_typestore

from piper_recorder.cdr.decode import STORE
from piper_recorder.errors import PiperInputError

# Decode with the bag's embedded definitions when present, else the Kilted store (what we record with);
# a fresh store per bag, since a reader registers the bag's own definitions into it.
DEFAULT_STORE = STORE  # cdr.decode: one store for bags and the live recorders
FINGERPRINT_METHOD = "sha256-sampled-v1"
_BLOCK = 1 << 20
_STRIDE = 64 << 20


class BagError(PiperInputError):
    """A bag cannot be converted; the message says which bag and why."""


@dataclass(frozen=True)
class BagMessage:
    """One decoded bag message with its receive (log) time."""

    topic: str
    msgtype: str
    log_ns: int  # when the recording node received it: the converter's notion of "now"
    msg: Any  # a rosbags message object with the ROS field names


@dataclass(frozen=True)
class RawMessage:
    """One serialized bag message with its receive (log) time."""

    topic: str
    msgtype: str
    log_ns: int
    data: bytes


def bag_fingerprint(path: Path) -> str:
    """Content fingerprint of a bag (for provenance and resume), ``FINGERPRINT_METHOD``.

    sha256 over every file's name and size, the whole of files up to 64 MiB (metadata.yaml, small
    bags) and, for larger storage files, the first and last MiB plus one MiB every 64 MiB. Any
    truncation, re-recording or metadata change alters it; reading every byte of a multi-GB image bag
    would cost more than converting it.
    """
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    h = hashlib.sha256(FINGERPRINT_METHOD.encode())
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.relative_to(path) if path.is_dir() else f.name}\0{size}\0".encode())
        with open(f, "rb") as fh:
            if size <= _STRIDE:
                while chunk := fh.read(_BLOCK):
                    h.update(chunk)
                continue
            offsets = list(range(0, size - _BLOCK, _STRIDE)) + [size - _BLOCK]
            for off in offsets:
                fh.seek(off)
                h.update(fh.read(_BLOCK))
    return h.hexdigest()


def bag_size(path: Path) -> int:
    """The bag's size on disk (every file of a bag directory)."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


class BagSource:
    """An open bag: its topics, and its messages on chosen topics in receive-time order."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.exists():
            raise BagError(f"{self.path}: no such bag")
        try:
            self._reader = AnyReader([self.path], default_typestore=get_typestore(DEFAULT_STORE))
            self._reader.open()
        except Exception as exc:  # rosbags raises several unrelated types for broken storage
            why = f"{type(exc).__name__}: {exc}"
            if "Message type" in str(exc):
                why = (
                    f"unknown message type: the bag's definition is missing or does not match ({why}); "
                    "rosbags decodes a type only from the bag's embedded definition or the ROS 2 store"
                )
            raise BagError(f"{self.path}: cannot open bag ({why})") from exc

    def close(self) -> None:
        """Close the bag (errors closing a broken bag are ignored)."""
        try:
            self._reader.close()
        except Exception:  # noqa: BLE001 - closing a broken bag must not hide the first error
            pass

    def __enter__(self) -> BagSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def topics(self) -> dict[str, str]:
        """Topic -> message type."""
        return {c.topic: c.msgtype for c in self._reader.connections}

    def message_counts(self) -> dict[str, int]:
        """The number of messages per topic."""
        out: dict[str, int] = {}
        for c in self._reader.connections:
            out[c.topic] = out.get(c.topic, 0) + int(c.msgcount or 0)
        return out

    @property
    def start_ns(self) -> int:
        """The log time of the bag's first message."""
        return int(self._reader.start_time)

    @property
    def end_ns(self) -> int:
        """The log time of the bag's last message."""
        return int(self._reader.end_time)

    @property
    def duration_s(self) -> float:
        """The bag's span in seconds."""
        return max(0, self.end_ns - self.start_ns) / 1e9

    def raw_messages(self, topics: Collection[str], stop_ns: int | None = None) -> Iterator[RawMessage]:
        """Serialized messages on ``topics`` with receive time < stop_ns, in receive order."""
        conns = [c for c in self._reader.connections if c.topic in topics]
        if not conns:
            return
        try:
            for conn, log_ns, raw in self._reader.messages(connections=conns, stop=stop_ns):
                yield RawMessage(conn.topic, conn.msgtype, int(log_ns), raw)
        except Exception as exc:
            raise BagError(f"{self.path}: cannot read messages ({type(exc).__name__}: {exc})") from exc

    def decode(self, raw: RawMessage) -> Any:
        """The message object of a raw message; ``BagError`` when it does not decode."""
        try:
            return self._reader.deserialize(raw.data, raw.msgtype)
        except Exception as exc:
            raise BagError(
                f"{self.path}: cannot decode a {raw.msgtype} message on {raw.topic} at "
                f"{raw.log_ns} ({type(exc).__name__}: {exc})"
            ) from exc

    def messages(self, topics: Collection[str]) -> Iterator[BagMessage]:
        """Deserialised messages on ``topics``, in receive order."""
        for raw in self.raw_messages(topics):
            yield BagMessage(raw.topic, raw.msgtype, raw.log_ns, self.decode(raw))


def peak_rss_mb() -> float:
    """This process's peak resident set size (ru_maxrss), MB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


__all__ = [
    "FINGERPRINT_METHOD",
    "BagError",
    "BagMessage",
    "BagSource",
    "RawMessage",
    "bag_fingerprint",
    "bag_size",
    "peak_rss_mb",
]
