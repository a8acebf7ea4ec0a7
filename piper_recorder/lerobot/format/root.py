"""A typed, read-only model of a LeRobot v2.x root (``Root.open`` reads the meta files once).

Readers (export, dataset edits, the policy runtime, dashboard, viewer) go through it so a field's name, type and
default are written once and a damaged file fails one way: shapes are checked by ``metacheck`` (a
``DatasetError`` naming the file and the field), what the model parses beyond that raises ``SchemaError``. Every
parsed object keeps its document (``raw``) so a derived file (an export's info.json) copies it key for key, in
order. Writers build their dicts themselves (``writer.meta_builders``); ``validate`` reads the raw files itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from piper_recorder.errors import DatasetError, SchemaError
from piper_recorder.names import IMAGES_PREFIX

from . import layout, metacheck
from .features import piper_features
from .layout import INFO, MODALITY

DEFAULT_LANGUAGE_KEY = "annotation.human.task_description"
# the episodes.jsonl keys every v2.x root has; the rest (our verdicts, counters, outcome...) are extras
EPISODE_KEYS = ("episode_index", "tasks", "length")


def _frozen(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(doc))


@dataclass(frozen=True)
class Feature:
    """One ``info.json`` feature: ``dtype``, ``shape``, ``names`` and, for a video, its ``info`` block."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    names: tuple[str, ...] | None
    video: Mapping[str, Any] | None  # the feature's "info" ("video.codec", "video.pix_fmt", ...)
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_json(key: str, doc: Mapping[str, Any]) -> Feature:
        """One entry of info.json's ``features``."""
        names = doc.get("names")
        vinfo = doc.get("info")
        return Feature(
            key,
            str(doc["dtype"]),
            tuple(int(s) for s in doc["shape"]),
            None if names is None else tuple(str(n) for n in names),
            _frozen(vinfo) if isinstance(vinfo, Mapping) else None,
            _frozen(doc),
        )

    @property
    def is_video(self) -> bool:
        """Whether the feature is a camera's video."""
        return self.dtype == "video"

    @property
    def camera(self) -> str | None:
        """``observation.images.<camera>`` -> ``<camera>`` for a video feature, else None."""
        return layout.camera_of(self.key) if self.is_video else None

    @property
    def width(self) -> int:
        """Elements per row of a vector feature (the product of its shape)."""
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class Info:
    """``meta/info.json``: version, rate, totals, path templates and the features in file order."""

    codebase_version: str
    robot_type: str | None
    fps: int | float
    chunks_size: int
    total_episodes: int
    total_frames: int
    total_tasks: int
    data_path: str
    video_path: str | None
    features: Mapping[str, Feature]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_json(doc: Any, path: Path | str = INFO) -> Info:
        """``doc`` checked by ``metacheck.check_info`` (DatasetError naming ``path`` and the field)."""
        doc = metacheck.check_info(doc, Path(path))
        feats = {str(k): Feature.from_json(str(k), f) for k, f in doc["features"].items()}
        try:
            totals = [int(doc.get(k, 0)) for k in ("total_episodes", "total_frames", "total_tasks")]
        except (TypeError, ValueError):
            raise SchemaError(f"{path}: total_episodes/total_frames/total_tasks must be integers") from None
        version = doc.get("codebase_version")
        robot = doc.get("robot_type")
        return Info(
            str(version) if version is not None else "",
            None if robot is None else str(robot),
            doc["fps"],
            int(doc["chunks_size"]),
            totals[0],
            totals[1],
            totals[2],
            str(doc["data_path"]),
            None if doc.get("video_path") is None else str(doc["video_path"]),
            MappingProxyType(feats),
            _frozen(doc),
        )

    @property
    def video_keys(self) -> tuple[str, ...]:
        """The video feature keys, in file order."""
        return tuple(k for k, f in self.features.items() if f.is_video)

    @property
    def cameras(self) -> tuple[str, ...]:
        """The camera names of the video features, in file order."""
        return tuple(layout.camera_of(k) for k in self.video_keys)

    @property
    def vector_features(self) -> dict[str, Feature]:
        """The parquet's numeric columns (every non-video feature), in file order."""
        return {k: f for k, f in self.features.items() if not f.is_video}

    def data_relpath(self, episode: int) -> str:
        """Episode ``episode``'s parquet path by the root's own template."""
        return layout.format_path(self.data_path, episode, self.chunks_size)

    def video_relpath(self, episode: int, key: str) -> str:
        """Episode ``episode``'s mp4 of video feature ``key`` (``observation.images.<camera>``)."""
        if self.video_path is None:
            raise SchemaError(f"{INFO}: no video_path template, yet a video of {key} was asked for")
        return layout.format_path(self.video_path, episode, self.chunks_size, key)

    def to_json(self) -> dict[str, Any]:
        """The document as read (a deep copy: callers derive other files from it)."""
        import copy

        return copy.deepcopy(dict(self.raw))


@dataclass(frozen=True)
class Episode:
    """One ``episodes.jsonl`` line: index, length, tasks.

    What this project adds (``task_index``, outcome, verdict, counters, frame lengths) is in ``extras``.
    """

    index: int
    length: int
    tasks: tuple[str, ...]
    extras: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Episode:
        """A line already checked by ``metacheck.check_episodes``."""
        return Episode(
            int(doc["episode_index"]),
            int(doc["length"]),
            tuple(doc["tasks"]),
            _frozen({k: v for k, v in doc.items() if k not in EPISODE_KEYS}),
            _frozen(doc),
        )

    @property
    def task_index(self) -> int | None:
        """The ``task_index`` this project writes, when it is an integer."""
        v = self.extras.get("task_index")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def to_json(self) -> dict[str, Any]:
        """The line as read (a deep copy)."""
        import copy

        return copy.deepcopy(dict(self.raw))


@dataclass(frozen=True)
class Task:
    """One ``tasks.jsonl`` line."""

    index: int
    task: str
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Task:
        """A line already checked by ``metacheck.check_tasks``."""
        return Task(int(doc["task_index"]), str(doc["task"]), _frozen(doc))

    def to_json(self) -> dict[str, Any]:
        """The line as read, or built from the fields."""
        import copy

        return copy.deepcopy(dict(self.raw)) if self.raw else {"task_index": self.index, "task": self.task}


# ---- modality.json (GR00T's map of named slices of the vector columns) -----------------------------
@dataclass(frozen=True)
class Slice:
    """``<group>.<name>`` = column ``original_key`` [start:end] (``rotation_type`` for a rotation)."""

    name: str
    original_key: str
    start: int
    end: int
    rotation_type: str | None = None


@dataclass(frozen=True)
class Modality:
    """``meta/modality.json``: the state and action slices, the videos and the language keys.

    ``video`` maps a modality name to a camera; ``language`` holds the ``annotation.<name>`` keys.
    """

    state: tuple[Slice, ...]
    action: tuple[Slice, ...]
    video: dict[str, str]  # modality name -> camera name
    language: tuple[str, ...]  # full keys, e.g. "annotation.human.task_description"
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def from_json(doc: Mapping[str, object], path: Path | str = MODALITY) -> Modality:
        """Parse a modality.json document; ``SchemaError`` naming ``path`` for a malformed slice."""

        def slices(group: str) -> tuple[Slice, ...]:
            entries = doc.get(group) or {}
            if not isinstance(entries, Mapping):
                raise SchemaError(f"{path}: {group} must be an object")
            default = "observation.state" if group == "state" else "action"  # GR00T's default columns
            out = []
            for n, e in entries.items():
                try:
                    rot = e.get("rotation_type")
                    out.append(
                        Slice(
                            str(n),
                            str(e.get("original_key") or default),
                            int(e["start"]),
                            int(e["end"]),
                            None if rot is None else str(rot),
                        )
                    )
                except (AttributeError, KeyError, TypeError, ValueError):
                    raise SchemaError(f"{path}: {group}.{n} needs integer 'start' and 'end', got {e!r:.80}") from None
            return tuple(out)

        video_doc = doc.get("video") or {}
        annotation_doc = doc.get("annotation") or {}
        if not isinstance(video_doc, Mapping) or not isinstance(annotation_doc, Mapping):
            raise SchemaError(f"{path}: video and annotation must be objects")
        video = {}
        for name, e in video_doc.items():
            original = str(e.get("original_key", IMAGES_PREFIX + str(name))) if isinstance(e, Mapping) else ""
            video[str(name)] = original[len(IMAGES_PREFIX) :] if original.startswith(IMAGES_PREFIX) else str(name)
        language = tuple(f"annotation.{n}" for n in annotation_doc) or (DEFAULT_LANGUAGE_KEY,)
        return Modality(slices("state"), slices("action"), video, language, _frozen(doc))

    @staticmethod
    def load(source: Mapping[str, object] | str | Path | None) -> Modality:
        """The modality of a modality.json dict, its path, or a root holding meta/modality.json.

        None gives the recorder's default Piper layout (cameras then follow the observation).
        """
        if source is None:
            doc: dict[str, dict[str, object]] = {"state": {}, "action": {}}
            for f in piper_features():
                for name, a, b, _rot in f.slices():
                    if f.group is not None:
                        doc[f.group][name] = {"start": a, "end": b, "original_key": f.key}
            return Modality.from_json(doc)
        if isinstance(source, Mapping):
            return Modality.from_json(source)
        path = Path(source)
        if path.is_dir():
            path = path / MODALITY
        try:
            loaded = metacheck.load_json_object(path)
        except DatasetError as e:
            raise SchemaError(f"cannot read {MODALITY}: {e}") from None
        return Modality.from_json(loaded, path)

    def slices(self, group: str) -> tuple[Slice, ...]:
        """The slices of ``group`` (``state`` or ``action``), in file order."""
        return {"state": self.state, "action": self.action}[group]

    def names(self, group: str) -> tuple[str, ...]:
        """The slice names of ``group`` (``state`` or ``action``), in file order."""
        return tuple(s.name for s in self.slices(group))

    def to_json(self) -> dict[str, Any]:
        """The document as read (a deep copy)."""
        import copy

        return copy.deepcopy(dict(self.raw))


def read_info(root: str | Path) -> Info:
    """Only ``meta/info.json`` of ``root`` (a reader that needs no episode list: a video's path)."""
    path = Path(root) / INFO
    return Info.from_json(metacheck.load_json(path), path)


# ---- the root ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Root:
    """A v2.x root's meta, read once.

    ``info.json`` is required; ``episodes.jsonl`` and ``tasks.jsonl`` are empty when absent (a root before its first
    save) and ``modality`` is None without a ``modality.json``.
    """

    path: Path
    info: Info
    episodes: tuple[Episode, ...]
    tasks: tuple[Task, ...]
    modality: Modality | None

    @staticmethod
    def is_root(path: str | Path) -> bool:
        """Whether ``path`` is a directory holding ``meta/info.json``."""
        return Path(path).is_dir() and (Path(path) / INFO).is_file()

    @staticmethod
    def open(path: str | Path) -> Root:
        """DatasetError naming the file and field for a missing info.json or a malformed meta file."""
        root = Path(path)
        info = read_info(root)
        episodes = tuple(Episode.from_json(e) for e in metacheck.load_episodes(root))
        tasks = tuple(sorted((Task.from_json(t) for t in metacheck.load_tasks(root)), key=lambda t: t.index))
        modality = None
        if (root / MODALITY).is_file():
            modality = Modality.from_json(metacheck.load_json_object(root / MODALITY), root / MODALITY)
        return Root(root, info, episodes, tasks, modality)

    @property
    def video_keys(self) -> tuple[str, ...]:
        """The video feature keys, in file order."""
        return self.info.video_keys

    @property
    def cameras(self) -> tuple[str, ...]:
        """The camera names, in file order."""
        return self.info.cameras

    @property
    def fps(self) -> int | float:
        """The root's frame rate."""
        return self.info.fps

    def state_names(self) -> tuple[str, ...]:
        """modality.json's state slice names (empty without a modality.json)."""
        return self.modality.names("state") if self.modality else ()

    def action_names(self) -> tuple[str, ...]:
        """modality.json's action slice names (empty without a modality.json)."""
        return self.modality.names("action") if self.modality else ()

    def task_text(self, index: int) -> str | None:
        """The task string of task index ``index``, or None."""
        return next((t.task for t in self.tasks if t.index == index), None)

    def data_file(self, episode: int) -> Path:
        """Episode ``episode``'s parquet."""
        return self.path / self.info.data_relpath(episode)

    def video_file(self, episode: int, camera: str) -> Path:
        """The mp4 of ``camera`` (a camera name or its ``observation.images.<camera>`` key)."""
        key = camera if camera.startswith(layout.VIDEO_KEY_PREFIX) else layout.video_key(camera)
        return self.path / self.info.video_relpath(episode, key)
