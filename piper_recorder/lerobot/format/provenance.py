"""Collection provenance: which controller, gains, firmware and rate produced each session.

A policy is bound to the controller that produced its data, so a new session whose binding keys
differ from the previous session's is either warned about loudly or refused.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import fsutil
from .errors import BindingChangeError
from .layout import COLLECTION_META, SESSIONS

log = logging.getLogger(__name__)

# Each arm's binding keys, under its name in ``arms`` when the session recorded several arms.
ARM_BINDING_KEYS = (
    "control.backend",
    "control.impedance.kp",
    "control.impedance.kd",
    "control.impedance.t_ff",
    "control.impedance.gravity_ff",
    "arm.firmware",
)
BINDING_KEYS = (*ARM_BINDING_KEYS, "recording.fps")  # one arm's session


def binding_keys(record: dict | None) -> tuple[str, ...]:
    """The binding keys of a session record: ``BINDING_KEYS``, or each arm's (``arms.left.control.backend``, ...)."""
    arms = record.get("arms") if isinstance(record, dict) else None
    if not isinstance(arms, dict):
        return BINDING_KEYS
    return (*(f"arms.{a}.{k}" for a in arms for k in ARM_BINDING_KEYS), "recording.fps")


def lookup(record: dict, dotted: str) -> Any:
    """Value at a dotted path in a nested dict, or None when absent."""
    cur: Any = record
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def binding_changes(previous: dict | None, record: dict) -> list[tuple[str, Any, Any]]:
    """(key, old, new) for every binding key whose value differs from the previous session."""
    if previous is None:
        return []
    keys = dict.fromkeys((*binding_keys(previous), *binding_keys(record)))  # one arm -> two: every key differs
    return [(k, lookup(previous, k), lookup(record, k)) for k in keys if lookup(previous, k) != lookup(record, k)]


def format_warning(root: Path, changes: list[tuple[str, Any, Any]]) -> str:
    """The loud multi-line warning printed when ``changes`` (binding keys) differ from the previous session."""
    bar = "!" * 78
    lines = [
        bar,
        "!! WARNING: binding-critical settings changed since the previous session of",
        f"!!   {root}",
        "!! Mixing controllers makes the action-to-motion mapping inconsistent.",
    ]
    lines += [f"!!   {k}: {json.dumps(old)} -> {json.dumps(new)}" for k, old, new in changes]
    lines += ["!! Start a fresh --root for this configuration instead.", bar]
    return "\n".join(lines)


def begin_session(root: Path, record: dict, writer_version: str, refuse: bool) -> tuple[dict, list]:
    """Append the session record (with id, start time, writer version); return it and the changes."""
    path = root / SESSIONS
    sessions = fsutil.read_jsonl(path)
    previous = sessions[-1] if sessions else None
    full = copy.deepcopy(record)
    full.update(
        session_id=uuid.uuid4().hex,
        started_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        writer_version=writer_version,
    )
    changes = binding_changes(previous, full)
    if changes:
        text = format_warning(root, changes)
        if refuse:
            raise BindingChangeError(
                "binding keys changed since the previous session ("
                + ", ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes)
                + "); start a fresh root",
                changes,
            )
        print(text, file=sys.stderr, flush=True)
        log.warning("%s", text)
    # The file is append-only in content; rewriting it atomically means a crash never leaves a torn line.
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    fsutil.atomic_write(path, old + fsutil.jsonl_bytes([full]))
    fsutil.atomic_write(root / COLLECTION_META, fsutil.json_bytes(full))
    return full, changes
