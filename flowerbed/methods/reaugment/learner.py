"""ReAugment client: zoo-guided RL augmentation of few-shot forecasting windows (arXiv 2409.06282).

Maths in :mod:`flowerbed.methods.reaugment.algorithm` (zoo, anchors, reward, REINFORCE),
:mod:`flowerbed.methods.reaugment.algorithm_vmae` (the augmenter) and
:mod:`flowerbed.methods.reaugment.algorithm_arms` (pipeline and comparison arms). The
data are ``dataset: forecast`` windows (a client holds its series' training,
validation and test windows; :mod:`flowerbed.data.timeseries_data`); the
forecaster is the scenario's ``model:`` (``dlinear``, ``forecast_mlp``,
``gru_forecaster``, ``patchtst``).

- ``run_local`` (strategy ``local``, baselines ``centralized`` / ``local_only``):
  the whole pipeline on the client's (or the pooled) windows with a K-fold zoo;
  metrics ``mse@<arm>``, ``mae@<arm>``, ``mase@<arm>`` on its test windows.
- Federated (strategy ``reaugment``): ``train.reaugment`` (FedAvg local steps of
  one arm on ``D + D̃_arm``), ``train.reaugment_augment`` (score the client's
  windows with the broadcast zoo, pre-train and fine-tune its VMAE, keep ``D̃``
  per arm in ``ctx.client_state("reaugment")``), ``evaluate.reaugment``
  (validation and test metrics of the global forecaster). Only forecaster
  weights and scalar metrics leave a client.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core import registry
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.data.timeseries_data import TEST, TRAIN, VAL, WindowSet, unpack, window_layout
from flowerbed.methods.reaugment.algorithm_names import ARMS, Arm
from flowerbed.models.forecasters import FORECASTERS

if TYPE_CHECKING:
    from torch import nn

    from flowerbed.methods.reaugment.algorithm_arms import ReAugmentConfig

#: Message types and config keys shared with :mod:`flowerbed.methods.reaugment.strategy`.
TRAIN_MESSAGE = "train.reaugment"
AUGMENT_MESSAGE = "train.reaugment_augment"
EVAL_MESSAGE = "evaluate.reaugment"
ARM, ARMS_KEY, STEPS = "arm", "arms", "steps"
ZOO_PREFIX = "zoo"
STATE = "reaugment"

ALL_ARMS = ARMS


class ZooParams(Params):
    """K-fold zoo and anchor selection."""

    folds: int = Field(5, ge=2, description="K: zoo members (fewer when there are fewer windows)")
    fold_mode: Literal["blocked", "random"] = Field(
        "blocked", description="contiguous folds (no overlap leakage) or a seeded shuffle"
    )
    anchor_share: float = Field(0.5, gt=0, le=1, description="share of windows kept as anchors")
    per_anchor: int = Field(2, ge=1, description="M: augmented windows per anchor")


class TrainParams(Params):
    """Adam on the MSE with early stopping on the validation windows."""

    steps: int = Field(500, ge=1, description="most mini-batch steps of a forecaster")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0)
    eval_every: int = Field(25, ge=1, description="steps between validation checks")
    patience: int = Field(4, ge=1, description="checks without improvement before stopping")


class VMAEParams(Params):
    """The variational masked autoencoder (RECONSTRUCTED sizes) and its pre-training."""

    patch_len: int = Field(8, ge=1)
    mask_ratio: float = Field(0.5, gt=0, lt=1)
    d_model: int = Field(32, ge=2)
    latent: int = Field(8, ge=1, description="latent dimensions per patch")
    layers: int = Field(2, ge=1, description="feature-encoder transformer layers")
    beta: float = Field(0.1, ge=0, description="KL weight of the pre-training loss")
    pretrain_steps: int = Field(300, ge=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(64, ge=1)


class RLParams(Params):
    """REINFORCE on the VMAE prior (spec defaults; the reward weights are RECONSTRUCTED)."""

    iterations: int = Field(200, ge=0)
    batch_anchors: int = Field(32, ge=1)
    samples: int = Field(8, ge=2, description="J: latents per anchor (their mean is the baseline)")
    lr: float = Field(1e-4, gt=0)
    beta_rl: float = Field(1.0, ge=0, description="weight of L_pre during RL")
    lambda_v: float = Field(1.0, ge=0, description="zoo error variance")
    lambda_m: float = Field(0.5, ge=0, description="mean zoo error (target reward only)")
    lambda_d: float = Field(1.0, ge=0, description="relative distance to the anchor")


class ReAugmentParams(Params):
    """Arms to compare and every setting of the zoo, augmenter, RL and forecaster training."""

    arms: tuple[Arm, ...] = Field(ALL_ARMS, min_length=1, description="run_local's arms")
    zoo: ZooParams = ZooParams()
    train: TrainParams = TrainParams()
    vmae: VMAEParams = VMAEParams()
    rl: RLParams = RLParams()

    def config(self) -> ReAugmentConfig:
        """The algorithm's configuration (imports torch)."""
        from flowerbed.methods.reaugment.algorithm import RLConfig
        from flowerbed.methods.reaugment.algorithm_arms import ReAugmentConfig
        from flowerbed.methods.reaugment.algorithm_ops import TrainConfig
        from flowerbed.methods.reaugment.algorithm_vmae import VMAEConfig

        return ReAugmentConfig(
            folds=self.zoo.folds,
            fold_mode=self.zoo.fold_mode,
            anchor_share=self.zoo.anchor_share,
            per_anchor=self.zoo.per_anchor,
            train=TrainConfig(**self.train.model_dump()),
            vmae=VMAEConfig(**self.vmae.model_dump()),
            rl=RLConfig(reward="target", **self.rl.model_dump()),
        )


def arm_metrics(per_arm: dict[str, dict[str, float]]) -> dict[str, float]:
    """``{metric@arm: value}`` from ``{arm: {metric: value}}``."""
    return {f"{k}@{arm}": v for arm, metrics in per_arm.items() for k, v in metrics.items()}


def client_windows(data: ClientData) -> WindowSet:
    """All of a client's windows (its local train and held-out rows together)."""
    x = np.concatenate([data.x_train, data.x_test]) if len(data.x_test) else data.x_train
    return unpack(x, data.meta)


def zoo_arrays(models: list[Arrays]) -> Arrays:
    """Zoo members' weights in one payload: ``zoo<k>.<param>``."""
    return {f"{ZOO_PREFIX}{k}.{name}": a for k, m in enumerate(models) for name, a in m.items()}


def split_zoo(arrays: Arrays) -> list[Arrays]:
    """Inverse of :func:`zoo_arrays`."""
    members: dict[int, Arrays] = {}
    for key, value in arrays.items():
        found = re.fullmatch(rf"{ZOO_PREFIX}(\d+)\.(.+)", key)
        if found:
            members.setdefault(int(found[1]), {})[found[2]] = value
    return [members[k] for k in sorted(members)]


@register("learner", "reaugment")
class ReAugmentLearner(Learner):
    """ReAugment: K-fold / federated zoo, anchors by zoo disagreement, VMAE + REINFORCE."""

    Params = ReAugmentParams

    def __init__(self, params: ReAugmentParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        model = scenario.model
        name = None if model is None else registry.name_of(model)
        if name not in FORECASTERS:
            raise ValueError(
                f"learner reaugment needs a forecaster model: model.name one of "
                f"{', '.join(FORECASTERS)} (got {name})"
            )
        dataset = registry.name_of(scenario.component("dataset"))
        if dataset != "forecast":
            raise ValueError(
                f"learner reaugment needs forecasting windows: dataset.name forecast "
                f"(got {dataset})"
            )
        self.p: ReAugmentParams = params

    # --- the forecaster ----------------------------------------------------------------

    def make_model(self, meta: DatasetMeta) -> nn.Module:
        """A fresh forecaster for the dataset's ``(T, H, C)``."""
        t, h, c = window_layout(meta)
        spec = self.scenario.model
        assert spec is not None  # checked in __init__
        module: nn.Module = registry.build(
            "model", spec, in_features=t * c, out_features=h * c, channels=c
        )
        return module

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Initial forecaster weights (seeded)."""
        from flowerbed.methods.reaugment.algorithm_ops import seeded_model

        return _to_arrays(seeded_model(lambda: self.make_model(meta), seed))

    def _load(self, meta: DatasetMeta, arrays: Arrays) -> nn.Module:
        import torch

        model = self.make_model(meta)
        model.load_state_dict(OrderedDict((k, torch.as_tensor(v)) for k, v in arrays.items()))
        return model

    # --- local task ------------------------------------------------------------------------

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """The ReAugment pipeline and every arm on this client's (or the pooled) windows."""
        from flowerbed.methods.reaugment import algorithm_arms as reaugment_arms

        ws = client_windows(data)
        tr, va, te = ws.split(TRAIN), ws.split(VAL), ws.split(TEST)
        if len(tr) < 2 or len(te) == 0:
            raise ValueError(
                f"client {data.partition_id}: learner reaugment needs >= 2 training and "
                f">= 1 test windows, has {len(tr)} and {len(te)}"
            )
        t, _, _ = window_layout(data.meta)
        per_arm, info = reaugment_arms.run(
            lambda: self.make_model(data.meta),
            tr.windows,
            va.windows,
            te.windows,
            te.scale,
            t,
            self.p.config(),
            tuple(self.p.arms),
            ctx.seed,
        )
        metrics = {**arm_metrics(per_arm), **info, "train_windows": float(len(tr))}
        return Payload(metrics=metrics, num_examples=len(te))

    # --- federated handlers -------------------------------------------------------------------

    def train_reaugment(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local steps of arm ``config.arm`` from the global weights, on ``D + D̃_arm``."""
        from dataclasses import replace

        from flowerbed.methods.reaugment.algorithm_arms import with_augmentation
        from flowerbed.methods.reaugment.algorithm_ops import train_forecaster

        arm, steps = str(payload.config[ARM]), int(payload.config[STEPS])
        tr = client_windows(data).split(TRAIN)
        extra = None if arm == "none" else ctx.client_state(STATE).load_array(f"aug_{arm}")
        if arm != "none" and extra is None:
            raise RuntimeError(f"client {data.partition_id}: no augmented windows for arm {arm!r}")
        t, _, _ = window_layout(data.meta)
        cfg = replace(self.p.config().train, steps=steps)
        model, fit = train_forecaster(
            self._load(data.meta, payload.arrays),
            with_augmentation(tr.windows, extra),
            t,
            cfg,
            ctx.seed,
        )
        return Payload(
            arrays=_to_arrays(model), metrics={"train_steps": fit["steps"]}, num_examples=len(tr)
        )

    def train_reaugment_augment(
        self, data: ClientData, payload: Payload, ctx: TaskContext
    ) -> Payload:
        """Score windows with the broadcast zoo, run the augmenter per arm, keep ``D̃`` locally."""
        from flowerbed.methods.reaugment.algorithm_arms import augment

        arms = tuple(str(a) for a in payload.config[ARMS_KEY])
        members = [self._load(data.meta, m) for m in split_zoo(payload.arrays)]
        tr = client_windows(data).split(TRAIN)
        t, _, _ = window_layout(data.meta)
        out = augment(tr.windows, members or None, t, self.p.config(), arms, ctx.seed)
        state = ctx.client_state(STATE)
        for arm, windows in out.windows.items():
            state.save_array(f"aug_{arm}", windows.astype(np.float32))
        return Payload(metrics=out.info, num_examples=len(tr))

    def evaluate_reaugment(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Validation MSE and test MSE / MAE / MASE of the global forecaster, with counts."""
        from flowerbed.methods.reaugment.algorithm_ops import forecast_metrics

        del ctx
        ws = client_windows(data)
        va, te = ws.split(VAL), ws.split(TEST)
        t, _, _ = window_layout(data.meta)
        model = self._load(data.meta, payload.arrays)
        metrics: dict[str, float] = {"n_val": float(len(va)), "n_test": float(len(te))}
        if len(va):
            metrics["val_mse"] = forecast_metrics(model, va.windows, t)["mse"]
        if len(te):
            metrics.update(forecast_metrics(model, te.windows, t, te.scale))
        return Payload(metrics=metrics, num_examples=len(te))


def _to_arrays(model: Any) -> Arrays:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
