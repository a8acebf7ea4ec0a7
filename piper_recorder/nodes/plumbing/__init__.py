"""The rclpy plumbing every node of the graph shares, one concept per module.

QoS profiles (``qos``), stamps (``stamps``), typed parameters (``parameters``), decoded subscriptions
(``decoded_subscription``), inputs taken in batches (``polled_inputs``), typed callbacks (``callbacks``), a
control loop (``fixed_rate_loop``), the executors (``executors``) and a node's process (``run_node``).
"""
