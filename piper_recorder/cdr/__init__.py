"""The CDR wire in both directions, without rclpy's message conversion.

``decode``: serialized bytes -> rosbags message objects, shared by the bag converter and the nodes' decoded and
polled subscriptions; ``encode``: the hot publishers' messages -> serialized bytes.
"""
