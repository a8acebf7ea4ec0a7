"""The headset page in headless Chromium without an XR device (no IWER), served by the relay in this process
(no ROS): it must not claim to be ready when WebXR offers no immersive session but say why; a "rejected"
command from the host is shown (which component refused how many lines, and why); a close reason is
shown with the reconnect. ~5 s.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from piper_recorder.quest.web_server import WebConfig, WebRelay

from support.browser import CHROMIUM_ARGS, chromium_path
from support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]  # a browser


def test_page_without_an_xr_device_says_webxr_is_unavailable_and_shows_what_the_host_refused():
    from playwright.sync_api import sync_playwright

    relay = WebRelay(WebConfig(port=0, bridge_port=0, video_port=-1), log=lambda _l: None)
    relay.start()
    bridge = socket.create_connection(("127.0.0.1", relay.ports["bridge"]), timeout=5.0)
    try:
        with sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                "", executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
            )
            try:
                page = ctx.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"http://127.0.0.1:{relay.ports['web']}/")
                # polled from here: the page's CSP forbids the eval Playwright's own polling uses
                wait_for(lambda: page.evaluate("window.piperWeb && window.piperWeb.stats.wsOpen"), 20, step=0.05)
                wait_for(lambda: page.evaluate("window.piperWeb.stats.xr !== 'checking'"), 20, step=0.05)
                status = page.inner_text("#status")
                assert page.evaluate("window.piperWeb.stats.xr") == "unavailable" and status != "ready"
                assert status.startswith("WebXR is unavailable: "), status
                assert page.is_disabled("#enter-ar") and page.is_disabled("#enter-vr")
                # quest_bridge (here: this socket in its place) tells the page what its parser refused
                deadline = time.monotonic() + 10
                while relay.page is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                bridge.sendall(
                    json.dumps(
                        {
                            "cmd": "rejected",
                            "by": "quest_bridge",
                            "lines": 3,
                            "total": 5,
                            "reason": "non_finite",
                            "detail": "left.pos[1]",
                        }
                    ).encode()
                    + b"\n"
                )
                wait_for(lambda: page.evaluate("window.piperWeb.stats.rejected !== null"), 10, step=0.05)
                assert page.inner_text("#notice") == "quest_bridge refused 3 lines (5 in all): non_finite (left.pos[1])"
                # the host closing with a reason: shown while the page reconnects
                relay.stop()
                wait_for(lambda: page.evaluate("window.piperWeb.stats.closed !== null"), 10, step=0.05)
                assert page.evaluate("window.piperWeb.stats.closed") == {"code": 1000, "reason": "server stopping"}
                assert page.inner_text("#link") == "host: disconnected (1000 server stopping), retrying"
                assert not errors, errors
            finally:
                ctx.close()
    finally:
        bridge.close()
        relay.stop()
