"""Thin rclpy nodes: they turn messages into calls on the plain-Python core."""
