"""The manual's reference pages are what the code says (docs/gen_reference.py generates them from the
nodes' config dataclasses and piper_recorder.names; `make docs` rewrites them), and mkdocs.yml's nav names
exactly the pages in docs/ (`mkdocs build --strict` in `make docs` checks the links themselves).
"""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from support.paths import ROOT


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reference_pages_equal_what_the_code_defines():
    pytest.importorskip("rclpy")  # the nodes' modules declare the parameters
    gen = _generator()
    for name, make in gen.PAGES.items():
        committed = (ROOT / "docs" / "reference" / name).read_text()
        assert committed == make(), f"docs/reference/{name} is out of date: run `make docs`"


def test_reference_covers_every_node_and_the_new_parameters():
    pytest.importorskip("rclpy")
    gen = _generator()
    text = gen.parameters_page()
    for node in ("lerobot_recorder", "rgbd_recorder", "policy", "dashboard", "quest_video", "teleop", "piper_arm"):
        assert f"## {node}\n" in text, node
    # the policy node and the dashboard take the recorders' pattern, under the same name and default
    for node in ("lerobot_recorder", "policy", "dashboard", "quest_video"):
        section = text.split(f"## {node}\n", 1)[1].split("\n## ", 1)[0]
        assert "| `image_topic_pattern` | `str` | `'/{cam}/color/image_raw'` |" in section, node


def test_type_names_keep_their_parameters():
    """A list parameter reads ``list[str]`` on every Python (3.10 takes ``list[str]`` for a class named list)."""
    name = _generator()._type_name
    assert [name(t) for t in (int, list[str], dict[str, float], str | None)] == [
        "int",
        "list[str]",
        "dict[str, float]",
        "str | None",
    ]


def _nav_files(nav) -> list[str]:
    out = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out += _nav_files(value) if isinstance(value, list) else [value]
    return out


def test_nav_names_exactly_the_pages():
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_files(cfg["nav"])
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages


def test_nodes_create_services_only_by_the_names_in_the_reference():
    """A service name written as a literal in a node would be missing from docs/reference/services.md:
    every ``create_service`` call takes its name from ``piper_recorder.names`` (a constant, or a loop over one).
    """
    import ast

    literal = []
    for path in sorted((ROOT / "piper_recorder" / "nodes").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "create_service" and len(node.args) > 1:
                name = node.args[1]
                if isinstance(name, ast.Constant) or (
                    isinstance(name, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in name.values)
                ):
                    literal.append(f"{path.name}:{node.lineno}")
    assert not literal, f"service names written as literals (put them in piper_recorder.names): {literal}"
