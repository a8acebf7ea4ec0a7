"""XR stage -> robot base remap, checked axis by axis against the reference facts."""

import math

import numpy as np
import pytest

from piper_recorder.teleop.frames import FrameConfig, remap_matrix


def test_fixed_remap_axis_by_axis():
    M = remap_matrix(FrameConfig())
    xr = np.array([0.1, 0.2, 0.3])  # right, up, back
    np.testing.assert_allclose(M @ xr, [-0.3, -0.1, 0.2])  # robot x=-xr_z, y=-xr_x, z=xr_y
    np.testing.assert_allclose(M @ [0, 0, -1], [1, 0, 0])  # pushing forward (xr -z) -> robot +x
    np.testing.assert_allclose(M @ [-1, 0, 0], [0, 1, 0])  # left -> robot +y
    assert np.linalg.det(M) == pytest.approx(1.0)
    np.testing.assert_allclose(M @ M.T, np.eye(3), atol=1e-12)


def test_yaw_offset_rotates_about_robot_z():
    M = remap_matrix(FrameConfig(yaw_offset_deg=90.0))
    # forward in XR maps to robot +x, then +90 deg yaw turns it to robot +y; up stays up.
    np.testing.assert_allclose(M @ [0, 0, -1], [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(M @ [0, 1, 0], [0, 0, 1], atol=1e-12)


def test_yaw_offset_validated():
    with pytest.raises(ValueError):
        FrameConfig(yaw_offset_deg=math.nan).validate()
