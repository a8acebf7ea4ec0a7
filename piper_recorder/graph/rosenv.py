"""DDS isolation for tests, benchmarks, the launcher, the launch files and the demo (no ROS import).

Fast DDS must stay on loopback and every run needs its own ROS_DOMAIN_ID so that concurrent test
runs on one machine never see each other's topics. A domain is leased by holding an exclusive
``flock`` on a per-domain file: the lease dies with the process, so a crashed run never leaks a domain.

Loopback: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` alone limits discovery but not the sockets:
rmw_fastrtps then adds a UDPv4 transport of its own that binds on every interface. So with Fast DDS
we select ``config/fastdds_loopback.xml`` (UDPv4 with an interfaces allowlist of 127.0.0.1, shared
memory, unicast discovery to 127.0.0.1, built-in transports off) and set the range to
``SYSTEM_DEFAULT`` so that rmw leaves the profile's transports alone. Without the profile file, or
with another RMW, discovery is limited to this host. The variable names depend on the ROS install
and are chosen by what it reads (``dds_features``), never by assuming a distro.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
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
FASTDDS3_PROFILE_VAR = "FASTDDS_DEFAULT_PROFILES_FILE"  # the only one Fast DDS 3 reads (Kilted and newer)
FASTDDS2_PROFILE_VAR = "FASTRTPS_DEFAULT_PROFILES_FILE"  # the only one Fast DDS 2.x reads (Humble, Jazzy)
PROFILE_VARS = (FASTDDS3_PROFILE_VAR, FASTDDS2_PROFILE_VAR)
DISCOVERY_RANGE = "ROS_AUTOMATIC_DISCOVERY_RANGE"  # rcl of Iron and newer
LOCALHOST_ONLY = "ROS_LOCALHOST_ONLY"  # Humble's only way; deprecated (and warned about) since


@dataclass(frozen=True)
class DdsFeatures:
    """What the ROS libraries rclpy loads understand, read off the libraries themselves.

    ``fastdds_major``: 3 (``libfastdds``), 2 (``libfastrtps``) or None (not found: both profile
    variables are set, so the profile applies whichever it is). ``discovery_range``: librcl reads
    ``ROS_AUTOMATIC_DISCOVERY_RANGE``; False means ``ROS_LOCALHOST_ONLY`` is all there is (Humble).
    """

    fastdds_major: int | None = None
    discovery_range: bool = True

    @property
    def profile_vars(self) -> tuple[str, ...]:
        """The Fast DDS profile variables this install reads (both names when its version is unknown)."""
        return {3: (FASTDDS3_PROFILE_VAR,), 2: (FASTDDS2_PROFILE_VAR,)}.get(self.fastdds_major or 0, PROFILE_VARS)

    @classmethod
    def detect(cls, lib_dirs: list[Path]) -> DdsFeatures:
        """The features of the first ``lib_dirs`` entry that holds librcl (and its Fast DDS)."""
        for d in lib_dirs:
            rcl = d / "librcl.so"
            if not rcl.is_file():
                continue
            major = 3 if any(d.glob("libfastdds.so*")) else 2 if any(d.glob("libfastrtps.so*")) else None
            return cls(major, DISCOVERY_RANGE.encode() in rcl.read_bytes())
        return cls()


def ros_lib_dirs() -> list[Path]:
    """Where the ROS libraries live that rclpy loads, found without importing rclpy.

    The prefix holding rclpy first (a venv of PyPI
    wheels: its ``lib``; an apt install: ``/opt/ros/<distro>/lib``), then AMENT_PREFIX_PATH's and this
    Python's prefix.
    """
    dirs: list[Path] = []
    try:
        spec = importlib.util.find_spec("rclpy")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs += [parent / "lib" for parent in Path(spec.origin).resolve().parents if (parent / "lib").is_dir()]
    dirs += [Path(p) / "lib" for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    dirs.append(Path(sys.prefix) / "lib")
    return list(dict.fromkeys(dirs))


@functools.lru_cache(maxsize=1)
def dds_features() -> DdsFeatures:
    """This install's ``DdsFeatures`` (read once per process)."""
    return DdsFeatures.detect(ros_lib_dirs())


def loopback_profile() -> Path | None:
    """The packaged Fast DDS loopback profile (source tree or installed share/), or None."""
    candidates = [
        Path(__file__).resolve().parents[2] / "config" / FASTDDS_PROFILE,
        Path(sys.prefix) / "share" / "piper_recorder" / "config" / FASTDDS_PROFILE,
    ]
    try:  # a colcon install: share/ of the package, wherever the overlay is
        from ament_index_python.packages import get_package_share_directory

        candidates.append(Path(get_package_share_directory("piper_recorder")) / "config" / FASTDDS_PROFILE)
    except Exception:  # noqa: BLE001 - not installed with ament: the other candidates decide
        pass
    for c in candidates:
        if c.is_file():
            return c
    return None


def loopback_env(base: dict[str, str] | None = None, features: DdsFeatures | None = None) -> dict[str, str]:
    """``base`` (default: os.environ) plus the variables that keep DDS on loopback (see the module doc).

    They are named as ``features`` (default: this install's) reads them.
    """
    env = dict(os.environ if base is None else base)
    f = features or dds_features()
    rmw = env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    profile = loopback_profile() if rmw == "rmw_fastrtps_cpp" else None
    for var in (*PROFILE_VARS, LOCALHOST_ONLY, DISCOVERY_RANGE):  # stale ones would be loaded too
        env.pop(var, None)
    if profile is not None:
        env.update(dict.fromkeys(f.profile_vars, str(profile)))
        if f.discovery_range:
            env[DISCOVERY_RANGE] = "SYSTEM_DEFAULT"  # LOCALHOST would add an open UDP transport
    elif f.discovery_range:
        env[DISCOVERY_RANGE] = "LOCALHOST"
    else:
        env[LOCALHOST_ONLY] = "1"
    return env


def launch_dds_env(base: dict[str, str] | None = None, features: DdsFeatures | None = None) -> dict[str, str | None]:
    """The DDS variables both launch files set (a value) or unset (None) for every node they start.

    The loopback profile, unless the launching shell already names a Fast DDS profile of its own in the
    variable this Fast DDS reads (e.g. one that adds the robot's LAN interface to watch it from another
    computer): the user's profile wins, and nothing is changed.
    """
    env = dict(os.environ if base is None else base)
    f = features or dds_features()
    if any(env.get(var) for var in f.profile_vars):
        return {}
    out = loopback_env({k: v for k, v in env.items() if k == "RMW_IMPLEMENTATION"}, f)
    names = (*PROFILE_VARS, LOCALHOST_ONLY, DISCOVERY_RANGE)
    return {k: out.get(k) for k in names if k in out or k in env}


DDS_VARS = ("ROS_DOMAIN_ID", "RMW_IMPLEMENTATION", *PROFILE_VARS, LOCALHOST_ONLY, DISCOVERY_RANGE)


def apply_dds_env(env: dict[str, str]) -> None:
    """Make this process's DDS variables those of ``env`` (set, or removed where ``env`` has none)."""
    for var in DDS_VARS:
        if var in env:
            os.environ[var] = env[var]
        else:
            os.environ.pop(var, None)
    os.environ["PYTHONUNBUFFERED"] = "1"


@dataclass
class DomainLease:
    """An exclusively held ROS_DOMAIN_ID; ``env()`` gives the variables every DDS process needs."""

    domain_id: int
    _fd: int = field(repr=False)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: os.environ) with this domain and the loopback variables."""
        env = loopback_env(dict(os.environ if base is None else base))
        env["ROS_DOMAIN_ID"] = str(self.domain_id)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def apply(self) -> None:
        """Set the variables in this process (before rclpy.init)."""
        base = {k: os.environ[k] for k in ("RMW_IMPLEMENTATION",) if k in os.environ}
        apply_dds_env(self.env(base))

    def release(self) -> None:
        """Give the domain back (close the lock file)."""
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
