"""``piper-policy-server --checkpoint DIR [--port 8000] [--host 127.0.0.1] [--device cpu]``.

Run it with the trainer's interpreter: ``PYTHONPATH=/path/to/piper_recorder
.venv-lerobot04/bin/python -m piper_recorder.policy.server --checkpoint DIR`` (or the console script
after ``pip install --no-deps -e /path/to/piper_recorder`` in that environment).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
import threading
from types import FrameType


def main(argv: list[str] | None = None) -> int:
    """The ``piper-policy-server`` command: serve a LeRobot checkpoint behind ``/predict`` until interrupted."""
    ap = argparse.ArgumentParser(prog="piper-policy-server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="a LeRobot pretrained_model directory")
    ap.add_argument("--host", default="127.0.0.1", help="listen address (default loopback)")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed)")
    ap.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, mps")
    ap.add_argument("--workers", type=int, default=8, help="handler threads (connections served at once)")
    ap.add_argument(
        "--queue", type=int, default=16, help="connections waiting for a handler; more are answered 503 at once"
    )
    ap.add_argument(
        "--client-timeout",
        type=float,
        default=10.0,
        help="seconds a client may leave a read or write waiting before it is dropped",
    )
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from piper_recorder.policy.server.httpd import make_server
    from piper_recorder.policy.server.lerobot_runner import CheckpointError, LeRobotRunner

    try:
        runner = LeRobotRunner(args.checkpoint, device=args.device)
    except (CheckpointError, FileNotFoundError) as e:
        print(f"piper-policy-server: {e}", file=sys.stderr)
        return 2
    try:
        server = make_server(
            runner, args.host, args.port, workers=args.workers, queued=args.queue, client_timeout_s=args.client_timeout
        )
    except ValueError as e:
        print(f"piper-policy-server: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"piper-policy-server: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    try:
        public = not ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        public = True
    if public:
        logging.getLogger("piper_policy_server").warning(
            "listening on %s: anyone who reaches it can query the policy (no authentication)", args.host
        )

    def stop(_sig: int, _frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    info = runner.info()
    port = server.server_address[1]
    print(
        f"piper-policy-server: ready http://{args.host}:{port} {info['policy_type']} chunk {info['chunk_size']} "
        f"lerobot {info['lerobot']} {info['content_hash']}",
        flush=True,
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
