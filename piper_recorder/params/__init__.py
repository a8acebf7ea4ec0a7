"""ROS 2 parameter files (``params_file``: read one as rcl does) and the parameters the nodes derive from the
configured cameras (``derived``), applied alike by the launch files, piper-launch and the bag converter.
"""
