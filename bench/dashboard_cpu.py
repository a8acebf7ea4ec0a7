"""CPU cost of piper-dashboard beside the simulated graph (2 cameras, 640x480 at 30 fps by default).

Starts the sim graph with the dashboard (``piper_launch.dashboard=true``) and measures, from
/proc/<pid>/stat, the dashboard process's CPU (cores) over three windows of ``--seconds`` each:
nobody watching (it hears only the small topics: camera images are not subscribed), one page watching
(what the page does: ``/api/state`` and one thumbnail per camera every 0.5 s), and three pages at once
(thumbnails are encoded at most ``thumb_hz`` per camera whoever asks, so this should cost about as
much as one). Baseline in the same run: the whole graph's CPU over the same windows.

  .venv/bin/python bench/dashboard_cpu.py [--seconds 20] [--size 640x480]

The figures depend on what else the machine runs (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from graph_capacity import cpu_seconds  # noqa: E402

from piper_recorder.graph.ports import free_port  # noqa: E402
from piper_recorder.graph.sim_session import SimSession, size_overrides  # noqa: E402


def watcher(base: str, cameras: list[str], stop: threading.Event, counts: dict[str, int]) -> None:
    """One page's requests: the state and each camera's thumbnail every 0.5 s."""
    while not stop.wait(0.5):
        for path in ["api/state", *(f"api/thumb?camera={c}" for c in cameras)]:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                body = r.read()
                counts["requests"] += 1
                if path.startswith("api/thumb") and r.status == 200:
                    counts["thumb_bytes"] += len(body)
                    counts["thumbs"] += 1


def measure(session: SimSession, procs: dict[str, int], seconds: float, pages: int, base: str) -> dict[str, float]:
    stop, counts = threading.Event(), {"requests": 0, "thumbs": 0, "thumb_bytes": 0}
    threads = [
        threading.Thread(target=watcher, args=(base, session.cameras, stop, counts), daemon=True) for _ in range(pages)
    ]
    for t in threads:
        t.start()
    if pages:
        time.sleep(2.5)  # the node subscribes to the images at its next 1 Hz housekeeping
    cpu0 = {n: cpu_seconds(p) for n, p in procs.items()}
    t0 = time.monotonic()
    c0 = dict(counts)
    time.sleep(seconds)
    wall = time.monotonic() - t0
    cpu = {n: (cpu_seconds(p) - cpu0[n]) / wall for n, p in procs.items()}
    c1 = dict(counts)
    stop.set()
    for t in threads:
        t.join(5)
    if pages:
        time.sleep(7.0)  # past watch_timeout_s: the node drops the image subscriptions again
    thumbs = c1["thumbs"] - c0["thumbs"]
    return {
        "dashboard": cpu["dashboard"],
        "graph": sum(v for n, v in cpu.items() if n != "dashboard"),
        "thumbs_per_s": thumbs / wall,
        "kb_per_thumb": (c1["thumb_bytes"] - c0["thumb_bytes"]) / max(thumbs, 1) / 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--size", default="640x480")
    args = p.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        sets = size_overrides(ROOT / "config" / "sim.yaml", args.size) + [
            "piper_launch.dashboard=true",
            f"dashboard.port={port}",
        ]
        with SimSession(Path(tmp) / "out", sets=sets) as session:
            procs = {r.spec.name: r.popen.pid for r in session.graph.running}
            base = f"http://127.0.0.1:{port}/"
            time.sleep(3.0)
            rows = [
                (label, measure(session, procs, args.seconds, pages, base))
                for label, pages in (("nobody watching", 0), ("1 page", 1), ("3 pages", 3), ("nobody again", 0))
            ]
    print(
        f"piper-dashboard CPU, sim graph with {len(session.cameras)} cameras at {args.size}, "
        f"{args.seconds:.0f} s windows, load average {os.getloadavg()[0]:.1f}"
    )
    for label, r in rows:
        print(
            f"  {label:16s} dashboard {r['dashboard']:.3f} cores  ({100 * r['dashboard'] / r['graph']:.1f} % of the "
            f"graph's {r['graph']:.2f})  thumbnails served {r['thumbs_per_s']:.1f}/s, {r['kb_per_thumb']:.1f} kB each"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
