"""HFM / FMA client (arXiv 2602.20479, 2510.14543): a velocity field on frozen VLM features.

The frozen vision-language model (any ``vlm``) gives the image features of the
client's few shots and, once per process, the class text features from the
class names (the roots, shared by every client). The learner trains the
velocity net of one variant (:data:`flowerbed.methods.hfm.algorithm.VARIANTS`: ``fma``,
``hfm`` and its ablations) on the shots:

- under ``strategy: fedavg`` the velocity net's weights are the learner's
  arrays, so FedAvg averages them; ``baselines: [centralized]`` trains it on the
  pooled shots for as many epochs as the federation's rounds run;
- under ``strategy: local`` (``run_local``) each client trains its own net from
  the seeded initialisation for ``epochs`` epochs.

Scores: ``accuracy`` (classes at the variant's stop step, nearest root),
``accuracy@k`` for every Euler step ``k``, ``zero_shot_accuracy`` (k = 0 with the
text features: the frozen model's own zero-shot), ``mean_stop_step`` and
``entangled`` (share of trajectories whose nearest corridor changes). The maths
is in :mod:`flowerbed.methods.hfm.algorithm`.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.data.federated import federated_data
from flowerbed.models.vlm import (
    DEFAULT_TEMPLATES,
    VisionLanguageModel,
    array_hash,
    build_vlm,
    vlm_spec_type,
)

VlmSpec = vlm_spec_type()
Variant = Literal["fma", "hfm", "hfm_no_corridor", "hfm_fixed_steps", "hfm_euclidean"]


class HfmParams(Params):
    """Frozen VLM, the variant (and overrides of its preset), the velocity net and training.

    Each ``None`` keeps the variant's preset (``flowerbed.methods.hfm.algorithm.VARIANTS``).
    The net and schedule are CPU-sized (FMA: width 512, 12 blocks, lr 2e-4,
    200 epochs); docs/methods/hfm.md.
    """

    vlm: VlmSpec  # type: ignore[valid-type]
    templates: tuple[str, ...] = Field(DEFAULT_TEMPLATES, min_length=1)
    variant: Variant = Field("hfm", description="fma, hfm or one of HFM's ablations")
    alpha: float | None = Field(None, ge=0, description="stop when d(o, x) <= rho_T + alpha D")
    corridor_weight: float | None = Field(None, ge=0, description="lambda of the corridor loss")
    corridor_samples: int | None = Field(
        2, ge=0, description="steps of the corridor sum sampled per batch (0: all K)")
    steps: int | None = Field(None, ge=1, description="Euler steps K of the flow")
    width: int = Field(64, ge=2, description="velocity net width")
    depth: int = Field(2, ge=1, description="residual blocks of the velocity net")
    epochs: int = Field(60, ge=0, description="local task (strategy local): training epochs")
    local_epochs: int = Field(6, ge=1, description="fedavg: epochs per round")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate (cosine, 1 warm-up epoch)")
    weight_decay: float = Field(0.01, ge=0)


_FEATURES: OrderedDict[str, np.ndarray] = OrderedDict()


@functools.lru_cache(maxsize=4)
def _vlm(spec_json: str, spec: Params) -> VisionLanguageModel:
    del spec_json  # the cache key (pydantic models hash by identity)
    return build_vlm(spec)


@register("learner", "hfm")
class HfmLearner(SupervisedLearner):
    """FMA / HFM velocity field on frozen VLM features; FedAvg-able, or a local task."""

    Params = HfmParams

    @property
    def p(self) -> HfmParams:
        """The learner's params."""
        params: HfmParams = self.params  # type: ignore[assignment]
        return params

    @property
    def vlm(self) -> VisionLanguageModel:
        """The frozen vision-language model (built once per process)."""
        spec = self.p.vlm
        return _vlm(spec.model_dump_json(), spec)  # type: ignore[attr-defined]

    def flow_config(self) -> Any:
        """The variant's :class:`~flowerbed.methods.hfm.algorithm.FlowConfig` with the overrides."""
        from flowerbed.methods.hfm import algorithm as hfm

        over = {k: getattr(self.p, k) for k in ("alpha", "corridor_weight",
                                                "corridor_samples", "steps")}
        return hfm.variant(self.p.variant, **{k: v for k, v in over.items() if v is not None})

    def text_features(self, meta: DatasetMeta) -> np.ndarray:
        """Zero-shot class features (the roots' directions), computed once per process."""
        key = f"text|{self.p.vlm.model_dump_json()}|{meta.class_names}|{self.p.templates}"  # type: ignore[attr-defined]
        if key not in _FEATURES:
            _FEATURES[key] = self.vlm.class_text_features(list(meta.class_names),
                                                          self.p.templates)
        return _FEATURES[key]

    def image_features(self, x: np.ndarray, meta: DatasetMeta) -> np.ndarray:
        """Frozen image features of rows ``x`` (kept in this process, keyed by the rows)."""
        key = f"img|{self.p.vlm.model_dump_json()}|{array_hash(np.asarray(x))}"  # type: ignore[attr-defined]
        if key not in _FEATURES:
            f = self.vlm.encode_images(x, meta) if len(x) else np.zeros((0, self.vlm.dim))
            _FEATURES[key] = np.asarray(f, dtype=np.float32)
            while len(_FEATURES) > 64:
                _FEATURES.popitem(last=False)
        return _FEATURES[key]

    def _net(self, arrays: Arrays | None, seed: int) -> Any:
        from flowerbed.methods.hfm import model as hv

        dim = self.vlm.dim
        net = hv.build(dim, self.flow_config().point_dim(dim), self.p.width, self.p.depth, seed)
        return net if arrays is None else hv.load_arrays(net, arrays)

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """The seeded initial velocity net (its output layer is zero: v = 0)."""
        from flowerbed.methods.hfm import model as hv

        del meta
        return hv.to_arrays(self._net(None, seed))

    def epochs_per_round(self) -> int:
        """Local epochs of one FedAvg round."""
        return self.p.local_epochs

    def fit(self, arrays: Arrays, x: Any, y: Any, meta: DatasetMeta, seed: int,
            epochs: int | None = None) -> tuple[Arrays, dict[str, float]]:
        """Train the velocity net from ``arrays`` on the shots ``(x, y)``."""
        import torch

        from flowerbed.methods.hfm import algorithm as hfm
        from flowerbed.methods.hfm import model as hv

        cfg = self.flow_config()
        net = self._net(arrays, seed)
        leaves = hfm.embed(torch.as_tensor(self.image_features(x, meta)), cfg.rho_image, cfg)
        roots = hfm.embed(torch.as_tensor(self.text_features(meta)), cfg.rho_text, cfg)
        tcfg = hfm.TrainConfig(epochs=self.p.local_epochs if epochs is None else epochs,
                               batch_size=self.p.batch_size, lr=self.p.lr,
                               weight_decay=self.p.weight_decay, seed=seed)
        losses = hfm.train(net, leaves, torch.as_tensor(np.asarray(y), dtype=torch.long), roots,
                           cfg, tcfg)
        metrics = {"train_loss": losses[-1]} if losses else {}
        return hv.to_arrays(net), metrics

    def score(self, arrays: Arrays, x: Any, y: Any, meta: DatasetMeta) -> dict[str, float]:
        """Accuracy at the stop step and per step, zero-shot, stop step, entanglement."""
        import torch

        from flowerbed.methods.hfm import algorithm as hfm

        cfg = self.flow_config()
        y = np.asarray(y)
        if len(y) == 0:
            return {}
        f = self.image_features(x, meta)
        text = self.text_features(meta)
        leaves = hfm.embed(torch.as_tensor(f), cfg.rho_image, cfg)
        roots = hfm.embed(torch.as_tensor(text), cfg.rho_text, cfg)
        net = self._net(arrays, 0)
        traj = hfm.trajectory(net, leaves, cfg)
        chosen, per_step, k = hfm.classify(traj, roots, cfg)
        switches = hfm.corridor_switches(traj, roots, cfg)
        out = {"accuracy": float((chosen == y).mean()),
               "zero_shot_accuracy": float(((f @ text.T).argmax(1) == y).mean()),
               "mean_stop_step": float(k.mean()),
               "entangled": float((switches >= 1).mean())}
        out |= {f"accuracy@{i}": float((row == y).mean()) for i, row in enumerate(per_step)}
        return out

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Train on the client's shots from the seeded init; score on its test rows.

        The test rows are the client's held-out rows when it has some, else the
        dataset's test split (the few-shot protocol: every client is scored on
        all classes).
        """
        if data.num_train == 0:
            return Payload(metrics={}, num_examples=0)
        init = self.init_arrays(data.meta, ctx.seed)
        arrays, metrics = self.fit(init, data.x_train, data.y_train, data.meta, ctx.seed,
                                   epochs=self.p.epochs)
        x, y = data.x_test, data.y_test
        if len(y) == 0:
            ds = federated_data(self.scenario).dataset
            x, y = ds.x_test, ds.y_test
        scores = self.score(arrays, x, y, data.meta)
        return Payload(metrics={**scores, **metrics}, num_examples=len(y))
