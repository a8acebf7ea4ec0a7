"""Episode replay core: load recorded actions, approach the first pose slowly, score tracking (no ROS)."""
