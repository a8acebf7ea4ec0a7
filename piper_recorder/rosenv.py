"""DDS isolation for tests, benchmarks, the launcher and the demo (no ROS import).

Fast DDS must stay on loopback and every run needs its own ROS_DOMAIN_ID so that concurrent test
runs on one machine never see each other's topics. A domain is leased by holding an exclusive
``flock`` on a per-domain file: the lease dies with the process, so a crashed run never leaks a domain.

Loopback: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` alone limits discovery but not the sockets:
rmw_fastrtps then adds a UDPv4 transport of its own that binds on every interface. So with Fast DDS
we select ``config/fastdds_loopback.xml`` (UDPv4 with an interfaces allowlist of 127.0.0.1, shared
memory, unicast discovery to 127.0.0.1, built-in transports off) and set the range to
``SYSTEM_DEFAULT`` so that rmw leaves the profile's transports alone. Without the profile file, or
with another RMW, the range stays ``LOCALHOST``.
"""
from __future__ import annotations

import fcntl
import os
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LOCK_DIR = Path(tempfile.gettempdir()) / "piper_recorder_ros_domains"
# Valid Fast DDS domain ids on Linux without port clashes: 0..101 and 215..232. Keep 0 for users.
DOMAIN_IDS = tuple(range(1, 102)) + tuple(range(215, 233))
FASTDDS_PROFILE = "fastdds_loopback.xml"
# Fast DDS 3 reads FASTDDS_DEFAULT_PROFILES_FILE; rmw_fastrtps warns that FASTRTPS_... (Fast DDS 2) is deprecated.
FASTDDS_PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE",)


def loopback_profile() -> Path | None:
    """The packaged Fast DDS loopback profile (source tree or installed share/), or None."""
    candidates = [Path(__file__).resolve().parents[1] / "config" / FASTDDS_PROFILE,
                  Path(sys.prefix) / "share" / "piper_recorder" / "config" / FASTDDS_PROFILE]
    try:  # a colcon install: share/ of the package, wherever the overlay is
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory("piper_recorder")) / "config" / FASTDDS_PROFILE)
    except Exception:  # noqa: BLE001 - not installed with ament: the other candidates decide
        pass
    for c in candidates:
        if c.is_file():
            return c
    return None


def loopback_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: os.environ) plus the variables that keep DDS on loopback (see the module doc)."""
    env = dict(os.environ if base is None else base)
    env.pop("ROS_LOCALHOST_ONLY", None)  # deprecated; conflicts with the discovery range
    rmw = env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    profile = loopback_profile() if rmw == "rmw_fastrtps_cpp" else None
    if profile is not None:
        for var in FASTDDS_PROFILE_VARS:
            env[var] = str(profile)
        env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)   # a stale one would be loaded too
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "SYSTEM_DEFAULT"  # LOCALHOST would add an open UDP transport
    else:
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return env


def launch_dds_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The DDS variables both launch files set for every node they start (sim and robot alike).

    The loopback profile, unless the launching shell already names a Fast DDS profile of its own
    (``FASTDDS_DEFAULT_PROFILES_FILE``, e.g. one that adds the robot's LAN interface to watch it from
    another computer): the user's profile wins. Only the variables to set are returned.
    """
    env = dict(os.environ if base is None else base)
    if env.get(FASTDDS_PROFILE_VARS[0]):
        return {}
    out = loopback_env({k: v for k, v in env.items() if k == "RMW_IMPLEMENTATION"})
    return {k: out[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", *FASTDDS_PROFILE_VARS) if k in out}


@dataclass
class DomainLease:
    """An exclusively held ROS_DOMAIN_ID; ``env()`` gives the variables every DDS process needs."""

    domain_id: int
    _fd: int = field(repr=False)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = loopback_env(dict(os.environ if base is None else base))
        env["ROS_DOMAIN_ID"] = str(self.domain_id)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def apply(self) -> None:
        """Set the variables in this process (before rclpy.init)."""
        base = {k: os.environ[k] for k in ("RMW_IMPLEMENTATION",) if k in os.environ}
        os.environ.update(self.env(base))
        os.environ.pop("ROS_LOCALHOST_ONLY", None)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DomainLease:
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
