"""The architecture as tests: the package layout (a short list of modules at the root, every subpackage in one
tier: the graph over the cores over the formats over the base), no import cycle between modules or between
subpackages, and one place per concept (each shared helper defined once, names and file names stated once).

Every import counts, wherever it is written: at module level, under ``if TYPE_CHECKING:``, inside a function
(a lazy import is still a dependency, and a cycle through one is still a cycle), and ``importlib.import_module``
of a literal name. The tests keep the same rules: no module imports a test module, every ``test_*``
file holds tests, one polling wait, and the test tree mirrors the source tree.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT, TEST_DIR

PACKAGES = ("piper_recorder", "rgbd_writer")


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each source file parsed once per session (every test here walks all of them)."""
    return ast.parse(path.read_text())


@functools.cache
def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def _imported(m: str, p: Path) -> list[tuple[str, list[str]]]:
    """(base, names) of every import in ``m``'s source, anywhere in it, relative imports resolved:
    ``import a.b`` -> ("a.b", []), ``from a import b, c`` -> ("a", ["b", "c"]), and
    ``importlib.import_module("a.b")`` of a literal -> ("a.b", []).
    """
    pkg = (m if p.name == "__init__.py" else m.rpartition(".")[0]).split(".")
    out: list[tuple[str, list[str]]] = []
    for n in ast.walk(_tree(p)):
        if isinstance(n, ast.Import):
            out += [(a.name, []) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                base = ".".join(pkg[: len(pkg) - (n.level - 1)] + ([n.module] if n.module else []))
            out.append((base, [a.name for a in n.names]))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "import_module"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
        ):
            out.append((n.args[0].value, []))
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Which of our modules each of our modules imports, anywhere in its source (``_imported``)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for base, names in _imported(m, p):
            targets = (
                {next((c for c in (f"{base}.{a}", base) if c in mods), None) for a in names}
                if names
                else {base if base in mods else None}
            )
            graph[m] |= {t for t in targets if t and t != m}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    graph = _imports(_modules())
    assert _cycles(graph) == []
    # leaves import none of our modules but the names (itself a leaf)
    for leaf in (
        "piper_recorder.lerobot.format.layout",
        "piper_recorder.timebase",
        "piper_recorder.storage.durable",
        "piper_recorder.params.params_file",
        "piper_recorder.errors",
        "piper_recorder.names",
    ):
        assert graph[leaf] <= {"piper_recorder.names"} - {leaf}, f"{leaf} must stay a leaf, imports {graph[leaf]}"
    assert "piper_recorder.lerobot.writer.dataset_writer" not in graph["piper_recorder.lerobot.writer.meta_builders"]
    assert "piper_recorder.lerobot.writer.dataset_writer" not in graph["piper_recorder.lerobot.writer.crash_repair"]


# The package root holds only what every tier shares and a newcomer looks for first: the ROS names (the one place
# they are stated), the error base classes and the row/PTS time grid. Everything else lives in a subpackage.
ROOT_MODULES = {"piper_recorder", "piper_recorder.names", "piper_recorder.errors", "piper_recorder.timebase"}

# Each subpackage's tier, top to bottom: a module imports only from its own tier or a lower one. The graph (the
# nodes, planning and supervising them, the command-line tools) over the cores (plain-Python logic, no rclpy)
# over the dataset formats (the feature table: which inputs become which columns; LeRobot; RGB-D) over the base
# (file I/O, the CDR wire, what every process shares). rgbd_writer is a package of its own beside piper_recorder,
# at the formats' tier.
TIERS = {
    "graph": {"nodes", "graph", "cli"},
    "cores": {
        "assembly",
        "bag",
        "dashboard",
        "dataset_edit",
        "params",
        "piper",
        "policy",
        "quest",
        "recording",
        "replay",
        "sim",
        "teleop",
        "viewer",
    },
    "formats": {"features", "lerobot", "rgbd_writer"},
    "base": {"names", "errors", "timebase", "storage", "cdr", "process"},
}
TIER_ORDER = ("base", "formats", "cores", "graph")


def _unit(m: str) -> str:
    """The subpackage (or root module) ``m`` belongs to: piper_recorder.<unit>..., or rgbd_writer."""
    parts = m.split(".")
    return parts[0] if parts[0] != "piper_recorder" else (parts[1] if len(parts) > 1 else "")


def test_the_package_root_holds_only_the_agreed_modules():
    mods = _modules()
    loose = {m for m, p in mods.items() if m.startswith("piper_recorder") and p.parent == ROOT / "piper_recorder"}
    assert loose == ROOT_MODULES, f"put {sorted(loose - ROOT_MODULES)} in the subpackage of what it is for"
    assert _imports(mods)["piper_recorder"] == set(), "the package root's __init__ imports none of our modules"


def test_every_subpackage_is_in_one_tier_and_imports_downward_only():
    units = {_unit(m) for m in _modules()} - {""}
    placed = [u for tier in TIERS.values() for u in tier]
    assert len(placed) == len(set(placed)), "a subpackage is in two tiers"
    assert units == set(placed), f"unplaced: {sorted(units - set(placed))}, gone: {sorted(set(placed) - units)}"
    rank = {u: TIER_ORDER.index(t) for t, us in TIERS.items() for u in us}
    found = [
        f"{m} ({_unit(m)}) imports {t} ({_unit(t)})"
        for m, ts in _imports(_modules()).items()
        for t in sorted(ts)
        if _unit(t) and _unit(m) and rank[_unit(t)] > rank[_unit(m)]
    ]
    assert found == []


def test_no_cycles_between_subpackages():
    """Collapsed to subpackages (piper_recorder.<a>, then piper_recorder.<a>.<b>), the import graph (every import,
    function-level included) has no cycle: a subpackage never needs one that needs it.
    """
    graph = _imports(_modules())
    for depth in (2, 3):

        def group(m: str) -> str:
            return ".".join(m.split(".")[:depth])

        collapsed: dict[str, set[str]] = {}
        for m, ts in graph.items():
            collapsed.setdefault(group(m), set()).update(group(t) for t in ts if group(t) != group(m))
        for ts in list(collapsed.values()):
            for t in ts:
                collapsed.setdefault(t, set())
        assert _cycles(collapsed) == [], f"depth {depth}"


@pytest.mark.integration  # a fresh interpreter: what the import loads, untouched by the suite's imports
def test_video_concat_does_not_load_the_assembler():
    code = (
        "import sys, piper_recorder.lerobot.export.video_concat, piper_recorder.lerobot.maintenance.retime; "
        "print(sorted(m for m in sys.modules if m.startswith('piper_recorder.assembly')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# piper_recorder.lerobot's subpackages: each imports (at module level or inside a function) only the ones named here.
# validate reads the raw files on its own, as the independent check of the typed read model (format.root).
LEROBOT = "piper_recorder.lerobot"
LEROBOT_LAYERS = {
    "format": set(),
    "writer": {"format"},
    "export": {"format"},
    "validate": {"format"},
    "maintenance": {"format", "writer"},
}


def _all_imports(m: str, p: Path) -> set[str]:
    """Every module name ``m`` imports anywhere in its source, ours or not (``from a import b``: a and a.b)."""
    return {x for base, names in _imported(m, p) for x in [base, *(f"{base}.{a}" for a in names)]}


def test_the_lerobot_subpackages_are_layered():
    assert set(LEROBOT_LAYERS) == {m.split(".")[2] for m in _modules() if m.startswith(LEROBOT + ".")}
    found = []
    for m, p in _modules().items():
        if m.startswith(LEROBOT + "."):
            layer = m.split(".")[2]
            found += [
                f"{m} imports {t}"
                for t in sorted(_all_imports(m, p))
                if t.startswith(LEROBOT + ".") and t.split(".")[2] not in LEROBOT_LAYERS[layer] | {layer}
            ]
    assert found == []
    assert f"{LEROBOT}.format.root" not in _all_imports(f"{LEROBOT}.validate", _modules()[f"{LEROBOT}.validate"])


# The LeRobot meta file names are stated only in the format's layout (INFO, EPISODES, TASKS, STATS, ...): code and
# messages use its names. Docstrings and --help texts (EPILOG) may mention the files, as for the names module below.
LAYOUT_MODULE = f"{LEROBOT}.format.layout"
META_FILE_LITERALS = (
    "info.json",
    "episodes.jsonl",
    "tasks.jsonl",
    "stats.json",
    "episodes_stats.jsonl",
    "modality.json",
    "relative_stats.json",
    "delta_stats.json",
    "collection_sessions.jsonl",
    "collection_meta.json",
    "dataset_edits.jsonl",
    "piper_export.json",
)


def test_meta_file_names_are_stated_only_in_the_layout():
    found = []
    for m, p in _modules().items():
        if m == LAYOUT_MODULE or not m.startswith("piper_recorder"):
            continue
        tree = _tree(p)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and any(lit in node.value for lit in META_FILE_LITERALS)
            ):
                found.append(f"{m}:{node.lineno}: {node.value!r}")
    assert found == [], f"state these through {LAYOUT_MODULE}"


def test_each_shared_helper_is_defined_once():
    names = {
        "fsync_dir",
        "fsync_file",
        "atomic_write",
        "load_config",
        "read_params_file",
        "grid_timestamp",
        "pts_ticks",
        "frame_period_ticks",
        "data_relpath",
        "video_relpath",
        "data_file",
        "video_file",
        "ROTATION_TYPES",
        "TICKS",
        "STAGING",
        "SchemaError",
        "EpisodeStateError",
        "DatasetError",
        "RgbdError",
        "PiperError",
        "PiperInputError",
        # the message helpers the nodes and the bag converter share (assembly.messages)
        "image_to_numpy",
        "joint_positions",
        "stamp_to_ns",
    }
    where: dict[str, list[str]] = {n: [] for n in names}
    for m, p in _modules().items():
        for node in _tree(p).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
                where[node.name].append(m)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in names:
                        where[t.id].append(m)
    assert {n: ms for n, ms in where.items() if len(ms) != 1} == {}


# Literals only piper_recorder.names may state: the image feature prefix and the camera topic suffixes
# (every colour/depth/info topic is built from its patterns), and the graph's topic and service names
# (NAME_PATTERNS: a name led by a slash that follows no word, so a path such as piper_recorder/policy/ is
# none; a node's ``/{node}/status`` and ``~/status`` both hold one). Docstrings and --help texts (EPILOG)
# may mention them: they show a user what to write.
NAMES_MODULE = "piper_recorder.names"
NAME_LITERALS = ("observation.images.", "color/image_raw", "aligned_depth_to_color/", "color/camera_info")
NAME_PATTERNS = tuple(
    re.compile(r"(?<![\w.])/" + p)
    for p in (
        r"(arm|quest|teleop|policy)/",
        r"(episode_events|diagnostics|reward|status)\b",
        r"(start|stop|discard|delete_last|label)_episode\b",
    )
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id.endswith("EPILOG") for t in node.targets)
        ):
            out.add(id(node.value))
    return out


def test_names_are_stated_only_in_the_names_module():
    found = []
    for m, p in _modules().items():
        if m == NAMES_MODULE:
            continue
        tree = _tree(p)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found += [f"{m}:{node.lineno}: {lit!r}" for lit in NAME_LITERALS if lit in node.value]
                found += [f"{m}:{node.lineno}: {node.value!r}" for p in NAME_PATTERNS if p.search(node.value)]
    assert found == [], "state these through piper_recorder.names"


def test_one_camera_placeholder():
    """Every camera topic pattern names its camera {cam} (the recorders' parameter), never {camera}."""
    from piper_recorder.names import CAMERA_PLACEHOLDER

    assert CAMERA_PLACEHOLDER == "{cam}"
    found = []
    for m, p in _modules().items():
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "/{camera}" in node.value:
                found.append(f"{m}:{node.lineno}")
    assert found == []


# The launch plan (config -> processes to start) is plain data work: the launch files import it inside
# `ros2 launch` and its tests run in milliseconds. Starting, watching and stopping processes is the
# supervisor's (piper_recorder.graph.supervisor), which no planning module imports.
GRAPH = "piper_recorder.graph"
PLAN_MODULES = {
    f"{GRAPH}.{m}"
    for m in (
        "arguments",
        "errors",
        "executables",
        "graph_node",
        "headset",
        "install",
        "params_dump",
        "plan",
        "ports",
        "realsense",
    )
}
PLAN_MODULE, SUPERVISOR_MODULE = f"{GRAPH}.plan", f"{GRAPH}.supervisor"
NOT_IN_THE_PLAN = {"subprocess", "signal", "threading", "multiprocessing", "asyncio", "rclpy"}


def _imported_names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if isinstance(node, ast.ImportFrom) and not node.level:
        return {node.module or ""}
    return set()


def test_the_launch_plan_runs_no_process():
    mods = _modules()
    assert set(mods) >= PLAN_MODULES
    for m in sorted(PLAN_MODULES):
        found = _all_imports(m, mods[m])
        assert {name.partition(".")[0] for name in found} & NOT_IN_THE_PLAN == set(), m
        assert SUPERVISOR_MODULE not in found, f"{m} imports the supervisor"
    assert PLAN_MODULE in _imports(mods)[SUPERVISOR_MODULE]


@pytest.mark.integration  # a fresh interpreter: what the import loads, untouched by the suite's imports
def test_planning_does_not_load_the_supervisor():
    code = f"import sys, {PLAN_MODULE}, {GRAPH}.graph_node; print('{SUPERVISOR_MODULE}' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_the_teleop_session_needs_no_ros():
    """The teleop node adapts piper_recorder.teleop.session; the session and all it uses are plain Python."""
    ros = ("rclpy", "std_msgs", "sensor_msgs", "geometry_msgs", "diagnostic_msgs", "std_srvs", "piper_recorder.nodes")
    found = {
        m: sorted(n for node in ast.walk(_tree(p)) for n in _imported_names(node) if n.startswith(ros))
        for m, p in _modules().items()
        if m.startswith("piper_recorder.teleop")
    }
    assert "piper_recorder.teleop.session" in found
    assert {m: names for m, names in found.items() if names} == {}


# this project's own issues, as the source used to cite them: the word issue and its number, a number after "(#" or
# "(issue #"; a public repository's issue quoted as evidence names its repository ("piper_sdk issue #73") and stays
ISSUE_REFERENCE = re.compile(r"\bissues?\s+\d|\(#\d+\)|\(issues?\s+#\d+\)", re.IGNORECASE)


def test_no_source_file_cites_an_issue():
    """Source and tests say why in their own words; which issue asked for it is history, and lives in the commits."""
    files = [*(p for d in (*PACKAGES, "launch", "bench") for p in (ROOT / d).rglob("*.py")), *_test_tree_files()]
    hits = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]
    assert not hits, "\n".join(hits)


# The tests keep the same rule: what two test files share lives in the helper package test/support/ (or in
# conftest.py's fixtures), never in one of the tests, so that a test module can move or go without breaking
# another; a wait polls through the one support.waiting.wait_for, which says what timed out.


@functools.cache
def _test_tree_files() -> tuple[Path, ...]:
    return tuple(p for p in sorted(TEST_DIR.rglob("*.py")) if "node_modules" not in p.parts)


def _imported_test_modules(tree: ast.Module) -> set[str]:
    """Every ``test_*`` module an import names, anywhere in the file (function-level imports too)."""
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found |= {a.name for a in n.names if any(part.startswith("test_") for part in a.name.split("."))}
        elif isinstance(n, ast.ImportFrom):
            parts = (n.module or "").split(".")
            if any(part.startswith("test_") for part in parts):
                found.add(n.module or "")
            elif not n.module or n.level:
                found |= {a.name for a in n.names if a.name.startswith("test_")}
        elif (
            isinstance(n, ast.Call)
            and getattr(n.func, "attr", getattr(n.func, "id", "")) == "import_module"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and str(n.args[0].value).startswith("test_")
        ):
            found.add(str(n.args[0].value))
    return found


def test_no_module_imports_a_test_module():
    files = [*_test_tree_files(), *sorted((ROOT / "bench").rglob("*.py"))]
    found = {str(p.relative_to(ROOT)): sorted(ms) for p in files if (ms := _imported_test_modules(_tree(p)))}
    assert found == {}, "move what they share into test/support/"


def test_every_test_module_holds_a_test():
    def has_test(tree: ast.Module) -> bool:
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test"):
                return True
            if (
                isinstance(n, ast.ClassDef)
                and n.name.startswith("Test")
                and any(
                    isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test") for m in n.body
                )
            ):
                return True
        return False

    empty = [
        str(p.relative_to(ROOT)) for p in _test_tree_files() if p.name.startswith("test_") and not has_test(_tree(p))
    ]
    assert empty == [], "a helper module takes a name without the test_ prefix (test/support/)"


def test_one_polling_wait_in_the_tests():
    names = {"wait_for", "wait_until", "_wait_for", "_wait_until"}
    where = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in _test_tree_files()
        for n in ast.walk(_tree(p))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names
    ]
    assert [w.partition(":")[0] for w in where] == ["test/support/waiting.py"], where


# The test tree mirrors the source tree: the tests of piper_recorder/<package>/ (at any depth: lerobot/writer/)
# live in test/<package>/, those of rgbd_writer/ in test/rgbd_writer/, so the tests of a module are found where
# its path says. Two folders mirror no package: test/project/ for the repository's own rules (architecture,
# style, types, tiers, packaging, launch files, configs, docs) and test/system/ for the graph as a whole
# (several nodes as real processes, end to end). Helpers live in test/support/, the scripts the consumer venvs
# run in test/consumers/; neither holds a test, and no test folder holds a helper.
TEST_FOLDERS = {"project": "the repository's own rules", "system": "the graph as a whole, end to end"}
HELPER_FOLDERS = {"support", "consumers"}


def _mirrored_source(folder: Path) -> Path:
    """The source folder a test folder stands for (``test/lerobot/writer`` -> ``piper_recorder/lerobot/writer``,
    ``test/rgbd_writer`` -> ``rgbd_writer``); it mirrors a package when that folder is one.
    """
    parts = folder.relative_to(TEST_DIR).parts
    return ROOT.joinpath(*parts) if parts[0] in PACKAGES else ROOT.joinpath("piper_recorder", *parts)


def _misplaced(path: Path) -> str | None:
    """Why a file of the test tree is not where the layout puts it, or None."""
    rel = path.relative_to(TEST_DIR)
    top = rel.parts[0]
    if len(rel.parts) == 1:
        if path.name == "conftest.py":
            return None
        return (
            "at the top of test/: a test goes in the folder of the package it tests (test/<package>/), "
            "test/project/ or test/system/; a helper in test/support/"
        )
    if top in HELPER_FOLDERS:
        return f"a test in test/{top}/, which holds helpers only" if path.name.startswith("test_") else None
    if not path.name.startswith("test_"):
        return "a helper module beside the tests: helpers live in test/support/ (imported as support.<name>)"
    if top in TEST_FOLDERS:
        return None if len(rel.parts) == 2 else f"in a subfolder of test/{top}/, which has none"
    source = _mirrored_source(path.parent)
    if not (source / "__init__.py").is_file():
        return (
            f"{path.parent.relative_to(ROOT)}/ mirrors no source package ({source.relative_to(ROOT)}/ is none): "
            f"name the folder after the package the test is about, or use test/project/ "
            f"({TEST_FOLDERS['project']}) or test/system/ ({TEST_FOLDERS['system']})"
        )
    return None


def test_the_test_tree_mirrors_the_source_tree():
    found = [f"{p.relative_to(ROOT)}: {why}" for p in _test_tree_files() if (why := _misplaced(p))]
    assert found == [], "\n".join(found)


def test_test_module_names_are_unique():
    """Test modules are imported by their file names (the test folders are not packages): two test files of
    the same name in different folders would stop the collection.
    """
    seen: dict[str, list[str]] = {}
    for p in _test_tree_files():
        if p.name.startswith("test_"):
            seen.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    assert {n: ps for n, ps in seen.items() if len(ps) > 1} == {}
