"""Convert many bags into one dataset: an engine converts, one writer appends in bag order; resume, progress.

One dataset root/file has one writer, so each bag is converted (by an ``Engine``) into its own
staging dataset under ``<staging>/.<out name>.bag2dataset/`` (``staging`` defaults to the output's
parent) while this process appends the finished ones to the output strictly in bag order
(``merge``). Engines differ only in where and when bags convert: ``InProcess`` (``--jobs 1``),
``ProcessPool`` (``--jobs N`` local processes) and ``ray_engine.RayEngine`` (a Ray cluster; Ray is
imported only there). Everything else (staging layout, resume, duplicate bags, append order, failure
reporting, progress bars) is here, shared, so every engine gives the same dataset. Resume: before
converting, a bag's task fingerprints it and skips the episodes the output already holds (their
``source`` blocks); a run killed at any point leaves a valid output and stale staging that the next
run deletes.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import shutil
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .convert import BagResult, ConvertOptions, Progress, convert_bag, open_writer
from .merge import SpanKey, import_lerobot, import_rgbd, lerobot_done, rgbd_done

DoneMap = dict[str, list[SpanKey]]  # bag fingerprint -> episode spans the output already holds


@dataclass(frozen=True)
class BagJob:
    """One bag to convert into the fresh staging dataset directory ``staging`` (nothing else writes there)."""

    index: int
    bag: str
    staging: str


class Engine(Protocol):
    """Where and when bags convert; the run (staging, resume, appending, reporting) is ``convert_many``'s."""

    def results(
        self, jobs: Sequence[BagJob], opts: ConvertOptions, done: DoneMap, progress: Progress
    ) -> Generator[BagResult, None, None]:
        """Convert every job and yield the results in job order.

        Never raises for one bag (a lost worker is that bag's failed result); closing the iterator early cancels what is
        still running.
        """
        ...


@dataclass
class RunSummary:
    """What a run gave: every bag's result and the run's wall and writer times."""

    results: list[BagResult] = field(default_factory=list)
    append_s: float = 0.0  # wall time in the one writer (the run's serial part)
    wall_s: float = 0.0

    @property
    def failed(self) -> list[BagResult]:
        """The bags that failed."""
        return [r for r in self.results if r.status == "failed"]

    @property
    def episodes(self) -> int:
        """The episodes converted in this run."""
        return sum(r.episodes for r in self.results if r.status == "converted")


class _Bars:
    """tqdm bars: one overall (bag seconds), one per bag while it converts."""

    def __init__(self, enabled: bool, bags: Sequence[str]):
        self.enabled, self.bags = enabled, bags
        self._bars: dict[int, Any] = {}
        self._lock = threading.Lock()
        if enabled:
            from tqdm import tqdm

            self._tqdm = tqdm
            self.total = tqdm(total=len(bags), desc="bags", unit="bag", position=0, file=sys.stderr)

    def update(self, i: int, done_s: float, total_s: float) -> None:
        if not self.enabled:
            return
        with self._lock:
            bar = self._bars.get(i)
            if bar is None:
                bar = self._bars[i] = self._tqdm(
                    total=round(total_s, 1),
                    desc=Path(self.bags[i]).name[:28],
                    unit="s",
                    position=1 + len(self._bars) % 8,
                    leave=False,
                    file=sys.stderr,
                )
            bar.n = round(min(done_s, total_s), 1)  # bag seconds done (set, not summed: no float drift)
            bar.refresh()

    def finish(self, i: int, status: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            bar = self._bars.pop(i, None)
            if bar is not None:
                bar.close()
            self.total.set_postfix_str(f"last: {Path(self.bags[i]).name} {status}")
            self.total.update(1)

    def close(self) -> None:
        if self.enabled:
            for bar in self._bars.values():
                bar.close()
            self.total.close()


# ---- local engines -------------------------------------------------------------------------------
class InProcess:
    """``--jobs 1``: each bag in this process, in order."""

    def results(
        self, jobs: Sequence[BagJob], opts: ConvertOptions, done: DoneMap, progress: Progress
    ) -> Generator[BagResult, None, None]:
        """Convert every job in this process, in order."""
        for job in jobs:
            yield convert_bag(job.index, job.bag, opts, job.staging, done, progress)


_progress_q: Any = None


def _worker_init(q: Any) -> None:
    global _progress_q
    _progress_q = q


def _worker(job: BagJob, opts: ConvertOptions, done: DoneMap) -> BagResult:
    q = _progress_q
    report: Progress | None = (lambda i, d, t: q.put((i, d, t))) if q is not None else None
    return convert_bag(job.index, job.bag, opts, job.staging, done, report)


@dataclass
class ProcessPool:
    """``--jobs N``: N spawned worker processes of this machine."""

    jobs: int

    def results(
        self, jobs: Sequence[BagJob], opts: ConvertOptions, done: DoneMap, progress: Progress
    ) -> Generator[BagResult, None, None]:
        """Convert the jobs in ``jobs`` spawned worker processes and yield the results in job order."""
        ctx = mp.get_context("spawn")  # no forked copies of the parent's open writer
        q = ctx.Queue()  # handed to each worker at start-up: progress reports
        pump = threading.Thread(target=_pump, args=(q, progress), daemon=True)
        pump.start()
        pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_worker_init, initargs=(q,))
        futures = [pool.submit(_worker, job, opts, done) for job in jobs]
        try:
            for job, fut in zip(jobs, futures):
                yield _result(fut, job)
        finally:
            for f in futures:
                f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            q.put(None)
            pump.join(2.0)
            q.close()


def _pump(q: Any, progress: Progress) -> None:
    while True:
        item = q.get()
        if item is None:
            return
        progress(*item)


def _result(fut: Future[BagResult], job: BagJob) -> BagResult:
    try:
        return fut.result()
    except Exception as exc:  # noqa: BLE001 - a worker that died (e.g. OOM-killed) fails only its bag
        return BagResult(job.index, job.bag, "failed", error=f"{job.bag}: worker failed ({type(exc).__name__}: {exc})")


def local_engine(jobs: int) -> Engine:
    """The engine for ``--jobs``: this process for 1, a process pool above."""
    return InProcess() if jobs <= 1 else ProcessPool(jobs)


# ---- the run -------------------------------------------------------------------------------------
def staging_root(out: Path, staging: str | Path | None = None) -> Path:
    """Where a run's staging datasets go: beside the output by default.

    Under ``staging`` (a path every worker can reach, for a cluster) they are named after the output's absolute
    path, so outputs never share one.
    """
    if staging is None:
        return out.parent / f".{out.name}.bag2dataset"
    tag = hashlib.sha1(str(out).encode()).hexdigest()[:10]
    return Path(staging).absolute() / f".{out.name}-{tag}.bag2dataset"


def convert_many(
    bags: Sequence[str | Path],
    opts: ConvertOptions,
    out: str | Path,
    jobs: int = 1,
    progress: bool = False,
    log: Callable[[str], None] = print,
    engine: Engine | None = None,
    staging: str | Path | None = None,
) -> RunSummary:
    """Convert ``bags`` into ``out`` (created or appended to) with ``engine`` (default: the local one for ``jobs``).

    Raises only for output-level errors (unusable output path/config, an engine that cannot start); per-bag problems
    are in the returned results.
    """
    t0 = time.perf_counter()
    out = Path(out).absolute()
    names = [str(b) for b in bags]
    opts.output = str(out)
    root = staging_root(out, staging)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = open_writer(opts, out)  # takes the output's lock: no other run owns the staging now
    summary = RunSummary()
    bars = _Bars(progress, names)
    try:
        shutil.rmtree(root, ignore_errors=True)  # leftovers of a killed run: never committed
        root.mkdir(parents=True)
        done = lerobot_done(out) if opts.fmt == "lerobot" else rgbd_done(out)
        jobs_ = [BagJob(i, b, str(root / f"bag{i:05d}")) for i, b in enumerate(names)]
        imported: set[str | None] = set()
        eng = engine if engine is not None else local_engine(jobs)
        with closing(eng.results(jobs_, opts, done, bars.update)) as results:
            for job, res in zip(jobs_, results):
                if res.status == "converted" and res.fingerprint in imported:
                    res.status, res.episodes = "skipped", 0
                    res.notes.append("same content as an earlier bag of this run")
                ta = time.perf_counter()
                _append(writer, opts, res, log)
                summary.append_s += time.perf_counter() - ta
                if res.status == "converted":
                    imported.add(res.fingerprint)
                shutil.rmtree(job.staging, ignore_errors=True)
                summary.results.append(res)
                bars.finish(job.index, res.status)
    finally:
        bars.close()
        writer.close()
        shutil.rmtree(root, ignore_errors=True)
    summary.wall_s = time.perf_counter() - t0
    return summary


def _append(writer: Any, opts: ConvertOptions, res: BagResult, log: Callable[[str], None]) -> None:
    """Import a converted bag's staging dataset into the output; a failure fails only this bag."""
    for note in res.notes:
        log(f"note: {res.bag}: {note}")
    if res.status != "converted" or not res.staging:
        return
    try:
        if opts.fmt == "lerobot":
            n = import_lerobot(writer, Path(res.staging), res.session or {})
        else:
            n = import_rgbd(writer, Path(res.staging))
        res.episodes = n
    except Exception as exc:  # noqa: BLE001 - e.g. BindingChangeError with on_binding_change: refuse
        res.status, res.error = "failed", f"{res.bag}: appending to the output failed ({type(exc).__name__}: {exc})"
