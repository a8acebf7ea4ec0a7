"""Typed node parameters (#12.2, #16.8): what `ros2 param set` gets from a running recorder.

Each parameter is declared with its type from the node's config dataclass; every parameter a running
node cannot apply is read-only; `task` stays settable and both recorders refuse the same tasks.
The process test drives real recorder processes through their rcl_interfaces parameter services,
exactly what `ros2 param set` calls.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import h5py
import pytest

pytest.importorskip("rclpy")  # ROS nodes or messages: skipped where ROS is not installed
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import DescribeParameters, GetParameters, SetParameters

from support.proc import ProcGroup
from support.recorder_rig import H, Rig, W

pytestmark = pytest.mark.timeout(120)
LR, RG = "lerobot_recorder", "rgbd_recorder"


def value_msg(value: Any) -> ParameterValue:
    """A ParameterValue of the type `ros2 param set` would infer from the command line."""
    if isinstance(value, bool):
        return ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value)
    if isinstance(value, int):
        return ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=value)
    if isinstance(value, float):
        return ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    if isinstance(value, str):
        return ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY, string_array_value=value)
    raise TypeError(value)


def call(rig: Rig, srv_type, name: str, request, timeout: float = 20.0):
    cli = rig.node.create_client(srv_type, name)
    try:
        assert cli.wait_for_service(timeout_sec=timeout), f"{name} not available"
        fut = cli.call_async(request)
        end = time.monotonic() + timeout
        while not fut.done():
            assert time.monotonic() < end, f"{name} timed out"
            time.sleep(0.01)
        return fut.result()
    finally:
        rig.node.destroy_client(cli)


def set_param(rig: Rig, node: str, name: str, value: Any):
    """`ros2 param set /<node> <name> <value>`: the SetParametersResult."""
    req = SetParameters.Request(parameters=[ParameterMsg(name=name, value=value_msg(value))])
    (result,) = call(rig, SetParameters, f"/{node}/set_parameters", req).results
    return result


def get_param(rig: Rig, node: str, name: str) -> ParameterValue:
    (v,) = call(rig, GetParameters, f"/{node}/get_parameters", GetParameters.Request(names=[name])).values
    return v


def describe(rig: Rig, node: str, name: str):
    req = DescribeParameters.Request(names=[name])
    (d,) = call(rig, DescribeParameters, f"/{node}/describe_parameters", req).descriptors
    return d


def refused(result, needle: str = "") -> None:
    assert not result.successful and result.reason and needle in result.reason, result


def test_running_recorders_refuse_what_cannot_apply_and_agree_on_tasks(ros_domain, tmp_path):
    root, h5 = tmp_path / "ds", tmp_path / "rgbd.hdf5"
    rig = Rig(ros_domain, cams=("cam_front",), depth=True)
    common = [
        "-p",
        f"camera_width:={W}",
        "-p",
        f"camera_height:={H}",
        "-p",
        "provenance_wait_s:=3.0",
        "-p",
        "fps:=30",
    ]  # an integer on the command line still gives the float parameter 30.0
    try:
        with ProcGroup(ros_domain.env(), tmp_path / "logs") as g:
            g.start(
                "piper-lerobot-recorder", "--ros-args", "-p", f"root:={root}", "-p", "cameras:=[cam_front]", *common
            )
            g.start("piper-rgbd-recorder", "--ros-args", "-p", f"path:={h5}", "-p", "camera:=cam_front", *common)
            # no task yet (the default is ""): both refuse to start, neither dataset gets an episode
            for rec in (LR, RG):
                start = rig.call(rec, "start_episode")
                assert not start.success and "task must be a non-blank string" in start.message, (rec, start.message)
            # typed and read-only: described as such, changes refused with a reason, value unchanged
            for rec in (LR, RG):
                d = describe(rig, rec, "fps")
                assert d.type == ParameterType.PARAMETER_DOUBLE and d.read_only and not d.dynamic_typing
                t = describe(rig, rec, "task")
                assert t.type == ParameterType.PARAMETER_STRING and not t.read_only
                refused(set_param(rig, rec, "fps", 25.0), "fps")
                refused(set_param(rig, rec, "fps", "abc"))
                refused(set_param(rig, rec, "max_episode_s", 10.0))
                fps = get_param(rig, rec, "fps")
                assert fps.type == ParameterType.PARAMETER_DOUBLE and fps.double_value == 30.0
                refused(set_param(rig, rec, "task", 42))
                refused(set_param(rig, rec, "task", ""), "non-blank")
                refused(set_param(rig, rec, "task", "   "), "non-blank")
                assert get_param(rig, rec, "task").string_value == ""
            refused(set_param(rig, LR, "cameras", ["cam_x"]))
            refused(set_param(rig, LR, "root", str(tmp_path / "elsewhere")))
            refused(set_param(rig, RG, "path", str(tmp_path / "other.hdf5")))
            refused(set_param(rig, RG, "camera", "cam_x"))
            # a good task is taken by both and used at the next start
            for rec in (LR, RG):
                assert set_param(rig, rec, "task", "pick").successful
                assert rig.call(rec, "start_episode").success
            time.sleep(0.6)
            for rec in (LR, RG):
                stop = rig.call(rec, "stop_episode")
                assert stop.success, stop.message
            ev = rig.wait_events(4)
            assert sorted((e["recorder"], e["event"], e["episode_index"], e["task"]) for e in ev) == [
                (LR, "saved", 0, "pick"),
                (LR, "started", 0, "pick"),
                (RG, "saved", 0, "pick"),
                (RG, "started", 0, "pick"),
            ]
        eps = [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]
        assert [(e["episode_index"], e["tasks"]) for e in eps] == [(0, ["pick"])]
        with h5py.File(h5, "r") as f:
            assert list(f["index/episode_lengths"]) and len(f["index/episode_lengths"]) == 1
            assert f["episodes/demo_0"].attrs["task"] == "pick"
    finally:
        rig.close()


def node_configs():
    """Each node of the graph and the config classes it declares (with their prefixes), as the nodes do."""
    from piper_recorder.nodes.quest_bridge import QuestBridgeConfig
    from piper_recorder.nodes.replay import ReplayConfig
    from piper_recorder.nodes.sim_camera import SimCameraConfig
    from piper_recorder.nodes.teleop import TeleopNodeConfig
    from piper_recorder.piper.backends import ArmConfig
    from piper_recorder.recording.config import LeRobotRecorderConfig, RgbdRecorderConfig
    from piper_recorder.teleop.clutch import ClutchConfig
    from piper_recorder.teleop.filters import FilterConfig
    from piper_recorder.teleop.frames import FrameConfig
    from piper_recorder.teleop.limits import LimitsConfig
    from piper_recorder.teleop.mapper import TeleopConfig

    return {
        "quest_bridge": [(QuestBridgeConfig, "")],
        "teleop": [
            (TeleopConfig, ""),
            (ClutchConfig, "clutch."),
            (FrameConfig, "frame."),
            (FilterConfig, "filter."),
            (LimitsConfig, "limits."),
            (TeleopNodeConfig, ""),
        ],
        "piper_arm": [(ArmConfig, "")],
        "cam_front": [(SimCameraConfig, "")],
        "replay": [(ReplayConfig, "")],
        LR: [(LeRobotRecorderConfig, "")],
        RG: [(RgbdRecorderConfig, "")],
    }


@pytest.mark.parametrize("mode", ["sim", "robot"])
def test_every_node_parameter_is_typed_and_read_only_unless_applied_at_run_time(ros_domain, mode):
    """The shipped parameter files (integers where floats are declared, lists) load into typed
    parameters; only `task` and the sim camera's faults may change on a running node.
    """
    import rclpy
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from piper_recorder.graph.install import config_path
    from piper_recorder.nodes.plumbing.parameters import declare_config

    ros_domain.apply()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        for node_name, classes in node_configs().items():
            node = Node(node_name, context=ctx, cli_args=["--ros-args", "--params-file", str(config_path(mode))])
            try:
                runtime = set()
                for cls, prefix in classes:
                    declare_config(node, cls, prefix)
                    runtime |= {prefix + n for n in getattr(cls, "runtime_params", ())}
                ours = {prefix + f.name for cls, prefix in classes for f in dataclasses.fields(cls)}
                names = [n for n in node.list_parameters([], 10).names if n in ours]  # not rclpy's own
                assert len(names) > 3, node_name
                for d in node.describe_parameters(names):
                    assert not d.dynamic_typing and d.type != ParameterType.PARAMETER_NOT_SET, (node_name, d.name)
                    assert d.read_only == (d.name not in runtime), (node_name, d.name)
                    value = node.get_parameter(d.name)
                    assert value.type_.value == d.type, (node_name, d.name)
                    wrong = Parameter(d.name, value=1 if d.type != ParameterType.PARAMETER_INTEGER else "x")
                    assert not node.set_parameters([wrong])[0].successful, (node_name, d.name)
            finally:
                node.destroy_node()

    finally:
        rclpy.shutdown(context=ctx)
