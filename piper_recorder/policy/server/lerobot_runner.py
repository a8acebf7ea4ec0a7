"""Any LeRobot ``PreTrainedPolicy`` checkpoint as a ``Runner`` (ACT, diffusion, SmolVLA, pi0, ...).

Loading and pre/post-processing are LeRobot's own: ``PreTrainedConfig.from_pretrained`` ->
``get_policy_class(type).from_pretrained``; LeRobot >= 0.4 saves its normalisation (from the
training dataset's stats) as processor pipelines next to the weights, loaded with
``make_pre_post_processors(config, pretrained_path=...)``; LeRobot 0.3.x normalises inside the
policy. torch and lerobot are imported when a runner is built, so this module imports anywhere.

Each query is answered from that observation alone (PiperPilot's protocol has no session): the
policy is ``reset()`` and asked for a whole chunk. Policies that predict from the current
observation (ACT, SmolVLA, pi0, ...) answer through ``predict_action_chunk`` (ACT: all
``chunk_size`` rows); policies that keep an observation history in queues (diffusion, VQ-BeT,
TD-MPC) through ``n_action_steps`` calls of ``select_action`` after the reset, their own episode
start (the first call generates the chunk, the rest pop it).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from piper_recorder.errors import PiperInputError
from piper_recorder.policy.server.inputs import InputFeature, build_inputs
from piper_recorder.policy.server.protocol import ACTION_WIDTH, PredictRequest

QUEUE_POLICIES = frozenset({"diffusion", "vqbet", "tdmpc"})
SUPPORTED_INPUTS = frozenset({"STATE", "VISUAL"})


class CheckpointError(PiperInputError, RuntimeError):
    """The checkpoint cannot be served (missing files, unsupported inputs, action width)."""


def content_hash(checkpoint: Path) -> str:
    """sha256 over the checkpoint's files (names and bytes, sorted): what the rollout names."""
    h = hashlib.sha256()
    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(checkpoint)).encode("utf-8") + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def _lerobot_version() -> str:
    try:
        return version("lerobot")
    except PackageNotFoundError:
        return "unknown"


class LeRobotRunner:
    """Loads a checkpoint directory and answers requests.

    The directory is ``.../pretrained_model``: config.json, model.safetensors and, from LeRobot 0.4,
    policy_{pre,post}processor*.json/safetensors.
    """

    def __init__(self, checkpoint: str | Path, device: str = "cpu"):
        self.checkpoint = Path(checkpoint).resolve()
        if not (self.checkpoint / "config.json").is_file():
            raise CheckpointError(
                f"{self.checkpoint}: no config.json (expected a LeRobot pretrained_model "
                f"directory, e.g. outputs/train/.../checkpoints/last/pretrained_model)"
            )
        try:
            self._torch: Any = importlib.import_module("torch")
            configs: Any = importlib.import_module("lerobot.configs.policies")
            factory: Any = importlib.import_module("lerobot.policies.factory")
        except ImportError as e:
            raise CheckpointError(
                f"torch and lerobot must be importable here ({e}): run the server in the "
                f"trainer's environment (README: Running a policy)"
            ) from e
        cfg = configs.PreTrainedConfig.from_pretrained(str(self.checkpoint))
        cfg.device = device
        self.config: Any = cfg
        self.device = device
        self.policy: Any = factory.get_policy_class(cfg.type).from_pretrained(str(self.checkpoint), config=cfg)
        self.policy.eval()
        self.features = tuple(
            InputFeature(k, str(getattr(f.type, "value", f.type)), tuple(f.shape))
            for k, f in cfg.input_features.items()
        )
        bad = [f"{f.key} ({f.kind})" for f in self.features if f.kind not in SUPPORTED_INPUTS]
        if bad:
            raise CheckpointError(f"inputs the /predict protocol cannot provide: {', '.join(bad)}")
        action = cfg.output_features.get("action")
        shape = None if action is None else tuple(action.shape)
        if shape is None or len(shape) != 1 or shape[0] < ACTION_WIDTH or shape[0] % ACTION_WIDTH:
            raise CheckpointError(
                f"the policy's action is {None if shape is None else list(shape)}; /predict answers "
                f"{ACTION_WIDTH} columns per arm (one arm's action.arm_eef + action.gripper, two arms' 16)"
            )
        self.action_width = int(shape[0])
        self._pre: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self._post: Callable[[Any], Any] | None = None
        make = getattr(factory, "make_pre_post_processors", None)
        if make is not None:  # LeRobot >= 0.4: normalisation lives in the saved pipelines
            if not (self.checkpoint / "policy_preprocessor.json").is_file():
                raise CheckpointError(
                    f"{self.checkpoint}: no policy_preprocessor.json; LeRobot "
                    f"{_lerobot_version()} needs the processors lerobot-train saves "
                    f"(a 0.3.x checkpoint: serve it from a LeRobot 0.3 environment)"
                )
            self._pre, self._post = make(
                cfg,
                pretrained_path=str(self.checkpoint),
                preprocessor_overrides={"device_processor": {"device": device}},
            )
        self._info: dict[str, object] = {
            "backend": "lerobot",
            "checkpoint": str(self.checkpoint),
            "content_hash": content_hash(self.checkpoint),
            "policy_type": cfg.type,
            "lerobot": _lerobot_version(),
            "device": device,
            "chunk_size": int(getattr(cfg, "chunk_size", 0) or getattr(cfg, "n_action_steps", 1)),
            "n_action_steps": int(getattr(cfg, "n_action_steps", 1)),
            "inputs": {f.key: {"type": f.kind, "shape": list(f.shape)} for f in self.features},
            "action_width": self.action_width,
        }

    def info(self) -> dict[str, object]:
        """What ``GET /info`` answers: the checkpoint, its inputs and its ``content_hash``."""
        return dict(self._info)

    def predict(self, request: PredictRequest) -> npt.NDArray[np.float32]:
        """The policy's action rows for ``request``, in absolute targets."""
        torch = self._torch
        arrays = build_inputs(self.features, request)
        batch: dict[str, Any] = {k: torch.from_numpy(v) for k, v in arrays.items()}
        if self._pre is not None:
            batch["task"] = request.task
            batch = self._pre(batch)  # batch dim, device, normalisation (and tokenizer for VLAs)
        else:  # LeRobot 0.3.x: the policy normalises; batch dim and device are ours
            batch = {k: v.unsqueeze(0).to(self.device) for k, v in batch.items()}
            batch["task"] = [request.task]
        with torch.no_grad():
            self.policy.reset()
            if self.config.type in QUEUE_POLICIES:
                steps = [self.policy.select_action(batch) for _ in range(int(self.config.n_action_steps))]
                chunk = torch.stack(steps, dim=1)
            else:
                chunk = self.policy.predict_action_chunk(batch)
            if self._post is not None:
                chunk = self._post(chunk)
        rows = chunk.detach().to("cpu").float().numpy()
        rows = rows.reshape(-1, rows.shape[-1])  # (1, T, D) -> (T, D)
        return np.asarray(rows, dtype=np.float32)
