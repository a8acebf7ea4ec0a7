"""Pip-only launcher, the supervisor: run a ``graph.plan.GraphPlan`` as processes and stop them in order.

Each process runs in its own process group (so a signal reaches the node and whatever it started); its
output goes to ``<log_dir>/<name>.log`` (and, with ``echo``, to stdout prefixed ``[name]``). ``stop()``
stops the recorders first (so an episode in flight is finished while its inputs still run), then the
rest: SIGINT, then SIGTERM, then SIGKILL, per process group. Every child is told this process's pid
(``PIPER_LAUNCHER_PID``) and ends by itself when it is gone (``supervision.watch_parent``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper_recorder.graph.errors import LaunchError
from piper_recorder.graph.plan import GraphPlan, ProcessSpec
from piper_recorder.names import RECORDER_NODES, node_key
from piper_recorder.process.supervision import LAUNCHER_PID_ENV


class _Running:
    def __init__(self, spec: ProcessSpec, env: dict[str, str], log_dir: Path, echo: bool):
        self.spec = spec
        self.log_path = (
            log_dir / f"{spec.name}.log"
        )  # a namespaced node's in its namespace's folder: left/piper_arm.log
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # open while the child writes; _pump closes it  # noqa: SIM115
        self.popen = subprocess.Popen(
            spec.argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._echo = echo
        self._reader = threading.Thread(target=self._pump, name=f"log-{spec.name}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        prefix = f"[{self.spec.name}] ".encode()
        assert self.popen.stdout is not None
        for line in iter(self.popen.stdout.readline, b""):
            self._log.write(line)
            if self._echo:
                sys.stdout.buffer.write(prefix + line)
                sys.stdout.flush()
        self._log.close()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


class Graph:
    """Runs a GraphPlan; use as a context manager so the processes are always stopped."""

    def __init__(self, plan: GraphPlan, env: Mapping[str, str], log_dir: Path, echo: bool = False):
        self.plan, self.env, self.log_dir, self.echo = plan, dict(env), Path(log_dir), echo
        self.running: list[_Running] = []
        self.exit_codes: dict[str, int | None] = {}

    def start(self) -> Graph:
        """Start every process.

        Each ends by itself if this process dies without stopping it (SIGKILL included:
        ``supervision.watch_parent``, told our pid through ``PIPER_LAUNCHER_PID``).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**self.env, LAUNCHER_PID_ENV: str(os.getpid())}
        for spec in self.plan.processes:
            self.running.append(_Running(spec, env, self.log_dir, self.echo))
        return self

    def dead(self) -> list[str]:
        """The processes that have exited."""
        return [r.spec.name for r in self.running if not r.alive()]

    def logs(self, n: int = 40) -> str:
        """The last ``n`` lines of every process's log, each under its name and exit status."""
        return "\n".join(f"----- {r.spec.name} (exit {r.popen.poll()})\n{r.tail(n)}" for r in self.running)

    def wait_nodes(self, probe: Any, timeout: float = 60.0) -> None:
        """Block until every planned node is in the ROS graph (seen by the rclpy node ``probe``)."""
        want = set(self.plan.node_names)
        deadline = time.monotonic() + timeout
        while True:
            dead = self.dead()
            if dead:
                raise LaunchError(f"process(es) exited during start-up: {dead}\n{self.logs()}")
            seen = {node_key(name, ns) for name, ns in probe.get_node_names_and_namespaces()}
            if want <= seen:
                return
            if time.monotonic() > deadline:
                raise LaunchError(f"nodes not up after {timeout:.0f}s: {sorted(want - seen)}\n{self.logs()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 20.0) -> dict[str, int | None]:
        """Recorders first, then everything else: SIGINT, SIGTERM after ``timeout``, SIGKILL after 5 s more."""
        stages = [
            [r for r in self.running if r.spec.name in RECORDER_NODES],
            [r for r in self.running if r.spec.name not in RECORDER_NODES],
        ]
        for stage in stages:
            for sig, wait_s in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                live = [r for r in stage if r.alive()]
                if not live:
                    break
                for r in reversed(live):
                    r.signal(sig)
                deadline = time.monotonic() + wait_s
                while any(r.alive() for r in live) and time.monotonic() < deadline:
                    time.sleep(0.05)
        for r in self.running:
            try:
                r.popen.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
            r._reader.join(timeout=2.0)
            self.exit_codes[r.spec.name] = r.popen.poll()
        return self.exit_codes

    def __enter__(self) -> Graph:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
