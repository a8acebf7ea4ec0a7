"""SpaceMouse teleoperation input (no ROS).

3Dconnexion HID reports (``hid``), a hidraw reader thread (``reader``) and the twist -> TeleopCore mapping
(``input``). The ROS adapter is the teleop node's ``input: spacemouse`` mode (``nodes.teleop``).
"""
