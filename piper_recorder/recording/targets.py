"""Writer adapters with one shape, so one episode controller drives both dataset formats.

Every method runs on the controller's writer thread. A target makes the episode's sink at
``start_episode`` (its typed ``Sink``, fed rows and frames), keeps it, and saves the episode from that
sink's counters and end flags: ``save_episode(counters, timeout)``. ``source`` (the bag converter:
where the episode came from) is a per-episode argument that goes into the saved record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from piper_recorder.assembly import LeRobotSink, RgbdSink, Sink
from piper_recorder.assembly.sinks import LeRobotRows, RgbdSteps
from piper_recorder.features import PIPER_TABLE, FeatureTable

from .verdict import VerdictConfig, judge

LABEL_KEYS = ("outcome", "outcome_note")
S = TypeVar("S", bound=Sink)
S_co = TypeVar("S_co", bound=Sink, covariant=True)  # a target's sink type (only handed out)
Record = dict[str, Any]


class LeRobotDatasetWriter(LeRobotRows, Protocol):
    """The LeRobot writer calls a target makes (``lerobot.writer.LeRobotWriter``)."""

    def begin_session(self, record: Record) -> Any:
        """Record a collection session."""

    def start_episode(self, task: str) -> int:
        """Open an episode with its task; returns its index."""

    def save_episode(self, counters: Mapping[str, Any] | None = None, annotate: Any = None) -> Mapping[str, Any] | None:
        """Save the open episode with the recorder's counters; None for an empty one."""

    def update_episode(self, index: int, fields: Mapping[str, Any]) -> Any:
        """Set fields in a saved episode's line."""

    def discard_episode(self) -> None:
        """Drop the open episode."""

    def delete_last_episode(self) -> Any:
        """Delete the last saved episode."""

    def close(self) -> None:
        """Close the writer."""


class RgbdDatasetWriter(RgbdSteps, Protocol):
    """The RGB-D writer calls a target makes (``rgbd_writer.writer.RgbdWriter``)."""

    def start_episode(self, seed: int | None = None, meta: Mapping[str, Any] | None = None) -> int:
        """Open an episode; returns its index."""

    def end_episode(
        self, success: bool | None = None, meta: Mapping[str, Any] | None = None
    ) -> Mapping[str, Any] | None:
        """Commit the open episode with its metadata; None for an empty one."""

    def update_episode_attrs(self, index: int, attrs: Mapping[str, Any]) -> None:
        """Set attrs of a committed episode."""

    def discard_episode(self) -> None:
        """Drop the open episode."""

    def close(self) -> None:
        """Close the file."""


class EpisodeTarget(Protocol[S_co]):
    """A writer adapter the episode controller drives, whatever the dataset format; every call on the writer thread."""

    kind: str
    depth: bool  # frames must carry depth (RGB-D observations)
    min_rows: int  # fewer assembled rows than this: the episode is empty and discarded
    needs_task: bool

    def begin_session(self, record: Record) -> None:
        """Record the session a recorder starts."""

    def start_episode(self, task: str, record: Record, source: Record | None = None) -> tuple[int, S_co]:
        """Open an episode; returns its index and the sink the assembler feeds."""

    def save_episode(self, counters: Record, timeout: bool) -> Record:
        """Save the episode from its sink's counters and end flags; returns the saved record."""

    def label_saved(self, index: int, fields: Record) -> None:
        """Set the label fields of a saved episode."""

    def keeps_failed_save(self, exc: BaseException) -> bool:
        """Whether the writer still holds the episode after this save failure (a retry can save it)."""

    def holds_episode(self) -> bool:
        """Whether the writer has an episode open."""

    def discard_episode(self) -> None:
        """Drop the episode in flight."""

    def delete_last_episode(self) -> None:
        """Delete the last saved episode."""

    def close(self) -> None:
        """Close the writer."""


def _open_sink(sink: S | None) -> S:
    if sink is None:
        raise RuntimeError("save_episode without an episode started")
    return sink


def _holds(writer: object) -> bool:
    """The writer still has an episode open (writers say so in ``recording``; assume yes if one cannot)."""
    return bool(getattr(writer, "recording", True))


class LeRobotTarget:
    """The LeRobot target: one writer for every episode, the session recorded once."""

    kind, depth, min_rows, needs_task = "lerobot", False, 1, True

    def __init__(
        self,
        writer: LeRobotDatasetWriter,
        save_raw_quest: bool = True,
        table: FeatureTable = PIPER_TABLE,
        verdict: VerdictConfig | None = None,
        fps: float = 30.0,
        cameras: tuple[str, ...] = (),
    ):
        self.writer, self.save_raw_quest, self.table = writer, save_raw_quest, table
        self.verdict, self.fps, self.cameras = verdict or VerdictConfig(), fps, cameras
        self._source: Record | None = None
        self._policy: Record | None = None
        self._sink: LeRobotSink | None = None  # the episode's, kept until it is saved or discarded

    def begin_session(self, record: Record) -> None:
        """Record the session in the dataset's provenance."""
        self.writer.begin_session(record)

    def start_episode(self, task: str, record: Record, source: Record | None = None) -> tuple[int, LeRobotSink]:
        """Open an episode with its task; returns its index and sink."""
        idx = int(self.writer.start_episode(task))
        self._source = source
        self._policy = record.get("policy")  # a rollout names its policy in episodes.jsonl
        self._sink = LeRobotSink(self.writer, self.save_raw_quest, self.table)
        return idx, self._sink

    def save_episode(self, counters: Record, timeout: bool) -> Record:
        """Save the episode with the assembly's counters and its verdict."""
        sink = _open_sink(self._sink)
        source = {} if self._source is None else {"source": self._source}
        extra = {} if self._policy is None else {"policy": self._policy}
        cfg, fps, cams = self.verdict, self.fps, self.cameras

        def annotate(record: Mapping[str, Any], videos: Mapping[str, Any], times: Any) -> Record:
            """The integrity verdict from the record and what was written (mp4 PTS, row times)."""
            return judge(record, cfg, fps, cams or tuple(videos), videos, times).fields()

        rec = self.writer.save_episode({**counters, **source, **sink.counters(), **extra}, annotate=annotate)
        self._sink = None  # saved (a failed save keeps it: the retry saves the same episode)
        return dict(rec) if isinstance(rec, dict) else {}

    def label_saved(self, index: int, fields: Record) -> None:
        """Rewrite the saved episode's episodes.jsonl line with the label (one atomic replace)."""
        self.writer.update_episode(index, fields)

    def keeps_failed_save(self, exc: BaseException) -> bool:
        """An I/O failure before the commit point leaves the staged episode pending: a retry can save it."""
        from piper_recorder.lerobot.format.errors import SaveFailedError

        return isinstance(exc, SaveFailedError)

    def holds_episode(self) -> bool:
        """Whether the writer has an episode open."""
        return _holds(self.writer)

    def discard_episode(self) -> None:
        """Drop the episode in flight."""
        self._sink = None
        self.writer.discard_episode()

    def delete_last_episode(self) -> None:
        """Delete the last saved episode."""
        self.writer.delete_last_episode()

    def close(self) -> None:
        """Close the writer."""
        self.writer.close()


class RgbdTarget:
    """RGB-D HDF5: the session record, task and source go into each episode's metadata (the format has no session)."""

    kind, depth, min_rows, needs_task = "rgbd", True, 2, False

    def __init__(
        self,
        writer: RgbdDatasetWriter,
        camera: str,
        table: FeatureTable = PIPER_TABLE,
        verdict: VerdictConfig | None = None,
        fps: float = 30.0,
    ):
        self.writer, self.camera, self.table = writer, camera, table
        self.verdict, self.fps = verdict or VerdictConfig(), fps
        self._sink: RgbdSink | None = None  # the episode's, kept until it is saved or discarded

    def begin_session(self, record: Record) -> None:
        """Nothing up front: every episode carries the record it was recorded under."""

    def start_episode(self, task: str, record: Record, source: Record | None = None) -> tuple[int, RgbdSink]:
        """Open an episode with its metadata; returns its index and sink."""
        meta = {"task": task, "provenance": json.dumps(record, sort_keys=True)}
        if source is not None:
            meta["source"] = json.dumps(source, sort_keys=True)
        idx = int(self.writer.start_episode(seed=None, meta=meta))
        self._sink = RgbdSink(self.writer, self.camera, self.table)
        return idx, self._sink

    def save_episode(self, counters: Record, timeout: bool) -> Record:
        """Commit the episode with the assembly's counters and its verdict."""
        sink, self._sink = _open_sink(self._sink), None  # a failed save is never retried (keeps_failed_save)
        sink.end(terminal=not timeout, timeout=timeout)
        v = judge(counters, self.verdict, self.fps, (self.camera,))
        meta = {**{k: counters[k] for k in LABEL_KEYS if k in counters}, **v.fields()}
        # success only where someone said so: a labelled episode (failure: False); an unlabelled one, however
        # it ended, carries no claim a loader filtering on success would train on
        outcome = counters.get("outcome")
        success = None if outcome is None else outcome == "success"
        rec = self.writer.end_episode(success=success, meta=meta)
        return {
            "observations": sink.observations,
            "transitions": sink.transitions,
            **meta,
            **(dict(rec) if isinstance(rec, dict) else {}),
        }

    def label_saved(self, index: int, fields: Record) -> None:
        """The episode's attrs in the file (one journaled transaction under the writer's lock)."""
        success = {"success": fields["outcome"] == "success"} if "outcome" in fields else {}
        self.writer.update_episode_attrs(index, {**fields, **success})

    def keeps_failed_save(self, exc: BaseException) -> bool:
        """Never: the journal rolls a failed commit back, truncating the episode's frames, which are held nowhere else."""
        return False

    def holds_episode(self) -> bool:
        """Whether the writer has an episode open."""
        return _holds(self.writer)

    def discard_episode(self) -> None:
        """Drop the episode in flight."""
        self._sink = None
        self.writer.discard_episode()

    def delete_last_episode(self) -> None:
        """Delete the last committed episode."""
        delete = getattr(self.writer, "delete_last_episode", None)  # writers that cannot delete lack it
        if delete is None:
            raise NotImplementedError("the RGB-D writer cannot delete a committed episode")
        delete()

    def close(self) -> None:
        """Close the file."""
        self.writer.close()
