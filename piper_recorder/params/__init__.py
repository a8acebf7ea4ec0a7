"""ROS 2 parameter files and the parameters the nodes derive from the configured cameras.

``params_file`` reads a file as rcl does; ``derived`` derives the camera-following nodes' parameters, applied
alike by the launch files, piper-launch and the bag converter.
"""
