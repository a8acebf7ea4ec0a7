"""LeRobot v2.0 / v2.1 datasets (no ROS).

Subpackages import only those before them (test/project/test_module_graph.py): ``format`` (what a root is and how to
read it: ``Root``), ``writer`` (the streaming ``LeRobotWriter``), ``validate`` (piper-validate's independent
checks), ``export`` (piper-export to v2.1 / v3.0) and ``maintenance`` (piper-repair, piper-recover,
piper-finalize). Nothing is re-exported here, so reading a file name from ``format.layout`` loads no video encoder.
"""
