"""Meta Quest headset protocol: parser, TCP client, clock mapping and a simulated headset (no ROS)."""
