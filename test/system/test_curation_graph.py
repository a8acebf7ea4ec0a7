"""Curation through the whole simulated graph (#24 item 4): labels from the headset's stop chord and
from the ``label_episode`` service, and a camera stall that comes out ``bad`` with its reason.

The graph is the launcher's sim graph (piper-sim-quest with its video channel, quest_bridge, teleop,
piper_arm, two sim cameras, both recorders, quest_video) with the headset's ``demo`` script, whose
buttons drive the episodes as an operator would: A starts, A stops (cycle k % 3 == 0: plain A, the
episode is labelled success), the thumbstick held in across the stop press (k % 3 == 1: failure), B
discards (k % 3 == 2). While an episode records (the first saved one after a warm-up episode),
cam_front is stalled for 1.2 s through its fault parameters. Checked: the ``saved`` and ``labeled`` events of both recorders, the haptic
patterns the headset received (success, failure, and the distinct one for ``bad``), the HUD's last
episode line, the service relabelling the last saved episode (and refusing a malformed request),
then episodes.jsonl and the RGB-D episode attrs read back with json and h5py, both validated.
Cost: 20-40 s of headset script after a graph start-up of 10-30 s.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import h5py
import pytest

from piper_recorder.graph.install import config_path
from piper_recorder.graph.plan import plan_graph
from piper_recorder.graph.supervisor import Graph

from support.operator_node import Operator
from support.reports import read_report
from support.waiting import wait_for

pytestmark = pytest.mark.timeout(420)
STALL = "cam_front: oldest frame at a row (camera stall)"


def _label(op: Operator, rec: str, payload: str, timeout: float = 30.0) -> tuple[bool, str]:
    from diagnostic_msgs.srv import AddDiagnostics

    client = op.node.create_client(AddDiagnostics, f"/{rec}/label_episode")
    try:
        assert client.wait_for_service(timeout), f"/{rec}/label_episode not available"
        fut = client.call_async(AddDiagnostics.Request(load_namespace=payload))
        end = time.monotonic() + timeout
        while not fut.done() and time.monotonic() < end:
            time.sleep(0.02)
        assert fut.done(), f"/{rec}/label_episode did not answer"
        return bool(fut.result().success), str(fut.result().message)
    finally:
        op.node.destroy_client(client)


def test_headset_chord_service_label_and_a_stalled_camera(tmp_path: Path, ros_domain):
    report = tmp_path / "headset.json"
    sets = [
        f"lerobot_recorder.root={tmp_path / 'lerobot'}",
        f"rgbd_recorder.path={tmp_path / 'rgbd.hdf5'}",
        "piper_launch.sim_quest.port=0",
        f"piper_launch.sim_quest.report={report}",
        "piper_launch.sim_quest.script=demo",
        "piper_launch.sim_quest.buttons=true",  # A / B / the chord
        "cam_front.width=320",
        "cam_front.height=240",
        "cam_wrist.width=320",
        "cam_wrist.height=240",
        "lerobot_recorder.camera_width=320",
        "lerobot_recorder.camera_height=240",
        "rgbd_recorder.camera_width=320",
        "rgbd_recorder.camera_height=240",
    ]
    plan = plan_graph("sim", config_path("sim"), sets, tmp_path / "logs")
    graph = Graph(plan, ros_domain.env(), tmp_path / "logs")
    ros_domain.apply()
    op = None
    try:
        graph.start()
        op = Operator(ros_domain.env())
        graph.wait_nodes(op.node, 120.0)
        dump = lambda: json.dumps(op.events[-12:])[:3000] + "\n" + graph.logs(15)  # noqa: E731

        def events(kind: str, rec: str = "lerobot_recorder") -> list[dict[str, Any]]:
            return [e for e in list(op.events) if e.get("event") == kind and e.get("recorder") == rec]

        # once the graph has saved one episode (the first cycle may start before every recorder is up and
        # be short), stall cam_front for 1.2 s early in the next episode that is saved with >= 3 s of rows
        # (a discard cycle's episode, or one shortened by a late start, is skipped): it must come out bad,
        # naming the stall
        wait_for(lambda: events("saved"), 90.0, "a first saved episode", dump, step=0.1)
        saved0 = None
        while saved0 is None:
            seen = len(op.events)
            wait_for(
                lambda: [
                    e
                    for e in op.events[seen:]
                    if e.get("event") == "started" and e.get("recorder") == "lerobot_recorder"
                ],
                30.0,
                "the next start",
                dump,
                step=0.1,
            )
            _set(op, "cam_front", "pause_s", 1.2)
            _set(op, "cam_front", "pause_at_s", 0.5)  # re-arms: the pause starts 0.5 s from now
            end = wait_for(
                lambda: [
                    e
                    for e in op.events[seen:]
                    if e.get("recorder") == "lerobot_recorder" and e.get("event") in ("saved", "discarded")
                ],
                40.0,
                "its end",
                dump,
                step=0.1,
            )[0]
            # a start that took effect late on a loaded machine leaves a short episode the stall may miss
            saved0 = end if end["event"] == "saved" and (end.get("rows") or 0) >= 90 else None
        ep0 = saved0["episode_index"]
        assert saved0["verdict"] == "bad", saved0
        assert any(r.startswith(f"bad: {STALL}") for r in saved0["verdict_reasons"]), saved0["verdict_reasons"]
        # (the RGB-D recorder numbers its own episodes: a start one recorder refused under load shifts them)
        rgbd0 = wait_for(
            lambda: [e for e in op.events[seen:] if e.get("recorder") == "rgbd_recorder" and e.get("event") == "saved"],
            20.0,
            "the RGB-D save",
            dump,
            step=0.1,
        )[0]
        assert rgbd0["verdict"] == "bad" and any(STALL in r for r in rgbd0["verdict_reasons"]), rgbd0
        # its label: the chord of that cycle, on both recorders; then a saved episode with the other outcome
        # (cycles alternate success, failure, discard)
        lab0 = wait_for(
            lambda: [e for e in events("labeled") if e["episode_index"] == ep0], 20.0, "its label", dump, step=0.1
        )[-1]
        first_outcome = lab0["outcome"]

        # the HUD names the last saved episode with its outcome and verdict (while the next one records too)
        def hud_last() -> list:
            return [h.get("last_episode") for h in (read_report(report).get("video") or {}).get("hud_history", [])]

        wait_for(
            lambda: f"ep{ep0} {first_outcome} bad" in hud_last(),
            15.0,
            "the last episode on the HUD",
            lambda: str(hud_last()),
            step=0.1,
        )
        want = "failure" if first_outcome == "success" else "success"
        lab1 = wait_for(
            lambda: [e for e in events("labeled") if e["episode_index"] > ep0 and e["outcome"] == want],
            60.0,
            f"a {want} chord",
            dump,
            step=0.1,
        )[0]
        outs = {e["episode_index"]: e["outcome"] for e in events("labeled")}
        assert outs.get(ep0) == first_outcome and outs.get(lab1["episode_index"]) == want, outs
        wait_for(
            lambda: (
                {first_outcome, want}
                <= {
                    e["outcome"]
                    for e in events("labeled", "rgbd_recorder")
                    if e["episode_index"] >= rgbd0["episode_index"]
                }
            ),
            20.0,
            "both outcomes on the RGB-D recorder",
            dump,
            step=0.1,
        )
        rgbd_outs = {e["episode_index"]: e["outcome"] for e in events("labeled", "rgbd_recorder")}
        ep1 = lab1["episode_index"]
        wait_for(
            lambda: [e for e in events("saved") if e["episode_index"] == ep1], 30.0, "the chord's save", dump, step=0.1
        )
        # the headset felt both outcomes and the bad verdict, each once however many recorders answered
        felt = lambda: [(h["amp"], h["ms"]) for h in read_report(report).get("haptics", [])]  # noqa: E731
        wait_for(
            lambda: (0.6, 80) in felt() and (1.0, 160) in felt() and (1.0, 400) in felt(),
            15.0,
            "success, failure and bad pulses",
            lambda: str(felt()),
            step=0.1,
        )
        # the 'bad' pattern (three pulses) at most once per stop, not once per recorder that saved it bad
        time.sleep(1.0)
        n_bad, stops = felt().count((1.0, 400)), len(events("saved"))
        assert n_bad % 3 == 0 and 3 <= n_bad <= 3 * stops, (felt(), stops)
        # the service: relabel the last saved episode with a note; a malformed request is refused
        # (the headset may already record the next episode: without "episode" the label would go to that one)
        ok, msg = _label(
            op, "lerobot_recorder", json.dumps({"outcome": "success", "note": "relabelled", "episode": ep1})
        )
        assert ok and f"episode {ep1} labelled success" in msg, msg
        ok, msg = _label(op, "lerobot_recorder", "success")
        assert not ok and "wants a JSON object" in msg
        ok, msg = _label(op, "rgbd_recorder", json.dumps({"outcome": "great"}))
        assert not ok and "outcome must be one of success, failure" in msg
        saved1 = [e for e in events("saved") if e["episode_index"] == ep1][-1]
        wait_for(
            lambda: any(
                h.get("last_episode") == f"ep{ep1} success {saved1['verdict']}"
                for h in (read_report(report).get("video") or {}).get("hud_history", [])[-10:]
            ),
            15.0,
            "the relabel on the HUD",
            lambda: str((read_report(report).get("video") or {}).get("hud")),
            step=0.1,
        )
    finally:
        if op is not None:
            op.close()
        graph.stop()
    eps = {
        e["episode_index"]: e
        for e in (
            json.loads(x) for x in (tmp_path / "lerobot/meta/episodes.jsonl").read_text().splitlines() if x.strip()
        )
    }
    assert eps[ep0]["outcome"] == first_outcome and eps[ep0]["verdict"] == "bad"
    assert any(STALL in r for r in eps[ep0]["verdict_reasons"])
    assert (eps[ep1]["outcome"], eps[ep1]["outcome_note"]) == ("success", "relabelled")
    assert (eps[ep1]["verdict"], eps[ep1]["verdict_reasons"]) == (saved1["verdict"], saved1["verdict_reasons"])
    with h5py.File(tmp_path / "rgbd.hdf5", "r") as f:
        for i, outcome in rgbd_outs.items():  # every label the RGB-D recorder confirmed is in its file
            a = f[f"episodes/demo_{i}"].attrs
            assert a["outcome"] == outcome and bool(a["success"]) == (outcome == "success"), (i, dict(a))
        a0 = f[f"episodes/demo_{rgbd0['episode_index']}"].attrs
        assert a0["verdict"] == "bad" and any(STALL in r for r in json.loads(a0["verdict_reasons"]))
    from piper_recorder.lerobot.validate import validate_root
    from rgbd_writer.validate import validate_file

    problems = validate_root(tmp_path / "lerobot")
    # whatever our validator rejects, the save-time verdict called bad (a starved machine's shed frames too)
    flagged = {int(m) for p in problems for m in re.findall(r"episode_(\d{6})", p)}
    assert all(eps[i]["verdict"] == "bad" for i in flagged), (problems, {i: eps[i]["verdict"] for i in flagged})
    assert problems == [], (
        problems,
        {
            i: (e["length"], e.get("frames_dropped_writer_behind"), e["verdict"], e["verdict_reasons"])
            for i, e in eps.items()
        },
    )
    assert validate_file(tmp_path / "rgbd.hdf5") == []


def _set(op: Operator, node: str, name: str, value: Any, timeout: float = 10.0) -> None:
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    cli = op.node.create_client(SetParameters, f"/{node}/set_parameters")
    try:
        assert cli.wait_for_service(timeout_sec=timeout), f"/{node}/set_parameters not available"
        fut = cli.call_async(SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()]))
        end = time.monotonic() + timeout
        while not fut.done() and time.monotonic() < end:
            time.sleep(0.02)
        assert fut.done() and fut.result().results[0].successful, f"setting {node}.{name}={value!r} failed"
    finally:
        op.node.destroy_client(cli)
