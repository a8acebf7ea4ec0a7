"""Crash-test worker: a pre-imported "zygote" that forks writer processes for the test to SIGKILL.

Forking from a process that already imported numpy/PyAV/pyarrow makes each trial start in
milliseconds, so many kills fit in a short test on a loaded machine.

stdin commands: ``run SEED`` forks a child that prints ``pid N``, opens the root (repairing it),
prints ``ready`` and then records, saves, discards and deletes episodes forever, printing
``saving``/``deleting`` just before those calls. ``reap`` waits for that child and prints
``exit CODE`` (-9 after SIGKILL). SIGUSR1 makes the worker or a writer print every thread's Python stack
to stderr (how the test explains a wait that timed out). Usage: python lerobot_crash_worker.py ROOT

The writers and the worker share one stdout pipe and a writer is killed at any instant, so each line goes
out in one ``write`` (``say``): ``print`` writes the text and its newline separately when stdout is
unbuffered (``PYTHONUNBUFFERED=1``, as ``make test`` sets), and a kill between the two left a torn
``saving`` that the worker's ``exit -9`` then continued (``savingexit -9``), a line the test never matched.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/, for the support package
from piper_recorder.assembly.assembler import grid_timestamp
from piper_recorder.lerobot.writer import CameraSpec, LeRobotWriter, WriterConfig

from support.lerobot_data import H, W, index_frame, row_values

FPS = 30


def say(line: str) -> None:
    """One whole line to stdout in one write(2) (atomic on a pipe below PIPE_BUF): never half a line."""
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def config(version: str | None = None) -> WriterConfig:
    """The worker's config; the LeRobot version comes from PIPER_TEST_LEROBOT_VERSION (default v2.0)."""
    version = version or os.environ.get("PIPER_TEST_LEROBOT_VERSION", "v2.0")
    return WriterConfig(
        fps=FPS, cameras={"cam_front": CameraSpec(H, W), "cam_wrist": CameraSpec(H, W)}, lerobot_version=version
    )


def record_forever(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    say(f"pid {os.getpid()}")
    w = LeRobotWriter(root, config())
    say("ready")
    w.begin_session({"control": {"backend": "impedance"}, "recording": {"fps": FPS}})
    while True:
        w.start_episode(rng.choice(["pick", "place", f"task {seed}"]))
        for k in range(rng.randint(3, 30)):
            t = float(grid_timestamp(k, FPS))  # as the assembler feeds rows: k/fps rounded up
            w.add_row(t, row_values(t, seed * 100 + w.total_episodes))
            for cam in ("cam_front", "cam_wrist"):
                w.add_frame(cam, index_frame(k), t)
            w.add_raw_quest(f'{{"k": {k}}}')
        r = rng.random()
        if r < 0.15:
            w.discard_episode()
            continue
        say("saving")
        rec = w.save_episode({"seed": seed})
        say(f"saved {rec['episode_index']}")
        if r > 0.7:
            say("deleting")
            w.delete_last_episode()


def main() -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # inherited by the forked writers
    root = Path(sys.argv[1])
    child = None
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "run":
            sys.stdout.flush()  # nothing buffered for the writer to inherit and print again
            child = os.fork()
            if child == 0:
                try:
                    record_forever(root, int(args[0]))
                finally:
                    os._exit(1)
        elif cmd == "reap" and child is not None:
            _, status = os.waitpid(child, 0)
            child = None
            say(f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    main()
