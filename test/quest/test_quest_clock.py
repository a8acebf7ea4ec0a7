"""Headset mono -> host clock mapping: synthetic properties and the accuracy measured against the sim.

Measured accuracy (this machine, live sim over loopback with a simulated 3 ms one-way delay plus
exponential jitter of mean 4 ms, 4 s run): capture-stamp error mean +3.26 ms, std 0.02 ms, p99
3.32 ms, i.e. late by the 3 ms minimum path delay plus ~0.26 ms (loopback, thread wake-up, the
jitter minimum); arrival-time stamps would be late by mean 8.0 ms, std 4.8 ms, p99 26 ms. With no
simulated delay the error is +0.17 ms (loopback + wake-up). Run with ``-s`` to print the figures.
"""

from __future__ import annotations

import random
import statistics
import threading
import time

import pytest

from piper_recorder.quest.bridge_core import BridgeCore
from piper_recorder.quest.client import ClientConfig, QuestClient
from piper_recorder.quest.clock import ClockMapperConfig, MonoClockMapper, SlidingMin
from piper_recorder.quest.protocol import Frame, Hello
from piper_recorder.quest.sim_server import SimConfig, SimQuestServer

pytestmark = pytest.mark.slow  # clock mapping measured over a real-time stream

S = 10**9


def test_sliding_min_window():
    w = SlidingMin(span=10)
    for key, val in [(0, 5), (3, 7), (6, 2), (9, 9)]:
        w.push(key, val)
    assert w.min == 2
    w.push(17, 8)  # key 6 is now out of the span [7, 17]
    assert w.min == 8
    w.clear()
    assert w.min is None and not w


def _synthetic(rng, n, offset_ns, base_ms, jitter_ms, rate=90.0, mono0=100.0):
    for i in range(n):
        mono = mono0 + i / rate
        delay = base_ms / 1e3 + rng.expovariate(1e3 / jitter_ms)
        yield mono, round((mono + delay) * 1e9) + offset_ns


def test_min_delay_estimate_synthetic():
    rng = random.Random(1)
    m = MonoClockMapper()
    offset = 1_700_000_000 * S
    errors, arrival = [], []
    for mono, recv in _synthetic(rng, 2000, offset, base_ms=2.0, jitter_ms=5.0):
        stamp = m.observe(mono, recv)
        assert stamp <= recv
        truth = round(mono * 1e9) + offset
        errors.append((stamp - truth) / 1e6)
        arrival.append((recv - truth) / 1e6)
    settled = errors[200:]
    assert min(settled) >= 2.0 and max(settled) < 2.5  # late by the minimum delay only
    assert statistics.mean(arrival[200:]) > 6.0


def test_reset_on_headset_clock_going_backwards():
    m = MonoClockMapper()
    m.observe(500.0, 1000 * S)
    assert m.offset_ns == 500 * S
    m.observe(3.0, 1001 * S)  # headset restarted: mono is small again
    assert m.resets == 1 and m.offset_ns == 998 * S


def test_host_clock_step_forward_followed_after_confirmation():
    cfg = ClockMapperConfig(window_s=10.0, jump_threshold_s=0.25, jump_confirm_s=1.0)
    m = MonoClockMapper(cfg)
    t = 0.0
    while t < 3.0:
        m.observe(t, round(t * 1e9) + 50 * S)
        t += 0.01
    assert m.offset_ns == 50 * S
    while t < 4.5:  # host clock stepped +2 s (NTP); the window min alone would hold the old offset
        m.observe(t, round(t * 1e9) + 52 * S)
        t += 0.01
    assert m.offset_ns == 52 * S


def test_backlog_after_a_stall_keeps_its_capture_times():
    """2 s of frames held back (a stalled bridge or link) arrive at one instant: each keeps its own
    capture time. (The jump rule used to count that single instant as a confirmed host clock step and
    stamped the whole backlog "now": seconds-old poses looked fresh to teleop.)
    """
    m = MonoClockMapper(ClockMapperConfig(window_s=10.0, jump_threshold_s=0.25, jump_confirm_s=1.0))
    t = 0.0
    while t < 3.0:
        m.observe(t, round(t * 1e9) + 50 * S)
        t += 0.01
    arrival = round(5.0 * 1e9) + 50 * S  # nothing from 3.0 to 5.0 s, then all of it at once
    stamps = [(m.observe(3.0 + i / 100, arrival), round((3.0 + i / 100) * 1e9) + 50 * S) for i in range(200)]
    assert all(stamp == truth for stamp, truth in stamps)
    assert m.resets == 0 and m.offset_ns == 50 * S


def test_host_clock_step_backward_followed_immediately():
    m = MonoClockMapper()
    m.observe(1.0, 51 * S)
    assert m.observe(1.01, round(1.01e9) + 49 * S) == round(1.01e9) + 49 * S


def _measure_live(delay_ms: float, jitter_ms: float, seconds: float) -> tuple[list[float], list[float]]:
    """Stamp errors and arrival errors (ms) of sim frames through client + bridge core."""
    mono_offset = -1234.5  # the headset clock is unrelated to the host's
    cfg = SimConfig(port=0, delay_ms=delay_ms, jitter_ms=jitter_ms, mono_offset_s=mono_offset, script="circle", seed=3)
    server = SimQuestServer(cfg, log=lambda _m: None)
    port = server.start()
    core = BridgeCore()
    lock = threading.Lock()
    errors: list[float] = []
    arrival: list[float] = []

    def on_message(msg, recv_ns):
        with lock:
            out = core.handle(msg, recv_ns)
        if isinstance(msg, Frame) and out.poses:
            # truth: CLOCK_MONOTONIC is shared with the sim thread; map it to CLOCK_REALTIME now
            truth = round((msg.mono - mono_offset) * 1e9) + (time.time_ns() - time.monotonic_ns())
            errors.append((out.poses[0].stamp_ns - truth) / 1e6)
            arrival.append((recv_ns - truth) / 1e6)

    client = QuestClient(
        ClientConfig(port=port), on_message, lambda e: core.on_connection() if e == "connected" else None
    ).start()
    try:
        time.sleep(seconds)
    finally:
        client.stop()
        server.stop()
    skip = 90  # the first second: the minimum is still settling
    return errors[skip:], arrival[skip:]


def _summary(xs: list[float]) -> str:
    s = sorted(xs)
    return (
        f"mean {statistics.mean(xs):.3f} std {statistics.pstdev(xs):.3f} p50 {s[len(s) // 2]:.3f} "
        f"p99 {s[int(len(s) * 0.99)]:.3f} max {s[-1]:.3f} ms (n={len(xs)})"
    )


def test_capture_stamp_accuracy_against_sim_with_network_jitter():
    errors, arrival = _measure_live(delay_ms=3.0, jitter_ms=4.0, seconds=4.0)
    print(f"\ncapture-stamp error: {_summary(errors)}\narrival-stamp error: {_summary(arrival)}")
    assert len(errors) > 150
    # Late by about the fixed 3 ms path delay; generous margins for a loaded 2-core CI box.
    assert 2.5 < statistics.median(errors) < 8.0
    assert statistics.pstdev(errors) < statistics.pstdev(arrival)
    assert statistics.median(errors) < statistics.median(arrival)


def test_capture_stamp_accuracy_without_delay():
    errors, _arrival = _measure_live(delay_ms=0.0, jitter_ms=0.0, seconds=2.0)
    print(f"\ncapture-stamp error (no simulated delay): {_summary(errors)}")
    assert -0.5 < statistics.median(errors) < 5.0


def test_hello_resets_nothing_but_connection_does():
    core = BridgeCore()
    core.clock.observe(10.0, 20 * S)
    core.handle(Hello(info={"app": "x"}, raw='{"hello":{"app":"x"}}'), 21 * S)
    assert core.clock.offset_ns == 10 * S and core.hello == {"app": "x"}
    core.on_connection()
    assert core.clock.offset_ns is None
