"""Episode control shared by the recorder nodes (no ROS): state machine, writer thread, writer adapters."""
