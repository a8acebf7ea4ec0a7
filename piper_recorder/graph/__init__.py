"""The ROS graph as a whole: planned from a config, run as processes, in an isolated ROS environment.

Planning (``plan``: ``graph_node``, ``arguments``, ``headset``, ``realsense``, ``executables``, ``install``)
starts no process; ``supervisor`` runs a plan; ``rosenv`` gives each run a leased loopback domain;
``sim_session`` is the simulated graph as a library. Both launch files and ``piper-launch`` / ``piper-demo``
start the graph described here.
"""
