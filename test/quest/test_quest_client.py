"""QuestClient against the simulated headset on a free localhost port: stream, reconnect, silence, haptic."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

import pytest

from piper_recorder.graph.ports import free_port
from piper_recorder.quest.client import ClientConfig, QuestClient, haptic_from_json
from piper_recorder.quest.protocol import Frame
from piper_recorder.quest.reconnect import Backoff
from piper_recorder.quest.sim_server import SimConfig, SimQuestServer

from support.waiting import wait_for

pytestmark = pytest.mark.slow  # reconnects and back-off against real sockets and wall-clock time


class Sink:
    def __init__(self):
        self.kinds: Counter[str] = Counter()
        self.events: list[str] = []
        self.frames: list[tuple[Frame, int]] = []
        self.lock = threading.Lock()

    def on_message(self, msg, recv_ns):
        with self.lock:
            self.kinds[type(msg).__name__] += 1
            if isinstance(msg, Frame):
                self.frames.append((msg, recv_ns))

    def on_event(self, e):
        self.events.append(e)


@pytest.fixture
def sim():
    servers = []

    def make(**kw):
        s = SimQuestServer(SimConfig(**{"port": 0, **kw}), log=lambda _m: None)
        s.start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def clients():
    made = []

    def make(port, sink, **kw):
        c = QuestClient(ClientConfig(port=port, **kw), sink.on_message, sink.on_event).start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def test_streams_hello_frames_heartbeats(sim, clients):
    server = sim()
    sink = Sink()
    c = clients(server.port, sink)
    wait_for(lambda: sink.kinds["Heartbeat"] >= 1 and sink.kinds["Frame"] >= 90, 10.0)
    assert sink.kinds["Hello"] == 1 and sink.events == ["connected"]
    assert c.connected and c.stats.connects == 1 and c.parser.rejected_total == 0
    recv = [ns for _f, ns in sink.frames]
    assert all(a <= b for a, b in itertools.pairwise(recv))


def test_reconnects_after_headset_disconnect(sim, clients):
    server = sim()
    sink = Sink()
    c = clients(server.port, sink, reconnect_s=0.2)
    wait_for(lambda: sink.kinds["Frame"] > 10, 10.0)
    server.drop_connections()
    wait_for(lambda: c.stats.connects == 2 and c.connected, 10.0)
    assert sink.events[:3] == ["connected", "disconnected", "connected"]
    n = sink.kinds["Frame"]
    wait_for(lambda: sink.kinds["Frame"] > n + 10, 10.0)
    assert sink.kinds["Hello"] == 2  # a new connection is a new session (fresh hello, fresh clock)


def test_backoff_until_headset_appears(sim, clients):
    port = free_port()
    sink = Sink()
    c = clients(port, sink, reconnect_s=0.1, reconnect_max_s=0.4)
    time.sleep(1.6)  # attempts at ~0, 0.1, 0.3, 0.7, 1.1, 1.5: doubling, capped at 0.4 s
    failures = c.stats.connect_failures
    assert 3 <= failures <= 9, failures
    assert c.stats.state in ("backoff", "connecting") and "connect" in c.stats.last_error
    sim(port=port)
    wait_for(lambda: sink.kinds["Frame"] > 5, 5)


def test_silence_forces_reconnect(sim, clients):
    server = sim(stall_after_s=0.5, stall_s=30.0, heartbeat_s=0.2)  # socket open, nothing sent
    sink = Sink()
    c = clients(server.port, sink, silence_timeout_s=1.0, reconnect_s=0.2)
    wait_for(lambda: c.stats.silence_reconnects >= 1, 6)
    assert "silence" in c.stats.last_error
    wait_for(lambda: c.stats.connects >= 2, 3)
    wait_for(lambda: server.connections >= 2, 3)  # the sim accepts on its own thread


def test_haptic_command_reaches_headset(sim, clients):
    server = sim()
    sink = Sink()
    c = clients(server.port, sink)
    wait_for(lambda: c.connected and sink.kinds["Hello"] == 1, 10.0)
    assert c.haptic("left", 0.7, 80)
    assert c.haptic("right", 5.0, 99999)  # clamped, not refused
    assert not c.haptic("middle", 0.5, 10)
    wait_for(lambda: len(server.haptics) == 2, 10.0)
    assert server.haptics[0] == {"cmd": "haptic", "hand": "left", "amp": 0.7, "ms": 80}
    assert server.haptics[1] == {"cmd": "haptic", "hand": "right", "amp": 1.0, "ms": 10000}
    assert server.commands["haptic"] == 2 and c.stats.commands_sent == 2 and c.stats.commands_failed == 1


def test_send_when_disconnected_fails_cleanly():
    sink = Sink()
    c = QuestClient(ClientConfig(port=free_port(), reconnect_s=0.1, reconnect_max_s=0.1), sink.on_message)
    c.start()
    try:
        assert not c.haptic("left", 0.5, 10)
    finally:
        c.stop()
    assert c.stats.state == "stopped"


def test_callback_exception_does_not_kill_stream(sim, clients):
    server = sim()
    count = Counter()

    def bad(msg, _ns):
        count["n"] += 1
        raise RuntimeError("consumer bug")

    c = QuestClient(ClientConfig(port=server.port), bad).start()
    try:
        wait_for(lambda: count["n"] > 20, 10.0)
        assert c.connected and "consumer bug" in c.stats.last_error
    finally:
        c.stop()


@pytest.mark.parametrize(
    "text,ok",
    [
        ('{"hand": "left", "amp": 0.5, "ms": 40}', ("left", 0.5, 40)),
        ('{"hand": "right", "amp": 1, "ms": 0}', ("right", 1.0, 0)),
        ('{"hand": "right", "amp": NaN, "ms": 40}', None),
        ('{"hand": "right", "amp": 1.5, "ms": 40}', None),
        ('{"hand": "up", "amp": 0.5, "ms": 40}', None),
        ('{"hand": "left", "amp": 0.5, "ms": 4.5}', None),
        ('{"hand": "left", "amp": true, "ms": 4}', None),
        ("[]", None),
        ("not json", None),
    ],
)
def test_haptic_request_validation(text, ok):
    assert haptic_from_json(text) == ok


def test_config_validation():
    with pytest.raises(ValueError):
        ClientConfig(port=0).validate()
    with pytest.raises(ValueError):
        ClientConfig(reconnect_s=2.0, reconnect_max_s=1.0).validate()
    with pytest.raises(ValueError):
        ClientConfig(silence_timeout_s=float("nan")).validate()


def test_backoff_schedule_shared_by_client_and_video_sender():
    # the one schedule both headset links use: 1, 2, 4, capped at 5, back to 1 after a good connection
    b = Backoff(1.0, 5.0)
    assert [b.failed() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    b.reset()
    assert b.delay_s == 1.0 and b.failed() == 1.0
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)
    with pytest.raises(ValueError):
        Backoff(float("inf"), float("inf"))


def test_a_web_page_is_told_why_its_lines_are_refused_at_most_once_a_second():
    """The page (hello "client": "web") gets {"cmd": "rejected", ...} with the parser's reason, the first at
    once and the rest rate-limited into the next; a headset that did not say it can show them gets none.
    """
    import json
    import socket

    srv = socket.create_server(("127.0.0.1", 0))
    client = QuestClient(ClientConfig(port=srv.getsockname()[1]), lambda m, t: None).start()
    conn, _ = srv.accept()
    conn.settimeout(0.1)

    def lines(seconds: float) -> list[tuple[float, dict]]:
        out, buf, end = [], b"", time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                buf += conn.recv(65536)
            except TimeoutError:
                pass
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                out.append((time.monotonic(), json.loads(line)))
        return out

    try:
        conn.sendall(b'{"hello":{"app":"native-app"}}\n{"heartbeat":1,"mono":NaN}\n')
        assert lines(1.5) == []  # the native app is not told
        conn.sendall(b'{"hello":{"app":"piper-quest-web","client":"web"}}\n{"heartbeat":2,"mono":1e999}\n')
        got = lines(0.5)
        assert [c for _, c in got] == [
            {
                "cmd": "rejected",
                "by": "quest_bridge",
                "lines": 2,
                "total": 2,  # since
                "reason": "non_finite",
                "detail": "mono",
            }
        ]  # connected
        t_first = got[0][0]
        conn.sendall(b'{"mono":"x"}\n[1]\n{"heartbeat":3}\n{"heartbeat":[]}\n')
        got = lines(2.0)
        assert [c for _, c in got] == [
            {
                "cmd": "rejected",
                "by": "quest_bridge",
                "lines": 3,
                "total": 5,
                "reason": "bad_type",
                "detail": "heartbeat: expected a scalar",
            }
        ]
        assert got[0][0] - t_first >= 0.9  # rate-limited: the three in one notice
        assert client.stats.notices_sent == 2 and client.stats.commands_sent == 0
    finally:
        client.stop()
        conn.close()
        srv.close()
