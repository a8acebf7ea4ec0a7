"""Where the package is installed: its config files and console scripts, found alike in every install.

A source tree, a venv (pip) and a colcon install (``config_path``, ``find_script``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .errors import LaunchError

PACKAGE = "piper_recorder"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def install_prefixes() -> list[Path]:
    """Where this package's data files and scripts may be installed.

    The interpreter's prefix (pip, a venv) and the prefix the package itself was installed under (a colcon install runs the system
    Python, whose prefix is /usr, with the package in ``<install>/lib/python3.X/site-packages``).
    """
    out = [Path(sys.prefix)]
    out += [p for p in PACKAGE_ROOT.parents[:4] if p not in out]
    return out


def config_path(mode_or_path: str) -> Path:
    """``sim``/``robot`` -> the packaged config file (source tree or installed share/); else a path."""
    if mode_or_path in ("sim", "robot"):
        candidates = [PACKAGE_ROOT / "config" / f"{mode_or_path}.yaml"]
        candidates += [p / "share" / "piper_recorder" / "config" / f"{mode_or_path}.yaml" for p in install_prefixes()]
        for c in candidates:
            if c.is_file():
                return c
        raise LaunchError(f"config/{mode_or_path}.yaml not found (looked in {', '.join(map(str, candidates))})")
    p = Path(mode_or_path)
    if not p.is_file():
        raise LaunchError(f"config file {p} does not exist")
    return p


def script_dirs(bin_dir: Path | None = None) -> list[Path]:
    """Where this package's console scripts are, in order.

    ``bin_dir``, next to the interpreter (pip,
    a venv), ``<prefix>/lib/piper_recorder`` of the package's own install (colcon puts them there for
    ``ros2 run``, off PATH: setup.cfg), then the interpreter's ``bin``.
    """
    dirs = [bin_dir] if bin_dir else []
    dirs.append(Path(sys.executable).parent)
    dirs += [p / "lib" / "piper_recorder" for p in install_prefixes()]
    return dirs


def find_script(name: str, bin_dir: Path | None = None) -> str:
    """The path of console script ``name`` (``script_dirs``, then PATH); LaunchError if there is none."""
    dirs = script_dirs(bin_dir)
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    found = shutil.which(name)
    if not found:
        raise LaunchError(f"executable {name!r} not found in {', '.join(map(str, dirs))} or on PATH")
    return found
