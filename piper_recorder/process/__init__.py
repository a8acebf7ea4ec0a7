"""What every process of the graph shares, without ROS.

Stop signals, the parent's watch and the teardown watchdog (``supervision``), a node's command line and
``--help`` (``nodehelp``), and the image delivery counts the nodes report (``delivery``).
"""
