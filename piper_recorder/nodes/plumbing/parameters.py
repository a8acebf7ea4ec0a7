"""Typed node parameters: every node declares its parameters from one typed dataclass (``declare_config``).

The config class is the single place that names, types and defaults a parameter, and a bad value fails at
start-up with a message naming it (``ParameterError``).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from piper_recorder.errors import PiperInputError
from piper_recorder.recording.config import coerce_param

C = TypeVar("C")


class ParameterError(PiperInputError, ValueError):
    """A node parameter has a wrong type or value; the message names the parameter."""


_ROS_TYPES: dict[Any, Parameter.Type] = {
    bool: Parameter.Type.BOOL,
    int: Parameter.Type.INTEGER,
    float: Parameter.Type.DOUBLE,
    str: Parameter.Type.STRING,
    list[str]: Parameter.Type.STRING_ARRAY,
    list[float]: Parameter.Type.DOUBLE_ARRAY,
    list[int]: Parameter.Type.INTEGER_ARRAY,
    list[bool]: Parameter.Type.BOOL_ARRAY,
}


def _coerce(name: str, typ: Any, value: Any) -> Any:
    try:
        return coerce_param(name, typ, value)
    except ValueError as exc:
        raise ParameterError(str(exc)) from exc


def _descriptor(name: str, typ: Any, settable: bool) -> ParameterDescriptor:
    return ParameterDescriptor(
        name=name,
        type=_ROS_TYPES[typ].value,
        read_only=not settable,
        description="may change at run time" if settable else "read at start-up; restart the node to change it",
    )


def declare_config(node: Node, cls: type[C], prefix: str = "") -> C:
    """Declare one statically typed ROS parameter per dataclass field and return the filled config.

    Defaults come from the class.

    Fields of type bool/int/float/str and list[...] of those map to ROS parameters of that type; a
    field named ``foo`` with ``prefix='bar.'`` becomes parameter ``bar.foo``. A start-up value (``-p``,
    ``--params-file``) is read with ``coerce_param`` (an int passes for a float, anything else of the
    wrong type is a ParameterError naming it). Every parameter is read-only (the node reads it once)
    except the class's ``runtime_params``; a change to one of those is checked by the config's
    ``check_runtime(name, value)`` (a reason string refuses it). If the class has ``validate()``, it
    runs last and its ValueError is re-raised as ParameterError.
    """
    hints = typing.get_type_hints(cls)
    runtime: frozenset[str] = getattr(cls, "runtime_params", frozenset())
    values: dict[str, Any] = {}
    fields: dict[str, str] = {}  # parameter name -> field name
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        typ = hints[f.name]
        if typ not in _ROS_TYPES:
            continue  # not a ROS parameter (e.g. nested config filled by the node itself)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        name = prefix + f.name
        # Declared untyped first to receive the start-up value as rcl parsed it (30 for a float field,
        # [] without a type), then typed by set_descriptor with the coerced value.
        given = node.declare_parameter(name, None, ParameterDescriptor(dynamic_typing=True)).value
        value = default if given is None else _coerce(name, typ, given)
        if value is not None:
            node.set_descriptor(
                name,
                _descriptor(name, typ, f.name in runtime),
                Parameter(name, _ROS_TYPES[typ], value).get_parameter_value(),
            )
        values[f.name] = value
        fields[name] = f.name
    try:
        cfg = cls(**values)
        validate = getattr(cfg, "validate", None)
        if callable(validate):
            validate()
    except ParameterError:
        raise
    except (ValueError, TypeError) as exc:
        raise ParameterError(f"{node.get_name()}: {exc}") from exc
    check = getattr(cfg, "check_runtime", None)
    if runtime and callable(check):

        def _on_set(params: list[Parameter]) -> SetParametersResult:
            for p in params:
                field_name = fields.get(p.name)
                if field_name in runtime:
                    reason = check(field_name, p.value)
                    if reason:
                        return SetParametersResult(successful=False, reason=f"{p.name}: {reason}")
            return SetParametersResult(successful=True)

        node.add_on_set_parameters_callback(_on_set)
    return cfg
