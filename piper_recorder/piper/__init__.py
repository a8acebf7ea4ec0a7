"""AgileX Piper arm backends over piper_sdk, kinematics/IK and a CAN-level emulator (no ROS)."""
