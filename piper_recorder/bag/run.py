"""Convert many bags into one dataset: parallel workers, one writer, bag order, resume, progress.

One dataset root/file has one writer, so ``--jobs N`` worker processes each convert a bag into its
own staging dataset under ``<out parent>/.<out name>.bag2dataset/`` while the parent appends the
finished ones to the output strictly in bag order (``merge``). ``--jobs 1`` takes the same path in
process, so both give the same dataset. Resume: before converting, a worker fingerprints its bag and
skips the episodes the output already holds (their ``source`` blocks); a run killed at any point
leaves a valid output and stale staging that the next run deletes.
"""
from __future__ import annotations

import multiprocessing as mp
import shutil
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .convert import BagResult, ConvertOptions, convert_bag, open_writer
from .merge import import_lerobot, import_rgbd, lerobot_done, rgbd_done


@dataclass
class RunSummary:
    results: list[BagResult] = field(default_factory=list)

    @property
    def failed(self) -> list[BagResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def episodes(self) -> int:
        return sum(r.episodes for r in self.results if r.status == "converted")


class _Bars:
    """tqdm bars: one overall (bag seconds), one per bag while it converts."""

    def __init__(self, enabled: bool, bags: Sequence[str]):
        self.enabled, self.bags, self._bars, self._lock = enabled, bags, {}, threading.Lock()
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
                bar = self._bars[i] = self._tqdm(total=round(total_s, 1), desc=Path(self.bags[i]).name[:28],
                                                 unit="s", position=1 + len(self._bars) % 8, leave=False,
                                                 file=sys.stderr)
            bar.n = round(min(done_s, total_s), 1)   # bag seconds done (set, not summed: no float drift)
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


_progress_q: Any = None


def _worker_init(q: Any) -> None:
    global _progress_q
    _progress_q = q


def _worker(index: int, bag: str, opts: ConvertOptions, staging: str, done: dict) -> BagResult:
    q = _progress_q
    report = (lambda i, d, t: q.put((i, d, t))) if q is not None else None
    return convert_bag(index, bag, opts, staging, done, report)


def convert_many(bags: Sequence[str | Path], opts: ConvertOptions, out: str | Path, jobs: int = 1,
                 progress: bool = False, log=print) -> RunSummary:
    """Convert ``bags`` into ``out`` (created or appended to). Raises only for output-level errors
    (unusable output path/config); per-bag problems are in the returned results."""
    out = Path(out).absolute()
    bags = [str(b) for b in bags]
    opts.output = str(out)
    staging_root = out.parent / f".{out.name}.bag2dataset"
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = open_writer(opts, out)   # takes the output's lock: no other run owns the staging now
    summary = RunSummary()
    bars = _Bars(progress, bags)
    try:
        shutil.rmtree(staging_root, ignore_errors=True)   # leftovers of a killed run: never committed
        staging_root.mkdir(parents=True)
        done = lerobot_done(out) if opts.fmt == "lerobot" else rgbd_done(out)
        stagings = [str(staging_root / f"bag{i:05d}") for i in range(len(bags))]
        imported: set[str | None] = set()
        if jobs <= 1:
            futures = None
        else:
            ctx = mp.get_context("spawn")   # no forked copies of the parent's open writer
            q = ctx.Queue()                  # handed to each worker at start-up: progress reports
            pump = threading.Thread(target=_pump, args=(q, bars), daemon=True)
            pump.start()
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init, initargs=(q,))
            futures = [pool.submit(_worker, i, b, opts, stagings[i], done) for i, b in enumerate(bags)]
        try:
            for i, bag in enumerate(bags):
                if futures is None:
                    res = convert_bag(i, bag, opts, stagings[i], done, bars.update)
                else:
                    res = _result(futures[i], i, bag)
                if res.status == "converted" and res.fingerprint in imported:
                    res.status, res.episodes = "skipped", 0
                    res.notes.append("same content as an earlier bag of this run")
                _append(writer, opts, res, log)
                if res.status == "converted":
                    imported.add(res.fingerprint)
                shutil.rmtree(stagings[i], ignore_errors=True)
                summary.results.append(res)
                bars.finish(i, res.status)
        finally:
            if futures is not None:
                for f in futures:
                    f.cancel()
                pool.shutdown(wait=True, cancel_futures=True)
                q.put(None)
                pump.join(2.0)
                q.close()
    finally:
        bars.close()
        writer.close()
        shutil.rmtree(staging_root, ignore_errors=True)
    return summary


def _pump(q: Any, bars: _Bars) -> None:
    while True:
        item = q.get()
        if item is None:
            return
        bars.update(*item)


def _result(fut: Future, i: int, bag: str) -> BagResult:
    try:
        return fut.result()
    except Exception as exc:  # noqa: BLE001 - a worker that died (e.g. OOM-killed) fails only its bag
        return BagResult(i, bag, "failed", error=f"{bag}: worker failed ({type(exc).__name__}: {exc})")


def _append(writer: Any, opts: ConvertOptions, res: BagResult, log) -> None:
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
