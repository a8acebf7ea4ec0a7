"""The edits (merge, split, delete, retask; retype for LeRobot roots) over either format, staged and committed atomically.

Sources are opened holding their writers' locks (a LeRobot root's ``.lock`` flock, an RGB-D file's OFD lock), so
no recorder changes them while they are read. Each output is built under ``.<name>.dsedit-staging`` beside it and
renamed into place: a new output appears whole or not at all; an edit in place swaps the new root with the old in
one ``renameat2(RENAME_EXCHANGE)`` (``export.commit``) or renames the new RGB-D file over the old, still holding
the source's lock. A killed run leaves the sources untouched and only the staging path, which the next run removes.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from piper_recorder.lerobot.export import operation as export
from piper_recorder.lerobot.format import fsutil
from piper_recorder.lerobot.format.layout import INFO, MODALITY, ROTATION_TYPES
from piper_recorder.recording.verdict import OUTCOMES, VERDICTS, label_fields
from piper_recorder.storage.outpaths import located, nested

from . import lerobot_edit, rgbd_edit
from .common import (
    EditError,
    EpisodeInfo,
    OutputLock,
    Pick,
    check_mergeable,
    check_new_output,
    describe_plan,
    filter_picks,
    label_picks,
    parse_choice,
    parse_episodes,
    picks_of,
    remove_stale_staging,
    retask_picks,
    split_fraction,
    staging_path,
)

Source = lerobot_edit.LeRobotSource | rgbd_edit.RgbdSource
Progress = Callable[[int, int], None]


@dataclass
class Output:
    """One dataset an edit writes: where, and the picked source episodes in output order."""

    path: Path
    picks: list[Pick]
    in_place: bool = False


@dataclass
class Result:
    """What an edit did (or, in a dry run, would do): its outputs, plan and totals."""

    operation: str
    kind: str  # "lerobot" or "rgbd"
    outputs: list[Path]
    plan: list[str]
    dry_run: bool
    totals: list[dict[str, int]] = field(default_factory=list)


def _kind(paths: list[Path]) -> str:
    kinds = set()
    for p in paths:
        if lerobot_edit.is_root(p):
            kinds.add("lerobot")
        elif rgbd_edit.is_file(p):
            kinds.add("rgbd")
        else:
            raise EditError(f"{p}: neither a LeRobot root ({INFO}) nor an RGB-D HDF5 file")
    if len(kinds) > 1:
        raise EditError("cannot mix LeRobot roots and RGB-D files in one edit")
    return kinds.pop()


def _open(kind: str, paths: list[Path]) -> list[Source]:
    out: list[Source] = []
    try:
        for p in paths:
            out.append(lerobot_edit.open_root(p) if kind == "lerobot" else rgbd_edit.open_file(p))
    except BaseException:
        for s in out:
            s.close()
        raise
    return out


def _episodes(s: Source) -> list[EpisodeInfo]:
    return s.episodes


def _run(
    op: str,
    kind: str,
    paths: list[Path],
    sources: list[Source],
    outputs: list[Output],
    dry_run: bool,
    progress: Progress | None,
    **extra: object,
) -> Result:
    names = [str(p) for p in paths]
    eps = [_episodes(s) for s in sources]
    plan: list[str] = []
    for o in outputs:
        if not o.picks:
            raise EditError(f"{o.path} would hold no episode; refusing to write an empty dataset")
        rows = sum(eps[p.source][p.episode].length for p in o.picks)
        unit = "rows" if kind == "lerobot" else "transitions"
        plan.append(
            f"{'rewrite in place' if o.in_place else 'write'} {o.path}: {len(o.picks)} episodes, "
            f"{rows} {unit}, {len({p.task for p in o.picks})} tasks"
        )
        plan += describe_plan(o.picks, names, eps)
        if not o.in_place:
            check_new_output(o.path, paths)
    news = [o.path for o in outputs if not o.in_place]
    for i, a in enumerate(news):
        for b in news[i + 1 :]:
            if nested(a, b):
                raise EditError(
                    f"split: --out and --rest must differ and neither may lie inside the other "
                    f"(resolved: {a.resolve()} and {b.resolve()})"
                )
    result = Result(op, kind, [o.path for o in outputs], plan, dry_run)
    if dry_run:
        return result
    for o in outputs:
        result.totals.append(_write(kind, op, paths, sources, o, progress, extra))
    return result


def _write(
    kind: str,
    op: str,
    paths: list[Path],
    sources: list[Source],
    o: Output,
    progress: Progress | None,
    extra: dict[str, object],
) -> dict[str, int]:
    out = o.path.absolute() if o.in_place else located(o.path)  # a new output: beside its real directory
    lock = OutputLock(out)
    staging = staging_path(out)
    try:
        remove_stale_staging(out)
        if kind == "lerobot":
            export.recover(out)  # an output moved aside by a killed fallback commit
            edit = lerobot_edit.edit_record(op, paths, o.picks, **extra)
            totals = lerobot_edit.build(
                [s for s in sources if isinstance(s, lerobot_edit.LeRobotSource)], o.picks, staging, edit, progress
            )
            export.commit(staging, out)  # fsyncs the tree; exchange with an existing root (in place)
        else:
            totals = rgbd_edit.build(
                [s for s in sources if isinstance(s, rgbd_edit.RgbdSource)], o.picks, staging, progress
            )
            os.replace(staging, out)
            fsutil.fsync_dir(out.parent)
        return totals
    except BaseException:
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
        elif staging.exists():
            staging.unlink()
        raise
    finally:
        lock.close()


def _close(sources: list[Source]) -> None:
    for s in sources:
        s.close()


def merge(inputs: list[Path], out: Path, dry_run: bool = False, progress: Progress | None = None) -> Result:
    """All episodes of every input, in input order, into the new dataset ``out``."""
    if len(inputs) < 2:
        raise EditError("merge needs at least two inputs")
    if len({p.resolve() for p in inputs}) != len(inputs):
        raise EditError("merge: an input is given twice")
    kind = _kind(inputs)
    sources = _open(kind, inputs)
    try:
        if kind == "lerobot":
            check_mergeable(
                [s for s in sources if isinstance(s, lerobot_edit.LeRobotSource)],
                lerobot_edit.differences,
                lambda s: s.root,
            )
        else:
            check_mergeable(
                [s for s in sources if isinstance(s, rgbd_edit.RgbdSource)], rgbd_edit.differences, lambda s: s.path
            )
        picks = [p for i, s in enumerate(sources) for p in picks_of(i, _episodes(s))]
        return _run("merge", kind, inputs, sources, [Output(out, picks)], dry_run, progress)
    finally:
        _close(sources)


def split(
    src: Path,
    out: Path,
    rest: Path | None,
    episodes: str | None = None,
    fraction: float | None = None,
    seed: int = 0,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> Result:
    """The selected episodes into ``out`` and, with ``rest``, the others into ``rest`` (source unchanged)."""
    if (episodes is None) == (fraction is None):
        raise EditError("split: give exactly one of --episodes or --fraction")
    kind = _kind([src])
    sources = _open(kind, [src])
    try:
        eps = _episodes(sources[0])
        chosen = (
            parse_episodes(episodes, len(eps))
            if episodes is not None
            else split_fraction(len(eps), fraction or 0.0, seed)
        )
        others = [i for i in range(len(eps)) if i not in set(chosen)]
        outputs = [Output(out, picks_of(0, eps, chosen))]
        if rest is not None:
            if nested(rest, out):
                raise EditError("split: --out and --rest must differ and neither may lie inside the other")
            outputs.append(Output(rest, picks_of(0, eps, others)))
        sel = {"selected": chosen} if fraction is None else {"selected": chosen, "fraction": fraction, "seed": seed}
        return _run("split", kind, [src], sources, outputs, dry_run, progress, **sel)
    finally:
        _close(sources)


def delete(
    src: Path, episodes: str, out: Path | None = None, dry_run: bool = False, progress: Progress | None = None
) -> Result:
    """Every episode but the given ones, renumbered; into ``out``, or in place when it is None."""
    kind = _kind([src])
    sources = _open(kind, [src])
    try:
        eps = _episodes(sources[0])
        gone = set(parse_episodes(episodes, len(eps)))
        if len(gone) == len(eps):
            raise EditError(f"delete: that is every episode of {src}; nothing would remain")
        keep = [i for i in range(len(eps)) if i not in gone]
        o = Output(out if out is not None else src, picks_of(0, eps, keep), in_place=out is None)
        return _run("delete", kind, [src], sources, [o], dry_run, progress, deleted=sorted(gone))
    finally:
        _close(sources)


def retask(
    src: Path, renames: dict[str, str], out: Path | None = None, dry_run: bool = False, progress: Progress | None = None
) -> Result:
    """Rename tasks (several old names onto one new name merges them); into ``out`` or in place."""
    if not renames:
        raise EditError("retask: give at least one --rename OLD=NEW")
    kind = _kind([src])
    sources = _open(kind, [src])
    try:
        picks = retask_picks(_episodes(sources[0]), renames)
        o = Output(out if out is not None else src, picks, in_place=out is None)
        return _run("retask", kind, [src], sources, [o], dry_run, progress, renamed=renames)
    finally:
        _close(sources)


def retype(
    src: Path, rotation_type: str, out: Path | None = None, dry_run: bool = False, progress: Progress | None = None
) -> Result:
    """Re-tag the quaternion slices of a LeRobot root's ``modality.json``.

    ``quat_wxyz`` is the spec's name, ``quaternion`` the w-first name GR00T N1.5's schema accepts (it rejects
    ``quat_wxyz``). The rows are w-first either way, so only the tag changes: the root is rebuilt by the writer like
    any edit (videos linked, rows and stats as written), into ``out`` or in place.
    """
    if rotation_type not in ROTATION_TYPES:
        raise EditError(f"retype: rotation type must be one of {', '.join(ROTATION_TYPES)}, got {rotation_type!r}")
    kind = _kind([src])
    if kind != "lerobot":
        raise EditError(f"retype: only LeRobot roots carry a {MODALITY}")
    sources = _open(kind, [src])
    try:
        s = sources[0]
        assert isinstance(s, lerobot_edit.LeRobotSource)
        was = s.cfg.rotation_type
        if was == rotation_type and out is None:
            raise EditError(f"retype: {src} is already tagged {rotation_type!r}; nothing to do")
        s.cfg = dataclasses.replace(s.cfg, rotation_type=rotation_type)
        o = Output(out if out is not None else src, picks_of(0, _episodes(s)), in_place=out is None)
        res = _run(
            "retype", kind, [src], sources, [o], dry_run, progress, rotation_type={"from": was, "to": rotation_type}
        )
        res.plan.insert(0, f"{MODALITY} rotation_type: {was} -> {rotation_type}")
        return res
    finally:
        _close(sources)


def label(
    src: Path,
    episodes: str,
    outcome: str,
    note: str = "",
    out: Path | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> Result:
    """Mark the given episodes success / failure, through the same staged rebuild as every edit.

    ``note``: a short remark (a label without one clears an old note). It goes to their episodes.jsonl lines
    (LeRobot) or demo attrs (RGB-D, whose ``success`` follows), into ``out`` or in place.
    """
    try:
        fields = label_fields(outcome, note)
    except ValueError as exc:
        raise EditError(f"label: {exc}") from None
    kind = _kind([src])
    sources = _open(kind, [src])
    try:
        eps = _episodes(sources[0])
        chosen = parse_episodes(episodes, len(eps))
        o = Output(out if out is not None else src, label_picks(eps, chosen, fields), in_place=out is None)
        res = _run("label", kind, [src], sources, [o], dry_run, progress, labelled=chosen, label=fields)
        res.plan.insert(0, f"label episodes {episodes} {outcome}" + (f" ({note!r})" if note else ""))
        return res
    finally:
        _close(sources)


def filter_(
    src: Path,
    out: Path,
    outcomes: str | None = None,
    verdicts: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> Result:
    """The episodes whose outcome and verdict are among the given ones, renumbered, into the new dataset ``out``.

    Comma lists; ``none``: unlabelled / no verdict. The source is unchanged.
    """
    want_o = parse_choice(outcomes, OUTCOMES, "outcome")
    want_v = parse_choice(verdicts, VERDICTS, "verdict")
    if want_o is None and want_v is None:
        raise EditError("filter: give --outcome and/or --verdict")
    kind = _kind([src])
    sources = _open(kind, [src])
    try:
        eps = _episodes(sources[0])
        picks = filter_picks(eps, want_o, want_v)
        if not picks:
            raise EditError(
                f"filter: no episode of {src} has outcome in {sorted(want_o or ['any'])} and verdict "
                f"in {sorted(want_v or ['any'])}; nothing to write"
            )
        sel = {"selected": [p.episode for p in picks], "outcome": sorted(want_o or []), "verdict": sorted(want_v or [])}
        return _run("filter", kind, [src], sources, [Output(out, picks)], dry_run, progress, **sel)
    finally:
        _close(sources)
