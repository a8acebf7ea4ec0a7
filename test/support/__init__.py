"""What the tests share: polling, rigs, fakes and data factories, each module named after what it holds.

Test modules import from here and never from one another (``test_module_graph`` keeps it so): a helper two
test files need lives in this package, not in one of the tests. Fixtures every module may use are loaded
through ``pytest_plugins`` in test/conftest.py.

- ``waiting``: ``wait_for``, the suite's one polling wait (says what timed out, with the logs it is given)
- ``paths``: the checkout's root, the test folder and this package, for tests in any folder of the tree
- ``consumers``: the LeRobot consumer venvs, their environment and JSON reports
- ``curation``, ``recorder_controller``: episodes through the recorders' episode controller (real writers;
  a fake LeRobot writer)
- ``lerobot_data``, ``lerobot_roots``: rows and self-describing frames, roots recorded by the real writer,
  and independent readers and checks
- ``frame_pairing``: synthetic camera stamps through the assembler, and the pairing checks
- ``launch_stub`` (fixture ``stub_launch``), ``node_configs``: the launch files without ROS's launch, and the
  config classes each node declares
- ``operator_node``, ``reports``, ``recorder_rig``, ``teleop_graph``: the ROS side of graph tests (an operator
  node, the sim headset's report, a synthetic arm and cameras, the graph around a teleop process)
- ``teleop_mapper``, ``teleop_session``, ``spacemouse``, ``quest_hellos``: teleop and input fixtures
- ``lerobot_fixtures``: tiny LeRobot v2.0 roots written straight from the spec (not by the writer)
- ``proc``: project console scripts as real processes, always reaped (the benches import it too)
- ``browser``, ``wsclient``: headless Chromium for page tests; a raw-socket WebSocket client (the page's side)
- ``gr00t_test_server``, ``policy_http_server``: inference services written from the published schemas (the
  latter also run as a process of its own by the sim graph's policy test)

Scripts the tests run as processes of their own (``python test/support/NAME.py ...``), importable too:

- ``lerobot_crash_worker``, ``rgbd_crash_worker``: the writers' loops the SIGKILL tests kill (the RGB-D one
  also holds the deterministic episodes the rgbd tests share)
- ``service_probe``: a Trigger service and its fresh-client callers
"""
