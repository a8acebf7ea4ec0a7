"""DDS isolation for tests, benchmarks and the demo (no ROS import).

Fast DDS must stay on loopback (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) and every run needs its
own ROS_DOMAIN_ID so that concurrent test runs on one machine never see each other's topics. A
domain is leased by holding an exclusive ``flock`` on a per-domain file: the lease dies with the
process, so a crashed run never leaks a domain.
"""
from __future__ import annotations

import fcntl
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / "piper_recorder_ros_domains"
# Valid Fast DDS domain ids on Linux without port clashes: 0..101 and 215..232. Keep 0 for users.
DOMAIN_IDS = tuple(range(1, 102)) + tuple(range(215, 233))


@dataclass
class DomainLease:
    """An exclusively held ROS_DOMAIN_ID; ``env()`` gives the variables every DDS process needs."""

    domain_id: int
    _fd: int = field(repr=False)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["ROS_DOMAIN_ID"] = str(self.domain_id)
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        env.pop("ROS_LOCALHOST_ONLY", None)  # deprecated; conflicts with the discovery range
        env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def apply(self) -> None:
        """Set the variables in this process (before rclpy.init)."""
        os.environ.update(self.env({}))
        os.environ.pop("ROS_LOCALHOST_ONLY", None)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "DomainLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease_domain() -> DomainLease:
    """Lease a ROS domain id no other live process on this machine holds."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    ids = list(DOMAIN_IDS)
    random.shuffle(ids)
    for domain_id in ids:
        fd = os.open(LOCK_DIR / f"{domain_id}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return DomainLease(domain_id, fd)
    raise RuntimeError("no free ROS_DOMAIN_ID: too many concurrent DDS runs on this machine")
