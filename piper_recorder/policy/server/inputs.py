"""A ``/predict`` request -> the policy's input features, as the dataset columns it was trained on.

The checkpoint names its inputs (``config.input_features``: key -> type and shape). Ours come from
the recorder's columns: ``observation.state`` is the combined column (``arm_joint + arm_eef +
gripper``, the writer's ``COMBINED`` order) unless the client sends it whole; split columns
(``observation.arm_eef`` ...) pass through; ``observation.images.<cam>`` is camera ``<cam>``'s
frame as CHW float32 in [0, 1], the layout LeRobot's dataset hands the policy in training. Sizes
must match what the policy was trained on: the server never resizes (a silently rescaled camera
is a different observation); a mismatch is refused naming the feature.

numpy only: unit-tested in the project's venv, used by the LeRobot runner in the trainer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from piper_recorder.lerobot.format.features import COMBINED
from piper_recorder.names import IMAGES_PREFIX
from piper_recorder.policy.server.protocol import PredictRequest, RequestRefused

F32 = npt.NDArray[np.float32]
SINGLE_IMAGE = "observation.image"


@dataclass(frozen=True)
class InputFeature:
    """One policy input: LeRobot's FeatureType name ("STATE", "VISUAL", "ENV", ...) and shape."""

    key: str
    kind: str
    shape: tuple[int, ...]


def _state(feature: InputFeature, request: PredictRequest) -> F32:
    if feature.key in request.state:
        vec = request.state[feature.key]
    elif feature.key in COMBINED and all(p in request.state for p in COMBINED[feature.key]):
        vec = np.concatenate([request.state[p] for p in COMBINED[feature.key]]).astype(np.float32)
    else:
        parts = COMBINED.get(feature.key, ())
        need = f"{feature.key}" + (f" or its parts {', '.join(parts)}" if parts else "")
        raise RequestRefused(f"state lacks {need} (sent: {', '.join(sorted(request.state)) or 'none'})")
    if vec.shape != tuple(feature.shape):
        raise RequestRefused(
            f"{feature.key}: the policy was trained on shape {list(feature.shape)}, the request gives {list(vec.shape)}"
        )
    return vec.astype(np.float32)


def _camera(feature: InputFeature, request: PredictRequest) -> str:
    if feature.key.startswith(IMAGES_PREFIX):
        return feature.key[len(IMAGES_PREFIX) :]
    if feature.key == SINGLE_IMAGE and len(request.images) == 1:
        return next(iter(request.images))
    raise RequestRefused(
        f"{feature.key}: no camera of the request maps to it (sent: {', '.join(sorted(request.images)) or 'none'})"
    )


def _image(feature: InputFeature, request: PredictRequest) -> F32:
    cam = _camera(feature, request)
    if cam not in request.images:
        raise RequestRefused(
            f"{feature.key}: camera {cam!r} missing from images (sent: {', '.join(sorted(request.images)) or 'none'})"
        )
    rgb = request.images[cam]
    c, h, w = feature.shape
    if rgb.shape != (h, w, c):
        raise RequestRefused(
            f"{feature.key}: the policy was trained on {w}x{h}x{c} frames, "
            f"camera {cam!r} sends {rgb.shape[1]}x{rgb.shape[0]}x{rgb.shape[2]}"
        )
    return np.ascontiguousarray(rgb.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


def build_inputs(features: tuple[InputFeature, ...], request: PredictRequest) -> dict[str, F32]:
    """Every input feature from the request, or RequestRefused naming the first that cannot be."""
    out: dict[str, F32] = {}
    for f in features:
        if f.kind == "VISUAL":
            out[f.key] = _image(f, request)
        elif f.kind == "STATE":
            out[f.key] = _state(f, request)
        else:
            raise RequestRefused(f"{f.key}: input type {f.kind} has no source in the /predict protocol")
    return out
