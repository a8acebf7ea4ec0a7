"""The effective parameter file the nodes start with (``--params-file``), written as rcl's parser reads it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .errors import LaunchError


class _NoAliasDumper(yaml.SafeDumper):
    """rcl's parameter-file parser rejects YAML anchors/aliases (a list shared by two nodes)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_params(cfg: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """The effective parameter file the nodes start with; a directory that cannot hold it is a LaunchError."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            yaml.dump({n: {"ros__parameters": p} for n, p in cfg.items()}, f, Dumper=_NoAliasDumper, sort_keys=False)
    except OSError as exc:
        raise LaunchError(f"cannot write the parameter file {path}: {exc.strerror or exc}") from None
    return path
