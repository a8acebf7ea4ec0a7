"""ament_python package piper_recorder (also pip-installable for the PyPI ROS 2 wheels)."""

import os
import runpy
import xml.etree.ElementTree as ET
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "piper_recorder"
# The version is written once, in package.xml (the package format requires it there); piper_recorder.__version__
# reads it back from the installed metadata.
VERSION = ET.parse(os.path.join(os.path.dirname(os.path.abspath(__file__)), "package.xml")).findtext("version")

# The executables are stated once, in piper_recorder/graph/executables.py (read here without importing the
# package, whose dependencies a build does not have): each console script, and each node also as a `ros2 run`
# executable under its ROS name (see setup.cfg).
EXECUTABLES = runpy.run_path(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), PACKAGE, "graph", "executables.py")
)

setup(
    name=PACKAGE,
    version=VERSION,
    packages=find_packages(include=["piper_recorder", "piper_recorder.*", "rgbd_writer", "rgbd_writer.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml")),
    ],
    # the headset page's own files (quest/web_server.py serves them from the installed package)
    package_data={"piper_recorder.quest": ["web/*.html", "web/*.js", "web/*.css"]},
    # the runtime dependencies, once (a robot's ROS install gives rclpy and the messages: package.xml)
    install_requires=[
        "numpy>=1.26,<3",
        "pyyaml>=6",
        "av>=14",
        "pyarrow>=15",
        "h5py>=3.10",
        "pillow>=10.4",
        # HTJ2K (rgbd_writer.codecs.HTJ2K_IMAGECODECS) came with 2026.1.1, built for Python >= 3.11 only; 2024.6.1
        # is the first with NumPy 2. On 3.10 the depth profile htj2k is unavailable (the writer says so).
        "imagecodecs>=2026.1.1; python_version >= '3.11'",
        "imagecodecs>=2024.6.1; python_version < '3.11'",
        "glymur>=0.13",
        "python-can>=4.3",
        "piper_sdk==0.6.2",
        "rosbags>=0.10",
        "tqdm>=4.60",
        # policy backends: GR00T N1.5's inference service (ZeroMQ REQ/REP, msgpack)
        "pyzmq>=25",
        "msgpack>=1.0",
    ],
    # optional engines: `pip install .[ray]` for `piper-bag2dataset --engine ray` (requirements/dev.txt installs
    # it into the dev/test venv; the recorders never import it)
    extras_require={"ray": ["ray>=2.40"]},
    zip_safe=True,
    maintainer="piper_recorder maintainers",
    maintainer_email="maintainers@piper-recorder.invalid",
    description="ROS 2 teleoperation data collection for the AgileX Piper: LeRobot v2.0 and RGB-D HDF5 recorders.",
    license="Apache-2.0",
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [f"{k} = {v}" for k, v in EXECUTABLES["console_scripts"]().items()],
    },
)
