"""Binding check: the training root's controller (provenance binding keys) vs the live arms.

A policy is bound to the controller its data came from (dataset spec, Provenance): the same EEF
targets give other contact behaviour under another backend, other gains or firmware, and another
rate shifts every timing the policy learned. The trained values come from the root's latest session
record; the live ones from each arm's ``/arm/provenance`` (the same keys the recorders map, see
``recording.config.session_record``) and the node's observation rate. Several arms: each arm's keys
under its name (``arms.left.control.backend``, ``lerobot.format.provenance.binding_keys``), each arm's
live values from its own provenance (``/left/arm/provenance``).

A root of one arm cannot drive two arms, nor the reverse: ``arms_mismatch`` says so in one line, and
the start is refused whatever ``on_binding_mismatch`` says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from piper_recorder.lerobot.format.provenance import binding_keys, lookup

UNKNOWN = "unknown"
Mismatch = tuple[str, Any, Any]  # (key, trained, live)


def _arm_record(p: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "control": {
            "backend": p.get("backend", UNKNOWN),
            "impedance": {k: p.get(k, UNKNOWN) for k in ("kp", "kd", "t_ff", "gravity_ff")},
        },
        "arm": {"firmware": p.get("firmware", UNKNOWN)},
    }


def live_record(arm_provenance: Mapping[str, Any] | None, fps: float, arms: tuple[str, ...] = ()) -> dict[str, Any]:
    """The binding part of a session record built from the live provenance JSON and our fps.

    One arm: ``arm_provenance`` is its /arm/provenance JSON. Several (``arms``): it maps each arm's name to its JSON
    (an arm not heard from is all "unknown").
    """
    given = dict(arm_provenance or {})
    if not arms:
        return {**_arm_record(given), "recording": {"fps": fps}}
    per_arm = {a: _arm_record(dict(given.get(a) or {})) for a in arms}
    return {"arms": per_arm, "recording": {"fps": fps}}


def arms_mismatch(trained_arms: tuple[str, ...], live_arms: tuple[str, ...]) -> str | None:
    """One line when the training root's arms are not the live graph's (None when they agree)."""
    if set(trained_arms) == set(live_arms):
        return None

    def count(arms: tuple[str, ...]) -> str:
        return f"two arms ({', '.join(arms)})" if len(arms) == 2 else (f"arms {', '.join(arms)}" if arms else "one arm")

    hint = f"arms:={','.join(trained_arms)}" if trained_arms else "no arms parameter"
    return (
        f"the training root was recorded with {count(trained_arms)}, this node drives {count(live_arms)} "
        f"(a policy drives the arms it was trained on: run the node with {hint})"
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def mismatches(trained: Mapping[str, Any] | None, live: Mapping[str, Any]) -> list[Mismatch]:
    """(key, trained, live) for each binding key that differs; every key when nothing was trained.

    The keys are both records' (one arm's, or each arm's under its name): a key only one side has differs.
    """
    live_doc = dict(live)
    if trained is None:
        return [(k, None, lookup(live_doc, k)) for k in binding_keys(live_doc)]
    trained_doc = dict(trained)
    keys = dict.fromkeys((*binding_keys(trained_doc), *binding_keys(live_doc)))
    return [
        (k, lookup(trained_doc, k), lookup(live_doc, k))
        for k in keys
        if not _same(lookup(trained_doc, k), lookup(live_doc, k))
    ]


def describe(found: list[Mismatch]) -> str:
    """The mismatches as one line for the operator."""
    return "; ".join(f"{k}: trained {json.dumps(a)} != live {json.dumps(b)}" for k, a, b in found)
