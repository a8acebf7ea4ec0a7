"""``piper-policy-server``: a LeRobot checkpoint behind PiperPilot's ``/predict`` HTTP protocol.

Runs in the trainer's virtualenv (torch + lerobot), never inside the ROS node. Modules: ``protocol``
(the JSON request/answer, stdlib + numpy), ``inputs`` (request -> the policy's input features),
``httpd`` (stdlib HTTP server over any ``Runner``), ``lerobot_runner`` (torch/lerobot, imported when
a checkpoint is loaded), ``__main__`` (the command line).
"""
