"""Optimized RGB-D HDF5 (rlroverlab.offline_rgbd_v2): writer, reader/loader, codecs, validation (no ROS).

- ``writer.RgbdWriter`` / ``writer.RgbdConfig``: streaming episodes (T actions, T+1 observations on one
  timeline; transitions index into it, no physical next_obs). Encoding runs on worker threads behind a
  bounded, counted queue. Each episode is one journaled transaction (``journal.py``): a SIGKILL at any
  instant loses at most the episode in flight and the next open rolls the file back to its last commit.
- ``codecs``: depth quantisation (metres -> uint16 mm, 0 = invalid), RGB JPEG, lossless JPEG 2000 in a
  JP2 container ("jpeg2000": the reference parameters plus the bypass mode switch, the default;
  "jpeg2000_strict": OpenJPEG defaults exactly; "htj2k": High-Throughput code-blocks), recorded in
  ``depth_jpeg2000_profile``.
- ``reader``: random transitions, sequences, frame stacks and episode splits; decodes each row once.
- ``validate.validate_file(path, full=False)``: every invariant of the reference schema plus ours;
  ``python -m rgbd_writer.validate FILE [--full]``.
"""
