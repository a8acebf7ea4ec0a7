"""What every edit shares, whatever the format: the plan, episode selections, and the staged, atomic commit.

The plan says which source episode becomes which output episode, under which task. Every operation builds a new
dataset from picked episodes of the sources (merge: all of every source; split: the selected ones and the rest;
delete: all but the deleted ones; retask: all under renamed tasks), beside the output under a hidden staging name,
by the format's own writer (so indices, offsets, metadata and statistics are the writer's), then renamed over the
output. A killed run leaves the sources untouched and only the staging path, which the next run removes.
"""

from __future__ import annotations

import glob
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from piper_recorder.lerobot.format.errors import DatasetError
from piper_recorder.storage.outpaths import overlapping_input
from piper_recorder.storage.sidelock import SideLock

STAGING_SUFFIX = ".dsedit-staging"
LOCK_SUFFIX = ".dsedit-lock"
TOOL = "piper-dataset"

S = TypeVar("S")


class EditError(DatasetError):
    """The edit cannot be done as asked (the message says why); nothing was changed."""


@dataclass(frozen=True)
class Pick:
    """Output episode <- episode ``episode`` of source number ``source``, saved under ``task``."""

    source: int
    episode: int
    task: str
    fields: tuple[tuple[str, Any], ...] = ()  # record keys set on the output episode (a label)


@dataclass(frozen=True)
class EpisodeInfo:
    """What a plan needs to know about one source episode."""

    task: str
    length: int  # LeRobot rows / RGB-D transitions
    # the curation keys of its record (outcome, outcome_note, verdict, verdict_reasons), when present
    curation: dict[str, Any] = field(default_factory=dict, compare=False)


def parse_episodes(text: str, n: int) -> list[int]:
    """``"0,3,5-7"`` -> [0, 3, 5, 6, 7] (sorted, unique), each checked against ``n`` episodes."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise EditError(f"--episodes {text!r}: expected indices and ranges like 0,3,5-7")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a:
            raise EditError(f"--episodes {text!r}: range {part} is empty")
        out.update(range(a, b + 1))
    bad = sorted(i for i in out if i >= n)
    if bad:
        raise EditError(f"--episodes {text!r}: episodes {bad} do not exist (the source has {n}: 0-{n - 1})")
    return sorted(out)


def split_fraction(n: int, fraction: float, seed: int) -> list[int]:
    """The episodes a seeded random split by ``fraction`` selects.

    The RGB-D loader's own ``split_episodes`` (its "val" part), so both formats split a given count identically.
    """
    from rgbd_writer.reader import split_episodes

    if not 0.0 < fraction < 1.0:
        raise EditError(f"--fraction {fraction}: must be between 0 and 1 (exclusive)")
    if n < 2:
        raise EditError(f"cannot split {n} episode(s) by fraction: need at least 2")
    return [int(i) for i in split_episodes(n, fraction, seed)[1]]


def parse_renames(pairs: list[str]) -> dict[str, str]:
    """``["old=new", ...]`` -> {old: new}; several olds may map to one new task (a merge of tasks)."""
    out: dict[str, str] = {}
    for p in pairs:
        old, sep, new = p.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise EditError(f"--rename {p!r}: expected OLD=NEW with non-blank task strings")
        if old in out and out[old] != new:
            raise EditError(f"--rename: task {old!r} renamed twice ({out[old]!r}, {new!r})")
        out[old] = new
    return out


def retask_picks(episodes: list[EpisodeInfo], renames: dict[str, str]) -> list[Pick]:
    """Every episode, under its renamed task; ``EditError`` for a rename of a task no episode has."""
    known = {e.task for e in episodes}
    unknown = sorted(set(renames) - known)
    if unknown:
        raise EditError(f"--rename: no episode has task(s) {unknown}; tasks present: {sorted(known)}")
    return [Pick(0, i, renames.get(e.task, e.task)) for i, e in enumerate(episodes)]


NONE = "none"  # what --outcome / --verdict call an episode without a label / a verdict


def parse_choice(text: str | None, allowed: tuple[str, ...], what: str) -> set[str] | None:
    """``"ok,warn"`` -> {"ok", "warn"}; each checked against ``allowed`` + ``none``; None for no filter."""
    if text is None:
        return None
    got = {p.strip() for p in text.split(",") if p.strip()}
    bad = sorted(got - set(allowed) - {NONE})
    if not got or bad:
        raise EditError(f"--{what} {text!r}: expected a comma list of {', '.join((*allowed, NONE))}")
    return got


def filter_picks(episodes: list[EpisodeInfo], outcomes: set[str] | None, verdicts: set[str] | None) -> list[Pick]:
    """The episodes whose outcome is in ``outcomes`` and verdict in ``verdicts`` (None: any)."""

    def ok(value: Any, allowed: set[str] | None) -> bool:
        return allowed is None or (value if isinstance(value, str) and value else NONE) in allowed

    return [
        Pick(0, i, e.task)
        for i, e in enumerate(episodes)
        if ok(e.curation.get("outcome"), outcomes) and ok(e.curation.get("verdict"), verdicts)
    ]


def label_picks(episodes: list[EpisodeInfo], chosen: list[int], fields: dict[str, Any]) -> list[Pick]:
    """Every episode, the chosen ones with ``fields`` (the label) set."""
    sel = set(chosen)
    return [Pick(0, i, e.task, tuple(sorted(fields.items())) if i in sel else ()) for i, e in enumerate(episodes)]


def picks_of(source: int, episodes: list[EpisodeInfo], keep: list[int] | None = None) -> list[Pick]:
    """The picks of source ``source``'s episodes ``keep`` (default: all), each under its own task."""
    idx = range(len(episodes)) if keep is None else keep
    return [Pick(source, i, episodes[i].task) for i in idx]


def describe_plan(picks: list[Pick], names: list[str], episodes: list[list[EpisodeInfo]]) -> list[str]:
    """One line per output episode (for --dry-run), runs of unchanged consecutive picks folded."""
    lines: list[str] = []
    run: list[tuple[int, Pick]] = []

    def flush() -> None:
        if not run:
            return
        (o0, p0), (o1, p1) = run[0], run[-1]
        rows = sum(episodes[p.source][p.episode].length for _, p in run)
        src = names[p0.source]
        same_task = all(p.task == episodes[p.source][p.episode].task for _, p in run)
        out = f"{o0}" if o0 == o1 else f"{o0}-{o1}"
        ins = f"{p0.episode}" if o0 == o1 else f"{p0.episode}-{p1.episode}"
        task = "" if same_task else f", task -> {run[0][1].task!r}"
        lines.append(f"  episodes {out} <- {src} episodes {ins} ({rows} rows{task})")
        run.clear()

    for o, p in enumerate(picks):
        if run:
            _lo, lp = run[-1]
            same_task = p.task == lp.task or (
                p.task == episodes[p.source][p.episode].task and lp.task == episodes[lp.source][lp.episode].task
            )
            if not (p.source == lp.source and p.episode == lp.episode + 1 and same_task):
                flush()
        run.append((o, p))
    flush()
    return lines


def check_mergeable(
    sources: Sequence[S], differences: Callable[[S, S], list[str]], name: Callable[[S], object]
) -> None:
    """Every source must agree with the first (the format's ``differences`` empty).

    The error names each pair that does not and what differs, so one run shows every problem.
    """
    problems = []
    for s in sources[1:]:
        d = differences(sources[0], s)
        if d:
            problems.append(f"{name(sources[0])} and {name(s)} differ: " + "; ".join(d))
    if problems:
        raise EditError("cannot merge: " + " | ".join(problems))


# ---- the staged output ----------------------------------------------------------------------------
def staging_path(out: Path) -> Path:
    """The hidden staging path beside ``out`` where an edit builds its output."""
    return out.with_name(f".{out.name}{STAGING_SUFFIX}")


class OutputLock(SideLock):
    """One edit per output path at a time: a flock on ``.<name>.dsedit-lock`` beside it.

    The lock file is removed when the edit ends, refused or not (``SideLock``: never while another live process holds
    it).
    """

    def __init__(self, out: Path):
        super().__init__(
            out.with_name(f".{out.name}{LOCK_SUFFIX}"), lambda: EditError(f"another {TOOL} is writing {out}")
        )


def remove_stale_staging(out: Path) -> None:
    """A killed run's staging tree or file (never valid output: it sits under a hidden name)."""
    st = staging_path(out)
    if st.is_dir() and not st.is_symlink():
        shutil.rmtree(st)
    elif st.exists() or st.is_symlink():
        st.unlink()
    for aside in st.parent.glob(glob.escape(st.name) + ".*"):  # an RGB-D writer's journal / creating file
        aside.unlink()


def check_new_output(out: Path, inputs: list[Path]) -> None:
    """``out`` must be a new path, not one of the inputs nor inside/around one."""
    if out.exists() or out.is_symlink():
        raise EditError(f"--out {out} already exists; choose a new path (edits never overwrite an output)")
    src = overlapping_input(out, inputs)  # symlinks resolved on both sides
    if src is not None:
        raise EditError(
            f"--out {out} must be outside the source {src} and not contain it "
            f"(resolved: {out.resolve()} and {src.resolve()})"
        )
