"""Binding check: the training root's controller (provenance binding keys) vs the live arm.

A policy is bound to the controller its data came from (dataset spec, Provenance): the same EEF
targets give other contact behaviour under another backend, other gains or firmware, and another
rate shifts every timing the policy learned. The trained values come from the root's latest session
record; the live ones from ``/arm/provenance`` (the same keys the recorders map, see
``recording.config.session_record``) and the node's observation rate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from piper_recorder.lerobot.format.provenance import BINDING_KEYS, lookup

UNKNOWN = "unknown"
Mismatch = tuple[str, Any, Any]  # (key, trained, live)


def live_record(arm_provenance: Mapping[str, Any] | None, fps: float) -> dict[str, Any]:
    """The binding part of a session record built from the live /arm/provenance JSON and our fps."""
    p = dict(arm_provenance or {})
    return {
        "control": {
            "backend": p.get("backend", UNKNOWN),
            "impedance": {k: p.get(k, UNKNOWN) for k in ("kp", "kd", "t_ff", "gravity_ff")},
        },
        "arm": {"firmware": p.get("firmware", UNKNOWN)},
        "recording": {"fps": fps},
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def mismatches(trained: Mapping[str, Any] | None, live: Mapping[str, Any]) -> list[Mismatch]:
    """(key, trained, live) for each binding key that differs; every key when nothing was trained."""
    if trained is None:
        return [(k, None, lookup(dict(live), k)) for k in BINDING_KEYS]
    return [
        (k, lookup(dict(trained), k), lookup(dict(live), k))
        for k in BINDING_KEYS
        if not _same(lookup(dict(trained), k), lookup(dict(live), k))
    ]


def describe(found: list[Mismatch]) -> str:
    """The mismatches as one line for the operator."""
    return "; ".join(f"{k}: trained {json.dumps(a)} != live {json.dumps(b)}" for k, a, b in found)
