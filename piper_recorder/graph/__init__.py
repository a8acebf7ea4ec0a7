"""The ROS graph as a whole: planning it from a config (``plan``: ``graph_node``, ``arguments``, ``headset``,
``realsense``, ``executables``, ``install``; no process started), running a plan (``supervisor``), the ROS
environment each run gets (``rosenv``: a leased loopback domain, Fast DDS profile) and the simulated graph as a
library (``sim_session``). Both launch files and ``piper-launch`` / ``piper-demo`` start the graph described here.
"""
