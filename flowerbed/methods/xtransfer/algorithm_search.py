"""XTransfer layer-wise search (LWS): splice-repair-remove candidates, keep the best, repeat.

The control loop of the official code's ``MatchingNet.fit`` / ``select_layer`` /
``select_best_layer`` / ``check_score`` (github.com/zhangy10/XTransfer,
``xtransfer/core.py``), on a pool of :class:`SourceLayer` from any number of
source models. At position ``lid`` the pool holds every source's layers
``lid .. lid + search_depth - 1`` (one layer at ``lid = 0``); a pre-search quick
check keeps the candidates with the highest estimated S-score; each survivor is
spliced (resizer + connector), its BN statistics re-estimated on the support,
repaired, rolled back if repair lowered its score, and pruned; the best by
``s / resource`` among those whose S-score did not drop (train and validation)
is appended. The model's features then feed the next position.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from flowerbed.methods.xtransfer import algorithm as xt
from flowerbed.methods.xtransfer.algorithm_cost import Cost, cost
from flowerbed.methods.xtransfer.algorithm_layers import (
    Connector,
    PoolLayer,
    PreResizer,
    Step,
    bn_layers,
    make_splice,
)


@dataclass(frozen=True)
class SourceLayer:
    """One layer of a source model, with its anchors (pooled source activations).

    ``anchor_out``/``anchor_inter`` are per-sample GAP activations of source data
    (rows) with labels ``anchor_labels``; ``first`` marks a source's input layer.
    """

    source: str
    index: int
    layer: PoolLayer
    anchor_out: np.ndarray
    anchor_labels: np.ndarray
    anchor_inter: np.ndarray | None = None
    first: bool = False

    @property
    def name(self) -> str:
        """``<source>_<index>`` as the code names pool entries."""
        return f"{self.source}_{self.index}"


@dataclass(frozen=True)
class SearchConfig:
    """The method's knobs (the learner's params hold the defaults of ``hhar_single.yaml``)."""

    search_depth: int
    break_depth: int
    n_components: int
    episodes: int
    rotation_steps: int
    quick_check: bool
    resource_switch: bool
    rollback: bool
    best_validation: bool
    max_prune_range: float
    max_mflops: float | None
    init_pick_range: float
    repair: bool
    prune: bool
    seed: int
    #: Reuse what repair and removal would recompute from the same inputs (the
    #: parameter-free splice of the support, a layer's part before a pruned group);
    #: the same result. ``False`` recomputes it, for ``benchmarks/methods/xtransfer_speed.py``.
    reuse: bool = True


@dataclass
class Candidate:
    """A spliced, repaired and pruned candidate with its scores and cost."""

    entry: SourceLayer
    step: Step
    scores: dict[str, float]
    rollback: bool
    cost: Cost
    anchor_score: float
    loss_curve: list[float] = field(default_factory=list)
    kept: np.ndarray | None = None
    seconds: float = 0.0
    estimated: float | None = None


@dataclass
class SearchState:
    """What the loop carries between positions (``MatchingNet``'s attributes)."""

    depth: int
    position: int = 1
    last_train: float = -1.0
    last_val: float = -1.0
    total_mflops: float = 0.0
    pick_range: float = 0.5
    rate_x: list[float] = field(default_factory=list)
    rate_y: list[float] = field(default_factory=list)
    estimated: dict[int, float] = field(default_factory=dict)
    achieved: dict[int, float] = field(default_factory=dict)


class Recombined(nn.Module):
    """The recombined model: a chain of :class:`Step` (splice, connector, layer, tail)."""

    def __init__(self, steps: list[Step]) -> None:
        super().__init__()
        self.steps = nn.ModuleList(steps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Feature map after the last step."""
        for step in self.steps:
            x = step(x)
        return x

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """``normalize(GAP(.))`` of the output: what the KNN / linear head sees."""
        return xt.features(self(x))

    @property
    def structure(self) -> str:
        """The chosen layers, e.g. ``efficientnet_0->crepe_2`` (the code's structure string)."""
        return "->".join(str(s.name) for s in self.steps)


@dataclass
class SearchResult:
    """The recombined model, the per-position record and the search's wall time."""

    model: Recombined
    history: list[dict[str, Any]]
    seconds: float


def _scores(
    step: Step, space: xt.AnchorSpace, sets: dict[str, tuple[torch.Tensor, np.ndarray]]
) -> dict[str, float]:
    with torch.no_grad():
        return {
            k: xt.s_score(space.transform(xt.features(step.head(x)).numpy()), y)
            for k, (x, y) in sets.items()
        }


def _bn_estimate(modules: list[nn.Module], run: Any, x: torch.Tensor) -> None:
    """Running BN statistics := the support batch's (momentum 1), as ``bn_init``."""
    bns = [b for m in modules for b in bn_layers(m)]
    saved = [b.momentum for b in bns]
    for b in bns:
        b.momentum = 1.0
        b.train()
    with torch.no_grad():
        run(x)
    for b, mom in zip(bns, saved, strict=True):
        b.momentum = mom
        b.eval()


def splice(entry: SourceLayer, x: torch.Tensor, first: bool, seed: int) -> Step:
    """Splice ``entry`` after features ``x``: resizer/adapter and a fresh connector."""
    layer = copy.deepcopy(entry.layer).eval()
    torch.manual_seed(seed)
    if first and layer.dims == 2:
        pre = PreResizer(x.shape[1], x.shape[-1], layer.in_size[0])
        conn = Connector(
            2, 1, layer.in_channels, layer.in_size, layer.kernel, layer.stride, wide=True, pre=pre
        )
        return Step(nn.Sequential(), conn, layer, entry.name)
    sp = make_splice(tuple(x.shape[1:]), layer)
    conn = Connector(
        layer.dims,
        x.shape[1],
        layer.in_channels,
        layer.in_size,
        layer.kernel,
        layer.stride,
        wide=entry.first,
    )
    return Step(sp, conn, layer, entry.name)


def _before(
    entry: SourceLayer,
    cfg: SearchConfig,
    sets: dict[str, tuple[torch.Tensor, np.ndarray]],
    first: bool,
) -> tuple[Step, xt.AnchorSpace, dict[str, float]]:
    """Fresh splice, connector BN statistics from the support, S-scores before repair."""
    x_tr = sets["train"][0]
    step = splice(entry, x_tr, first, cfg.seed)
    _bn_estimate([step.connector], lambda x: step.connector(step.splice(x)), x_tr)
    anchors = xt.normalize_rows(entry.anchor_out)
    space = xt.fit_space(anchors, cfg.n_components)
    return step, space, _scores(step, space, sets)


def _aligned(entry: SourceLayer, n_shot: int) -> SourceLayer:
    """``entry`` with its anchors cut to the same ``n_shot`` per class as the support."""
    out, out_y = xt.align_anchors(entry.anchor_out, entry.anchor_labels, n_shot)
    inter = (
        None
        if entry.anchor_inter is None
        else xt.align_anchors(entry.anchor_inter, entry.anchor_labels, n_shot)[0]
    )
    return SourceLayer(entry.source, entry.index, entry.layer, out, out_y, inter, entry.first)


def _repair(
    step: Step, cfg: SearchConfig, x_tr: torch.Tensor, y_tr: np.ndarray, plan: xt.RepairPlan
) -> list[float]:
    """Repair the connector and the candidate layer in place; the loss curve."""
    if not cfg.repair:
        return []
    x: torch.Tensor = x_tr
    if cfg.reuse:
        # The splice (resize, dims adapter) has no parameters: the repair steps see the
        # same spliced support, computed once.
        with torch.no_grad():
            x = step.splice(x_tr)

    def forward(h: torch.Tensor) -> torch.Tensor:
        out = step.layer(step.connector(h)) if cfg.reuse else step.head(h)
        return xt.features(out)

    return xt.repair([step.connector, step.layer], forward, x, y_tr, plan, cfg.episodes, cfg.seed)


def _prune(
    step: Step,
    aligned: SourceLayer,
    space: xt.AnchorSpace,
    cfg: SearchConfig,
    sets: dict[str, tuple[torch.Tensor, np.ndarray]],
) -> tuple[Step, np.ndarray, dict[str, float]]:
    """Channel removal on the candidate layer: the pruned step, the kept channels, its scores."""
    x_tr, y_tr = sets["train"]
    with torch.no_grad():
        x_in = step.connector(step.splice(x_tr))
    acts = {"out": aligned.anchor_out} | (
        {} if aligned.anchor_inter is None else {"inter": aligned.anchor_inter}
    )
    pruned, kept = xt.removal(
        step.layer,
        x_in,
        y_tr,
        acts,
        space,
        cfg.n_components,
        cfg.max_prune_range,
        reuse=cfg.reuse,
    )
    step = Step(step.splice, step.connector, pruned, step.name)
    scores = _scores(step, space.keep(kept), sets)
    return step, kept, {f"prune_{k}": v for k, v in scores.items()}


def evaluate(
    entry: SourceLayer,
    cfg: SearchConfig,
    sets: dict[str, tuple[torch.Tensor, np.ndarray]],
    first: bool,
    n_shot: int,
) -> Candidate:
    """Splice -> BN re-estimation -> repair -> (rollback) -> removal of one candidate."""
    t0 = time.perf_counter()
    aligned = _aligned(entry, n_shot)
    step, space, before = _before(aligned, cfg, sets, first)
    x_tr, y_tr = sets["train"]
    _bn_estimate([step.layer], step.head, x_tr)
    original = copy.deepcopy(step)
    scores = {f"before_{k}": v for k, v in before.items()}
    with torch.no_grad():
        f_tr = xt.features(step.head(x_tr)).numpy()
    plan = xt.plan_repair(
        f_tr,
        y_tr,
        xt.normalize_rows(aligned.anchor_out),
        aligned.anchor_labels,
        cfg.n_components,
        True,
        cfg.rotation_steps,
        cfg.seed,
    )
    curve = _repair(step, cfg, x_tr, y_tr, plan)
    after = _scores(step, space, sets)
    scores.update(after)
    rollback = False
    if cfg.rollback and _combined(after, cfg) < _combined(before, cfg):
        step, rollback = original, True
    kept = None
    if cfg.prune:
        step, kept, pruned_scores = _prune(step, aligned, space, cfg, sets)
        scores.update(pruned_scores)
    return Candidate(
        aligned,
        step,
        scores,
        rollback,
        cost(step, x_tr),
        plan.anchor_score,
        curve,
        kept,
        time.perf_counter() - t0,
    )


def _combined(s: dict[str, float], cfg: SearchConfig) -> float:
    a, b = (0.5, 0.5) if cfg.best_validation else (1.0, 0.0)
    return a * (s["train"] + 1) + b * (s["val"] + 1)


def select_best(cands: list[Candidate], state: SearchState, cfg: SearchConfig) -> Candidate | None:
    """The code's ``select_best_layer``: score = s / resource over the admissible candidates.

    ``s = 0.5 (S_train + 1) + 0.5 (S_val + 1)`` (before-repair scores for a rolled-back
    candidate); ``resource = max(1, mflops / (max_mflops / layer_max))`` with
    ``layer_max = exp(position / (depth / 2) - 2) + 1``. A candidate that was
    repaired must not lower S_train or S_val below the last chosen layer's nor
    below its own before-repair value (the first position takes any); a
    ``max_mflops`` budget drops those that would exceed it.
    """
    if not cands:
        return None
    layer_max = math.exp(state.position / (state.depth / 2) - 2) + 1
    scale = max(c.cost.mflops for c in cands) / layer_max
    admissible = []
    for c in cands:
        s = c.scores
        if c.rollback:
            c.scores["s"] = _combined({"train": s["before_train"], "val": s["before_val"]}, cfg)
        else:
            c.scores["s"] = _combined(s, cfg)
        c.scores["resource"] = max(1.0, c.cost.mflops / scale) if scale > 0 else 1.0
        c.scores["score"] = c.scores["s"] / c.scores["resource"]
        ok = True
        if not c.rollback:
            ok = s["train"] >= state.last_train and s["train"] >= s["before_train"]
            if cfg.best_validation:
                ok = ok and s["val"] >= state.last_val and s["val"] >= s["before_val"]
        if state.position == 1 or ok:
            admissible.append(c)
    if cfg.max_mflops is not None:
        admissible = [c for c in admissible if state.total_mflops + c.cost.mflops <= cfg.max_mflops]
    if not admissible:
        return None
    key = "score" if cfg.resource_switch else "s"
    return max(admissible, key=lambda c: c.scores[key])


def _rate_curve(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Fit ``rate(x) = exp(a x) + b`` to the (position, repair rate) history."""
    from scipy.optimize import curve_fit

    try:
        popt, _ = curve_fit(
            lambda x, a, b: np.exp(a * x) + b,
            np.asarray(xs, float),
            np.asarray(ys, float),
            maxfev=5000,
        )
        return float(popt[0]), float(popt[1])
    except (RuntimeError, ValueError, TypeError):
        return math.log(3.0) / max(xs[1], 1.0), -1.0  # the curve through the two priors


def quick_check(
    pool: list[SourceLayer],
    state: SearchState,
    cfg: SearchConfig,
    sets: dict[str, tuple[torch.Tensor, np.ndarray]],
    n_classes: int,
    n_shot: int,
) -> list[tuple[SourceLayer, float]]:
    """Pre-search check (the code's ``check_score``).

    Keep the candidates with the best estimate ``S_before + rate (S_anchor -
    S_before)``, ``rate`` from the curve ``exp(a x) + b`` fitted to the repair
    rates so far; the share kept adapts to how well the previous estimate
    matched (between 0.2 and 0.5 of the pool, at least 2).
    """
    x = state.position
    if len(state.achieved) >= 2 and (x - 1) in state.achieved and (x - 1) in state.estimated:
        pred, true = state.estimated[x - 1], state.achieved[x - 1]
        rate = min(abs(true - pred) / max(abs(pred), 1e-12), 1.0)
        state.pick_range *= (1 - rate) if pred < true else (1 + rate)
    state.pick_range = min(max(0.2, state.pick_range), 0.5)
    top_n = int(max(len(pool) * state.pick_range // 1 + 1, 2))
    a, b = _rate_curve(state.rate_x, state.rate_y)
    rate = math.exp(a * x) + b
    rated = []
    train = {"train": sets["train"]}
    for entry in pool:
        out, out_y = xt.align_anchors(entry.anchor_out, entry.anchor_labels, n_shot)
        aligned = SourceLayer(entry.source, entry.index, entry.layer, out, out_y, None, entry.first)
        _, space, before = _before(aligned, cfg, train, first=False)
        a_score = xt.anchor_score(space, xt.normalize_rows(out), out_y, n_classes)
        rated.append((entry, before["train"] + rate * (a_score - before["train"])))
    rated.sort(key=lambda t: t[1], reverse=True)
    return rated[:top_n]


def search(
    pool: list[SourceLayer],
    x_train: torch.Tensor,
    y_train: np.ndarray,
    x_val: torch.Tensor,
    y_val: np.ndarray,
    cfg: SearchConfig,
) -> SearchResult:
    """Layer-wise search over ``pool`` on the support (train) and validation shots.

    ``x_*`` are raw target windows ``(n, C, T)``; labels ``0..K-1``. Returns the
    recombined model (eval mode) and one record per position examined.

    Raises ValueError naming the class count when a class has a single support
    window: its silhouette, hence every S-score, is undefined (the official code
    raises there too), so the search would be blind.
    """
    t0 = time.perf_counter()
    n_classes = len(np.unique(y_train))
    n_shot = int(np.bincount(y_train).min())
    refuse_singletons(y_train)
    by_pos: dict[int, list[SourceLayer]] = {}
    for e in pool:
        by_pos.setdefault(e.index, []).append(e)
    depth = max(by_pos) + 1
    state = SearchState(
        depth=depth, pick_range=cfg.init_pick_range, rate_x=[0.0, float(depth)], rate_y=[0.0, 2.0]
    )
    steps: list[Step] = []
    history: list[dict[str, Any]] = []
    feats = {"train": x_train, "val": x_val}
    last = -1
    for lid in sorted(by_pos):
        if lid > cfg.break_depth:
            break
        if lid <= last:
            continue
        width = 1 if lid == 0 else cfg.search_depth
        cands = [
            e for d in range(width) if lid + d <= cfg.break_depth for e in by_pos.get(lid + d, [])
        ]
        sets = {"train": (feats["train"], y_train), "val": (feats["val"], y_val)}
        estimates: dict[str, float] = {}
        if cfg.quick_check and lid != 0:
            kept = quick_check(cands, state, cfg, sets, n_classes, n_shot)
            estimates = {e.name: est for e, est in kept}
            cands = [e for e, _ in kept]
        evaluated = [evaluate(e, cfg, sets, first=lid == 0, n_shot=n_shot) for e in cands]
        for c in evaluated:
            c.estimated = estimates.get(c.entry.name)
        best = select_best(evaluated, state, cfg)
        history.append(_record(lid, state.position, evaluated, best))
        if best is None:
            last = last + width
            continue
        steps.append(best.step)
        s = best.scores
        denom = best.anchor_score - s["before_train"]
        state.rate_x.append(float(state.position))
        state.rate_y.append((s["train"] - s["before_train"]) / denom if abs(denom) > 1e-12 else 0.0)
        state.achieved[state.position] = s["train"]
        if best.estimated is not None:
            state.estimated[state.position] = best.estimated
        state.last_train, state.last_val = s["train"], s["val"]
        state.total_mflops += best.cost.mflops
        state.position += 1
        last = best.entry.index
        with torch.no_grad():
            feats = {k: best.step(v) for k, v in feats.items()}
    model = Recombined(steps).eval()
    return SearchResult(model, history, time.perf_counter() - t0)


def _record(
    lid: int, position: int, cands: list[Candidate], best: Candidate | None
) -> dict[str, Any]:
    return {
        "lid": lid,
        "position": position,
        "chosen": None if best is None else best.entry.name,
        "candidates": {
            c.entry.name: {
                **{k: round(v, 4) for k, v in c.scores.items()},
                "rollback": c.rollback,
                "mflops": round(c.cost.mflops, 3),
                "params": c.cost.params,
                "seconds": round(c.seconds, 2),
                "repair_steps": len(c.loss_curve),
            }
            for c in cands
        },
    }


def refuse_singletons(y_train: np.ndarray) -> None:
    """Raise ValueError (one line, naming the class count) if a class has one support window."""
    counts = np.bincount(y_train)
    counts = counts[counts > 0]
    singles = int((counts == 1).sum())
    if singles:
        raise ValueError(
            f"shots: XTransfer's search needs at least 2 support windows per class; "
            f"{singles} of {len(counts)} classes have 1 (a singleton class has no silhouette, "
            "so every S-score is undefined)")


def knn_neighbours(k: int, y_support: np.ndarray) -> int:
    """``min(k, shots)``: ``k`` capped at the smallest class's support count.

    With more neighbours than a class has windows, a vote can never be won by
    that class's own windows alone (at 1 shot and k = 5 the KNN is nearly a
    constant predictor).
    """
    counts = np.bincount(y_support)
    return int(min(k, counts[counts > 0].min()))


def knn_predict(
    model: nn.Module, x_support: torch.Tensor, y_support: np.ndarray, x_query: torch.Tensor, k: int
) -> np.ndarray:
    """``TEST_METHOD='KNN'``: k-nearest neighbours on the support's features.

    ``model.embed`` gives the features; ``k`` is capped at the shots per class
    (:func:`knn_neighbours`).
    """
    from sklearn.neighbors import KNeighborsClassifier

    with torch.no_grad():
        f_s, f_q = model.embed(x_support).numpy(), model.embed(x_query).numpy()  # type: ignore[operator]
    knn = KNeighborsClassifier(n_neighbors=knn_neighbours(k, y_support)).fit(f_s, y_support)
    pred: np.ndarray = knn.predict(f_q)
    return pred


class LinearHead(nn.Module):
    """``Linear(normalize(GAP(model(x))))``: the code's final ``Finetuner`` head."""

    def __init__(self, model: Recombined, n_classes: int, example: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        with torch.no_grad():
            dim = model.embed(example[:1]).shape[1]
        self.linear = nn.Linear(dim, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits."""
        out: torch.Tensor = self.linear(self.model.embed(x))
        return out


def finetune(
    model: Recombined, x: torch.Tensor, y: np.ndarray, n_classes: int, steps: int, seed: int
) -> LinearHead:
    """``FINETUNE=True``: a linear head trained with the recombined layers.

    Connectors frozen, full batch, SGD lr 0.01 momentum 0.95, cross-entropy;
    on a copy of ``model``.
    """
    torch.manual_seed(seed)
    head = LinearHead(copy.deepcopy(model), n_classes, x)
    return train_head(head, x, y, steps)


def train_head(head: LinearHead, x: torch.Tensor, y: np.ndarray, steps: int) -> LinearHead:
    """``steps`` full-batch steps of :func:`finetune`'s training on ``head``, in place.

    Connectors frozen, SGD lr 0.01 momentum 0.95 (fresh), cross-entropy. Also
    a client's local training in a FedAvg round of the recombined model.
    """
    head.requires_grad_(True)
    for m in head.model.modules():
        if isinstance(m, Connector):
            m.requires_grad_(False)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.95)
    yt = torch.as_tensor(y, dtype=torch.long)
    head.train()
    for _ in range(steps):
        loss = nn.functional.cross_entropy(head(x), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval()
