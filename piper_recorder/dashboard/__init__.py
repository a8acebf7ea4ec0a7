"""piper-dashboard: a live, read-only web page for the person beside the robot (no ROS in this package).

``model`` aggregates what the node hears into one JSON view model, ``frames`` makes camera thumbnails
and decodes reference frames for the re-alignment view, ``server`` serves the page and the JSON over
the standard library's HTTP server (loopback by default, a token elsewhere), ``page`` is the page.
The ROS node (``piper_recorder.nodes.dashboard``) only feeds the model.
"""
