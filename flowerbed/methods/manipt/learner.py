"""Client learner of ManiPT and its prompt-tuning baselines (CoOp, KgCoOp, MaPLe-style).

Method: "ManiPT: prompt tuning on the pretrained manifold" (arXiv 2602.19198);
maths in :mod:`flowerbed.methods.manipt.algorithm`, prompted towers in
:mod:`flowerbed.methods.manipt.model`. ``method`` picks a preset of
:data:`flowerbed.methods.manipt.algorithm.PRESETS`; ``lambda_text``, ``lambda_image``
and ``alpha`` override it (ablations: no image / text consistency, no bias).

Prompts train with cross-entropy at CLIP's logit scale 100 (``train_logit_scale``),
whatever the VLM's own scale: the consistency weights are in the units of CLIP's
loss, where KgCoOp tuned its lambda = 8.

As a local task (``run_local``), the client tunes prompts on the few-shot
training rows of its *base* classes (the first ``1 - novel_fraction`` of the
class list, as in CoOp's base-to-novel protocol) and reports accuracy on its
test rows of the base classes (among base names) and of the novel classes
(among novel names, never seen in tuning), their harmonic mean, the zero-shot
numbers on the same rows, the drift of the used features from the frozen ones,
accuracy on each ``transfer`` dataset (cross-dataset) and on its test rows
under each ``shift_kinds`` domain (domain generalisation, the ``domain_shift``
partitioner's transforms). Under ``fewshot_dirichlet`` the test rows are the
partition's per-client test sets (the union for the pooled client).

Federated (strategy ``manipt_promptfl``): ``train.manipt`` tunes the broadcast
prompts locally and returns them, ``evaluate.manipt`` scores given prompts.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.algorithms import adapter_training as at
from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.data.domain_shift import ImageKind
from flowerbed.methods.manipt import algorithm as mp
from flowerbed.models.vlm import VisionLanguageModel, build_vlm, vlm_spec_type

if TYPE_CHECKING:
    from flowerbed.methods.manipt.model import OpenClipBranch, TwoTowerBranch

#: Message types and record keys shared with ``flowerbed.methods.manipt.strategy``.
TRAIN_MESSAGE = "train.manipt"
EVAL_MESSAGE = "evaluate.manipt"
EPOCHS = "epochs"
Method = Literal["coop", "kgcoop", "maple", "manipt"]
#: CLIP's fixed logit scale, at which CoOp, KgCoOp and MaPLe train (and KgCoOp tuned lambda).
CLIP_LOGIT_SCALE = 100.0

VlmSpec = vlm_spec_type()
DatasetSpec = registry.spec_union("dataset")


class ManiptParams(Params):
    """Frozen VLM, method preset (and overrides), schedule, splits and transfer targets."""

    vlm: VlmSpec = Field(description="frozen VLM, e.g. {name: two_tower_concepts}")  # type: ignore[valid-type]
    method: Method = Field("manipt", description="coop | kgcoop | maple | manipt")
    lambda_text: float | None = Field(None, ge=0, description="override the preset's lambda_T")
    lambda_image: float | None = Field(None, ge=0, description="override the preset's lambda_I")
    alpha: float | Literal["off"] | None = Field(
        None, description="override the fusion weight; 'off': no incremental bias")
    prompt_init: str = Field("a photo of a", description="context initialisation (CoOp)")
    template: str = Field("a photo of a {}.", description="hand template of the frozen t0")
    train_logit_scale: float | None = Field(
        CLIP_LOGIT_SCALE, gt=0, description="logit scale of the training cross-entropy "
        "(default CLIP's 100, the scale the lambdas were tuned at; null: the VLM's own); "
        "evaluation is an argmax and does not depend on it")
    validation_per_class: int = Field(
        0, ge=0, description="run_local: score only on this many unused training rows per "
        "base class (a validation split for choosing lambda / alpha; 0: the test rows)")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate of the prompts")
    epochs: int = Field(10, ge=0, description="local epochs (run_local; federated: per round)")
    batch_size: int = Field(32, ge=1)
    novel_fraction: float = Field(0.5, ge=0, lt=1,
                                  description="share of classes held out of tuning (novel)")
    transfer: tuple[DatasetSpec, ...] = Field(  # type: ignore[valid-type]
        (), description="cross-dataset targets: datasets scored on their test split")
    shift_kinds: tuple[ImageKind, ...] = Field(
        (), description="domain-generalisation targets: domain_shift transforms of the test rows")
    shift_severity: float = Field(0.5, ge=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _yaml_off(cls, data: Any) -> Any:
        """YAML reads a bare ``alpha: off`` as false: that is ``'off'`` here."""
        if isinstance(data, dict) and data.get("alpha") is False:
            return {**data, "alpha": "off"}
        return data

    def config(self) -> mp.PromptConfig:
        """The method's preset with this scenario's overrides."""
        base = mp.PRESETS[self.method]
        alpha = base.alpha if self.alpha is None else (None if self.alpha == "off"
                                                       else float(self.alpha))
        return mp.PromptConfig(
            visual=base.visual,
            lambda_text=base.lambda_text if self.lambda_text is None else self.lambda_text,
            lambda_image=base.lambda_image if self.lambda_image is None else self.lambda_image,
            alpha=alpha)


@functools.lru_cache(maxsize=4)
def _model(spec_json: str, spec: Params) -> tuple[VisionLanguageModel, Any]:
    del spec_json  # the cache key (pydantic models hash by identity)
    from flowerbed.methods.manipt.model import build_branch

    vlm = build_vlm(spec)
    return vlm, build_branch(vlm)


def split_classes(num_classes: int, novel_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Base classes (the first ones) and novel classes (the rest)."""
    n_novel = int(np.floor(num_classes * novel_fraction))
    base = np.arange(num_classes - n_novel)
    return base, np.arange(num_classes - n_novel, num_classes)


@register("learner", "manipt")
class ManiptLearner(Learner):
    """Prompt tuning (CoOp / KgCoOp / MaPLe-style / ManiPT) on a frozen VLM, per client."""

    Params = ManiptParams

    @property
    def p(self) -> ManiptParams:
        """The validated params."""
        params: ManiptParams = self.params  # type: ignore[assignment]
        return params

    @property
    def model(self) -> tuple[VisionLanguageModel, TwoTowerBranch | OpenClipBranch]:
        """The frozen VLM and its prompted branch (built once per process)."""
        spec = self.p.vlm
        return _model(spec.model_dump_json(), spec)  # type: ignore[attr-defined]

    def t0(self, names: Sequence[str]) -> np.ndarray:
        """Frozen class features of the hand template."""
        return self.model[0].class_text_features(list(names), (self.p.template,))

    def initial_prompts(self) -> dict[str, np.ndarray]:
        """Context spelling ``prompt_init`` and, for visual methods, the zero coupling."""
        vlm, branch = self.model
        ctx0 = vlm.context_from_text(self.p.prompt_init)
        prompts = mp.init_prompts(ctx0, branch.visual_dim, self.p.config())
        return {k: v.numpy() for k, v in prompts.items()}

    def test_rows(self, data: ClientData) -> tuple[np.ndarray, np.ndarray]:
        """The client's test rows (the ``fewshot_dirichlet`` per-client test sets if any)."""
        from flowerbed.data.federated import federated_data
        from flowerbed.data.fewshot import FewShotPartition

        fed = federated_data(self.scenario)
        part = fed.partition
        if isinstance(part, FewShotPartition) and part.test_indices:
            rows = part.test_pool() if data.partition_id < 0 else \
                part.test_indices[data.partition_id]
            return fed.dataset.x_test[rows], fed.dataset.y_test[rows]
        return data.x_test, data.y_test

    def tune(self, prompts: dict[str, np.ndarray], data: ClientData, epochs: int, seed: int
             ) -> mp.TrainResult:
        """Train ``prompts`` on the client's base-class training rows."""
        from flowerbed.methods.manipt.algorithm import as_tensors, batched_image

        base, _ = split_classes(data.meta.num_classes, self.p.novel_fraction)
        keep = np.isin(data.y_train, base)
        if not keep.any() or epochs == 0:
            return mp.TrainResult(prompts)
        vlm, branch = self.model
        names = [data.meta.class_names[c] for c in base]
        inputs = branch.inputs(data.x_train[keep], data.meta)
        f0 = batched_image(branch, inputs, None)
        t0 = as_tensors({"t": self.t0(names)})["t"]
        cfg = at.TrainConfig(self.p.lr, epochs, self.p.batch_size, seed)
        scale = self.p.train_logit_scale or vlm.logit_scale
        return mp.train(branch, as_tensors(prompts), self.p.config(), names, inputs,
                        data.y_train[keep], t0, f0, cfg, scale)

    def score(self, prompts: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray,
              meta: DatasetMeta, classes: np.ndarray, prefix: str) -> dict[str, float]:
        """Accuracy (tuned and zero-shot) and drift on the rows of ``classes``, among them."""
        from flowerbed.methods.manipt.algorithm import batched_image

        vlm, branch = self.model
        keep = np.isin(y, classes)
        names = [meta.class_names[c] for c in classes]
        if not keep.any():
            return {f"{prefix}n_test": 0.0}
        inputs = branch.inputs(x[keep], meta)
        f0 = batched_image(branch, inputs, None).numpy()
        t0 = self.t0(names)
        labels = np.searchsorted(classes, y[keep])
        out = mp.evaluate(branch, prompts, self.p.config(), names, inputs, labels, t0, f0,
                          vlm.logit_scale)
        zero_shot = float(((f0 @ t0.T).argmax(1) == labels).mean())
        return {f"{prefix}{k}": v for k, v in out.items()} | {
            f"{prefix}zero_shot_accuracy": zero_shot, f"{prefix}n_test": float(keep.sum())}

    def validation_rows(self, data: ClientData) -> tuple[np.ndarray, np.ndarray]:
        """``validation_per_class`` seeded training rows of each base class that no client holds.

        Drawn from the partition's pool (its ``pool_rows`` when it has them), so a
        VLM's pre-training slice stays out; the test rows are never touched.
        """
        from flowerbed.core.seeds import rng
        from flowerbed.data.federated import federated_data

        fed = federated_data(self.scenario)
        y = fed.dataset.y_train
        pool = getattr(self.scenario.component("partition"), "pool_rows", None)
        free = np.setdiff1d(np.arange(min(pool or len(y), len(y))),
                            np.concatenate(fed.partition.indices))
        base, _ = split_classes(data.meta.num_classes, self.p.novel_fraction)
        k = self.p.validation_per_class
        rows = []
        for c in base:
            mine = free[y[free] == c]
            if len(mine) < k:
                raise ValueError(f"learner.validation_per_class={k}: class {c} has only "
                                 f"{len(mine)} unused training rows")
            rows.append(rng(self.scenario.seed, "manipt", "validation", int(c)).choice(
                mine, k, replace=False))
        idx = np.sort(np.concatenate(rows))
        return fed.dataset.x_train[idx], y[idx]

    def base_novel(self, prompts: dict[str, np.ndarray], data: ClientData) -> dict[str, float]:
        """Base, novel and harmonic-mean accuracy on the client's test rows (and zero-shot)."""
        x, y = self.test_rows(data)
        base, novel = split_classes(data.meta.num_classes, self.p.novel_fraction)
        out = self.score(prompts, x, y, data.meta, base, "base_")
        if len(novel):
            out |= self.score(prompts, x, y, data.meta, novel, "novel_")
            for k in ("accuracy", "zero_shot_accuracy"):
                b, n = out.get(f"base_{k}"), out.get(f"novel_{k}")
                if b is not None and n is not None:
                    out[f"hm_{k}"] = mp.harmonic_mean(b, n)
        return out

    def targets(self, prompts: dict[str, np.ndarray], data: ClientData) -> dict[str, float]:
        """Cross-dataset and domain-generalisation accuracy (tuned and zero-shot)."""
        from flowerbed.data.domain_shift import image_shift
        from flowerbed.data.federated import federated_data

        out: dict[str, float] = {}
        for spec in self.p.transfer:
            ds = registry.build("dataset", spec, seed=self.scenario.seed)
            tag = f"transfer/{ds.meta.name}/"
            allc = np.arange(ds.meta.num_classes)
            got = self.score(prompts, ds.x_test, ds.y_test, ds.meta, allc, tag)
            out |= {k: v for k, v in got.items() if "accuracy" in k}
        x, y = self.test_rows(data)
        dataset = federated_data(self.scenario).dataset
        for i, kind in enumerate(self.p.shift_kinds):
            shift = image_shift(dataset, kind, self.p.shift_severity, self.scenario.seed + i)
            got = self.score(prompts, shift(x), y, data.meta,
                             np.arange(data.meta.num_classes), f"shift/{kind}/")
            out |= {k: v for k, v in got.items() if "accuracy" in k}
        return out

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Tune on the base classes' shots; score base / novel / transfer / shifted targets."""
        start = time.perf_counter()
        result = self.tune(self.initial_prompts(), data, self.p.epochs, ctx.seed)
        seconds = time.perf_counter() - start
        if self.p.validation_per_class:
            x, y = self.validation_rows(data)
            base, _ = split_classes(data.meta.num_classes, self.p.novel_fraction)
            scores = self.score(result.prompts, x, y, data.meta, base, "val_base_")
        else:
            scores = {**self.base_novel(result.prompts, data),
                      **self.targets(result.prompts, data)}
        metrics = {"train_seconds": seconds, **scores}
        if result.steps:
            metrics["train_loss"] = result.steps[-1]["loss"]
        arrays = {**result.prompts, **step_arrays(result.steps)}
        return Payload(arrays=arrays, metrics=metrics, num_examples=len(data.y_train))

    def train_manipt(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """PromptFL client: tune the broadcast prompts for ``epochs`` on local base shots."""
        epochs = int(payload.config.get(EPOCHS, self.p.epochs))
        start = time.perf_counter()
        result = self.tune(dict(payload.arrays), data, epochs, ctx.seed)
        base, _ = split_classes(data.meta.num_classes, self.p.novel_fraction)
        n = int(np.isin(data.y_train, base).sum())
        metrics = {"train_seconds": time.perf_counter() - start}
        if result.steps:
            metrics |= {k: result.steps[-1][k] for k in ("loss", "drift_text", "drift_image")}
        return Payload(arrays=result.prompts, metrics=metrics, num_examples=n)

    def evaluate_manipt(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Base / novel accuracy of the given prompts on the client's test rows."""
        del ctx
        metrics = self.base_novel(dict(payload.arrays), data)
        return Payload(metrics=metrics, num_examples=int(metrics.get("base_n_test", 0)
                                                         + metrics.get("novel_n_test", 0)))


def step_arrays(steps: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """The per-step log as arrays ``steps_<name>`` (saved with the run's local arrays)."""
    if not steps:
        return {}
    return {f"steps_{k}": np.asarray([s[k] for s in steps]) for k in steps[0]}
