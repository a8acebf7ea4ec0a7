"""piper-quest-web's relay without ROS: a real server on loopback, a raw-socket WebSocket client (RFC 6455
framing written here, independent of the server's), a TCP client in quest_bridge's place and a PCV1 sender
in quest_video's. It checks the safety rules (Host, Origin, sizes, silent and slow clients), that the
page's lines reach the bridge verbatim with the hello marked ``client: web``, that the bridge's commands
reach the page, that panels are relayed latest-only, and that the protocol parser accepts what the page
sends (one parser for native and web). ~3 s.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time

import pytest

from piper_recorder.quest.protocol import Frame, Hello, Rejected, StreamParser
from piper_recorder.quest.video import encode_frame as pcv1
from piper_recorder.quest.web_server import ASSETS, WebConfig, WebRelay, asset, origin_allowed, web_hello
from piper_recorder.quest.websocket import accept_key

from support.wsclient import WebSocketClient

FRAME = {
    "t": 12.5,
    "mono": 12.5,
    "frame": 7,
    "state": "FOCUSED",
    "space": "local_floor",
    "head": {"pos": [0, 1.6, 0], "quat": [0, 0, 0, 1], "valid": True, "tracked": True},
    "left": {
        "pos": [-0.2, 1.4, -0.3],
        "quat": [0, 0, 0, 1],
        "valid": True,
        "tracked": True,
        "trigger": 0,
        "squeeze": 0,
        "stick": [0, 0],
        "stick_click": False,
        "primary": False,
        "secondary": False,
        "menu": False,
    },
    "right": {
        "pos": [0.2, 1.4, -0.3],
        "quat": [0, 0, 0, 1],
        "valid": True,
        "tracked": True,
        "trigger": 0.5,
        "squeeze": 1,
        "stick": [0.1, -0.2],
        "stick_click": False,
        "primary": True,
        "secondary": False,
        "menu": False,
    },
}


@pytest.fixture
def relay():
    r = WebRelay(
        WebConfig(
            port=0,
            bridge_port=0,
            video_port=0,
            page_timeout_s=1.0,
            request_timeout_s=1.0,
            max_pending_bytes=64 * 1024,
            max_buffer_bytes=16 << 20,
        ),
        log=lambda _l: None,
    )
    r.start()
    yield r
    r.stop()


def _http(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def _ws(port: int, origin: str | None = None, host: str | None = None) -> WebSocketClient:
    ws = WebSocketClient(port, origin, host)
    if ws.status == 101:
        assert ws.accept == accept_key(ws.key)
    return ws


def _bridge(relay: WebRelay) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", relay.ports["bridge"]), timeout=5.0)
    deadline = time.monotonic() + 5
    while relay.bridge is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return s


def _lines(sock: socket.socket, n: int) -> list[bytes]:
    buf = b""
    while buf.count(b"\n") < n:
        buf += sock.recv(65536)
    return buf.split(b"\n")[:n]


def test_assets_ship_in_the_package_and_are_served_with_a_strict_csp(relay):
    for path, (name, ctype) in ASSETS.items():
        body = asset(name)
        assert body, name
        resp = _http(
            relay.ports["web"], f"GET {path} HTTP/1.1\r\nHost: localhost:{relay.ports['web']}\r\n\r\n".encode()
        )
        head, _, got = resp.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and got == body and f"Content-Type: {ctype}".encode() in head
        assert b"Content-Security-Policy: default-src 'none'; script-src 'self'" in head
    page = asset("index.html").decode()
    assert "http" not in page.replace("http-equiv", "")  # nothing from anywhere else (no CDN)
    assert "https://" not in asset("app.js").decode() and "http://" not in asset("app.js").decode()
    assert _http(relay.ports["web"], b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert _http(relay.ports["web"], b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 405")


def test_foreign_host_and_origin_are_refused(relay):
    port = relay.ports["web"]
    assert _http(port, b"GET / HTTP/1.1\r\nHost: evil.example:8737\r\n\r\n").startswith(b"HTTP/1.1 421")
    assert _ws(port, host="evil.example").status == 421  # DNS rebinding
    assert _ws(port, origin="http://evil.example").status == 403  # another site's page
    assert _ws(port, origin="").status == 403  # no Origin at all
    assert _ws(port, origin=f"http://127.0.0.1:{port + 1}").status == 403  # another port is another origin
    ok = _ws(port)
    assert ok.status == 101
    assert relay.counters["refused_origin"] == 3 and relay.counters["refused_host"] == 2
    assert origin_allowed("https://robot.lan:8737", "robot.lan:8737")
    assert not origin_allowed("null", "127.0.0.1:8737")


def test_a_slow_request_and_a_silent_page_are_dropped(relay):
    port = relay.ports["web"]
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127")  # and then nothing
        t0 = time.monotonic()
        assert s.recv(100) == b""
        assert time.monotonic() - t0 < 3.0
    ws = _ws(port)
    t0 = time.monotonic()
    op, _payload = ws.recv()  # the close frame after page_timeout_s
    assert op == 8 and 0.8 < time.monotonic() - t0 < 3.0
    assert relay.counters["page_timeouts"] == 1


def test_page_lines_reach_the_bridge_and_the_parser_accepts_them(relay):
    bridge = _bridge(relay)
    ws = _ws(relay.ports["web"])
    ws.send(json.dumps({"hello": {"app": "piper-quest-web", "client": "native", "mode": "immersive-ar"}}).encode())
    ws.send(json.dumps(FRAME).encode())
    ws.send(b'{"heartbeat": 3, "state": "HIDDEN"}')
    ws.send(b'{"a": 1}\n{"b": 2}')  # two lines in one message: refused
    ws.send(b"x" * 70000)  # above max_message_bytes: the page is closed (1009)
    relay_hello, hello, frame, beat = _lines(bridge, 4)
    # a new page is a new input source: the relay's own hello comes before any line of the page
    assert json.loads(relay_hello) == {"hello": {"client": "web", "page": 1}}
    assert json.loads(hello)["hello"]["client"] == "web"  # whatever the page claimed
    assert json.loads(hello)["hello"]["page"] == 1  # the relay's number of the page
    assert json.loads(frame) == FRAME
    msgs = StreamParser().feed(hello + b"\n" + frame + b"\n" + beat + b"\n")
    assert isinstance(msgs[0], Hello) and msgs[0].info["client"] == "web"
    assert isinstance(msgs[1], Frame) and msgs[1].right.primary and msgs[1].right.squeeze == 1.0
    op, payload = ws.recv()  # the page is told why its message was refused
    assert op == 1 and json.loads(payload) == {
        "cmd": "rejected",
        "by": "quest_web",
        "lines": 1,
        "total": 1,
        "reason": "not_one_line",
        "detail": "a message is one protocol line, without a newline",
    }
    op, payload = ws.recv()
    assert op == 8 and struct.unpack("!H", payload[:2])[0] == 1009
    assert payload[2:] == b"frame above 65536 bytes"  # ... and why it was closed
    assert relay.counters["page_not_one_line"] == 1
    # a new bridge connection gets the page's hello first (the bridge publishes it latched)
    bridge.close()
    again = _bridge(relay)
    assert json.loads(_lines(again, 1)[0])["hello"]["client"] == "web"
    again.close()


def test_bridge_commands_and_panels_reach_the_page_latest_only(relay):
    bridge = _bridge(relay)
    ws = _ws(relay.ports["web"])
    deadline = time.monotonic() + 5
    while relay.page is None and time.monotonic() < deadline:
        time.sleep(0.01)
    bridge.sendall(b'{"cmd":"haptic","hand":"right","amp":0.8,"ms":120}\n')
    op, payload = ws.recv()
    assert op == 1 and json.loads(payload) == {"cmd": "haptic", "hand": "right", "amp": 0.8, "ms": 120}
    video = socket.create_connection(("127.0.0.1", relay.ports["video"]), timeout=5.0)
    jpeg = b"\xff\xd8" + os.urandom(200_000) + b"\xff\xd9"
    for _ in range(60):  # 12 MB the page does not read meanwhile: past the socket buffers, frames drop
        video.sendall(pcv1(1, jpeg))
    deadline = time.monotonic() + 5
    while relay.panels_sent[1] + relay.panels_dropped[1] < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
    sent, dropped = relay.panels_sent[1], relay.panels_dropped[1]
    assert sent + dropped == 60 and dropped > 0 and sent >= 1, (sent, dropped)
    op, payload = ws.recv()
    assert op == 2 and payload == bytes([1]) + jpeg
    video.close()


def test_web_hello_only_marks_hellos():
    assert web_hello(b'{"hello": {"app": "x"}}', 4) == b'{"hello":{"app":"x","client":"web","page":4}}'
    for line, reason in (
        (b'{"hello": {"app": "x"}, "mono": 1}', "missing_field"),
        (b'{"hello": 3}', "bad_type"),
        (b"nope", "bad_json"),
        (b'{"heartbeat": 1}', "bad_type"),
    ):
        with pytest.raises(Rejected) as exc:
            web_hello(line)
        assert exc.value.reason == reason, (line, exc.value)
    with pytest.raises(ValueError):
        WebConfig(cert="a.pem").validate()


def test_protocol_errors_close_the_page_with_a_reason(relay):
    """1002 and 1009 name what the page did: a browser shows CloseEvent.reason, a bare code says nothing."""
    ws = _ws(relay.ports["web"])
    ws.sock.sendall(bytes([0x81, 0x02]) + b"hi")  # a client frame without the mask
    assert _closed(ws) == (1002, "client frame not masked")
    ws = _ws(relay.ports["web"])
    ws.send(b"", opcode=0x9)  # a ping is fine ...
    ws.sock.sendall(bytes([0x09, 0x80]) + bytes(4))  # ... a fragmented one is not
    assert _closed(ws) == (1002, "bad control frame")
    ws = _ws(relay.ports["web"])
    ws.send(b"x" * 70000)
    assert _closed(ws) == (1009, "frame above 65536 bytes")
    assert relay.counters["page_closed_1002"] == 2 and relay.counters["page_closed_1009"] == 1


def test_a_lan_address_needs_a_certificate_or_the_named_opt_in(tmp_path):
    """Plain HTTP on the LAN would let anyone there open the page and drive the arm (the dashboard asks for
    a token there): a non-loopback host needs cert + key, or insecure_http said out loud.
    """
    for host in ("0.0.0.0", "::", "192.168.1.50", "robot.lan"):
        with pytest.raises(ValueError, match=f"host '{host}' is not a loopback address: give cert and key"):
            WebConfig(host=host).validate()
        WebConfig(host=host, insecure_http=True).validate()
    for host in ("127.0.0.1", "localhost", "::1"):
        WebConfig(host=host).validate()
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    WebConfig(host="0.0.0.0", cert=str(cert), key=str(key)).validate()


def _closed(ws: WebSocketClient) -> tuple[int, str]:
    """The close frame the relay sent (skipping anything before it): (code, reason)."""
    while True:
        op, payload = ws.recv()
        if op == 8:
            return struct.unpack("!H", payload[:2])[0], payload[2:].decode()


def test_a_hello_no_consumer_could_hold_closes_the_page_with_its_reason(relay, caplog):
    """NaN, 1e999, 30,000 nested lists, an unpaired surrogate: each is refused with a counted, named
    reason and a close frame saying it; the good hello stays the one the bridge gets, and no connection
    handler raises (asyncio's "Unhandled exception in client_connected_cb").
    """
    from support.quest_hellos import UNREPRESENTABLE

    bridge = _bridge(relay)
    ws = _ws(relay.ports["web"])
    ws.send(b'{"hello":{"app":"good"}}')
    relay_hello, good = (json.loads(line) for line in _lines(bridge, 2))
    assert relay_hello == {"hello": {"client": "web", "page": 1}}
    assert good == {"hello": {"app": "good", "client": "web", "page": 1}}
    ws.close()
    n = 0
    for reason, lines in UNREPRESENTABLE.items():
        for line in lines:
            ws = _ws(relay.ports["web"])
            ws.send(line)
            code, text = _closed(ws)
            ws.close()
            n += 1
            assert code == 1008 and text.startswith(f"bad hello: {reason}"), (reason, code, text)
            assert relay.counters[f"page_bad_hello.{reason}"] >= 1 and relay.counters["page_bad_hello"] == n
    # each page that connected was a new source (the relay's hello numbering it), none of its hellos got through
    assert json.loads(relay.hello) == {"hello": {"client": "web", "page": n + 1}}
    bridge.settimeout(0.3)
    got = b""
    try:
        while chunk := bridge.recv(65536):
            got += chunk
    except TimeoutError:
        pass
    hellos = [json.loads(line) for line in got.splitlines() if b"hello" in line]
    assert hellos == [{"hello": {"client": "web", "page": k}} for k in range(2, n + 2)], got[:400]
    assert not [r for r in caplog.records if "nhandled exception" in r.getMessage()], caplog.text


@pytest.mark.integration  # openssl makes the certificate
def test_https_with_a_user_certificate(tmp_path):
    """LAN use: the page over HTTPS with a certificate the user supplies (here a self-signed one made now)."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    r = WebRelay(WebConfig(port=0, bridge_port=0, video_port=-1, cert=str(cert), key=str(key)), log=lambda _l: None)
    r.start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False
        with (
            socket.create_connection(("127.0.0.1", r.ports["web"]), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as s,
        ):
            s.sendall(f"GET / HTTP/1.1\r\nHost: localhost:{r.ports['web']}\r\n\r\n".encode())
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(asset("index.html"))
    finally:
        r.stop()


def test_each_new_page_starts_a_new_source_before_any_of_its_lines(relay):
    """Page A is replaced by page B (a reload, a second tab): the bridge hears the relay's hello for B
    before B's first frame, whether or not B sends a hello of its own; a bridge connecting later gets
    the current page's hello, not an earlier page's.
    """
    bridge = _bridge(relay)
    lines = bridge.makefile("rb")
    a = _ws(relay.ports["web"])
    a.send(json.dumps({"hello": {"app": "page-a", "page": 7}}).encode())  # a page cannot claim another number
    a.send(json.dumps(FRAME).encode())

    def line() -> dict:  # the next line but the relay's idle heartbeats (sent while no page is connected)
        while True:
            obj = json.loads(lines.readline())
            if "heartbeat" not in obj:
                return obj

    got = [line() for _ in range(3)]
    assert got[0] == {"hello": {"client": "web", "page": 1}} and got[2] == FRAME
    assert got[1] == {"hello": {"app": "page-a", "client": "web", "page": 1}}
    a.send(b'{ "hello" : {"client": "native", "page": 99}}')  # spaced otherwise: still the relay's to rewrite
    assert line() == {"hello": {"client": "web", "page": 1}}
    a.send(json.dumps({**FRAME, "hello": {"page": 5}}).encode())  # a frame with a stray key stays a frame
    assert line() == {**FRAME, "hello": {"page": 5}}
    b = _ws(relay.ports["web"])
    op, payload = a.recv()
    assert op == 8 and payload[2:] == b"replaced by a newer page"
    b.send(json.dumps(FRAME).encode())  # B sends frames without any hello
    assert line() == {"hello": {"client": "web", "page": 2}}
    assert line() == FRAME
    bridge.close()
    again = _bridge(relay)
    assert json.loads(_lines(again, 1)[0]) == {"hello": {"client": "web", "page": 2}}
    assert relay.counters["pages_replaced"] == 1
    again.close()


def test_the_report_after_stop_is_written_and_leaves_no_coroutine_behind(tmp_path, recwarn):
    """Main writes a last report after stopping the relay: it must hold the final counters, at once, and
    no coroutine may be left unawaited on the stopped loop (a RuntimeWarning at exit).
    """
    import gc

    gc.collect()  # what earlier tests left behind is theirs, not this relay's
    recwarn.clear()
    r = WebRelay(WebConfig(port=0, bridge_port=0, video_port=-1), log=lambda _l: None)
    r.start()
    path = tmp_path / "report.json"
    r.write_report(str(path))
    assert json.loads(path.read_text())["ports"] == r.ports
    ws = _ws(r.ports["web"])
    ws.send(b"not one line\n")
    deadline = time.monotonic() + 5
    while not r.counters["page_not_one_line"] and time.monotonic() < deadline:
        time.sleep(0.01)
    r.stop()
    ws.close()
    path.unlink()
    t0 = time.monotonic()
    r.write_report(str(path))
    assert time.monotonic() - t0 < 1.0
    last = json.loads(path.read_text())
    assert last["counters"]["page_not_one_line"] == 1 and not last["page_connected"]
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)], [str(w.message) for w in recwarn]


def test_a_relay_that_could_not_start_or_never_did_stops_without_leaving_its_loop(recwarn):
    """start() failing (its port taken) and a relay never started: stop() closes the loop and schedules
    nothing on it (before, a coroutine never awaited and an unclosed loop surfaced in a later test).
    """
    import gc

    gc.collect()
    recwarn.clear()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = WebRelay(WebConfig(port=taken.getsockname()[1], bridge_port=0, video_port=-1), log=lambda _l: None)
        with pytest.raises(OSError):
            r.start()
        r.stop()
    never = WebRelay(WebConfig(port=0, bridge_port=0, video_port=-1), log=lambda _l: None)
    never.stop()
    assert r._loop.is_closed() and never._loop.is_closed()
    del r, never
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message) or "unclosed" in str(w.message)], [
        str(w.message) for w in recwarn
    ]


@pytest.mark.integration
def test_piper_quest_web_report_at_shutdown(tmp_path):
    """The console script with --report, stopped by SIGINT: a final report, nothing on stderr about an
    unawaited coroutine.
    """
    import signal
    import subprocess
    import sys
    from pathlib import Path

    report = tmp_path / "web.json"
    exe = str(Path(sys.executable).parent / "piper-quest-web")
    p = subprocess.Popen(
        [exe, "--port", "0", "--bridge-port", "0", "--video-port", "-1", "--report", str(report)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert report.exists()
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    assert p.returncode == 0 and "never awaited" not in err and "Traceback" not in err, err
    assert json.loads(report.read_text())["ports"]["web"] > 0


@pytest.mark.slow  # waits out the notices' rate limit
def test_the_page_is_told_why_its_lines_are_refused():
    """quest_bridge's client (its parser refuses a frame with 1e999) and the relay (a message of two lines)
    each tell the page, as a command line, what they refused and why; rate-limited to one a second each.
    """
    from piper_recorder.quest.client import ClientConfig, QuestClient

    relay = WebRelay(WebConfig(port=0, bridge_port=0, video_port=-1), log=lambda _l: None)  # pages silent 5 s
    relay.start()
    client = QuestClient(ClientConfig(port=relay.ports["bridge"]), lambda m, t: None).start()
    try:
        deadline = time.monotonic() + 5
        while relay.bridge is None and time.monotonic() < deadline:
            time.sleep(0.01)
        ws = _ws(relay.ports["web"])
        ws.send(b'{"hello":{"app":"piper-quest-web"}}')
        bad = json.dumps(FRAME).replace('"pos": [-0.2, 1.4, -0.3]', '"pos": [-0.2, 1e999, -0.3]').encode()
        assert bad != json.dumps(FRAME).encode()
        ws.send(bad)
        op, payload = ws.recv()
        assert op == 1 and json.loads(payload) == {
            "cmd": "rejected",
            "by": "quest_bridge",
            "lines": 1,
            "total": 1,
            "reason": "non_finite",
            "detail": "left.pos[1]",
        }
        t0 = time.monotonic()
        for _ in range(3):
            ws.send(bad)
        ws.send(b'{"heartbeat": 1}\n{"heartbeat": 2}')  # two lines: refused by the relay, told at once
        ws.send(b'{"heartbeat": 3}\n')  # a newline: refused, told a second later
        got = {}
        while len(got) < 2:
            op, payload = ws.recv()
            assert op == 1
            notice = json.loads(payload)
            got[notice["by"]] = (notice, time.monotonic() - t0)
        assert got["quest_web"][0] == {
            "cmd": "rejected",
            "by": "quest_web",
            "lines": 1,
            "total": 1,
            "reason": "not_one_line",
            "detail": "a message is one protocol line, without a newline",
        }
        assert got["quest_bridge"][0]["lines"] == 3 and got["quest_bridge"][0]["total"] == 4
        assert got["quest_bridge"][1] >= 0.8  # the bridge's three in one notice, a second on
        ws.send(b'{"heartbeat": 4}')  # a later message carries the pending notice
        time.sleep(1.1)
        ws.send(b'{"heartbeat": 5}')
        op, payload = ws.recv()
        assert json.loads(payload)["by"] == "quest_web" and json.loads(payload)["lines"] == 1
        assert relay.counters["page_not_one_line"] == 2
    finally:
        client.stop()
        relay.stop()
