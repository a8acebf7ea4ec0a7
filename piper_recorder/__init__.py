"""piper_recorder: ROS 2 teleoperation data collection for the AgileX Piper arm."""

from importlib import metadata as _metadata

try:  # package.xml's <version>, which setup.py installs as the distribution's version
    __version__ = _metadata.version(__name__)
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
