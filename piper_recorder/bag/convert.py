"""One bag -> one staging dataset, through exactly the live recorders' path.

The bag's messages go, in receive (log) order, through the same input router (``recording.router``:
message adapters, joint names and scales of the mapping, image checks) into the same
``EpisodeController`` (pre-roll = newest sample of each input, assembler, writer thread, writer
targets) the recorder nodes use; the log time plays the node's
``now``: ``tick(log_ns)`` before each message, ``start`` once the log passes the episode's feed time,
``stop(end_ns)`` once it passes ``end_ns`` + the assembly delay (lateness, plus the frame horizon when
rows carry frames). Between episodes only the last few serialized
messages per topic are kept (they become the pre-roll), and of each camera topic the last phase window
(``frame_assign.window_captures``), so the episode's phase estimate starts from the captures the live
recorder's ``CaptureHistory`` held; gaps cost no decoding beyond that.

For /episode_events episodes the assembler starts at the live grid origin (the "saved" event's
``start_ns``) and is fed from the live "started" time, so rows land on the live grid; the resulting
origin and row count are checked against the event and any difference is reported as a note.

Each episode carries a ``source`` block (bag, fingerprint, span) in its record (LeRobot
episodes.jsonl counters; RGB-D demo attribute ``source``), passed to ``EpisodeController.start``:
that is what resume reads.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piper_recorder import __version__
from piper_recorder.assembly import window_captures
from piper_recorder.names import EPISODE_EVENTS
from piper_recorder.recording.config import (
    LeRobotRecorderConfig,
    RecorderConfig,
    RgbdRecorderConfig,
    lerobot_writer_config,
    rgbd_writer_config,
    session_record,
)
from piper_recorder.recording.controller import EpisodeController
from piper_recorder.recording.router import IMAGE, InputRouter
from piper_recorder.recording.targets import EpisodeTarget, LeRobotTarget, RgbdTarget

from .config import TopicMap
from .episodes import EpisodeSpan, recorders_with_saves, spans_from_events, spans_from_ranges, whole_bag
from .source import FINGERPRINT_METHOD, BagError, BagSource, RawMessage, bag_fingerprint, peak_rss_mb

CONVERTER = "piper-bag2dataset"
GAP_KEEP = 4  # serialized messages kept per topic between episodes (the next pre-roll)
MAX_WRITER_BACKLOG = 256  # rows/frames queued for the writer thread before the reader waits
Progress = Callable[[int, float, float], None]  # (bag index, seconds done, seconds total)

if TYPE_CHECKING:
    from piper_recorder.lerobot.writer import LeRobotWriter
    from rgbd_writer import RgbdWriter


@dataclass
class ConvertOptions:
    """How to convert a bag: the format, the recorder's settings and topics, episode ranges and task."""

    fmt: str  # "lerobot" | "rgbd"
    settings: RecorderConfig  # the recorder's own config class (recording.config)
    topics: TopicMap
    ranges: tuple[str, ...] = ()
    task: str | None = None
    recorder: str | None = None  # whose /episode_events to follow (default: the format's)
    output: str = ""  # for provenance

    @property
    def recorder_name(self) -> str:
        """The node name of the recorder the conversion stands in for."""
        return self.settings.node_name


@dataclass
class BagResult:
    """What converting one bag gave: its status, fingerprint, staging dataset, episodes, notes and costs."""

    index: int
    bag: str
    status: str = "failed"  # converted | skipped | failed
    fingerprint: str | None = None
    error: str | None = None
    staging: str | None = None  # staging dataset (LeRobot root / HDF5 file)
    session: dict[str, Any] | None = None
    episodes: int = 0
    skipped_episodes: int = 0
    notes: list[str] = field(default_factory=list)
    bag_s: float = 0.0
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0


# ---- writers (the recorder nodes' settings; offline: never drop frames) --------------------------
def open_writer(opts: ConvertOptions, path: Path) -> LeRobotWriter | RgbdWriter:
    """The staging dataset's writer, with the recorder node's settings (offline: never drop frames)."""
    return _lerobot_writer(opts, path) if opts.fmt == "lerobot" else _rgbd_writer(opts, path)


def _lerobot_writer(opts: ConvertOptions, path: Path) -> LeRobotWriter:
    from piper_recorder.lerobot.writer import LeRobotWriter

    assert isinstance(opts.settings, LeRobotRecorderConfig)
    tm = opts.topics
    return LeRobotWriter(path, lerobot_writer_config(opts.settings, tm.cameras, offline=True, table=tm.table))


def _rgbd_writer(opts: ConvertOptions, path: Path) -> RgbdWriter:
    from rgbd_writer import RgbdWriter

    assert isinstance(opts.settings, RgbdRecorderConfig)
    tm = opts.topics
    return RgbdWriter(path, rgbd_writer_config(opts.settings, tm.cameras, producer=CONVERTER, table=tm.table))


def open_target(opts: ConvertOptions, path: Path) -> EpisodeTarget[Any]:
    """The recorder's own writer target over a fresh writer at ``path``."""
    if opts.fmt == "lerobot":
        assert isinstance(opts.settings, LeRobotRecorderConfig)
        return LeRobotTarget(
            _lerobot_writer(opts, path),
            opts.settings.save_raw_quest,
            opts.topics.table,
            fps=opts.settings.fps,
            cameras=tuple(opts.topics.cameras),
            verdict=opts.settings.verdict,
        )
    return RgbdTarget(
        _rgbd_writer(opts, path),
        next(iter(opts.topics.cameras)),
        opts.topics.table,
        fps=opts.settings.fps,
        verdict=opts.settings.verdict,
    )


# ---- provenance --------------------------------------------------------------------------------
def _latest_json(src: BagSource, topic: str | None) -> dict[str, Any] | None:
    if not topic or topic not in src.topics:
        return None
    last = None
    for m in src.messages([topic]):
        last = m.msg.data
    if last is None:
        return None
    try:
        v = json.loads(last)
    except ValueError:
        return {"raw": last}
    return v if isinstance(v, dict) else {"raw": last}


def _provenance(src: BagSource, topics: TopicMap) -> dict[str, Any] | None:
    """The arm's last provenance JSON in the bag; several arms: each arm's, by name (``session_record``)."""
    if topics.table.arms:
        return {a: _latest_json(src, t) for a, t in topics.provenance_topics().items() if a is not None}
    return _latest_json(src, topics.provenance)


# ---- checks and spans ----------------------------------------------------------------------------
def check_topics(src: BagSource, opts: ConvertOptions) -> None:
    """Raise ``BagError`` unless the bag holds every required topic with the expected message type."""
    have = src.topics
    required = opts.topics.required(depth=opts.fmt == "rgbd")
    wrong = [
        f"{t} is {have[t]}, expected {want}"
        for t, want in {**required, **opts.topics.optional()}.items()
        if t in have and have[t] != want
    ]
    if wrong:
        raise BagError(f"{src.path}: unexpected message types: {'; '.join(wrong)}")
    missing = [t for t in required if t not in have]
    if missing:
        raise BagError(
            f"{src.path}: missing topics {missing} (bag has {sorted(have) or 'no topics'}); "
            "map other names with --config/--mapping"
        )
    counts = src.message_counts()
    empty = [t for t in required if counts.get(t, 1) == 0]
    if empty:
        raise BagError(f"{src.path}: no messages on {empty}")


def choose_spans(src: BagSource, opts: ConvertOptions, notes: list[str]) -> list[EpisodeSpan]:
    """The episode spans to convert: ``--episode`` ranges, else /episode_events, else the whole bag."""
    tm = opts.topics
    if tm.episode_events and tm.episode_events in src.topics:
        lines = [m.msg.data for m in src.messages([tm.episode_events])]
        names = recorders_with_saves(lines)
        who = opts.recorder or (opts.recorder_name if opts.recorder_name in names else (names[0] if names else None))
        if who is not None:
            spans = spans_from_events(lines, who)
            if who != opts.recorder_name:
                notes.append(f"episodes from {who}'s {tm.episode_events} (no {opts.recorder_name} saves in the bag)")
            if spans:
                return _begun_in_bag(spans, src, notes)
        notes.append(
            f"the bag's {tm.episode_events} hold no saved episodes; "
            + ("using --episode ranges" if opts.ranges else "converting the whole bag")
        )
    if opts.ranges:
        return spans_from_ranges(
            opts.ranges,
            src.start_ns,
            opts.settings.assembly(tuple(opts.topics.cameras)).delay_ns(depth=opts.fmt == "rgbd"),
        )
    return whole_bag(src.start_ns, src.end_ns)


def _begun_in_bag(spans: list[EpisodeSpan], src: BagSource, notes: list[str]) -> list[EpisodeSpan]:
    """Drop live episodes that began before the bag did (``ros2 bag record`` started mid-episode).

    Their first rows are not in the bag, so a conversion could only be a silently shorter episode.
    """
    keep = []
    for s in spans:
        if s.start_ns < src.start_ns:
            notes.append(
                f"live episode {s.live_index} began {(src.start_ns - s.start_ns) / 1e9:.3f}s before the "
                "bag's first message: skipped (convert what the bag holds with --episode START:END)"
            )
        else:
            keep.append(s)
    return keep


# ---- the pass ------------------------------------------------------------------------------------
def convert_bag(
    index: int,
    bag: str | Path,
    opts: ConvertOptions,
    staging: str | Path,
    done: dict[str, list[tuple[int, int]]] | None = None,
    progress: Progress | None = None,
) -> BagResult:
    """Convert one bag into a fresh staging dataset at ``staging``; never raises for bad input."""
    t0 = time.perf_counter()
    res = BagResult(index, str(bag))
    try:
        if not Path(bag).exists():
            raise BagError(f"{bag}: no such bag")
        try:
            res.fingerprint = bag_fingerprint(Path(bag))
        except OSError as exc:
            raise BagError(f"{bag}: cannot read ({exc})") from exc
        with BagSource(Path(bag)) as src:
            res.bag_s = src.duration_s
            finished = {(a, b) for a, b in (done or {}).get(res.fingerprint, [])}
            _convert(src, res, opts, Path(staging), finished, progress)
    except BagError as exc:
        res.status, res.error = "failed", str(exc)
    except Exception as exc:  # noqa: BLE001 - one bad bag must not stop the others
        res.status, res.error = "failed", f"{bag}: {type(exc).__name__}: {exc}"
    res.wall_s = time.perf_counter() - t0
    res.peak_rss_mb = peak_rss_mb()
    return res


def _convert(
    src: BagSource,
    res: BagResult,
    opts: ConvertOptions,
    staging: Path,
    done: set[tuple[int, int]],
    progress: Progress | None,
) -> None:
    check_topics(src, opts)
    spans = choose_spans(src, opts, res.notes)
    todo = [s for s in spans if (s.start_ns, s.end_ns) not in done]
    res.skipped_episodes = len(spans) - len(todo)
    source = {
        "converter": CONVERTER,
        "converter_version": __version__,
        "bags": [str(src.path)],
        "fingerprints": [res.fingerprint],
        "fingerprint_method": FINGERPRINT_METHOD,
        "episodes_from": spans[0].origin if spans else None,
        "topics": opts.topics.to_dict(),
    }
    if not todo:
        res.status = "skipped"
        return
    task_default = opts.task or opts.settings.task
    record = {
        **session_record(
            opts.settings,
            opts.recorder_name,
            _provenance(src, opts.topics),
            _latest_json(src, opts.topics.hello),
            opts.topics.cameras,
            opts.output,
        ),
        "source": source,
    }
    res.session = record
    staging.mkdir(parents=True, exist_ok=True)
    path = staging / ("lerobot" if opts.fmt == "lerobot" else "rgbd.hdf5")
    target = open_target(opts, path)
    res.staging = str(path)
    # the end comes from the span, never from max_episode_s; events come back in the Answers
    c = EpisodeController(
        target,
        opts.settings.assembly(tuple(opts.topics.cameras), opts.topics.table),
        recorder=opts.recorder_name,
        max_episode_s=0,
        publish_event=lambda e: None,
        session_record=lambda: record,
        log=lambda m: None,
        tick_stats=False,
        max_lag_s=math.inf,
    )  # offline: no deadline, so never shed a frame behind the writer
    try:
        router = InputRouter(opts.topics, c, depth=opts.fmt == "rgbd", warn=res.notes.append)
        _run_pass(src, opts, c, router, todo, task_default, res, progress)
    finally:
        ans = c.shutdown(save=False)
        if not ans.ok:
            res.notes.append(ans.message)
    res.status = "converted"


def _run_pass(
    src: BagSource,
    opts: ConvertOptions,
    c: EpisodeController,
    router: InputRouter,
    spans: list[EpisodeSpan],
    task_default: str,
    res: BagResult,
    progress: Progress | None,
) -> None:
    lateness = opts.settings.assembly(tuple(opts.topics.cameras)).delay_ns(depth=opts.fmt == "rgbd")
    spans = sorted(spans, key=lambda s: s.feed_from_ns)
    gap: dict[str, deque[RawMessage]] = {}
    topics = [r.topic for r in router.routes]
    # kept between episodes: each input's newest few (its pre-roll); each camera topic's phase window,
    # GAP_KEEP more for the colour/depth pairs at its old end (the capture history, ``CaptureHistory``)
    captures = window_captures(c.assembly.fps) + GAP_KEEP
    keep = {r.topic: captures if r.kind == IMAGE else GAP_KEEP for r in router.routes}
    stop_at = spans[-1].end_ns + lateness + 1
    t_begin, total = src.start_ns, max(1e-9, min(src.end_ns, stop_at) - src.start_ns) / 1e9
    last_report = 0.0

    def dispatch(raw: RawMessage) -> None:
        router.route(raw.topic, src.decode(raw), raw.log_ns)

    def start(span: EpisodeSpan) -> None:
        for raw in sorted((r for q in gap.values() for r in q), key=lambda r: r.log_ns):
            dispatch(raw)  # idle: the pre-roll and the capture history, as in the live node
        gap.clear()
        task = span.task or task_default
        if c.target.needs_task and not task.strip():
            raise BagError(
                f"{src.path}: episode at {_rel(span.start_ns, t_begin)} has no task (no {EPISODE_EVENTS} "
                "task, no --task, empty `task` in the recorder config); pass --task"
            )
        source = {
            "bag": str(src.path),
            "fingerprint": res.fingerprint,
            "start_ns": span.start_ns,
            "end_ns": span.end_ns,
            "episodes_from": span.origin,
            "live_episode_index": span.live_index,
        }
        ans = c.start(task, lambda: span.start_ns, source=source)
        if not ans.ok:
            raise BagError(f"{src.path}: episode at {_rel(span.start_ns, t_begin)}: {ans.message}")

    def finish(span: EpisodeSpan) -> None:
        ans = c.stop(span.end_ns, reason=span.reason)
        where = f"episode {_rel(span.start_ns, t_begin)}..{_rel(span.end_ns, t_begin)}"
        if not ans.ok:
            raise BagError(f"{src.path}: {where}: {ans.message}")
        ev = ans.event or {}
        res.episodes += 1
        if span.origin == "events":
            if ev.get("start_ns") != span.start_ns:
                res.notes.append(f"{where}: origin {ev.get('start_ns')} differs from the live {span.start_ns}")
            if span.rows is not None and ev.get("rows") != span.rows:
                res.notes.append(f"{where}: {ev.get('rows')} rows, the live recorder saved {span.rows}")

    j, active = 0, None
    for raw in src.raw_messages(topics, stop_ns=stop_at):
        now = raw.log_ns
        if active is not None and now > active.end_ns + lateness:
            finish(active)
            active, j = None, j + 1
        if active is None and j < len(spans) and now >= spans[j].feed_from_ns:
            start(spans[j])
            active = spans[j]
        if active is None:
            q = gap.get(raw.topic)
            if q is None:
                q = gap[raw.topic] = deque(maxlen=keep[raw.topic])
            q.append(raw)
            continue
        c.tick(now)
        dispatch(raw)
        while c.worker.backlog > MAX_WRITER_BACKLOG:
            time.sleep(0.002)
        if progress is not None and now - last_report > 0.5e9:
            last_report = now
            progress(res.index, (now - t_begin) / 1e9, total)
    if active is not None:
        finish(active)
        j += 1
    if j < len(spans):
        raise BagError(
            f"{src.path}: episode at {_rel(spans[j].start_ns, t_begin)} starts after the bag's last "
            f"message ({_rel(src.end_ns, t_begin)})"
        )
    if progress is not None:
        progress(res.index, total, total)
    if router.rejected:
        res.notes.append(f"frames dropped for wrong size/encoding: {router.rejected}")


def _rel(ns: int, t0: int) -> str:
    return f"{(ns - t0) / 1e9:.3f}s"
