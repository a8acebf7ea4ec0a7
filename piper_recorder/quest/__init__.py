"""Meta Quest headset protocol: parser, TCP client, clock mapping and a simulated headset (no ROS).

Public API (others build on these names)::

    from piper_recorder.quest.protocol import (StreamParser, parse_line, Rejected, encode,
        Frame, Hello, Heartbeat, DeviceSample, HandSample, Message, MAX_LINE_BYTES, QUAT_TOLERANCE)
    p = StreamParser(max_line_bytes=65536, quat_tolerance=0.1)
    msgs = p.feed(data: bytes)          # -> list[Frame | Hello | Heartbeat]; never raises
    p.rejected: Counter[str]            # by reason; p.accepted: Counter[str] by kind; p.reset()
    Frame(t, mono, frame, state, space, head: DeviceSample, left: HandSample, right: HandSample, raw)
    DeviceSample(pos xyz, quat xyzw unit, valid, tracked).usable
    HandSample(..., trigger, squeeze, stick (x, y), stick_click, primary, secondary, menu)

    from piper_recorder.quest.client import QuestClient, ClientConfig, haptic_from_json
    c = QuestClient(ClientConfig(host, port, reconnect_s, reconnect_max_s, silence_timeout_s, ...),
                    on_message=lambda msg, recv_ns: ..., on_event=lambda "connected"|"disconnected": ...)
    c.start(); c.haptic("right", 0.5, 40); c.send_command({...}); c.stats; c.parser; c.stop()

    from piper_recorder.quest.clock import MonoClockMapper, ClockMapperConfig
    stamp_ns = MonoClockMapper().observe(mono_s, recv_ns)   # capture time on the host clock

    from piper_recorder.quest.bridge_core import BridgeCore, BridgeOutput, PoseOut, JoyOut
    out = BridgeCore().handle(msg, recv_ns)  # poses / joys / raw / hello, as quest_bridge publishes them

    from piper_recorder.quest.scripts import ScriptedHeadset, LEAD_S, CYCLE_S, LOOP_S, RIGHT_HOME
    ScriptedHeadset("demo"|"idle"|"circle"|"continuous", buttons=True, seed=0).sample(t) -> frame dict; .right(t)
    from piper_recorder.quest.sim_server import SimQuestServer, SimConfig   # piper-sim-quest
"""
