"""One error root: every exception class the project defines derives from ``PiperError``, the names
the two formats share are defined once, and the console scripts exit 2 only for the project's input
errors, OSError and a decoder's own "does not decode" errors; a bare ValueError (a bug) exits 1 with
its traceback. The exit codes are checked through the real console scripts as child processes; the bug
is injected with a ``sitecustomize`` module on PYTHONPATH that patches the validator before main runs.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from piper_recorder import errors
from piper_recorder.errors import (
    DatasetError,
    EpisodeStateError,
    PiperError,
    PiperInputError,
    RgbdError,
    SchemaError,
    is_input_error,
)

from support.lerobot_fixtures import small_root
from support.paths import ROOT

BIN = Path(sys.executable).parent
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
# An AssertionError on purpose: the teleop limit checks fail the way an `assert` does (tests and the
# node's self-check catch AssertionError), so it stays outside the project's error tree.
OUTSIDE_THE_ROOT = {"LimitViolation"}


def _exception_classes() -> dict[str, list[tuple[str, list[str]]]]:
    """Class name -> [(module path, base names)] for every class that derives (by name) from an exception."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for pkg in ("piper_recorder", "rgbd_writer"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [
                        b.id if isinstance(b, ast.Name) else b.attr
                        for b in node.bases
                        if isinstance(b, (ast.Name, ast.Attribute))
                    ]
                    found.setdefault(node.name, []).append((str(p.relative_to(ROOT)), bases))
    known = set(BUILTIN_EXCEPTIONS)
    while True:  # a class is an exception class if one of its bases is
        more = {n for n, defs in found.items() if n not in known and any(set(b) & known for _, b in defs)}
        if not more:
            break
        known |= more
    return {n: defs for n, defs in found.items() if n in known and n not in BUILTIN_EXCEPTIONS}


def test_every_project_exception_derives_from_piper_error():
    classes = _exception_classes()
    assert len(classes) >= 25, sorted(classes)
    rooted = {"PiperError"}
    while True:
        more = {n for n, defs in classes.items() if n not in rooted and all(set(b) & rooted for _, b in defs)}
        if not more:
            break
        rooted |= more
    assert sorted(set(classes) - rooted - OUTSIDE_THE_ROOT) == []


def test_each_exception_name_is_defined_once():
    twice = {n: [m for m, _ in defs] for n, defs in _exception_classes().items() if len(defs) > 1}
    assert twice == {}


def test_the_formats_share_one_schema_and_one_episode_state_error():
    from piper_recorder.lerobot.format import errors as lerobot_errors
    from rgbd_writer import errors as rgbd_errors

    assert lerobot_errors.SchemaError is rgbd_errors.SchemaError is SchemaError
    assert lerobot_errors.EpisodeStateError is rgbd_errors.EpisodeStateError is EpisodeStateError
    for cls in (SchemaError, EpisodeStateError):  # either format's callers catch them with their base
        assert issubclass(cls, DatasetError) and issubclass(cls, RgbdError)
    assert issubclass(SchemaError, ValueError) and issubclass(EpisodeStateError, RuntimeError)


def test_input_errors_are_the_projects_oserror_and_decoders_never_a_bare_value_error():
    import av.error
    import pyarrow as pa

    assert (PiperInputError, OSError) == errors.INPUT_ERRORS
    for exc in (
        SchemaError("x"),
        DatasetError("x"),
        FileNotFoundError("x"),
        json.JSONDecodeError("x", "", 0),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        pa.lib.ArrowInvalid("x"),
        av.error.InvalidDataError(1094995529, "x"),
    ):
        assert is_input_error(exc), exc
    for exc in (ValueError("x"), TypeError("x"), KeyError("x"), RuntimeError("x"), PiperError("x")):
        assert not is_input_error(exc), exc
    assert errors.describe(SchemaError("bad  column\n x")) == "bad column x"
    assert errors.describe(ValueError("boom")) == "ValueError: boom"


def test_errors_is_a_leaf():
    tree = ast.parse((ROOT / "piper_recorder/errors.py").read_text())
    imported = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "json", "sys"}, imported


# -- exit codes of the real console scripts -------------------------------------------------------

INJECT = """
import piper_recorder.lerobot.validate as v
def _raise(*a, **k):
    raise {exc}
v.validate_root = _raise
"""


def _run(args: list[str], tmp_path: Path, inject: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if inject is not None:
        site = tmp_path / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(INJECT.format(exc=inject))
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return small_root(tmp_path_factory.mktemp("errors") / "root", lengths=(5,), cameras=("cam_front",))


@pytest.mark.integration
def test_garbled_input_exits_2_with_one_line(tmp_path, root):
    bad = tmp_path / "bad"
    shutil.copytree(root, bad)
    (bad / "meta/info.json").write_text('{"codebase_version": ')  # a JSONDecodeError
    p = _run(["piper-view", str(bad), "--out", str(tmp_path / "r.html")], tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.strip().startswith("piper-view:"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    "exc, code",
    [
        ("ValueError('a bug in the reading code')", 1),
        ("KeyError('features')", 1),
        ("__import__('piper_recorder.errors').errors.SchemaError('column x: bad shape')", 2),
        ("FileNotFoundError(2, 'No such file', 'meta/tasks.jsonl')", 2),
    ],
)
def test_console_script_exit_code_follows_the_error_class(tmp_path, root, exc, code):
    p = _run(["piper-validate", str(root)], tmp_path, inject=exc)
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    if code == 1:  # a bug: its traceback and a line saying it is one
        assert "Traceback" in p.stderr and "piper-validate: internal error (a bug" in p.stderr, p.stderr
    else:
        assert "Traceback" not in p.stderr and p.stderr.startswith("piper-validate: "), p.stderr
