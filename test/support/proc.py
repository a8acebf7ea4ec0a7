"""Start project console scripts as real processes for multiprocess tests, and always reap them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
_SIGINT = signal.SIGINT  # class Proc has a method named `signal`, which shadows the module in its body


class Proc:
    """A child process with its output captured to a file (read it with ``output()`` on failure)."""

    def __init__(self, args: list[str], env: dict[str, str], log_dir: Path, name: str | None = None):
        exe = args[0]
        if not os.path.isabs(exe) and (BIN / exe).exists():
            args = [str(BIN / exe), *args[1:]]
        self.name = name or Path(args[0]).name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.name}.{os.getpid()}.{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 10.0, sig: int = _SIGINT) -> int:
        if self.alive():
            self.signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()
        return self.popen.returncode


class ProcGroup:
    """Context manager owning several processes: stops all of them on exit, even after a failure, and
    then prints their output if the block failed (pytest shows it with the failure). A wait on them passes
    ``logs`` to ``support.waiting.wait_for``, which shows every process's output when it times out.
    """

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env, self.log_dir, self.procs = env, log_dir, []

    def start(self, *args: str, name: str | None = None) -> Proc:
        p = Proc(list(args), self.env, self.log_dir, name)
        self.procs.append(p)
        return p

    def logs(self) -> str:
        return "\n".join(f"----- {p.name}\n{p.output()[-4000:]}" for p in self.procs)

    def __enter__(self) -> ProcGroup:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        for p in reversed(self.procs):
            p.stop()
        if exc_type is not None:
            print(self.logs())
