"""DNA client (arXiv 2601.22515): unit statistics, FDU probe and baselines on a frozen backbone.

A local task (``run_local``: the whole method on one client's few labelled images,
then every comparison arm scored on the dataset's test split) and the client side of
strategy ``dna`` (:mod:`flowerbed.methods.dna.strategy`): ``query.dna_stats`` (per-unit
sufficient statistics at every layer, :class:`flowerbed.methods.dna.algorithm.LayerStats`),
``train.dna_probe`` (local L-BFGS steps of one arm's probe from the global weights)
and ``train.dna_finetune`` (local epochs of the fine-tuned tail). The maths is in
:mod:`flowerbed.methods.dna.algorithm` and :mod:`flowerbed.methods.dna.algorithm_probe`, the
backbones in :mod:`flowerbed.methods.dna.model`, the data in
:mod:`flowerbed.methods.dna.data` (dataset ``dna_fakes``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.methods.dna import algorithm as dna
from flowerbed.methods.dna import algorithm_probe as probe
from flowerbed.methods.dna.data import LabelParts, label_parts
from flowerbed.methods.dna.model import DnaBackboneParams, LayerFeatures, intermediate_layers

#: Message types and record keys shared with ``flowerbed.methods.dna.strategy``.
STATS_MESSAGE = "query.dna_stats"
PROBE_MESSAGE = "train.dna_probe"
FINETUNE_MESSAGE = "train.dna_finetune"
LAYERS, ARM, ITERS = "layers", "arm", "iters"
UNITS, MEAN, STD, W, B = "units", "mean", "std", "w", "b"
SECONDS = "seconds"

Arm = Literal["fdu", "all_units", "random_units", "top_d", "final_layer", "finetune"]
ARMS: tuple[Arm, ...] = ("fdu", "all_units", "random_units", "top_d", "final_layer", "finetune")
PROBE_ARMS = ("fdu", "all_units", "random_units", "top_d", "final_layer")
Triad = Literal["statistics", "attribution"]


class DnaParams(Params):
    """Backbone, scoring and truncation settings, probe, comparison arms (the spec's defaults)."""

    backbone: DnaBackboneParams = DnaBackboneParams()
    layers: tuple[str, ...] | None = Field(
        None, description="candidate layers for localisation (default: the intermediate "
        "blocks, every block* layer: not the stem, not the final representation)")
    layer: str | None = Field(None, description="skip localisation and use this layer")
    window: int | None = Field(
        None, ge=0, description="only layers this close to the map-entropy transition")
    localisation: dna.Localisation = Field(
        "statistics", description="statistics (decoupling + bias-corrected map shift) or "
        "probe_auc (leave-one-out AUC of an all-unit probe per layer; local task only)")
    null_draws: int = Field(20, ge=0, description="pseudo-label draws of the map-shift null")
    triad: Triad = Field("statistics", description="unit score: statistics (d s u) or "
                         "attribution (activation x gradient x probe weight; local task only)")
    num_folds: int = Field(10, ge=2, description="jackknife folds of the stability score")
    fusion: dna.Fusion = Field("product", description="product (T = d s u) or mean")
    adjusted_eta: bool = Field(True, description="ε² instead of η² for the semantic score")
    sensitivity: float = Field(1.0, gt=0, description="Kneedle sensitivity S")
    min_units: int = Field(1, ge=1, description="keep at least this many FDUs")
    c: float = Field(1.0, gt=0, description="inverse L2 strength of the logistic probes")
    arms: tuple[Arm, ...] = Field(ARMS, min_length=1, description="what is scored")
    local_iters: int = Field(20, ge=1, description="L-BFGS iterations per FedAvg round")
    finetune_blocks: int = Field(2, ge=1, le=16, description="MBConv blocks fine-tuned")
    finetune_epochs: int = Field(60, ge=1, description="full-batch AdamW steps (local task)")
    finetune_round_epochs: int = Field(10, ge=1, description="steps per FedAvg round")
    finetune_lr: float = Field(1e-3, gt=0)


_FEATURES: OrderedDict[str, LayerFeatures] = OrderedDict()


@dataclass(frozen=True)
class Plan:
    """What the statistics decide: the selection and each probe arm's layer and units."""

    names: tuple[str, ...]
    selection: dna.Selection
    sets: dict[str, tuple[int, np.ndarray]]
    stats: list[dna.LayerStats]

    def standardisation(self, arm: str) -> tuple[np.ndarray, np.ndarray]:
        """Pooled mean and std of the arm's units."""
        layer, units = self.sets[arm]
        return dna.standardisation(self.stats[layer], units)

    def summary(self) -> dict[str, float]:
        """Layer, knee and FDU count as metrics."""
        sel = self.selection
        return {"dna_layer": float(sel.layer), "dna_num_fdus": float(len(sel.fdus)),
                "dna_layer_units": float(len(sel.scores.triadic)),
                "dna_knee": float("nan") if sel.knee is None else float(sel.knee)}


def detection_metrics(p: np.ndarray, y: np.ndarray, parts: LabelParts, prefix: str
                      ) -> dict[str, float]:
    """Accuracy and AUC of ``P(fake)`` on reals against each generator's fakes.

    ``<prefix>_acc@<family>`` per generator; ``_seen`` and ``_unseen`` are means over
    the seen and the unseen generators.
    """
    src = parts.source(y)
    out: dict[str, float] = {}
    groups: dict[str, list[tuple[float, float]]] = {"seen": [], "unseen": []}
    for k, name in enumerate(parts.sources):
        if k == 0 or not (src == k).any():
            continue
        keep = (src == 0) | (src == k)
        acc, area = probe.accuracy(p[keep], src[keep] > 0), probe.auc(p[keep], src[keep] > 0)
        kind, family = name.split(":", 1)
        out[f"{prefix}_acc@{family}"], out[f"{prefix}_auc@{family}"] = acc, area
        groups[kind].append((acc, area))
    for kind, rows in groups.items():
        if rows:
            out[f"{prefix}_acc_{kind}"] = float(np.mean([r[0] for r in rows]))
            out[f"{prefix}_auc_{kind}"] = float(np.mean([r[1] for r in rows]))
    return out


@register("learner", "dna")
class DnaLearner(Learner):
    """DNA: layer localisation, triadic unit scores, Kneedle truncation, FDU probe; baselines."""

    Params = DnaParams

    @property
    def p(self) -> DnaParams:
        """The learner's parameters."""
        params: DnaParams = self.params  # type: ignore[assignment]
        return params

    # --- features -----------------------------------------------------------------------

    def cut_layer(self) -> int | None:
        """Layer whose whole output feeds the fine-tuned tail (None without that arm)."""
        if "finetune" not in self.p.arms or self.p.backbone.name == "open_clip":
            return None
        return 16 - self.p.finetune_blocks

    def features(self, x: np.ndarray, meta: DatasetMeta, maps: bool) -> LayerFeatures:
        """Every layer's features of image rows ``x`` (kept in this process, and on disk)."""
        from flowerbed.methods.dna.model import extract
        from flowerbed.models.vlm import array_hash

        key = f"{self.p.backbone.model_dump_json()}-{maps}-{self.cut_layer()}-{array_hash(x)}"
        if key not in _FEATURES:
            _FEATURES[key] = extract(self.p.backbone, x, meta, maps, self.cut_layer())
            while len(_FEATURES) > 8:
                _FEATURES.popitem(last=False)
        return _FEATURES[key]

    def test_set(self) -> tuple[LayerFeatures, np.ndarray]:
        """Features and labels of the dataset's test split (what every arm is scored on)."""
        from flowerbed.data.federated import federated_data

        ds = federated_data(self.scenario).dataset
        return self.features(ds.x_test, ds.meta, maps=False), ds.y_test

    def _check(self, meta: DatasetMeta) -> LabelParts:
        if self.scenario.clients.local_test_fraction > 0:
            raise ValueError("learner dna scores every arm on the dataset's test split; set "
                             "clients.local_test_fraction: 0 (it would hold out shots)")
        return label_parts(meta)

    # --- statistics and the plan --------------------------------------------------------

    def stats(self, x: np.ndarray, y: np.ndarray, meta: DatasetMeta
              ) -> tuple[tuple[str, ...], list[dna.LayerStats]]:
        """Layer names and per-layer statistics of labelled image rows."""
        parts = label_parts(meta)
        feats = self.features(x, meta, maps=True)
        folds = dna.fold_ids(x, self.p.num_folds)
        null = dna.null_labels(x, self.p.null_draws, self.scenario.seed)
        fake, sem = parts.fake(y), parts.semantic_class(y)
        out = [dna.layer_stats(f, fake, folds, sem, self.p.num_folds, parts.num_semantic, m,
                               null) for f, m in zip(feats.pooled, feats.maps, strict=True)]
        return feats.names, out

    def candidates(self, names: tuple[str, ...]) -> list[int]:
        """Indices of the candidate layers: ``layers`` if set, else :func:`intermediate_layers`."""
        if self.p.layers is not None:
            return [self._index(names, n, "layers") for n in self.p.layers]
        return intermediate_layers(names)

    def plan(self, names: tuple[str, ...], stats: list[dna.LayerStats],
             auc: list[float] | None = None) -> Plan:
        """Select the layer and the FDUs from (pooled or merged) statistics; the arms' units.

        ``auc``: leave-one-out probe AUC of each candidate layer (``probe_auc``).
        """
        p = self.p
        cand = self.candidates(names)
        forced = None
        if p.layer is not None:
            idx = self._index(names, p.layer, "layer")
            if idx not in cand:
                raise ValueError(f"learner dna: layer {p.layer!r} is not a candidate layer")
            forced = cand.index(idx)
        sub = dna.select([stats[i] for i in cand], p.window, p.fusion, p.sensitivity,
                         p.min_units, p.adjusted_eta, forced, auc)
        sel = dna.Selection(sub.profile, cand[sub.layer], sub.scores, sub.fdus, sub.knee)
        final = len(names) - 1
        seed = derive_seed(self.scenario.seed, "dna", "random_units")
        return Plan(names, sel, dna.unit_sets(sel, final, stats[final].num_units, seed), stats)

    def layer_auc(self, st: dna.LayerStats, x: np.ndarray, fake: np.ndarray) -> float:
        """Leave-one-out AUC of the all-unit probe of one layer on the labelled images."""
        mean, std = dna.standardisation(st, np.arange(st.num_units))
        return probe.loo_auc((x - mean) / std, fake, self.p.c)

    def attribution_plan(self, plan: Plan, feats: LayerFeatures, x: np.ndarray,
                         fake: np.ndarray, meta: DatasetMeta) -> Plan:
        """The plan with the FDUs re-scored by the attribution triad.

        Gradient: of the final-layer (UnivFD) probe's logit through the frozen network;
        probe weight: of the all-unit probe of the chosen layer.
        """
        from flowerbed.methods.dna.model import unit_gradients

        sel = plan.selection
        final = self.fit_arm(plan, "final_layer", feats, fake)
        whole = self.fit_arm(plan, "all_units", feats, fake)
        grads = unit_gradients(self.p.backbone, x, meta, sel.layer, final.w, final.mean,
                               final.std)
        scores = dna.attribution_scores(plan.stats[sel.layer], grads, whole.w)
        fdus, knee = dna.truncate(scores.triadic, self.p.sensitivity, self.p.min_units)
        new = dna.Selection(sel.profile, sel.layer, sel.scores, fdus, knee)
        sets = plan.sets | {"fdu": (sel.layer, fdus)}
        return Plan(plan.names, new, sets, plan.stats)

    @staticmethod
    def _index(names: tuple[str, ...], name: str, field: str) -> int:
        if name not in names:
            raise ValueError(f"learner dna: {field} {name!r} is not a layer of the backbone "
                             f"({', '.join(names)})")
        return names.index(name)

    # --- arms ---------------------------------------------------------------------------

    def detector(self, plan: Plan, arm: str, w: np.ndarray, b: float) -> probe.Detector:
        """The arm's probe with the plan's pooled standardisation."""
        mean, std = plan.standardisation(arm)
        return probe.Detector(plan.sets[arm][1], mean, std, w, b)

    def fit_arm(self, plan: Plan, arm: str, feats: LayerFeatures, fake: np.ndarray,
                start: tuple[np.ndarray, float] | None = None, max_iter: int = 500
                ) -> probe.Detector:
        """Fit (or, from ``start``, continue) the arm's probe on labelled features."""
        det = self.detector(plan, arm, np.zeros(len(plan.sets[arm][1])), 0.0)
        x = det.inputs(feats.pooled[plan.sets[arm][0]])
        w0, b0 = start if start is not None else (None, 0.0)
        w, b = probe.fit_logistic(x, fake, self.p.c, w0, b0, max_iter)
        return self.detector(plan, arm, w, b)

    def score_arm(self, plan: Plan, arm: str, det: probe.Detector, meta: DatasetMeta
                  ) -> dict[str, float]:
        """Test metrics of one probe arm."""
        test, y = self.test_set()
        p = det.proba(test.pooled[plan.sets[arm][0]])
        return detection_metrics(p, y, label_parts(meta), arm)

    def tail(self, seed: int) -> Any:
        """A fresh trainable tail (last blocks, head, new logit) for the fine-tuning arm."""
        from flowerbed.methods.dna.model import finetune_parts

        return finetune_parts(self.p.backbone, self.p.finetune_blocks, seed)[0]

    def score_tail(self, tail: Any, meta: DatasetMeta) -> dict[str, float]:
        """Test metrics of a fine-tuned tail."""
        import torch

        test, y = self.test_set()
        assert test.cut is not None
        with torch.no_grad():
            logits = torch.cat([tail(torch.as_tensor(test.cut[i : i + 512]))
                                for i in range(0, len(test.cut), 512)]).reshape(-1)
        return detection_metrics(probe.sigmoid(logits.numpy()), y, label_parts(meta),
                                 "finetune")

    # --- the local task -----------------------------------------------------------------

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """The method and its baselines on this client's shots, scored on the test split."""
        parts = self._check(data.meta)
        start = time.perf_counter()
        names, stats = self.stats(data.x_train, data.y_train, data.meta)
        feats = self.features(data.x_train, data.meta, maps=True)
        fake = parts.fake(data.y_train)
        auc = None
        if self.p.localisation == "probe_auc":
            auc = [self.layer_auc(stats[i], feats.pooled[i], fake) for i in self.candidates(names)]
        plan = self.plan(names, stats, auc)
        if self.p.triad == "attribution":
            plan = self.attribution_plan(plan, feats, data.x_train, fake, data.meta)
        metrics = plan.summary() | {"dna_select_seconds": time.perf_counter() - start}
        arrays: dict[str, np.ndarray] = {"fdus": plan.selection.fdus,
                                         "triadic": plan.selection.scores.triadic}
        for arm in self.p.arms:
            if arm == "finetune":
                if self.cut_layer() is None:
                    continue
                tail = self.tail(derive_seed(ctx.seed, "finetune"))
                assert feats.cut is not None  # extracted whenever the arm runs
                probe.finetune_tail(tail, feats.cut, fake, self.p.finetune_epochs,
                                    self.p.finetune_lr, ctx.seed)
                metrics |= self.score_tail(tail, data.meta)
                continue
            det = self.fit_arm(plan, arm, feats, fake)
            metrics |= self.score_arm(plan, arm, det, data.meta)
        return Payload(arrays=arrays, metrics=metrics, num_examples=data.num_train)

    # --- federated handlers -------------------------------------------------------------

    def query_dna_stats(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Per-layer statistics of the client's labelled images (nothing else leaves)."""
        self._check(data.meta)
        start = time.perf_counter()
        names, stats = self.stats(data.x_train, data.y_train, data.meta)
        arrays = {k: v for i, st in enumerate(stats) for k, v in st.to_arrays(str(i)).items()}
        return Payload(arrays=arrays, config={LAYERS: list(names)},
                       metrics={SECONDS: time.perf_counter() - start},
                       num_examples=data.num_train)

    def train_dna_probe(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """``iters`` L-BFGS iterations of one arm's probe from the global ``(w, b)``."""
        parts = label_parts(data.meta)
        a = payload.arrays
        det = probe.Detector(a[UNITS].astype(np.int64), a[MEAN], a[STD], a[W], float(a[B][0]))
        feats = self.features(data.x_train, data.meta, maps=True)
        layer = int(payload.config[LAYERS])
        x = det.inputs(feats.pooled[layer])
        w, b = probe.fit_logistic(x, parts.fake(data.y_train), self.p.c, det.w, det.b,
                                  int(payload.config[ITERS]))
        return Payload(arrays={W: w, B: np.array([b])}, num_examples=data.num_train)

    def train_dna_finetune(self, data: ClientData, payload: Payload, ctx: TaskContext
                           ) -> Payload:
        """Local epochs of the fine-tuned tail from the global state."""
        import torch

        parts = label_parts(data.meta)
        tail = self.tail(0)
        tail.load_state_dict({k: torch.as_tensor(v) for k, v in payload.arrays.items()})
        feats = self.features(data.x_train, data.meta, maps=True)
        if feats.cut is None:
            raise ValueError("learner dna: the finetune arm needs an EfficientNet backbone")
        probe.finetune_tail(tail, feats.cut, parts.fake(data.y_train),
                            int(payload.config[ITERS]), self.p.finetune_lr, ctx.seed)
        state = {k: v.detach().numpy().copy() for k, v in tail.state_dict().items()}
        return Payload(arrays=state, num_examples=data.num_train)
