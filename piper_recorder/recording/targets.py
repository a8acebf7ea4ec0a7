"""Writer adapters with one shape, so one episode controller drives both dataset formats.

Every method runs on the controller's writer thread.
"""
from __future__ import annotations

import json
from typing import Any, Protocol

from piper_recorder.assembly import LeRobotSink, RgbdSink


class EpisodeTarget(Protocol):
    kind: str
    depth: bool          # frames must carry depth (RGB-D observations)
    min_rows: int        # fewer assembled rows than this: the episode is empty and discarded
    needs_task: bool

    def begin_session(self, record: dict[str, Any]) -> None: ...
    def start_episode(self, task: str, record: dict[str, Any]) -> int: ...
    def make_sink(self) -> Any: ...
    def save_episode(self, sink: Any, counters: dict[str, Any], timeout: bool) -> dict[str, Any]: ...
    def keeps_failed_save(self, exc: BaseException) -> bool: ...
    def discard_episode(self) -> None: ...
    def delete_last_episode(self) -> None: ...
    def close(self) -> None: ...


class LeRobotTarget:
    kind, depth, min_rows, needs_task = "lerobot", False, 1, True

    def __init__(self, writer: Any, save_raw_quest: bool = True):
        self.writer, self.save_raw_quest = writer, save_raw_quest
        self._policy: Any = None

    def begin_session(self, record: dict[str, Any]) -> None:
        self.writer.begin_session(record)

    def start_episode(self, task: str, record: dict[str, Any]) -> int:
        self._policy = record.get("policy")   # a rollout names its policy in episodes.jsonl
        return int(self.writer.start_episode(task))

    def make_sink(self) -> LeRobotSink:
        return LeRobotSink(self.writer, self.save_raw_quest)

    def save_episode(self, sink: LeRobotSink, counters: dict[str, Any], timeout: bool) -> dict[str, Any]:
        extra = {"policy": self._policy} if self._policy is not None else {}
        rec = self.writer.save_episode({**counters, **sink.counters(), **extra})
        return dict(rec) if isinstance(rec, dict) else {}

    def keeps_failed_save(self, exc: BaseException) -> bool:
        """An I/O failure before the commit point leaves the staged episode pending: a retry can save it."""
        from piper_recorder.lerobot.errors import SaveFailedError

        return isinstance(exc, SaveFailedError)

    def discard_episode(self) -> None:
        self.writer.discard_episode()

    def delete_last_episode(self) -> None:
        self.writer.delete_last_episode()

    def close(self) -> None:
        self.writer.close()


class RgbdTarget:
    """RGB-D HDF5: the session record and task go into each episode's metadata (the format has no session)."""

    kind, depth, min_rows, needs_task = "rgbd", True, 2, False

    def __init__(self, writer: Any, camera: str):
        self.writer, self.camera = writer, camera

    def begin_session(self, record: dict[str, Any]) -> None:
        """Nothing up front: every episode carries the record it was recorded under."""

    def start_episode(self, task: str, record: dict[str, Any]) -> int:
        meta = {"task": task, "provenance": json.dumps(record, sort_keys=True)}
        return int(self.writer.start_episode(seed=None, meta=meta))

    def make_sink(self) -> RgbdSink:
        return RgbdSink(self.writer, self.camera)

    def save_episode(self, sink: RgbdSink, counters: dict[str, Any], timeout: bool) -> dict[str, Any]:
        sink.end(terminal=not timeout, timeout=timeout)
        rec = self.writer.end_episode(success=None if timeout else True)
        return {"observations": sink.observations, "transitions": sink.transitions,
                **(dict(rec) if isinstance(rec, dict) else {})}

    def keeps_failed_save(self, exc: BaseException) -> bool:
        """Never: a failed commit is rolled back by the journal, which truncates the episode's frames
        (they were appended past the committed end); the frames are not held anywhere else."""
        return False

    def discard_episode(self) -> None:
        self.writer.discard_episode()

    def delete_last_episode(self) -> None:
        delete = getattr(self.writer, "delete_last_episode", None)
        if delete is None:
            raise NotImplementedError("the RGB-D writer cannot delete a committed episode")
        delete()

    def close(self) -> None:
        self.writer.close()
