"""An exclusive lock on a hidden file beside an output, removed again when released (a leaf module).

The dataset tools (``piper-dataset``, ``piper-export``) serialize runs on one output with a flock on
``.<name>.<tool>-lock`` beside it. Unlinking a flock file naively races (a process that opened the file just
before the holder unlinked it locks the orphaned inode while a third creates and locks a new file, and both
write), so:

- release: unlink the path *while still holding* the lock, then close. Only the holder unlinks, so a lock another
  live process holds is never removed (a refused run does not touch the file);
- acquire: open (create), flock, then check the path still names the inode locked; if not (the holder removed it
  in between), close and start again on the new file.

A lock file left by a killed run (flock dies with the process) is simply taken over and removed at the end.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

_ATTEMPTS = 100


class SideLock:
    """Hold ``path`` exclusively; ``busy()`` is raised when another live process holds it."""

    def __init__(self, path: Path, busy: Callable[[], Exception]):
        self.path = Path(path)
        self.fd: int | None = None
        for _ in range(_ATTEMPTS):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise busy() from None
            try:
                st, held = os.stat(self.path), os.fstat(fd)
                same = (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return
            os.close(fd)  # locked a file its holder had just removed: lock the current one
        raise busy()

    def close(self) -> None:
        """Release: remove the file while still holding it, then let go (idempotent)."""
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> SideLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
