"""The Ray engine of piper-bag2dataset (``--engine ray``): each bag is a Ray task on any node of a cluster.

Only scheduling differs from the local engines (``run.Engine``): a task converts its bag into its
own staging dataset on a path every node can reach, and ``run.convert_many`` appends the finished
ones in bag order with its one writer, resumes and reports exactly as for ``--jobs N``. So the
inputs and the staging must be on a shared filesystem (NFS, Lustre, EFS, ...): rosbags and the
writers (PyAV, h5py, flock) need local paths, so object-store staging through fsspec would add a copy
of every bag's output and a dependency and would still need the bags on a shared path; not done.

- A task that finds the run's marker missing (the staging is not shared with its node) fails its bag
  with a message naming the node, instead of converting into a directory the writer cannot see.
- A worker or node lost mid-task: Ray re-runs the task (``retries``) into a fresh attempt
  directory, so a half-written attempt is never appended; past the retries the bag fails alone.
- At most ``window`` bags are converting or waiting for the writer, so staging space stays bounded
  when the cluster converts faster than the one writer appends.
- Progress: tasks report (bag, seconds done, total) to a small actor the driver polls while it
  waits for the next bag in order; progress is best-effort (a lost actor only stops the bars).

Ray is an optional extra (``pip install .[ray]``): it is imported when the engine connects, never
when this module is imported, and nothing else in the package imports it.
"""

from __future__ import annotations

import importlib
import os
import secrets
import socket
import uuid
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType

from piper_recorder.errors import PiperError

from .convert import BagResult, ConvertOptions, Progress, convert_bag
from .run import BagJob, DoneMap

RUN_MARKER = ".run"  # in the run's staging root: the token every task checks before converting
INSTALL_HINT = "--engine ray needs Ray: pip install 'piper_recorder[ray]' (or pip install ray)"


class RayUnavailable(PiperError, RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def import_ray() -> ModuleType:
    """The ``ray`` module, imported on first use (an optional dependency)."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise RayUnavailable(INSTALL_HINT) from exc


# ---- on the workers ------------------------------------------------------------------------------
class ProgressBoard:
    """Actor: the newest (seconds done, total) of each converting bag, taken by the driver."""

    def __init__(self) -> None:
        self._new: dict[int, tuple[float, float]] = {}

    def report(self, index: int, done_s: float, total_s: float) -> None:
        """Record a bag's progress (seconds done of total)."""
        self._new[index] = (done_s, total_s)

    def take(self) -> dict[int, tuple[float, float]]:
        """The progress reported since the last take."""
        new, self._new = self._new, {}
        return new


def convert_task(job: BagJob, opts: ConvertOptions, done: DoneMap, board: object, token: str) -> BagResult:
    """One bag on a Ray worker, into a fresh attempt directory under the bag's staging."""
    host = socket.gethostname()
    marker = Path(job.staging).parent / RUN_MARKER
    try:
        seen: str | None = marker.read_text()
    except OSError:
        seen = None
    if seen != token:
        return BagResult(
            job.index,
            job.bag,
            "failed",
            error=f"{job.bag}: the run's staging {marker.parent} is not visible on node {host}; "
            "put --staging (or --out) on a filesystem every node mounts",
        )
    report = getattr(board, "report", None)
    progress: Progress | None = None
    if report is not None:

        def progress(i: int, d: float, t: float) -> None:
            report.remote(i, d, t)  # fire and forget: progress never slows the conversion

    attempt = Path(job.staging) / f"attempt-{uuid.uuid4().hex[:12]}-{os.getpid()}"
    res = convert_bag(job.index, job.bag, opts, attempt, done, progress)
    if res.status == "failed" and res.error:
        res.error += f" (on node {host})"
    return res


# Ray's one switch for a cluster that stays on this machine: with it off (the default on macOS and
# Windows only) the node address is the loopback address, and every server of the node binds to it.
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


@contextmanager
def _loopback_node(ray: ModuleType) -> Iterator[None]:
    """While a local cluster starts: its node address is 127.0.0.1, not the host's address.

    Ray makes a local node "remotely reachable": it replaces 127.0.0.1 (also a ``_node_ip_address`` of
    127.0.0.1) by the host's address (``services.resolve_ip_for_localhost``), and gcs_server, the raylet,
    the workers and the agents bind that address or every interface: a "local" cluster listened on
    ``::`` and, for the runtime-env agent, on the host's network address. With
    ``ray_constants.ENABLE_RAY_CLUSTER`` off the node address is the loopback address (read by the
    driver here, at start-up only: later processes get it from their node) and everything binds
    127.0.0.1 (checked in test/bag/test_bag_ray.py with the kernel's socket table). The environment
    variable carries it to the processes started now; both are restored after.
    """
    constants = importlib.import_module("ray._private.ray_constants")
    saved_env, saved_const = os.environ.get(LOOPBACK_SWITCH), getattr(constants, "ENABLE_RAY_CLUSTER", True)
    os.environ[LOOPBACK_SWITCH] = "0"
    setattr(constants, "ENABLE_RAY_CLUSTER", False)
    try:
        yield
    finally:
        setattr(constants, "ENABLE_RAY_CLUSTER", saved_const)
        if saved_env is None:
            os.environ.pop(LOOPBACK_SWITCH, None)
        else:
            os.environ[LOOPBACK_SWITCH] = saved_env


def _local_token() -> None:
    """Token authentication for the local cluster, with a token of this run only.

    Loopback is reachable by every user of the machine, and Ray runs what it is sent: every gRPC and
    HTTP endpoint of the cluster requires the token (Ray's ``RAY_AUTH_MODE=token``). Given through the
    environment (inherited by every process of the cluster), so nothing is written to ``~/.ray``; a
    token the user set in ``RAY_AUTH_TOKEN`` is used as it is.
    """
    os.environ["RAY_AUTH_MODE"] = "token"
    if not os.environ.get("RAY_AUTH_TOKEN"):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # The driver has imported Ray already: its C++ config and token cache must re-read the environment
    # (what Ray's own _enable_token_auth does), else the driver is the one client without the token.
    raylet = importlib.import_module("ray._raylet")
    raylet.Config.initialize("")
    loader = getattr(raylet, "AuthenticationTokenLoader", None)
    if loader is not None:
        loader.instance().reset_cache()


def init_local(ray: ModuleType, cpus: int | None, attempts: int = 3) -> None:
    """Start a new local Ray cluster of ``cpus`` CPUs on 127.0.0.1 only, with token authentication.

    No dashboard, no usage stats (``_loopback_node``, ``_local_token``). Ray's raylet aborts its start when its
    Python agents are slow to report their ports on a loaded machine; the next attempt starts with warm imports, so
    it is retried a few times before giving up.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    _local_token()
    for attempt in range(attempts):
        try:
            with _loopback_node(ray):
                ray.init(
                    address="local",
                    num_cpus=cpus,
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    object_store_memory=128 * 2**20,
                    logging_level="WARNING",
                    log_to_driver=False,
                )
            return
        except Exception:
            ray.shutdown()
            if attempt == attempts - 1:
                raise


# ---- the driver ----------------------------------------------------------------------------------
def _kill(ray: ModuleType, actor: object) -> None:
    try:
        ray.kill(actor)
    except Exception:  # noqa: BLE001 - already gone with its node
        pass


class _Poller:
    """Takes the board's new reports without ever blocking the driver; forwards those of unfinished bags."""

    def __init__(self, ray: ModuleType, board: object | None, progress: Progress) -> None:
        self.ray, self.board, self.progress = ray, board, progress
        self.finished: set[int] = set()
        self._pending: object | None = None

    def poll(self) -> None:
        if self.board is None:
            return
        if self._pending is None:
            self._pending = getattr(self.board, "take").remote()
        if not self.ray.wait([self._pending], timeout=0)[0]:
            return  # the actor is still starting or busy: next time
        ref, self._pending = self._pending, None
        try:
            new: dict[int, tuple[float, float]] = self.ray.get(ref)
        except Exception:  # noqa: BLE001 - best-effort: a lost progress actor loses only the bars
            self.board = None
            return
        for i, (d, t) in sorted(new.items()):
            if i not in self.finished:
                self.progress(i, d, t)


@dataclass
class RayEngine:
    """Bags as Ray tasks.

    ``address``: an existing cluster (``ray.init(address)``; also RAY_ADDRESS); without one a new local cluster of
    ``cpus`` CPUs (default: all) is started on 127.0.0.1 (never one found running) and stopped at the end. A driver
    that already called ``ray.init`` (tests) is used as it is.
    """

    address: str | None = None
    cpus: int | None = None
    cpus_per_bag: float = 1.0
    retries: int = 2
    window: int | None = None
    poll_s: float = 0.5
    _owned: bool = field(default=False, init=False, repr=False)

    def __enter__(self) -> RayEngine:
        self.connect()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def connect(self) -> None:
        """Join the cluster at ``address``, or start a local one (a driver already connected is used as it is)."""
        ray = import_ray()
        if ray.is_initialized():
            return
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        try:
            if address:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                ray.init(address=address, logging_level="WARNING")
            else:
                init_local(ray, self.cpus)
        except Exception as exc:
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            raise RayUnavailable(f"cannot start or reach {where}: {type(exc).__name__}: {exc}") from exc
        self._owned = True

    def close(self) -> None:
        """Shut down the cluster this engine started or joined."""
        if self._owned:
            import_ray().shutdown()
            self._owned = False

    def results(
        self, jobs: Sequence[BagJob], opts: ConvertOptions, done: DoneMap, progress: Progress
    ) -> Generator[BagResult, None, None]:
        """Convert every job as a Ray task and yield the results in job order (see ``run.Engine``)."""
        if not jobs:
            return
        self.connect()
        ray = import_ray()
        token = uuid.uuid4().hex
        (Path(jobs[0].staging).parent / RUN_MARKER).write_text(token)
        task = ray.remote(convert_task).options(
            num_cpus=self.cpus_per_bag, max_retries=self.retries, retry_exceptions=False
        )
        board: object | None = ray.remote(ProgressBoard).options(num_cpus=0).remote()
        try:  # up before the first task, so no bag finishes before its reports can be taken
            ray.get(getattr(board, "take").remote(), timeout=60)
        except Exception:  # noqa: BLE001 - no progress actor: convert without bars
            _kill(ray, board)
            board = None
        poller = _Poller(ray, board, progress)
        opts_ref, done_ref = ray.put(opts), ray.put(done)
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        window = self.window or max(2, int(2 * cpus / self.cpus_per_bag))
        pending: dict[int, object] = {}
        try:
            for k, job in enumerate(jobs):
                for j in range(k + len(pending), min(len(jobs), k + window)):
                    pending[j] = task.remote(jobs[j], opts_ref, done_ref, board, token)
                ref = pending.pop(k)
                while not ray.wait([ref], timeout=self.poll_s)[0]:
                    poller.poll()
                poller.poll()
                poller.finished.add(k)
                yield self._get(ray, ref, job)
        finally:
            for ref in pending.values():
                ray.cancel(ref, force=True)
            if board is not None:
                _kill(ray, board)

    @staticmethod
    def _get(ray: ModuleType, ref: object, job: BagJob) -> BagResult:
        try:
            res: BagResult = ray.get(ref)
            return res
        except Exception as exc:  # noqa: BLE001 - a lost worker/node (past the retries) fails only its bag
            first = (str(exc).strip().splitlines() or [""])[0]
            return BagResult(
                job.index, job.bag, "failed", error=f"{job.bag}: Ray task failed ({type(exc).__name__}: {first})"
            )
