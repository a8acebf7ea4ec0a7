"""Teleop's calls to the recorders' services: deadline, re-match, retry, and what the record toggle shows.

Why: when a recorder is SIGKILLed and relaunched, teleop's service client still holds the dead
server's endpoint until its DDS lease runs out, and a request sent to it is never answered; an
operator told nothing would believe an episode was recording. This policy is plain Python driven with
explicit (monotonic) times; the node is a thin adapter that sends what ``poll`` asks for and feeds
back replies, ``/episode_events`` and each recorder's ``~/status``.

Every press becomes one call per recorder with a deadline (``call_timeout_s``). On a timeout it
reports TIMEOUT (the node pulses the headset and logs) and asks the node to destroy and re-create
that recorder's clients: a fresh client matches the live server, and the dead endpoint is gone for
good once its lease expires. It then waits until the recorder is up again (a ``~/status`` arrived
after the timeout: that process is alive and discovered), re-creates the clients once more (those
made while it was down know only the dead endpoint), and resends when they are matched,
unless the recorder's own state already shows the press took effect (a lost reply): START is done
when it records, STOP when a ``saved`` event came, DISCARD when it is idle. STOP on a recorder that
came back idle without a ``saved`` event is FAILED: that episode was lost with the process. A press
that cannot be delivered within ``retry_window_s`` of the press is FAILED. DELETE is never resent:
a lost reply may mean it happened, and a second delete would remove another episode.

A STOP carries its press's capture stamp (``end_ns``; None for an unstamped press) in every attempt,
resends included: the recorder ends the episode there (``stop_episode_at``), not at the arrival of a
request that may be seconds late, and refuses a stamp before its episode's start, so a resent stop never
ends an episode started after the press.

The toggle (``recording``) is what the recorders said: replies, events, and their ``~/status``
whenever no call is in flight and nothing newer is known, so a teleop that missed an event (the
topic is VOLATILE: a teleop started late, or a relaunched recorder that lost its episode) corrects
itself without an extra press.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from .mapper import Action

RECORDING, IDLE, SAVING = "recording", "idle", "saving"
SAVE_FAILED = "save_failed"  # the save failed (e.g. a full disk) and the recorder kept the episode: stop retries it
UNSAVED = (RECORDING, SAVE_FAILED)  # states where the next press must stop (save), never start


@dataclass
class RecorderCallConfig:
    """The calls' deadline, retry window and status grace."""

    call_timeout_s: float = 3.0  # a reply later than this is reported, and the call re-matched and resent
    retry_window_s: float = 20.0  # a press not delivered this long after it is reported FAILED
    status_grace_s: float = 1.0  # a ~/status this soon after a reply/event may predate it: not trusted

    def validate(self) -> None:
        """Raise ValueError naming the first bad setting."""
        for name in ("call_timeout_s", "retry_window_s", "status_grace_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")
        if self.retry_window_s < self.call_timeout_s:
            raise ValueError("retry_window_s must be >= call_timeout_s")


class Outcome(Enum):
    """How a press ended, or where it stands, on one recorder."""

    OK = "ok"  # answered success, or the effect was seen (event / status)
    REFUSED = "refused"  # answered failure (the recorder's message says why)
    TIMEOUT = "timeout"  # no answer within call_timeout_s: re-matching, will resend if allowed
    UNAVAILABLE = "unavailable"  # the service is not matched at all: waiting for it
    RETRY = "retry"  # resent to the (re-)matched recorder
    FAILED = "failed"  # given up: the press did not take effect

    @property
    def alarm(self) -> str | None:
        """Which haptic pattern tells the operator, or None when nothing is wrong.

        ``timeout`` while it is being retried, ``failed`` when
        the press did not (or not everywhere) take effect.
        """
        if self in (Outcome.TIMEOUT, Outcome.UNAVAILABLE):
            return "timeout"
        if self in (Outcome.REFUSED, Outcome.FAILED):
            return "failed"
        return None


@dataclass(frozen=True)
class Report:
    """One recorder's outcome of one press, to log and feel."""

    recorder: str
    action: Action
    outcome: Outcome
    message: str = ""

    def __str__(self) -> str:
        text = f"{self.recorder}/{self.action.value}: {self.outcome.value}"
        return f"{text} ({self.message})" if self.message else text


@dataclass(frozen=True)
class Send:
    """One request for the node to send."""

    call_id: int
    recorder: str
    action: Action
    end_ns: int | None = None  # STOP: the press's capture stamp (ROS ns) the episode ends at; None: at arrival


@dataclass
class PollResult:
    """What one poll asks of the node: requests to send, clients to re-create, reports."""

    sends: list[Send] = field(default_factory=list)
    reconnect: list[str] = field(default_factory=list)  # destroy and re-create these recorders' clients
    reports: list[Report] = field(default_factory=list)


_EFFECT_EVENT = {
    Action.START: "started",
    Action.STOP: "saved",
    Action.DISCARD: "discarded",
    Action.DELETE_LAST: "deleted",
}
NEW, SENT, WAITING = "new", "sent", "waiting"


@dataclass
class _Call:
    action: Action
    pressed_t: float
    end_ns: int | None = None  # the press's capture stamp, the same in every attempt (Send.end_ns)
    call_id: int = -1
    phase: str = NEW
    sent_t: float = -math.inf
    waiting_since: float = -math.inf
    effect_seen: bool = False
    up_t: float = math.inf  # when the recorder was first seen up again while this call waited
    ids: set[int] = field(default_factory=set)  # every attempt's id: a late answer to any of them counts


@dataclass
class _Recorder:
    state: str | None = None  # what we believe: recording | idle | saving | closed | None (unknown)
    state_t: float = -math.inf  # when a press, reply or event set it (status is ignored within the grace)
    status: str | None = None  # the last ~/status state
    status_t: float = -math.inf  # its arrival
    call: _Call | None = None


class RecorderCalls:
    """One call per recorder and press; see the module docstring for the policy."""

    def __init__(self, recorders: list[str], cfg: RecorderCallConfig | None = None):
        self.cfg = cfg or RecorderCallConfig()
        self.cfg.validate()
        self.recorders = {name: _Recorder() for name in recorders}
        self._next_id = 0
        self._ids: dict[int, tuple[str, Action]] = {}  # call id -> (recorder, action), also once superseded

    # ---- state ---------------------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        """The record toggle's state.

        True when any recorder is (believed) recording or holds an episode whose save
        failed, so the next press stops (and retries that save).
        """
        return any(r.state in UNSAVED for r in self.recorders.values())

    def pending(self) -> dict[str, str]:
        """Recorder -> action still in flight (for the status topic)."""
        return {n: r.call.action.value for n, r in self.recorders.items() if r.call is not None}

    # ---- inputs --------------------------------------------------------------------------------
    def press(self, t: float, action: Action, end_ns: int | None = None) -> None:
        """The operator pressed: a new call on every recorder, superseding one still in flight.

        ``end_ns``: a STOP's capture stamp (ROS ns), or None (unstamped: the episode ends at arrival).
        """
        for rec in self.recorders.values():
            rec.call = _Call(action, t, end_ns if action is Action.STOP else None)
            if action is Action.START:
                rec.state, rec.state_t = RECORDING, t  # optimistic until answered; a timeout undoes it
            elif action in (Action.STOP, Action.DISCARD):
                rec.state, rec.state_t = IDLE, t

    def on_reply(self, t: float, call_id: int, success: bool, message: str = "") -> Report | None:
        """Take a reply, possibly late or to a call a newer press replaced.

        A late reply (after a timeout) is still the answer; one to a replaced call is reported, but the newer
        press owns the state.
        """
        known = self._ids.pop(call_id, None)
        if known is None:
            return None
        name, action = known
        rec = self.recorders[name]
        outcome = Outcome.OK if success else Outcome.REFUSED
        if rec.call is None or call_id not in rec.call.ids:
            return Report(name, action, outcome, f"late answer to an earlier press: {message}")
        if success:
            if action is Action.START:
                rec.state, rec.state_t = RECORDING, t
            elif action in (Action.STOP, Action.DISCARD):
                rec.state, rec.state_t = IDLE, t
        else:
            rec.state, rec.state_t = None, -math.inf  # refused: let the next status say where it is
        rec.call = None
        return Report(name, action, outcome, message)

    def on_event(self, t: float, recorder: str, event: str) -> None:
        """Take one of a recorder's ``/episode_events`` (the effect of a press, seen)."""
        rec = self.recorders.get(recorder)
        if rec is None:
            return
        if event == "started":
            rec.state, rec.state_t = RECORDING, t
        elif event in ("saved", "discarded"):
            rec.state, rec.state_t = IDLE, t
        elif event == "save_failed":
            rec.state, rec.state_t = SAVE_FAILED, t
        if rec.call is not None and _EFFECT_EVENT[rec.call.action] == event:
            rec.call.effect_seen = True

    def on_status(self, t: float, recorder: str, state: str) -> None:
        """Take a recorder's state from its ``~/status``."""
        rec = self.recorders.get(recorder)
        if rec is None or not isinstance(state, str):
            return
        rec.status, rec.status_t = state, t
        if rec.call is None and t - rec.state_t > self.cfg.status_grace_s:
            rec.state = state

    # ---- policy --------------------------------------------------------------------------------
    def poll(self, t: float, ready: Callable[[str], bool]) -> PollResult:
        """Advance every call; ``ready(recorder)`` is True when that recorder's service is matched."""
        out = PollResult()
        for name, rec in self.recorders.items():
            call = rec.call
            if call is None:
                continue
            if call.phase == NEW:
                if ready(name):
                    out.sends.append(self._send(name, call, t))
                else:
                    call.phase, call.waiting_since = WAITING, t
                    rec.state, rec.state_t = None, -math.inf  # not delivered: the optimistic state is void
                    out.reports.append(Report(name, call.action, Outcome.UNAVAILABLE, "service not matched"))
            elif call.phase == SENT:
                if t - call.sent_t >= self.cfg.call_timeout_s and call.effect_seen:
                    rec.call = None  # the reply was lost, but its event says it happened: nothing to alarm
                    out.reports.append(
                        Report(name, call.action, Outcome.OK, f"{_EFFECT_EVENT[call.action]} (reply lost)")
                    )
                    continue
                if t - call.sent_t >= self.cfg.call_timeout_s:
                    rec.state, rec.state_t = None, -math.inf  # unknown until the recorder says
                    out.reconnect.append(name)
                    if call.action is Action.DELETE_LAST:
                        rec.call = None
                        out.reports.append(
                            Report(
                                name,
                                call.action,
                                Outcome.FAILED,
                                f"no answer in {self.cfg.call_timeout_s:g} s; not resent "
                                "(it may have deleted): check the dataset, hold again",
                            )
                        )
                        continue
                    call.phase, call.waiting_since, call.up_t = WAITING, t, math.inf
                    out.reports.append(
                        Report(
                            name,
                            call.action,
                            Outcome.TIMEOUT,
                            f"no answer in {self.cfg.call_timeout_s:g} s; re-matching",
                        )
                    )
            if call.phase == WAITING:
                report = self._resolve_waiting(name, rec, call, t, ready, out)
                if report is not None:
                    out.reports.append(report)
        return out

    def _resolve_waiting(
        self, name: str, rec: _Recorder, call: _Call, t: float, ready: Callable[[str], bool], out: PollResult
    ) -> Report | None:
        if call.effect_seen:
            return self._done(rec, Outcome.OK, name, call, f"{_EFFECT_EVENT[call.action]} (reply lost)")
        if t - call.pressed_t > self.cfg.retry_window_s:
            return self._done(
                rec, Outcome.FAILED, name, call, f"not delivered within {self.cfg.retry_window_s:g} s of the press"
            )
        if rec.status_t <= call.waiting_since:
            return None  # not up again yet (no status since the timeout)
        st = rec.status
        if call.action is Action.START and st == RECORDING:
            return self._done(rec, Outcome.OK, name, call, "recording (per status; reply lost)")
        if call.action is Action.STOP and st == IDLE:
            return self._done(
                rec,
                Outcome.FAILED,
                name,
                call,
                "recorder is idle and saved nothing: the episode was lost (recorder restarted?)",
            )
        if call.action is Action.DISCARD and st == IDLE:
            return self._done(rec, Outcome.OK, name, call, "not recording (per status)")
        resend = st == IDLE if call.action is Action.START else st in UNSAVED
        if not resend:
            return None  # saving (or closed): wait for it to settle
        if call.up_t == math.inf:
            # Seen up again: resend only through clients created now. Older ones may be matched to the
            # dead endpoint alone, and "ready" would send the request nowhere once more.
            call.up_t = t
            out.reconnect.append(name)
            return None
        if not ready(name):
            return None  # the fresh clients are not matched yet
        out.sends.append(self._send(name, call, t))
        return Report(name, call.action, Outcome.RETRY, "resent to the re-matched recorder")

    @staticmethod
    def _done(rec: _Recorder, outcome: Outcome, name: str, call: _Call, message: str) -> Report:
        """End the call; the toggle takes the recorder's newest status (the event, if one came, set it)."""
        rec.call = None
        if not call.effect_seen:
            fresh = rec.status_t > call.waiting_since
            rec.state, rec.state_t = (rec.status if fresh else None), -math.inf
        return Report(name, call.action, outcome, message)

    def _send(self, name: str, call: _Call, t: float) -> Send:
        call.call_id, self._next_id = self._next_id, self._next_id + 1
        call.phase, call.sent_t = SENT, t
        call.ids.add(call.call_id)
        self._ids[call.call_id] = (name, call.action)
        return Send(call.call_id, name, call.action, call.end_ns)
