"""The package installs the ROS way and says each thing once: every package.xml key resolves with rosdep on
Humble (jammy) and Jazzy (noble); every runtime dependency in setup.py's install_requires is covered by one of
those keys or listed in requirements/robot.txt (what a robot installs with pip), never both; every third-party
module the code imports is one of them; the version is written only in package.xml; the oldest Python is the
same wherever it is stated; the executables' node names (graph/executables.py imports nothing, so it spells
them) are the names each node starts under and the names module's.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import sys
import xml.etree.ElementTree as ET

import pytest
from packaging.requirements import Requirement

import piper_recorder
from rgbd_writer import codecs

from support.paths import ROOT

# The keys rosdep resolves, with their source in ros/rosdistro. ROS packages: released for humble and jazzy
# (<distro>/distribution.yaml, the repository named here).
ROS_PACKAGES = {
    "rclpy": "rclpy",
    "std_msgs": "common_interfaces",
    "std_srvs": "common_interfaces",
    "sensor_msgs": "common_interfaces",
    "geometry_msgs": "common_interfaces",
    "diagnostic_msgs": "common_interfaces",
    "builtin_interfaces": "rcl_interfaces",
    "rcl_interfaces": "rcl_interfaces",
    "ament_index_python": "ament_index",
    "launch": "launch",
    "launch_ros": "launch_ros",
    "ros2launch": "launch_ros",
    "realsense2_camera": "realsense2_camera",
}
# rosdep/python.yaml: an ubuntu apt package of the same name on every release, and the PyPI distribution it is.
# Not there (pip, requirements/robot.txt): av, pyarrow, imagecodecs, glymur, piper_sdk; rosbags has only a
# `-pip` key, which would install it system-wide. ament_python is no key at all (<export><build_type> says it).
PYTHON_KEYS = {
    "python3-numpy": "numpy",
    "python3-yaml": "pyyaml",
    "python3-h5py": "h5py",
    "python3-pil": "pillow",
    "python3-can": "python-can",
    "python3-zmq": "pyzmq",
    "python3-msgpack": "msgpack",
    "python3-tqdm": "tqdm",
    "python3-pytest": "pytest",
}
# Third-party modules the code imports -> the distribution that provides them (ROS modules: the key, same name).
MODULES = {
    "numpy": "numpy",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "h5py": "h5py",
    "av": "av",
    "pyarrow": "pyarrow",
    "imagecodecs": "imagecodecs",
    "glymur": "glymur",
    "can": "python-can",
    "piper_sdk": "piper_sdk",
    "rosbags": "rosbags",
    "tqdm": "tqdm",
    "zmq": "pyzmq",
    "msgpack": "msgpack",
}
# Imported, but no runtime dependency of the robot's install, and why.
NOT_RUNTIME = {
    "torch": "rgbd_writer.reader.as_torch_dataset, for a trainer that has torch",
    "typing_extensions": "type annotations only (if TYPE_CHECKING)",
}
DEPENDS = (
    "depend",
    "build_depend",
    "build_export_depend",
    "exec_depend",
    "test_depend",
    "buildtool_depend",
    "doc_depend",
)


def _name(n: str) -> str:
    return re.sub(r"[-_.]+", "-", n).lower()


def _package_xml() -> ET.Element:
    return ET.parse(ROOT / "package.xml").getroot()


def _setup_kwargs() -> dict[str, ast.expr]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return {k.arg: k.value for k in call.keywords if k.arg}


def _install_requires() -> list[Requirement]:
    return [Requirement(ast.literal_eval(e)) for e in _setup_kwargs()["install_requires"].elts]


def _robot_txt() -> list[Requirement]:
    lines = (ROOT / "requirements" / "robot.txt").read_text().splitlines()
    return [Requirement(line) for line in (ln.split("#")[0].strip() for ln in lines) if line]


def test_every_package_xml_key_resolves_with_rosdep():
    root = _package_xml()
    keys = {e.tag: [] for e in root if e.tag in DEPENDS}
    for e in root:
        if e.tag in DEPENDS:
            keys[e.tag].append(e.text)
    unknown = [k for ks in keys.values() for k in ks if k not in ROS_PACKAGES and k not in PYTHON_KEYS]
    assert unknown == [], f"no rosdep key on humble/jazzy (install it with pip: requirements/robot.txt): {unknown}"
    assert "buildtool_depend" not in keys
    assert root.findtext("export/build_type") == "ament_python"
    assert root.get("format") == "3"


def test_each_runtime_dependency_is_installed_by_rosdep_or_by_robot_txt_never_both():
    keyed = {_name(PYTHON_KEYS[e.text]) for e in _package_xml() if e.tag == "exec_depend" and e.text in PYTHON_KEYS}
    required = _install_requires()
    robot = _robot_txt()
    names = {_name(r.name) for r in required}
    pip = {_name(r.name) for r in robot}
    assert names - keyed - pip == set(), "neither a rosdep key in package.xml nor in requirements/robot.txt"
    assert keyed & pip == set(), "installed twice: by rosdep and by pip"
    assert keyed <= names, "a python3-* exec_depend that setup.py does not require"
    # robot.txt repeats setup.py's requirements exactly (versions and markers): nothing of its own
    assert sorted(map(str, robot)) == sorted(str(r) for r in required if _name(r.name) in pip)


def _imported_modules() -> dict[str, set[str]]:
    """Top-level third-party module -> the files importing it (anywhere in the file), in both packages and
    the launch files.
    """
    files = [
        *ROOT.joinpath("piper_recorder").rglob("*.py"),
        *ROOT.joinpath("rgbd_writer").rglob("*.py"),
        *ROOT.joinpath("launch").glob("*.launch.py"),
    ]
    out: dict[str, set[str]] = {}
    for p in files:
        for n in ast.walk(ast.parse(p.read_text())):
            names = (
                [a.name for a in n.names]
                if isinstance(n, ast.Import)
                else [n.module or ""]
                if isinstance(n, ast.ImportFrom) and not n.level
                else []
            )
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("piper_recorder", "rgbd_writer", "__future__"):
                    out.setdefault(top, set()).add(str(p.relative_to(ROOT)))
    return out


def test_every_imported_module_is_a_declared_dependency():
    exec_keys = {e.text for e in _package_xml() if e.tag == "exec_depend"}
    required = {_name(r.name) for r in _install_requires()}
    found = _imported_modules()
    for must in ("piper_sdk", "rosbags", "zmq", "msgpack", "glymur", "imagecodecs", "tqdm", "ament_index_python"):
        assert must in found, f"{must}: the walk no longer sees its import"
    missing = {
        m: sorted(f)
        for m, f in found.items()
        if m not in NOT_RUNTIME
        and not (m in ROS_PACKAGES and m in exec_keys)
        and not (m in MODULES and _name(MODULES[m]) in required)
    }
    assert missing == {}, "imported but neither a package.xml key nor in install_requires"


def test_the_version_is_written_only_in_package_xml():
    version = _package_xml().findtext("version")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version or "")
    assert not isinstance(_setup_kwargs()["version"], ast.Constant), "setup.py reads the version from package.xml"
    assert piper_recorder.__version__ == importlib.metadata.version("piper_recorder") == version
    literal = re.compile(r"^__version__\s*=\s*['\"]", re.M)
    assert [p for p in ROOT.joinpath("piper_recorder").rglob("*.py") if literal.search(p.read_text())] == []


def test_each_node_executable_is_the_name_its_node_starts_under():
    pytest.importorskip("rclpy")  # the nodes' modules import it (the core's own venv has none)
    from piper_recorder import names
    from piper_recorder.graph import executables

    started_under = {}
    for exe, (_script, entry) in executables.NODE_EXECUTABLES.items():
        module = importlib.import_module(entry.split(":")[0])
        tree = ast.parse(ROOT.joinpath(*module.__name__.split(".")).with_suffix(".py").read_text())
        for fn in ast.walk(tree):  # super().__init__(NAME, ...) in the __init__ of the module's Node
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
                continue
            # a name taken as an argument (SimCamera's, whose host names each camera): its default
            params = fn.args.args[len(fn.args.args) - len(fn.args.defaults) :]
            defaults = {a.arg: d for a, d in zip(params, fn.args.defaults, strict=True)}
            for call in ast.walk(fn):
                f = call.func if isinstance(call, ast.Call) else None
                init = isinstance(f, ast.Attribute) and f.attr == "__init__" and isinstance(f.value, ast.Call)
                if init and call.args and getattr(f.value.func, "id", None) == "super":
                    arg = call.args[0]
                    arg = defaults.get(arg.id, arg) if isinstance(arg, ast.Name) else arg
                    name = eval(compile(ast.Expression(arg), module.__name__, "eval"), vars(module))
                    started_under[exe] = name
    assert {e: n for e, n in started_under.items() if e != n} == {}
    assert set(started_under) == set(executables.NODE_EXECUTABLES) - {"sim_quest", "quest_web"}  # not ROS nodes
    node_names = {v for k, v in vars(names).items() if k.endswith(("_NODE", "_RECORDER")) and isinstance(v, str)}
    assert node_names <= set(executables.NODE_EXECUTABLES), node_names - set(executables.NODE_EXECUTABLES)
    assert executables.POLICY_NODE[0] == names.POLICY_NODE


def test_the_oldest_python_is_the_same_everywhere():
    assert ast.literal_eval(_setup_kwargs()["python_requires"]) == ">=3.10"
    assert re.search(r'^target-version = "py310"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert re.search(r"^CORE_PY \?= 3\.10$", (ROOT / "Makefile").read_text(), re.M)


def test_the_imagecodecs_floor_has_htj2k_where_a_release_has_it():
    floors = {str(r.marker): str(r.specifier) for r in _install_requires() if r.name == "imagecodecs"}
    assert floors == {
        'python_version >= "3.11"': f">={codecs.HTJ2K_IMAGECODECS}",
        'python_version < "3.11"': ">=2024.6.1",
    }  # NumPy 2's first; none with HTJ2K for 3.10
