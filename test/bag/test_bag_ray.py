"""piper-bag2dataset --engine ray on a real local Ray cluster (2 CPUs, 127.0.0.1, no dashboard, no usage stats).

The Ray engine must give the local engine's dataset byte for byte (parquet) and frame for frame
(video, decoded with PyAV); a worker killed mid-bag is retried or fails that bag alone, and a re-run
(also after the whole cluster and driver were killed) completes the set without duplicates.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import av
import h5py
import numpy as np
import pytest
import ray
import yaml

from piper_recorder.bag.config import topic_map
from piper_recorder.bag.convert import ConvertOptions
from piper_recorder.bag.ray_engine import RUN_MARKER, RayEngine, convert_task, init_local
from piper_recorder.bag.run import BagJob, RunSummary, convert_many
from piper_recorder.bag.synth import SynthScenario, scenario_messages, write_bag
from piper_recorder.cli.bag2dataset import main as bag2dataset
from piper_recorder.lerobot.validate import validate_root
from piper_recorder.recording.config import RECORDER_CONFIGS, load_config
from rgbd_writer.validate import validate_file

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
W, H = 64, 48
CAMS = ("cam_front", "cam_wrist")
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: 2 CPUs on 127.0.0.1 (two workers convert at once). Its session
    files, and those of the clusters the CLI starts, go to a directory of the module's (short: Ray's socket
    paths must fit 107 bytes), removed at its end.
    """
    temp = tempfile.mkdtemp(prefix="ray-")
    saved = {k: os.environ.get(k) for k in (*RAY_ENV, "RAY_TMPDIR")}
    os.environ.update(RAY_ENV, RAY_TMPDIR=temp)
    os.environ.pop("RAY_ADDRESS", None)
    init_local(ray, 2)  # ray.init(address="local", num_cpus=2, ...): 127.0.0.1, no dashboard
    try:
        yield ray.cluster_resources()
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("cfg") / "recorders.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "lerobot_recorder": {
                    "ros__parameters": {
                        "task": "config task",
                        "cameras": list(CAMS),
                        "camera_width": W,
                        "camera_height": H,
                    }
                },
                "rgbd_recorder": {"ros__parameters": {"camera": "cam_front", "camera_width": W, "camera_height": H}},
            }
        )
    )
    return p


# ---- the local cluster listens on loopback only (issue #21 item 9) ------------------------------------
def _descendants(root: int) -> set[int]:
    """``root`` and every process below it (from /proc: Ray's node processes are the driver's children,
    its workers the raylet's).
    """
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def _hex_addr(text: str) -> str:
    """An address of /proc/net/tcp{,6}: little-endian 32-bit words of hex."""
    import ipaddress
    import struct

    raw = bytes.fromhex(text)
    words = b"".join(struct.pack("<I", w) for w in struct.unpack(f">{len(raw) // 4}I", raw))
    return str(ipaddress.ip_address(words))


def _listening(pids: set[int]) -> list[tuple[int, str, str, int]]:
    """(pid, process name, address, port) of every listening TCP and bound UDP socket the processes hold,
    from the kernel's tables (what `ss -ltnup` shows).
    """
    inode_pid: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inode_pid[target[8:-1]] = pid
        except OSError:
            continue
    out = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            local, state, inode = f[1], f[3], f[9]
            if inode in inode_pid and (state == "0A" or table.startswith("udp")):
                addr, port = local.split(":")
                pid = inode_pid[inode]
                try:
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    name = "?"
                out.append((pid, name, _hex_addr(addr), int(port, 16)))
    return out


def _is_loopback(addr: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(addr)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_local_cluster_listens_on_loopback_only_and_wants_its_token(cluster):
    @ray.remote
    def pid() -> int:
        return os.getpid()

    @ray.remote
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    probe = Probe.remote()
    worker_pids = {ray.get(pid.remote()), ray.get(probe.pid.remote())}  # a task's worker and an actor's
    procs = _descendants(os.getpid())
    assert worker_pids <= procs
    sockets = _listening(procs)
    names = {name for _p, name, _a, _port in sockets}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), sockets
    assert {p for p, *_ in sockets} & worker_pids, sockets  # the workers' own servers were seen
    wide = [s for s in sockets if not _is_loopback(s[2])]
    assert wide == [], wide  # nothing on '::', 0.0.0.0 or the host's address
    # token authentication: the runtime-env agent (HTTP) refuses a request without this run's token
    agent = [s for s in sockets if "RuntimeEnv" in Path(f"/proc/{s[0]}/cmdline").read_text() or "RuntimeEnv" in s[1]]
    assert agent, sockets
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{agent[0][3]}/get_runtime_envs_info"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=10)
    assert e.value.code in (401, 403)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(
            urllib.request.Request(url, data=b"", method="POST", headers={"Authorization": "Bearer not-the-token"}),
            timeout=10,
        )
    assert e.value.code in (401, 403)
    ok = urllib.request.Request(
        url, data=b"", method="POST", headers={"Authorization": f"Bearer {os.environ['RAY_AUTH_TOKEN']}"}
    )
    with urllib.request.urlopen(ok, timeout=10) as r:
        assert r.status == 200
    ray.kill(probe)


@pytest.fixture(scope="module")
def bags(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("bags")
    return [
        write_bag(
            d / f"b{i}",
            scenario_messages(
                SynthScenario(
                    duration_s=2.5 + 2.0 * (i == 1),
                    seed=i,
                    t0_ns=1_700_000_000_000_000_000 + i * 10**10,
                    cameras=CAMS,
                    episodes=[(0.3, 1.1), (1.4, 2.2 + 2.0 * (i == 1))],
                    task=f"task {i % 2}",
                )
            ),
            "sqlite3",
        )
        for i in range(4)
    ]


def options(fmt: str, cfg: Path) -> ConvertOptions:
    settings = load_config(RECORDER_CONFIGS[fmt], str(cfg))
    return ConvertOptions(fmt=fmt, settings=settings, topics=topic_map(fmt, settings, None))


def convert(
    bags: list[Path], out: Path, cfg: Path, engine: RayEngine | None = None, jobs: int = 2, fmt: str = "lerobot"
) -> RunSummary:
    return convert_many(bags, options(fmt, cfg), out, jobs=jobs, engine=engine, log=lambda m: None)


def episodes(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "meta" / "episodes.jsonl").read_text().splitlines()]


def frames(path: Path) -> list[tuple[int, np.ndarray]]:
    with av.open(str(path)) as c:
        return [(f.pts, f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]


def assert_same_root(a: Path, b: Path) -> None:
    """Every parquet byte-identical, every video's decoded frames identical, the same episodes/tasks/stats."""
    parquets = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    assert parquets and parquets == sorted(p.relative_to(b) for p in b.rglob("*.parquet"))
    for rel in parquets:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    videos = sorted(p.relative_to(a) for p in a.rglob("*.mp4"))
    assert videos and videos == sorted(p.relative_to(b) for p in b.rglob("*.mp4"))
    for rel in videos:
        fa, fb = frames(a / rel), frames(b / rel)
        assert len(fa) == len(fb) > 0 and [f[0] for f in fa] == [f[0] for f in fb], rel
        assert all(np.array_equal(x[1], y[1]) for x, y in zip(fa, fb)), rel
    for name in ("episodes.jsonl", "tasks.jsonl", "info.json", "stats.json"):
        assert (a / "meta" / name).read_bytes() == (b / "meta" / name).read_bytes(), name


def no_duplicates(root: Path) -> None:
    keys = [(e["source"]["fingerprint"], e["source"]["start_ns"]) for e in episodes(root)]
    assert len(keys) == len(set(keys))


def test_ray_engine_gives_the_local_engines_dataset_and_reports_bad_bags(cluster, bags, cfg, tmp_path):
    assert cluster["CPU"] == 2
    corrupt = tmp_path / "corrupt"
    shutil.copytree(bags[0], corrupt)
    db = next(corrupt.glob("*.db3"))
    db.write_bytes(db.read_bytes()[:4096] + os.urandom(8192))
    inputs = [bags[0], corrupt, bags[1], tmp_path / "missing", bags[2], bags[3]]

    local = convert(inputs, tmp_path / "local", cfg, jobs=2)
    bars: list[tuple[int, float, float]] = []
    engine = RayEngine()
    with_ray = convert_many(inputs, options("lerobot", cfg), tmp_path / "ray", engine=engine, log=lambda m: None)
    assert (
        [r.status for r in with_ray.results]
        == [r.status for r in local.results]
        == ["converted", "failed", "converted", "failed", "converted", "converted"]
    )
    assert "no such bag (on node " in (with_ray.results[3].error or "")
    assert with_ray.results[1].error and str(corrupt) in with_ray.results[1].error
    assert with_ray.episodes == local.episodes == 8
    assert validate_root(tmp_path / "ray", full=True) == []
    assert_same_root(tmp_path / "local", tmp_path / "ray")
    assert not list(tmp_path.glob(".*.bag2dataset"))  # staging gone

    # progress from the workers reaches the driver's bars (bag seconds, per bag)
    engine = RayEngine(window=2, poll_s=0.02)
    jobs_root = tmp_path / "prog_staging"
    jobs_root.mkdir()
    jobs = [BagJob(i, str(b), str(jobs_root / f"bag{i:05d}")) for i, b in enumerate([bags[1], bags[3]])]
    results = list(engine.results(jobs, options("lerobot", cfg), {}, lambda i, d, t: bars.append((i, d, t))))
    assert [r.status for r in results] == ["converted", "converted"]
    assert bars and {i for i, _, _ in bars} <= {0, 1}
    assert all(0 <= d <= t and t > 2 for _, d, t in bars)  # bag seconds of a 4.5 s / 2.5 s bag


def test_ray_rgbd_matches_local(cluster, bags, cfg, tmp_path):
    one, two = tmp_path / "local.hdf5", tmp_path / "ray.hdf5"
    convert(bags[:3], one, cfg, jobs=2, fmt="rgbd")
    assert convert(bags[:3], two, cfg, engine=RayEngine(), fmt="rgbd").episodes == 6
    assert validate_file(two, full=True) == []
    with h5py.File(one, "r") as a, h5py.File(two, "r") as b:
        for ds in ("observations/rgb_jpeg", "observations/depth_jp2"):
            assert len(a[ds]) == len(b[ds]) > 0 and all(bytes(x) == bytes(y) for x, y in zip(a[ds], b[ds]))
        for ds in (
            "transitions/actions",
            "observations/state/arm_eef",
            "transitions/terminals",
            "index/episode_lengths",
        ):
            assert np.array_equal(a[ds][()], b[ds][()])


def _worker_converting(bag: Path) -> int | None:
    """Pid of the Ray worker executing a bag task (Ray titles a busy worker ray::<function>) that has
    ``bag``'s database open right now, i.e. is in the middle of converting it.
    """
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if not Path(f"/proc/{name}/cmdline").read_bytes().startswith(b"ray::convert_task"):
                continue
            fds = [os.readlink(f"/proc/{name}/fd/{fd}") for fd in os.listdir(f"/proc/{name}/fd")]
        except OSError:
            continue
        if any(f.startswith(str(bag) + os.sep) and f.endswith(".db3") for f in fds):
            return int(name)
    return None


def _convert_killing_one_worker(bags: list[Path], out: Path, cfg: Path, retries: int) -> tuple[RunSummary, int]:
    """Run the Ray engine in a thread and SIGKILL the worker converting bags[1] (the longest) mid-bag."""
    box: dict[str, RunSummary] = {}
    t = threading.Thread(target=lambda: box.setdefault("s", convert(bags, out, cfg, RayEngine(retries=retries))))
    t.start()
    killed = None
    end = time.monotonic() + 240
    while killed is None and t.is_alive() and time.monotonic() < end:
        killed = _worker_converting(bags[1])
        if killed is not None:
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.005)
    t.join(300)
    assert not t.is_alive() and killed
    return box["s"], killed


@pytest.mark.timeout(600)
def test_killed_worker_is_retried_or_fails_alone_and_a_rerun_completes(cluster, bags, cfg, tmp_path):
    ref = tmp_path / "ref"
    convert(bags, ref, cfg, jobs=1)

    # with retries Ray re-runs the lost bag into a fresh attempt directory: the run completes itself
    retried, _ = _convert_killing_one_worker(bags, tmp_path / "retried", cfg, retries=1)
    assert [r.status for r in retried.results] == ["converted"] * 4
    no_duplicates(tmp_path / "retried")
    assert_same_root(ref, tmp_path / "retried")

    # without retries the killed worker's bag fails alone; the re-run converts only that bag
    out = tmp_path / "rerun"
    first, _ = _convert_killing_one_worker(bags, out, cfg, retries=0)
    failed = [r for r in first.results if r.status == "failed"]
    assert [r.bag for r in failed] == [str(bags[1])] and "Ray task failed (" in (failed[0].error or "")
    assert sum(r.status == "converted" for r in first.results) == 3
    assert validate_root(out) == []
    second = convert(bags, out, cfg, RayEngine())
    assert [r.status for r in second.results] == ["converted" if r is failed[0] else "skipped" for r in first.results]
    no_duplicates(out)
    assert sorted(json.dumps(e["source"], sort_keys=True) for e in episodes(out)) == sorted(
        json.dumps(e["source"], sort_keys=True) for e in episodes(ref)
    )
    assert validate_root(out, full=True) == []


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


@pytest.mark.timeout(600)
def test_cluster_killed_mid_run_then_rerun_completes_without_duplicates(cluster, bags, cfg, tmp_path):
    """The CLI starts its own local cluster; the driver and every Ray process of it die by SIGKILL mid-run."""
    ref = tmp_path / "ref"
    convert(bags, ref, cfg, jobs=1)
    out = tmp_path / "out"
    env = {**os.environ, **RAY_ENV}
    env.pop("RAY_ADDRESS", None)
    cmd = [
        sys.executable,
        "-m",
        "piper_recorder.cli.bag2dataset",
        *map(str, bags),
        "--format",
        "lerobot",
        "--out",
        str(out),
        "--config",
        str(cfg),
        "--engine",
        "ray",
        "--jobs",
        "2",
        "--no-progress",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    meta = out / "meta" / "episodes.jsonl"
    end = time.monotonic() + 300  # a local cluster starts in ~10 s; far longer on a loaded machine
    while p.poll() is None and time.monotonic() < end and (not meta.exists() or len(meta.read_text().splitlines()) < 2):
        time.sleep(0.01)
    tree = _descendants(p.pid)
    os.killpg(p.pid, signal.SIGKILL)
    for pid in tree:  # Ray daemons may have left the process group: the whole tree this test started
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait(10)
    n = len(episodes(out))
    assert 2 <= n < 8 or p.returncode == 0
    assert validate_root(out) == []
    again = convert(bags, out, cfg, RayEngine())
    assert not again.failed
    no_duplicates(out)
    assert [e["source"] for e in episodes(out)] == [e["source"] for e in episodes(ref)]
    assert validate_root(out, full=True) == []


def test_staging_not_shared_with_a_node_fails_its_bag_clearly(bags, cfg, tmp_path):
    """A task whose node does not see the run's marker (staging not on a shared path) converts nothing."""
    root = tmp_path / "staging"
    root.mkdir()
    (root / RUN_MARKER).write_text("another run")
    res = convert_task(BagJob(0, str(bags[0]), str(root / "bag00000")), options("lerobot", cfg), {}, None, "this run")
    assert res.status == "failed" and "is not visible on node" in (res.error or "")
    assert not (root / "bag00000").exists()


def test_cli_engine_arguments_and_ray_kept_out_of_the_package(bags, cfg, tmp_path, capsys, monkeypatch):
    base = [str(bags[0]), "--format", "lerobot", "--config", str(cfg), "--no-progress"]
    assert bag2dataset([*base, "--out", str(tmp_path / "a"), "--address", "127.0.0.1:1"]) == 2
    assert "--address applies to --engine ray only" in capsys.readouterr().err
    assert bag2dataset([*base, "--out", str(tmp_path / "a"), "--engine", "ray", "--address", "x:1", "--jobs", "2"]) == 2
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    assert bag2dataset([*base, "--out", str(tmp_path / "a"), "--engine", "ray"]) == 2
    assert "pip install 'piper_recorder[ray]'" in capsys.readouterr().err
    monkeypatch.undo()
    # nothing but the Ray engine itself imports ray: the recorders and the local engine never need it
    code = (
        "import sys, piper_recorder.bag.run, piper_recorder.bag.ray_engine, piper_recorder.cli.bag2dataset, "
        "piper_recorder.nodes.lerobot_recorder, piper_recorder.nodes.rgbd_recorder; "
        "sys.exit('ray' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
