"""Teleop counted 11-16 "out of order inputs" a minute from a headset stream whose mono and
frame rose. ROS-free reproduction with the real bridge clock mapper and teleop core.

Cause: not the bridge (its mapped stamps rise whenever the frames arrive in order: a lower minimum
comes from the newest frame, which it maps to its own receive time), but teleop's conversion of each
header stamp to the monotonic clock, ``mono_now - (host_now - stamp)``: two clock reads, and a thread
held between them (GIL hand-over, OS preemption on a loaded box) by more than the 11-14 ms between
frames put a later input before the previous one, which was then counted and dropped. Fix: the core
orders inputs by their stamp (the source's order), and the node converts with ``HostToMono`` (the
tightest clock-read pair of the last 2 s), which one held thread does not move.
"""

from __future__ import annotations

import itertools
import random

from piper_recorder.quest.clock import MonoClockMapper
from piper_recorder.teleop.capture_time import HostToMono
from piper_recorder.teleop.mapper import Joy, TeleopConfig, TeleopCore

HZ = 72.0  # the Quest app's frame rate
HOST_MINUS_MONO = 1_700_000_000_000_000_000 - 5_000_000_000  # system clock - monotonic clock (ns)
HEADSET_MONO0 = 1234.5  # the headset's own clock, unrelated to the host's


def headset_stream(seconds: float, seed: int) -> list[tuple[int, int]]:
    """(stamp from the real bridge clock mapper (host ns), host-monotonic arrival ns at teleop) of a
    stream captured at ``HZ`` whose transport delay jitters (2 ms + exponential 3 ms, in order).
    """
    rng = random.Random(seed)
    mapper = MonoClockMapper()
    out, last_recv = [], 0
    for i in range(int(seconds * HZ)):
        capture_mono = 10_000_000_000 + round(i * 1e9 / HZ)  # host monotonic ns
        recv_mono = max(last_recv, capture_mono + 2_000_000 + round(rng.expovariate(1 / 3.0) * 1e6))
        last_recv = recv_mono
        stamp = mapper.observe(HEADSET_MONO0 + i / HZ, recv_mono + HOST_MINUS_MONO)
        out.append((stamp, recv_mono + 1_000_000))  # + bridge -> teleop
    return out


class HeldClocks:
    """The host's two clocks as a thread reading them sees them: now and then (p = ``held``) the thread
    is held 15-30 ms between one read and the next (a GIL hand-over plus an OS preemption).
    """

    def __init__(self, seed: int, held: float = 0.004):
        self.rng, self.held, self.t = random.Random(seed), held, 0

    def at(self, t_ns: int) -> None:
        self.t = t_ns

    def mono(self) -> int:
        return self.t

    def host(self) -> int:
        if self.rng.random() < self.held:
            self.t += self.rng.randint(15_000_000, 30_000_000)
        else:
            self.t += self.rng.randint(0, 50_000)
        return self.t + HOST_MINUS_MONO


def old_convert(clocks: HeldClocks, stamp: int) -> float:
    """What nodes/teleop.py did: mono read, then host read."""
    mono = clocks.mono()
    return mono / 1e9 - max(0, clocks.host() - stamp) / 1e9


def feed(core: TeleopCore, t: float, order: int | None) -> None:
    core.on_hand_pose(t, [0.1, 0.0, 0.2], [1.0, 0.0, 0.0, 0.0], order)
    core.on_joy(t, core.cfg.hand, Joy(0.0, 0.9), order)


def test_the_bridges_stamps_rise_with_the_headset_clock():
    for seed in range(3):
        stamps = [s for s, _ in headset_stream(60.0, seed)]
        assert all(b > a for a, b in itertools.pairwise(stamps))


def test_an_input_in_order_at_the_source_is_never_counted_out_of_order():
    stream = headset_stream(60.0, seed=1)
    # the old path: per-message paired reads, order by the converted time
    clocks = HeldClocks(seed=2)
    old = TeleopCore(TeleopConfig())
    for stamp, arrival in stream:
        clocks.at(arrival)
        feed(old, old_convert(clocks, stamp), None)
    assert 10 <= old.counters.out_of_order_inputs <= 80, old.counters  # poses and joys: ~2 x 0.4 % a minute
    # the fixed path: HostToMono, and the stamp as the source's order
    clocks = HeldClocks(seed=2)
    conv = HostToMono(host_ns=clocks.host, mono_ns=clocks.mono)
    new = TeleopCore(TeleopConfig())
    worst = 0.0
    for stamp, arrival in stream:
        clocks.at(arrival)
        t = conv.convert(stamp)
        worst = max(worst, abs(t - (stamp - HOST_MINUS_MONO) / 1e9))
        feed(new, t, stamp)
    assert new.counters.out_of_order_inputs == 0
    assert worst < 1e-4  # the conversion itself: within 0.1 ms, a held read costs nothing


def test_an_input_older_at_the_source_is_still_refused():
    core = TeleopCore(TeleopConfig())
    feed(core, 10.000, 2_000_000_000)
    core.on_hand_pose(10.020, [0.2, 0.0, 0.2], [1.0, 0.0, 0.0, 0.0], 1_990_000_000)  # late, older stamp
    assert core.counters.out_of_order_inputs == 1
    # unstamped inputs keep ordering by their (arrival) time
    other = TeleopCore(TeleopConfig())
    other.on_hand_pose(5.0, [0.1, 0.0, 0.2], [1.0, 0.0, 0.0, 0.0])
    assert not other.on_hand_pose(4.9, [0.1, 0.0, 0.2], [1.0, 0.0, 0.0, 0.0])
    assert other.counters.out_of_order_inputs == 1


def test_host_to_mono_converts_unstamped_to_now_and_never_past_now():
    clocks = HeldClocks(seed=0, held=0.0)
    conv = HostToMono(host_ns=clocks.host, mono_ns=clocks.mono)
    clocks.at(50_000_000_000)
    assert abs(conv.convert(0) - 50.0) < 1e-3
    future = 60_000_000_000 + HOST_MINUS_MONO  # a stamp after now (another host's clock ahead)
    assert conv.convert(future) <= clocks.t / 1e9
