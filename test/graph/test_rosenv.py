"""The DDS variables are chosen by what the ROS install reads (rosenv.DdsFeatures), on every distro:
Fast DDS 3 (Kilted) reads only FASTDDS_DEFAULT_PROFILES_FILE, Fast DDS 2 (Humble, Jazzy) only
FASTRTPS_DEFAULT_PROFILES_FILE; rcl of Iron and newer reads ROS_AUTOMATIC_DISCOVERY_RANGE, Humble's only
ROS_LOCALHOST_ONLY. Each install is simulated by a folder of libraries that say so, and this machine's
own libraries are checked to say what the chosen variables claim.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from piper_recorder.graph.rosenv import (
    DISCOVERY_RANGE,
    FASTDDS2_PROFILE_VAR,
    FASTDDS3_PROFILE_VAR,
    LOCALHOST_ONLY,
    PROFILE_VARS,
    DdsFeatures,
    dds_features,
    launch_dds_env,
    loopback_env,
    ros_lib_dirs,
)

RMW = {"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"}


def _install(tmp_path: Path, name: str, fastdds: str, rcl_reads: tuple[str, ...]) -> Path:
    lib = tmp_path / name / "lib"
    lib.mkdir(parents=True)
    (lib / fastdds).write_bytes(b"\x7fELF fake")
    (lib / "librcl.so").write_bytes(b"\x7fELF " + b"\x00".join(v.encode() for v in rcl_reads))
    return lib


@pytest.mark.parametrize(
    "distro,fastdds,rcl_reads,major,ranged",
    [
        ("humble", "libfastrtps.so.2.6.10", (LOCALHOST_ONLY,), 2, False),
        ("jazzy", "libfastrtps.so.2.14.5", (DISCOVERY_RANGE, LOCALHOST_ONLY), 2, True),
        ("kilted", "libfastdds.so.3.2.2", (DISCOVERY_RANGE,), 3, True),
    ],
)
def test_features_are_read_off_the_libraries(tmp_path, distro, fastdds, rcl_reads, major, ranged):
    lib = _install(tmp_path, distro, fastdds, rcl_reads)
    f = DdsFeatures.detect([tmp_path / "nothing", lib])
    assert f == DdsFeatures(major, ranged)
    assert f.profile_vars == ((FASTDDS3_PROFILE_VAR,) if major == 3 else (FASTDDS2_PROFILE_VAR,))


def test_unknown_install_sets_both_profile_variables(tmp_path):
    assert DdsFeatures.detect([tmp_path]).profile_vars == PROFILE_VARS
    env = loopback_env(dict(RMW), DdsFeatures())
    assert all(env[v].endswith("config/fastdds_loopback.xml") for v in PROFILE_VARS)


def test_jazzy_gets_the_fast_dds_2_variable_and_no_stale_one():
    stale = {**RMW, FASTDDS3_PROFILE_VAR: "/elsewhere.xml", LOCALHOST_ONLY: "1", DISCOVERY_RANGE: "SUBNET"}
    env = loopback_env(stale, DdsFeatures(2, True))
    assert env[FASTDDS2_PROFILE_VAR].endswith("config/fastdds_loopback.xml")
    assert FASTDDS3_PROFILE_VAR not in env and LOCALHOST_ONLY not in env
    assert env[DISCOVERY_RANGE] == "SYSTEM_DEFAULT"  # rmw leaves the profile's transports alone


def test_kilted_gets_the_fast_dds_3_variable_only():
    env = loopback_env({**RMW, FASTDDS2_PROFILE_VAR: "/old.xml"}, DdsFeatures(3, True))
    assert env[FASTDDS3_PROFILE_VAR].endswith("config/fastdds_loopback.xml") and FASTDDS2_PROFILE_VAR not in env


def test_humble_falls_back_to_localhost_only_without_the_profile():
    humble = DdsFeatures(2, False)
    with_profile = loopback_env(dict(RMW), humble)
    assert with_profile[FASTDDS2_PROFILE_VAR].endswith("fastdds_loopback.xml")
    assert DISCOVERY_RANGE not in with_profile and LOCALHOST_ONLY not in with_profile  # the profile restricts
    other = loopback_env({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}, humble)  # no profile: Humble's switch
    assert other[LOCALHOST_ONLY] == "1" and DISCOVERY_RANGE not in other
    ranged = loopback_env({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}, DdsFeatures(3, True))
    assert ranged[DISCOVERY_RANGE] == "LOCALHOST" and LOCALHOST_ONLY not in ranged


def test_launch_env_sets_ours_unsets_stale_ones_and_keeps_a_users_profile(tmp_path):
    jazzy = DdsFeatures(2, True)
    out = launch_dds_env({**RMW, LOCALHOST_ONLY: "1", FASTDDS3_PROFILE_VAR: "/kilted-leftover.xml"}, jazzy)
    assert out[FASTDDS2_PROFILE_VAR].endswith("fastdds_loopback.xml") and out[DISCOVERY_RANGE] == "SYSTEM_DEFAULT"
    assert out[LOCALHOST_ONLY] is None and out[FASTDDS3_PROFILE_VAR] is None
    assert launch_dds_env({**RMW, FASTDDS2_PROFILE_VAR: str(tmp_path / "lan.xml")}, jazzy) == {}


def test_this_machines_libraries_read_the_variables_chosen():
    """The real check behind the simulated ones: the Fast DDS library rclpy loads here contains the
    profile variable chosen and not the other, and its rcl the discovery variable chosen.
    """
    f = dds_features()
    lib = next((d for d in ros_lib_dirs() if (d / "librcl.so").is_file()), None)
    if lib is None:
        pytest.skip("no ROS libraries here (the ROS-free core's venv)")
    (fastdds,) = sorted(lib.glob("libfast[dr]*.so.*.*.*"))
    text = fastdds.read_bytes()
    (chosen,) = f.profile_vars
    other = FASTDDS2_PROFILE_VAR if chosen == FASTDDS3_PROFILE_VAR else FASTDDS3_PROFILE_VAR
    assert chosen.encode() in text and other.encode() not in text, fastdds
    assert f.discovery_range == (DISCOVERY_RANGE.encode() in (lib / "librcl.so").read_bytes())


def test_an_rclpy_without_the_events_executor_gets_the_single_threaded_one(monkeypatch):
    """Humble's rclpy has no rclpy.experimental.EventsExecutor: the nodes spin a SingleThreadedExecutor."""
    pytest.importorskip("rclpy")
    import sys

    from rclpy.executors import SingleThreadedExecutor

    from piper_recorder.nodes.plumbing.executors import executor_class

    assert executor_class("events").__name__ == "EventsExecutor"
    monkeypatch.setitem(sys.modules, "rclpy.experimental", None)  # import fails as on Humble
    assert executor_class("events") is SingleThreadedExecutor
    with pytest.raises(ValueError):
        executor_class("fastest")
