"""PolicyRuntime: states, queries off the control thread, one safe target per control tick.

States: ``idle`` -> ``running`` (start) <-> ``paused`` (pause, stale input, query error or timeout,
binding mismatch in warn mode never pauses) / ``takeover`` (the operator's clutch: at once, resume
only on an explicit resume) -> ``stopped`` (stop, max_duration_s). While running or paused the arm
gets a target every tick: the due action through the envelope, or the previous target (hold) when
nothing valid is due. In takeover and when idle/stopped nothing is published (teleop drives, or the
arm holds its last target). All methods take ``now_ns`` from the caller (monotonic or the graph's
clock, one clock throughout): tests run it on a fake clock in milliseconds.

The operator always wins (``operator.OperatorGate``): the grip on the headset's joy stream and
teleop's clutch feed ``on_joy`` / ``on_teleop_status``; while the gate says the operator holds the
arm, ``start`` and ``resume`` are refused and every tick publishes nothing (a tick that finds the
grip held takes over then, whatever message order brought it).

Two arms (a root recorded with two, ``TrainingMeta.layout``; the node's ``arms``): a chunk row is the
root's whole ``action`` (every arm's pose and gripper), each arm's part goes through its own envelope
against its own measured pose (``safety.ArmsEnvelope``: an unusable part holds every arm for that tick),
each arm's feedback has its own staleness bound, and a tick publishes a target per arm (``Tick.targets``).
A grip on either hand, or teleop's clutch of either arm, takes over: that arm is the operator's at once and
the policy stops publishing for both (it pauses in ``takeover``: a bimanual policy's rows move the arms
together), the other arm holding its last target by the arm's own rule, until ``resume`` with both hands
open. A root of one arm on a graph of two (or the reverse) refuses the start in one line.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from piper_recorder.names import QUEST_JOY_PATTERN, quest_topic

from . import binding
from .backend import ActionChunk, BackendError, BackendTimeout, Observation, PolicyBackend
from .config import PolicyConfig
from .executor import ChunkExecutor, LeadTime
from .observation import ObservationBuilder
from .operator import OperatorGates
from .safety import Arm, ArmsEnvelope, Target

IDLE, RUNNING, PAUSED, TAKEOVER, STOPPED = "idle", "running", "paused", "takeover", "stopped"
Result = ActionChunk | BaseException


class QueryRunner(Protocol):
    """Runs ``backend.predict`` somewhere else; ``poll`` hands back the finished result once."""

    def submit(self, obs: Observation, horizon: int) -> None:
        """Start a query for ``obs``."""

    def poll(self) -> Result | None:
        """The finished query's chunk or exception, once; None while it runs."""

    def abandon(self) -> None:
        """Forget the query in flight: its late answer is ignored."""


class ThreadRunner:
    """One worker thread per query; an abandoned query's late answer is ignored."""

    def __init__(self, backend: PolicyBackend):
        self.backend = backend
        self._lock = threading.Lock()
        self._gen = 0
        self._result: Result | None = None

    def submit(self, obs: Observation, horizon: int) -> None:
        """Start a query for ``obs`` on a new worker thread."""
        with self._lock:
            self._gen += 1
            gen = self._gen

        def run() -> None:
            res: Result
            try:
                res = self.backend.predict(obs, horizon)
            except BaseException as e:  # noqa: BLE001 - handed to the control thread, which pauses
                res = e
            with self._lock:
                if gen == self._gen:
                    self._result = res

        threading.Thread(target=run, name="policy-query", daemon=True).start()

    def poll(self) -> Result | None:
        """The finished query's chunk or exception, once; None while it runs."""
        with self._lock:
            res, self._result = self._result, None
            return res

    def abandon(self) -> None:
        """Forget the query in flight: its late answer is ignored."""
        with self._lock:
            self._gen += 1
            self._result = None


@dataclass(frozen=True)
class Tick:
    """What one control tick decided: each arm's target to publish (or none), who acts, and whether it is an action.

    ``targets`` maps each arm's name to its target (key None for one arm); empty: publish nothing.
    """

    targets: dict[Arm, Target]
    actor: str  # policy | operator | none
    due: bool  # the targets are a policy action (False: hold)

    @property
    def target(self) -> Target | None:
        """One arm's target (None: publish nothing; always None for several arms: use ``targets``)."""
        return self.targets.get(None)


class PolicyRuntime:
    """The policy's states, its queries off the control thread and one safe target per control tick."""

    def __init__(
        self,
        cfg: PolicyConfig,
        builder: ObservationBuilder,
        backend: PolicyBackend,
        runner: QueryRunner | None = None,
        log: Callable[[str], None] = lambda m: None,
    ):
        cfg.validate()
        self.cfg, self.builder, self.backend, self.log = cfg, builder, backend, log
        self.runner: QueryRunner = runner or ThreadRunner(backend)
        self.layout = builder.meta.layout
        self.executor = ChunkExecutor(
            round(1e9 / builder.fps), cfg.mode, cfg.ensemble_m, cfg.replan_every, cfg.query_ahead, self.layout
        )
        self.lead = LeadTime(
            round(cfg.period_s * 1e9), round(cfg.lead_margin_s * 1e9), cfg.horizon * self.executor.period_ns
        )
        self.envelope = ArmsEnvelope(self.layout, cfg.limits, cfg.gripper_max_width, cfg.period_s)
        self.state, self.reason = IDLE, ""
        self._started_ns = 0
        self._query_ns: int | None = None  # submit time of the query in flight
        self._query_obs_ns = -1  # the newest observation already asked about
        self._have_chunk = False
        self.latency_ms: deque[float] = deque(maxlen=2000)
        self.counters: dict[str, int] = {
            "ticks": 0,
            "starved_ticks": 0,
            "waiting_ticks": 0,
            "queries": 0,
            "query_errors": 0,
            "query_timeouts": 0,
            "takeovers": 0,
            "pauses": 0,
            "non_finite_refused": 0,
        }
        self.binding: list[binding.Mismatch] = []
        self.pause_reasons: dict[str, int] = {}
        self.operator = OperatorGates(cfg.arm_names(), cfg.hand, cfg.takeover_above, cfg.takeover_release_below)
        self.counters["operator_refusals"] = 0

    # ---- the operator ---------------------------------------------------------------------------
    def on_joy(self, now_ns: int, squeeze: float, hand: str | None = None) -> bool:
        """A joy message of ``hand`` (None: the configured ``hand``); True when it took the arms from the policy."""
        if self.operator.on_joy(now_ns, squeeze, hand):
            arm = self.operator.hand_arm(hand)
            topic = quest_topic(QUEST_JOY_PATTERN, arm or hand or self.cfg.hand)
            return self.takeover(f"operator grip on {topic}" + (f" ({arm} arm)" if arm else ""))
        return False

    def on_teleop_status(self, now_ns: int, engaged: bool, arm: str | None = None) -> bool:
        """Teleop's reported clutch of ``arm`` (None: one arm's, or any arm's); True when it took the arms from the policy."""
        if self.operator.on_teleop_status(now_ns, engaged, arm):
            return self.takeover("teleop clutch engaged" + (f" ({arm} arm)" if arm else ""))
        return False

    def _operator_refusal(self, now_ns: int, what: str) -> str | None:
        holder = self.operator.holder(now_ns)
        if holder is None:
            return None
        self.counters["operator_refusals"] += 1
        arms = "the arms" if self.layout.arm_names else "the arm"
        return f"{what} refused: {holder}; the operator has {arms} (release the grip, then call ~/{what})"

    # ---- commands -------------------------------------------------------------------------------
    def start(self, now_ns: int, arm_provenance: Mapping[str, Any] | None) -> tuple[bool, str]:
        """Start running at ``now_ns``; returns (False, why) when refused.

        ``arm_provenance``: the /arm/provenance JSON, or for several arms each arm's by name. Refused when not idle,
        when the root's arms are not the node's, while the operator holds an arm, when live inputs differ from the
        training root, or for a binding mismatch in refuse mode.
        """
        if self.state in (RUNNING, PAUSED, TAKEOVER):
            return False, f"already {self.state}"
        arms = binding.arms_mismatch(self.layout.arm_names, self.cfg.arm_names())
        if arms:
            return False, f"refused: {arms}"
        refusal = self._operator_refusal(now_ns, "start")
        if refusal:
            return False, refusal
        problems = self.builder.problems()
        if problems:
            return False, "refused: live inputs differ from the training root: " + "; ".join(problems)
        self.binding = binding.mismatches(
            self.builder.meta.session, binding.live_record(arm_provenance, self.builder.fps, self.layout.arm_names)
        )
        note = ""
        if self.binding:
            text = binding.describe(self.binding)
            if self.cfg.on_binding_mismatch == "refuse":
                return False, f"refused: binding keys differ from the training root: {text}"
            note = f" (WARNING binding mismatch: {text})"
            self.log(f"binding mismatch (on_binding_mismatch=warn): {text}")
        self._started_ns = now_ns
        self.builder.start(now_ns)
        self._arm(now_ns)
        self.state, self.reason = RUNNING, ""
        return True, f"running {self.describe().get('backend')}{note}"

    def _arm(self, now_ns: int) -> None:
        """Fresh chunks, no query in flight, the envelope anchored on the measured pose."""
        self.executor.reset()
        self.runner.abandon()
        self._query_ns = None
        self._have_chunk = False
        measured: dict[Arm, tuple[Any, Any, float]] = {}
        for arm, fb in self.builder.feedback.items():
            assert fb.eef is not None and fb.gripper is not None
            measured[arm] = (fb.eef[0], fb.eef[1], fb.gripper)
        self.envelope.reset(measured)

    def stop(self, reason: str = "stopped") -> tuple[bool, str]:
        """Stop; the arm holds its last target."""
        if self.state in (IDLE, STOPPED):
            return False, f"not running ({self.state})"
        self.runner.abandon()
        self._query_ns = None
        self.builder.stop()
        self.state, self.reason = STOPPED, reason
        return True, reason

    def pause(self, reason: str) -> tuple[bool, str]:
        """Pause with ``reason``: the arm holds the previous target until a resume."""
        if self.state != RUNNING:
            return False, f"not running ({self.state})"
        self.state, self.reason = PAUSED, reason
        self.counters["pauses"] += 1
        key = reason.split(":")[0]
        self.pause_reasons[key] = self.pause_reasons.get(key, 0) + 1
        self.runner.abandon()
        self._query_ns = None
        self.log(f"paused: {reason}")
        return True, f"paused: {reason}"

    def takeover(self, reason: str = "operator clutch") -> bool:
        """The operator's clutch: stop publishing at once. True when it changed the state."""
        if self.state not in (RUNNING, PAUSED):
            return False
        self.state, self.reason = TAKEOVER, reason
        self.counters["takeovers"] += 1
        self.runner.abandon()
        self._query_ns = None
        return True

    def resume(self, now_ns: int) -> tuple[bool, str]:
        """Resume running at ``now_ns`` from the measured pose; refused while the operator holds the arm."""
        if self.state not in (PAUSED, TAKEOVER):
            return False, f"nothing to resume ({self.state})"
        refusal = self._operator_refusal(now_ns, "resume")
        if refusal:
            return False, refusal
        silent = [arm for arm, fb in self.builder.feedback.items() if not fb.complete]
        if silent:
            return False, "no arm feedback" + (f" of {', '.join(map(str, silent))}" if silent != [None] else "")
        stale = self._stale(now_ns)
        if stale:
            return False, f"cannot resume: {stale}"
        self._arm(now_ns)
        self.state, self.reason = RUNNING, ""
        return True, "running"

    # ---- the control tick ---------------------------------------------------------------------------
    def _stale(self, now_ns: int) -> str | None:
        for arm, fb in self.builder.feedback.items():
            arm_age = (now_ns - fb.newest_ns) / 1e9
            if arm_age > self.cfg.arm_stale_s:
                who = f"{arm} " if arm else ""
                return f"stale arm: {who}newest feedback {arm_age:.2f} s old (bound {self.cfg.arm_stale_s} s)"
        for cam, seen in self.builder.cams.items():
            age = (now_ns - seen.newest_ns) / 1e9
            if age > self.cfg.camera_stale_s:
                return f"stale camera: {cam} newest frame {age:.2f} s old (bound {self.cfg.camera_stale_s} s)"
        return None

    def ages(self, now_ns: int) -> dict[str, float | None]:
        """Seconds since each arm's newest feedback (``arm``; two arms ``left_arm`` ...) and each camera's newest frame.

        None: never.
        """

        def age(t: int) -> float | None:
            return round((now_ns - t) / 1e9, 3) if t else None

        return {
            **{f"{arm}_arm" if arm else "arm": age(fb.newest_ns) for arm, fb in self.builder.feedback.items()},
            **{cam: age(seen.newest_ns) for cam, seen in self.builder.cams.items()},
        }

    def tick(self, now_ns: int) -> Tick:
        """The control tick at ``now_ns``: the due action through the envelope, a hold, or nothing."""
        if self.state in (IDLE, STOPPED):
            return Tick({}, "none", False)
        holder = self.operator.holder(now_ns)
        if self.state in (RUNNING, PAUSED) and holder is not None:
            self.takeover(holder)
        if self.state == TAKEOVER:
            return Tick({}, "operator", False)
        self.counters["ticks"] += 1
        obs = self.builder.advance(now_ns)
        if self.state == RUNNING:
            if self.cfg.max_duration_s > 0 and now_ns - self._started_ns >= self.cfg.max_duration_s * 1e9:
                self.stop(f"max_duration_s {self.cfg.max_duration_s} reached")
                return Tick({}, "none", False)
            problem = self._stale(now_ns) or self._collect(now_ns)
            if problem:
                self.pause(problem)
        if (
            self.state == RUNNING
            and obs is not None
            and self._query_ns is None
            and self.executor.want_query(now_ns, self.lead_ns())
            and obs.stamp_ns > self._query_obs_ns
        ):
            self.runner.submit(obs, self.cfg.horizon)
            self._query_ns, self._query_obs_ns = now_ns, obs.stamp_ns
            self.counters["queries"] += 1
        targets: dict[Arm, Target] | None = None
        due = False
        if self.state == RUNNING:
            row = self.executor.action(now_ns)
            if row is None:
                self.counters["starved_ticks" if self._have_chunk else "waiting_ticks"] += 1
            else:
                measured = {}
                for arm, fb in self.builder.feedback.items():
                    assert fb.eef is not None
                    measured[arm] = np.asarray(fb.eef[0], dtype=np.float64)
                targets = self.envelope.apply(row, measured)
                due = targets is not None
        if targets is None:
            targets = self.envelope.hold()
        if targets is not None and not all(t.finite() for t in targets.values()):  # never by construction
            self.counters["non_finite_refused"] += 1
            self.pause("non-finite target refused")
            return Tick({}, "policy", False)
        return Tick(targets or {}, "policy", due)

    def _collect(self, now_ns: int) -> str | None:
        """Take a finished query, or report one that takes too long. A problem string pauses."""
        if self._query_ns is None:
            return None
        res = self.runner.poll()
        if res is None:
            waited = (now_ns - self._query_ns) / 1e9
            if waited > self.cfg.timeout_s:
                self.counters["query_timeouts"] += 1
                return f"query timeout: no answer in {waited:.2f} s (timeout_s {self.cfg.timeout_s})"
            return None
        self.latency_ms.append((now_ns - self._query_ns) / 1e6)
        self.lead.observe(now_ns - self._query_ns)
        self._query_ns = None
        if isinstance(res, BackendTimeout):
            self.counters["query_timeouts"] += 1
            return f"query timeout: {res} (timeout_s {self.cfg.timeout_s})"
        if isinstance(res, BaseException):
            self.counters["query_errors"] += 1
            kind = "server error" if isinstance(res, BackendError) else f"backend {type(res).__name__}"
            return f"{kind}: {res}"
        width = res.rows.shape[1]
        if width != self.layout.dim:
            self.counters["query_errors"] += 1
            return (
                f"server error: its action rows have {width} values, the training root's action "
                f"{self.layout.dim} ({self.layout.describe()}: {', '.join(self.layout.columns())})"
            )
        self.executor.add(res, now_ns)
        self._have_chunk = True
        return None

    def lead_ns(self) -> int:
        """How long before the newest chunk runs out the next query leaves (``LeadTime``)."""
        return self.lead.lead_ns()

    # ---- reporting ------------------------------------------------------------------------------------
    def describe(self) -> dict[str, object]:
        """The backend's provenance."""
        try:
            return dict(self.backend.describe())
        except Exception as e:  # noqa: BLE001 - provenance must not fail the start
            return {"backend": type(self.backend).__name__, "describe_error": str(e)}

    def provenance(self) -> dict[str, object]:
        """The policy's provenance: backend, spec, training root, chunk settings and binding mismatches."""
        return {
            **self.describe(),
            "spec": self.cfg.policy,
            "training_root": str(self.builder.meta.root),
            "chunk": self.cfg.chunk_settings(),
            "binding_mismatches": [list(m) for m in self.binding],
        }

    def status(self) -> dict[str, object]:
        """The runtime's state and counters for ``~/status``."""
        lat = np.asarray(self.latency_ms, dtype=np.float64)
        p50, p99 = (float(np.percentile(lat, 50)), float(np.percentile(lat, 99))) if len(lat) else (None, None)
        lead_ns = max(self.lead_ns(), self.cfg.query_ahead * self.executor.period_ns)  # as want_query uses it
        return {
            "state": self.state,
            "reason": self.reason,
            **({"arms": list(self.layout.arm_names)} if self.layout.arm_names else {}),
            **self.counters,
            "chunks": self.executor.counters.chunks,
            "rows_dropped_late": self.executor.counters.rows_dropped_late,
            "chunks_stale": self.executor.counters.chunks_stale,
            "query_in_flight": self._query_ns is not None,
            "query_latency_ms": {"p50": p50, "p99": p99, "n": len(lat)},
            "query_lead_ms": round(lead_ns / 1e6, 1),
            "limit_hits": self.envelope.hits,  # two arms: each arm's under its name
            "pause_reasons": dict(self.pause_reasons),
            "frames_wrong_size": dict(self.builder.frames_wrong_size),
        }
