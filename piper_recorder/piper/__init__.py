"""AgileX Piper arm backends over piper_sdk, kinematics/IK and a CAN-level emulator (no ROS).

Modules:
- ``kinematics``: FK from the SDK's own DH table (``fk``, ``link_frames``, ``jacobian``), IK with joint
  limits (``ik`` -> ``IkResult``: closed form near the seed, else damped least squares, ``solve_ik``),
  rotations (``euler_to_matrix`` / ``matrix_to_euler`` in the SDK/firmware convention
  R = Rz(rz) Ry(ry) Rx(rx), ``quat_to_matrix`` / ``matrix_to_quat`` xyzw, ``pose_to_matrix``),
  ``SDK_JOINT_MIN`` / ``SDK_JOINT_MAX``. SI units.
- ``wire``: frame ids, move modes, JointMitCtrl packing.
- ``link.PiperLink``: the only piper_sdk user (open socketcan or any python-can interface, feedback
  snapshot in SI units, typed commands).
- ``limits.TargetLimits``: target validation (finite, unit quaternion, the acceptance box, IK reachability).
- ``backends``: ``ArmConfig`` (the piper_arm node parameters), ``PositionBackend``, ``ImpedanceBackend``.
- ``controller.ArmController``: the control loop with the safety rules (stale target, CAN silence).
- ``emulator.PiperEmulator``: the firmware stand-in on a python-can virtual bus.
"""
