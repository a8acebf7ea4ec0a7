"""Where an output may go relative to its inputs, compared on resolved paths (a leaf module).

Every dataset tool that takes ``--out`` compares here, with every symlink of both paths resolved
(``Path.resolve``: a missing tail kept as given): an output reached through a symlink into an input would
otherwise live inside it, and a later in-place edit of that input would delete it. ``dir_problem`` /
``file_problem`` say why an output cannot go where it is asked to, so a tool refuses it in one line before it
starts anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def nested(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are the same path or one lies inside the other, once resolved."""
    ra, rb = Path(a).resolve(), Path(b).resolve()
    return ra == rb or ra in rb.parents or rb in ra.parents


def overlapping_input(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]]) -> Path | None:
    """The first input ``out`` is, lies inside or contains (resolved), else None."""
    for src in inputs:
        if nested(Path(out), Path(src)):
            return Path(src)
    return None


def located(out: str | os.PathLike[str]) -> Path:
    """``out`` with its directory resolved and its own name kept.

    That is where the tool stages, locks and renames: beside the real directory, whatever symlink led there.
    """
    p = Path(out).absolute()
    return p.parent.resolve() / p.name


def dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be, or be made, a directory; None when it can.

    A file there, or a file where a parent would be: an output option checked before anything starts.
    """
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            return None if q.is_dir() else f"{q} is not a directory"
    return None


def file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (a directory there, its directory missing or not one); None when it can."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a directory"
    if not p.parent.is_dir():
        return f"{p.parent} is not a directory" if p.parent.exists() else f"{p.parent} does not exist"
    return None
