"""Which policies acted in an episode, and when: for its ``episodes.jsonl`` line (no ROS).

A session record taken at the episode's start cannot say it: an episode may start before ``/policy/start`` or
outlive a policy switch. So the log keeps two latched streams as the recorder receives them, on its own clock:
``/policy/provenance`` (which policy the node runs; ``active``: started, not stopped) and ``/policy/actor``
(``policy`` | ``operator`` | ``none``, who drives the arm). The policy acts while the actor is ``policy``; each
such interval goes to the provenance in force at its start or, when the actor arrived first (the topics have no
mutual order), to the first active provenance received during it.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Mapping
from typing import Any

from piper_recorder.names import POLICY_ACTOR, POLICY_PROVENANCE

POLICY = "policy"
VOLATILE = ("active",)  # provenance keys that change between start and stop of the same policy
UNKNOWN: dict[str, Any] = {
    "backend": "unknown",
    "note": f"{POLICY_ACTOR} said policy but no {POLICY_PROVENANCE} named it",
}


def identity(provenance: Mapping[str, Any]) -> dict[str, Any]:
    """The provenance without the keys that change while the same policy runs."""
    return {k: v for k, v in provenance.items() if k not in VOLATILE}


class PolicyLog:
    """The two latched policy streams as the recorder receives them, on its clock.

    Thread-safe: the recorder's message callbacks add, its writer thread asks. Keeps the last ``keep`` events of each
    stream (actor changes are rare: a start, a takeover, a resume).
    """

    def __init__(self, keep: int = 10_000):
        self._lock = threading.Lock()
        self._keep = keep
        self._actor: list[tuple[int, str]] = []
        self._prov: list[tuple[int, dict[str, Any] | None]] = []  # None: stopped (not active)

    def on_actor(self, t_ns: int, actor: str) -> None:
        """Record who drives the arm from ``t_ns`` (a ``/policy/actor`` message)."""
        with self._lock:
            if self._actor and self._actor[-1][1] == actor:
                return
            self._insert(self._actor, (int(t_ns), str(actor)))

    def actor(self) -> str | None:
        """Who drives the arm as far as the recorder knows (the last ``/policy/actor``; None before any)."""
        with self._lock:
            return self._actor[-1][1] if self._actor else None

    def on_provenance(self, t_ns: int, provenance: object) -> None:
        """Record which policy the node runs from ``t_ns`` (a ``/policy/provenance`` message)."""
        doc = provenance if isinstance(provenance, Mapping) else None
        with self._lock:
            self._insert(self._prov, (int(t_ns), identity(doc) if doc is not None and doc.get("active") else None))

    def _insert(self, seq: list[Any], item: tuple[int, Any]) -> None:
        if seq and item[0] < seq[-1][0]:  # callbacks of one topic arrive in order; stamps may tie
            item = (seq[-1][0], item[1])
        seq.append(item)
        if len(seq) > self._keep:
            del seq[: len(seq) - self._keep]

    def _policy_for(self, s: int, e: int) -> dict[str, Any]:
        times = [t for t, _ in self._prov]
        i = bisect.bisect_right(times, s) - 1
        if i >= 0 and self._prov[i][1] is not None:
            return self._prov[i][1]  # type: ignore[return-value]
        for t, doc in self._prov[i + 1 :]:
            if t > e:
                break
            if doc is not None:
                return doc
        return UNKNOWN

    def acted(self, origin_ns: int, end_ns: int) -> list[dict[str, Any]]:
        """Every policy that acted in [origin_ns, end_ns], in the order they first acted.

        Each with its identity plus ``acted_s`` ([from, to] pairs, seconds from ``origin_ns``, the episode's timestamp 0),
        ``first_s`` and ``last_s``.
        """
        with self._lock:
            actor = list(self._actor)
            out: dict[str, dict[str, Any]] = {}
            for k, (t, who) in enumerate(actor):
                if who != POLICY:
                    continue
                until = actor[k + 1][0] if k + 1 < len(actor) else end_ns
                s, e = max(t, origin_ns), min(until, end_ns)
                if e <= s:  # before or after the episode
                    continue
                doc = self._policy_for(t, until)
                key = json.dumps(doc, sort_keys=True, default=str)
                entry = out.setdefault(key, {**doc, "acted_s": []})
                entry["acted_s"].append([round((s - origin_ns) / 1e9, 3), round((e - origin_ns) / 1e9, 3)])
        for entry in out.values():
            entry["first_s"], entry["last_s"] = entry["acted_s"][0][0], entry["acted_s"][-1][1]
        return list(out.values())


def episode_fields(log: PolicyLog, origin_ns: int, end_ns: int) -> dict[str, Any]:
    """What an episode's ``episodes.jsonl`` line gets; nothing for an episode no policy acted in.

    ``policies``: every policy that acted, with when; ``policy``: the first of them, or the policy a recorder saw
    active at the start.
    """
    acted = log.acted(origin_ns, end_ns)
    if not acted:
        return {}
    first = {k: v for k, v in acted[0].items() if k not in ("acted_s", "first_s", "last_s")}
    return {"policies": acted, "policy": first}
