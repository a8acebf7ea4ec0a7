"""Real consumers read and train on what we write.

Each consumer runs in its own virtualenv that the Makefile builds on demand (`make consumers`), so
the project's .venv stays free of torch:
- `.venv-lerobot03` (`lerobot==0.3.3`, the last LeRobot that reads v2.0/v2.1 roots),
- `.venv-lerobot04` (`lerobot==0.4.4`, the newest for Python 3.11; reads only v3.0),
- `.venv-lerobot06` (`lerobot==0.6.1`, the newest on the index; needs Python >= 3.12, the Makefile's
  PYTHON312; reads only v3.0: test/consumers/lerobot06-facts.md).
The datasets are recorded by `piper-demo` through the real simulated ROS 2 graph (2 episodes of 4 s,
2 cameras at ``SIZE``): a v2.0 root (the default), a v2.1 root (`lerobot_version: v2.1`) and the v2.0 root
exported to v3.0 by `piper-export`, which both 0.4.4 and 0.6.1 read. The scripts under test/consumers/
run inside the consumer venvs:
- read_every_frame.py: `LeRobotDataset(repo_id, root=...)` with LeRobot's defaults (tolerance_s 1e-4 s,
  the value `lerobot-train` uses; default video backend) and fetches every row, i.e. decodes every
  frame of every camera with LeRobot's own timestamp checks;
- `lerobot-train` (ACT, CPU, a few steps; only the size flags and the offline flags of
  reference-facts §6 differ from the defaults), then policy_actions.py loads the saved checkpoint
  and checks it returns finite actions of the dataset's action width.

A missing consumer venv is built through make (minutes, several GB; the pip cache is shared).
`PIPER_CONSUMERS=skip` skips these tests visibly for a local run; it is refused when CI is set.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from support.consumers import (
    BIN,
    SCRIPTS,
    SIZE,
    DemoRoots,
    consumer_env,
    consumer_python,
    export_v30,
    record_demo,
    run_json,
    tail,
    timed,
    train_act,
)

EPISODES, SECONDS = 2, 4
# (version, the consumer venv that reads it): every consumer of each version
READERS = [("v2.0", "lerobot03"), ("v2.1", "lerobot03"), ("v3.0", "lerobot04"), ("v3.0", "lerobot06")]
READER_IDS = [f"{v}-{c}" for v, c in READERS]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1800),
]  # the first use may build a consumer venv (~5 min cold)


def make_roots(base: Path) -> DemoRoots:
    """The v2.0 root (the default), the v2.1 root (``lerobot_version: v2.1``) and the v2.0 root exported to v3.0."""

    def v21() -> Path:
        root = record_demo(base / "v21", EPISODES, SECONDS, SIZE, "--set", "lerobot_recorder.lerobot_version=v2.1")
        info = json.loads((root / "meta" / "info.json").read_text())
        assert info["codebase_version"] == "v2.1", f"lerobot_version=v2.1 wrote {info['codebase_version']}"
        return root

    makers: dict[str, Callable[[], Path]] = {
        "v2.0": lambda: record_demo(base / "v20", EPISODES, SECONDS, SIZE),
        "v2.1": v21,
        "v3.0": lambda: export_v30(roots.get("v2.0"), base / "v30"),
    }
    roots = DemoRoots(makers)
    return roots


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> DemoRoots:
    return make_roots(tmp_path_factory.mktemp("consumer_roots"))


def pinned_lerobot(consumer: str) -> str:
    """The lerobot release the consumer's requirements file pins (``lerobot[extras]==X``)."""
    text = (SCRIPTS / f"requirements-{consumer}.txt").read_text()
    m = re.search(r"^lerobot(?:\[[^\]]*\])?==(\S+)", text, re.M)
    assert m, f"requirements-{consumer}.txt pins no lerobot"
    return m.group(1)


@pytest.mark.parametrize(("version", "consumer"), READERS, ids=READER_IDS)
def test_lerobot_decodes_every_frame_at_default_tolerance(version, consumer, roots, hf_home):
    py = consumer_python(consumer)
    root = roots.get(version)
    t0 = time.monotonic()
    p, rep = run_json([str(py), str(SCRIPTS / "read_every_frame.py"), str(root)], consumer_env(hf_home), 900)
    timed(f"{consumer} reads every frame of {version}", t0)
    print(json.dumps(rep, indent=1))
    assert rep, f"no report from the reader ({p.returncode}):\n{tail(p.stdout + p.stderr)}"
    assert rep["lerobot"] == pinned_lerobot(consumer)  # the release under test, not another one
    assert "open_error" not in rep, rep["open_error"]
    assert rep["codebase_version"] == version
    assert rep["tolerance_s"] == pytest.approx(1e-4)  # LeRobot's default, not ours
    # its default decoder; LeRobot falls back to PyAV with only a warning when torchcodec cannot load
    assert rep["video_backend"] == "torchcodec"
    if version == "v3.0":  # nothing to convert or drop: e.g. 0.6.1 logs every info.json key it does not know
        assert rep["open_warnings"] == [], rep["open_warnings"]
    source = roots.get("v2.0") if version == "v3.0" else root  # v3.0 is the v2.0 root exported
    episodes_jsonl = (source / "meta" / "episodes.jsonl").read_text().splitlines()
    rows = sum(json.loads(ln)["length"] for ln in episodes_jsonl if ln.strip())
    assert rep["rows"] == rows and rep["episodes"] == EPISODES
    assert len(rep["cameras"]) == 2
    loaded = min(rep["decoded"].values())
    assert rep["failed_rows"] == 0, (
        f"{loaded} of {rep['rows']} rows load; {rep['failed_rows']} fail, first: {rep['first_error']}"
    )
    assert rep["decoded"] == dict.fromkeys(rep["cameras"], rows) and rep["bad_images"] == 0
    assert p.returncode == 0


def test_every_frame_lookup_rule_gets_the_paired_frame(roots, hf_home):
    """#11.6: torchvision's last-at-or-before after a keyframe seek (GR00T N1.5 torchvision_av),
    torchcodec played-at (GR00T torchcodec), torchcodec index in approximate mode within 1e-4 s
    (LeRobot's default) and OpenCV's CAP_PROP_FPS index + CAP_PROP_POS_FRAMES seek (GR00T opencv) all
    return frame k for row k of every episode and camera of the recorded root.
    """
    py = consumer_python("lerobot03")
    root = roots.get("v2.0")
    t0 = time.monotonic()
    p, rep = run_json([str(py), str(SCRIPTS / "lookup_rules.py"), str(root)], consumer_env(hf_home), 900)
    timed("lookup rules on v2.0", t0)
    print(json.dumps(rep))
    assert rep, f"no report ({p.returncode}):\n{tail(p.stdout + p.stderr)}"
    assert rep["rows"] > 0 and rep["misses"] == dict.fromkeys(rep["misses"], 0), json.dumps(rep["examples"])


@pytest.mark.parametrize(("version", "consumer"), READERS, ids=READER_IDS)
def test_lerobot_train_act_checkpoint_acts(version, consumer, roots, hf_home, tmp_path):
    py, root, env = consumer_python(consumer), roots.get(version), consumer_env(hf_home)
    ckpt = train_act(consumer, root, tmp_path / "train", env)
    t0 = time.monotonic()
    p, rep = run_json([str(py), str(SCRIPTS / "policy_actions.py"), str(ckpt), str(root)], env, 600)
    timed(f"{consumer} checkpoint actions on {version}", t0)
    print(json.dumps(rep))
    assert rep and p.returncode == 0, f"checkpoint check failed ({p.returncode}):\n{tail(p.stdout + p.stderr)}"
    assert rep["lerobot"] == pinned_lerobot(consumer)
    assert rep["finite"] and rep["action_shape"][-1] == rep["action_dim"] == 8
    assert "observation.state" in rep["inputs"] and any(k.startswith("observation.images.") for k in rep["inputs"])


def _curated_root(base: Path) -> tuple[Path, list[dict]]:
    """Three episodes saved by the recorders' episode controller through the real LeRobot writer (64x64,
    1 camera, 2 s each; the second with its camera stalled for 1 s: verdict bad), ok/bad by construction
    whatever the machine's load, unlike a graph recording.
    """
    from piper_recorder.lerobot.writer import LeRobotWriter
    from piper_recorder.recording.config import LeRobotRecorderConfig, lerobot_writer_config
    from piper_recorder.recording.targets import LeRobotTarget

    from support.curation import controller, record_episode

    root = base / "curated"
    cfg = LeRobotRecorderConfig(
        root=str(root), cameras=["cam_front"], camera_height=64, camera_width=64, lateness_s=0.0
    )
    c = controller(
        LeRobotTarget(LeRobotWriter(cfg.root, lerobot_writer_config(cfg)), fps=30, cameras=("cam_front",)), cfg, []
    )
    try:
        record_episode(c, 2.0, px=64)
        record_episode(c, 2.0, stall=(0.6, 1.6), px=64)
        record_episode(c, 2.0, px=64)
    finally:
        c.shutdown(save=False)
    eps = [json.loads(ln) for ln in (root / "meta" / "episodes.jsonl").read_text().splitlines() if ln.strip()]
    assert [e["verdict"] for e in eps] == ["ok", "bad", "ok"], [e["verdict_reasons"] for e in eps]
    return root, eps


def test_curation_filter_read_by_lerobot03_and_labels_kept_by_lerobot04(hf_home, tmp_path):
    """#24 item 4: ``piper-dataset label`` + ``filter --outcome success --verdict ok`` give a root LeRobot 0.3.3
    reads at its defaults (every frame decoded); the labelled root's v3.0 export carries outcome and verdict
    into meta/episodes/, and LeRobot 0.4.4 keeps them in ``dataset.meta.episodes``.
    """
    src, eps = _curated_root(tmp_path)
    labelled = tmp_path / "labelled"
    tool = str(BIN / "piper-dataset")
    for args in (
        ["label", str(src), "--episodes", "0", "--outcome", "success", "--note", "clean", "--out", str(labelled)],
        ["label", str(labelled), "--episodes", "1-2", "--outcome", "failure"],
    ):
        p = subprocess.run([tool, *args, "-q"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, tail(p.stdout + p.stderr)
    chosen = tmp_path / "chosen"
    p = subprocess.run(
        [tool, "filter", str(labelled), "--outcome", "success", "--verdict", "ok", "--out", str(chosen), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, tail(p.stdout + p.stderr)
    (kept,) = [json.loads(ln) for ln in (chosen / "meta" / "episodes.jsonl").read_text().splitlines() if ln.strip()]
    assert (kept["outcome"], kept["outcome_note"], kept["verdict"], kept["length"]) == (
        "success",
        "clean",
        "ok",
        eps[0]["length"],
    )
    t0 = time.monotonic()
    p, rep = run_json(
        [str(consumer_python("lerobot03")), str(SCRIPTS / "read_every_frame.py"), str(chosen)],
        consumer_env(hf_home),
        900,
    )
    timed("lerobot03 reads every frame of the filtered root", t0)
    assert rep and "open_error" not in rep, tail(p.stdout + p.stderr)
    assert rep["tolerance_s"] == pytest.approx(1e-4)
    assert rep["episodes"] == 1 and rep["rows"] == kept["length"] and rep["failed_rows"] == 0, rep
    assert rep["decoded"] == dict.fromkeys(rep["cameras"], kept["length"]) and rep["bad_images"] == 0
    v3 = tmp_path / "v3"
    p = subprocess.run(
        [str(BIN / "piper-export"), str(labelled), "--to", "v3.0", "--out", str(v3)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, tail(p.stdout + p.stderr)
    t0 = time.monotonic()
    p, rep = run_json(
        [str(consumer_python("lerobot04")), str(SCRIPTS / "read_curation.py"), str(v3)], consumer_env(hf_home), 900
    )
    timed("lerobot04 reads the curation columns of the v3.0 export", t0)
    assert rep and "error" not in rep, tail(p.stdout + p.stderr)
    assert [(e["outcome"], e["outcome_note"]) for e in rep["episodes"]] == [
        ("success", "clean"),
        ("failure", None),
        ("failure", None),
    ]
    assert [e["verdict"] for e in rep["episodes"]] == ["ok", "bad", "ok"]
    assert [e["verdict_reasons"] for e in rep["episodes"]] == [e["verdict_reasons"] for e in eps]
