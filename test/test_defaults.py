"""One default per timing setting (issue 12.1): the assembler, both recorder config classes (which the
nodes declare as parameters) and the bag converter (which loads those classes without --config) agree,
and the shipped parameter files set only what differs from it."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from piper_recorder.assembly import AssemblyConfig
from piper_recorder.launcher import config_path
from piper_recorder.recording.config import RECORDER_CONFIGS, load_config

TIMING = ("timestamp_mode", "lateness_s")


def _default(cls, name):
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


@pytest.mark.parametrize("fmt", sorted(RECORDER_CONFIGS))
def test_timing_defaults_agree_between_layers(fmt):
    cls = RECORDER_CONFIGS[fmt]
    assembler = {k: _default(AssemblyConfig, k) for k in TIMING}
    assert assembler["timestamp_mode"] == "nominal"                    # the mode every loader accepts
    assert {k: _default(cls, k) for k in TIMING} == assembler           # recorder class = node parameters
    assert {k: getattr(cls().assembly(), k) for k in TIMING} == assembler
    converter = load_config(cls, None)                                   # piper-bag2dataset without --config
    assert {k: getattr(converter, k) for k in TIMING} == assembler


@pytest.mark.parametrize("name", ["sim", "robot"])
def test_shipped_configs_do_not_repeat_timing_defaults(name):
    doc = yaml.safe_load(config_path(name).read_text())
    for fmt, cls in RECORDER_CONFIGS.items():
        params = (doc.get(cls.node_name) or {}).get("ros__parameters") or {}
        for key in TIMING:
            if key in params:
                assert params[key] != _default(cls, key), \
                    f"config/{name}.yaml: {cls.node_name}.{key} repeats the code default {params[key]!r}; remove it"
