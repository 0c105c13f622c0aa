"""One few-shot episode of XTransfer and its baselines, with costs (same shots for all).

An episode draws ``shots`` support and ``val`` validation windows per class
(seeded); XTransfer repairs on the support, selects layers on both and trains
its final linear head on the validation windows, as the official code does
(:func:`xtransfer_heads` lists its four heads, one of them trained on the
baselines' rows). Every baseline trains on the union of those labelled windows:

- ``scratch_cnn``: a Conv4-1D (64 channels) trained from scratch on the raw windows;
- ``stats_logreg``: per-channel statistics (mean, std, min, max, mean absolute
  change) + logistic regression (the handcrafted baseline);
- ``linear_probe``: each frozen source on a parameter-free input map
  (:func:`~flowerbed.methods.xtransfer.model_sources.source_input`), pooled features,
  logistic regression;
- ``finetune``: each source with a linear head, all weights trained (Adam);
- ``single_source``: XTransfer with a pool of one source (no cross-source
  recombination), for each source.

Each method reports macro-F1 and accuracy on the query windows, parameters,
MFLOPs per inference and training seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowerbed.methods.xtransfer import algorithm_search as xs
from flowerbed.methods.xtransfer import model_sources as src
from flowerbed.methods.xtransfer.algorithm_cost import Cost, cost
from flowerbed.methods.xtransfer.algorithm_layers import PoolLayer, gap

BASELINES = ("scratch_cnn", "stats_logreg", "linear_probe", "finetune", "single_source")


@dataclass(frozen=True)
class Split:
    """Row indices of one episode: support, validation and query."""

    support: np.ndarray
    val: np.ndarray
    query: np.ndarray


def fewshot_split(y: np.ndarray, shots: int, val: int, seed: int,
                  query_rows: bool = True) -> Split:
    """``shots`` support + ``val`` validation rows per class, the rest as query.

    Raises ValueError naming ``shots`` when a class has too few rows.
    """
    gen = np.random.default_rng(seed)
    sup, va = [], []
    for c in np.unique(y):
        rows = gen.permutation(np.flatnonzero(y == c))
        need = shots + val + (1 if query_rows else 0)
        if len(rows) < need:
            raise ValueError(f"shots: class {c} has {len(rows)} windows; shots={shots} + "
                             f"val={val} (+1 query) need {need}")
        sup += rows[:shots].tolist()
        va += rows[shots:shots + val].tolist()
    used = np.asarray(sup + va)
    query = np.setdiff1d(np.arange(len(y)), used)
    return Split(np.asarray(sup), np.asarray(va), query)


@dataclass(frozen=True)
class Outcome:
    """One method's predictions on the query, its cost and training time."""

    pred: np.ndarray
    cost: Cost
    seconds: float
    extra: dict[str, float | str]
    #: The trained model, where a caller needs it again (XTransfer's linear head).
    model: nn.Module | None = None


def scores(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Macro-F1 and accuracy."""
    from sklearn.metrics import accuracy_score, f1_score

    return {"macro_f1": float(f1_score(y, pred, average="macro", zero_division=0)),
            "accuracy": float(accuracy_score(y, pred))}


def _timed(fn: Callable[[], tuple[np.ndarray, Cost, dict[str, float | str]]]) -> Outcome:
    t0 = time.perf_counter()
    pred, c, extra = fn()
    return Outcome(pred, c, time.perf_counter() - t0, extra)


def run_xtransfer(pool: list[xs.SourceLayer], x: torch.Tensor, y: np.ndarray, split: Split,
                  cfg: xs.SearchConfig, finetune_steps: int, knn_k: int
                  ) -> dict[str, Outcome]:
    """Search on the support and validation shots, then :func:`xtransfer_heads`.

    The searched model (before any head) is ``out["xtransfer_knn"].model``.
    """
    t0 = time.perf_counter()
    res = xs.search(pool, x[split.support], y[split.support], x[split.val], y[split.val], cfg)
    return xtransfer_heads(res.model, x, y, split, finetune_steps, knn_k, cfg.seed,
                           time.perf_counter() - t0)


def xtransfer_heads(model: xs.Recombined, x: torch.Tensor, y: np.ndarray, split: Split,
                    finetune_steps: int, knn_k: int, seed: int, search_s: float = 0.0
                    ) -> dict[str, Outcome]:
    """XTransfer's four heads on one searched model (which none of them modifies).

    - ``xtransfer``: the code's ``FINETUNE`` linear head trained with the layers on
      the validation windows, its argmax;
    - ``xtransfer_knn``: KNN on the support's features of the searched model;
    - ``xtransfer_official``: the official metric (``validate_all.py``): KNN on the
      support's features of the backbone *after* that fine-tune, at its last step
      (the code also keeps the best step on the test set; not copied);
    - ``xtransfer_equal``: the searched model's features with the probes' head
      (standardised logistic regression) on support and validation, the rows
      every baseline trains on.

    KNN heads use ``k = min(knn_k, shots)``. ``search_s`` is added to each arm's
    training seconds.
    """
    n_classes = len(np.unique(y))
    sup, val, query = split.support, split.val, split.query
    k = xs.knn_neighbours(knn_k, y[sup])
    t0 = time.perf_counter()
    knn = xs.knn_predict(model, x[sup], y[sup], x[query], k)
    knn_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    head = xs.finetune(model, x[val], y[val], n_classes, finetune_steps, seed)
    ft_s = time.perf_counter() - t1
    with torch.no_grad():
        pred = head(x[query]).argmax(1).numpy()
    t2 = time.perf_counter()
    official = xs.knn_predict(head.model, x[sup], y[sup], x[query], k)
    off_s = time.perf_counter() - t2
    t3 = time.perf_counter()
    train = np.concatenate([sup, val])
    with torch.no_grad():
        f_tr, f_q = model.embed(x[train]).numpy(), model.embed(x[query]).numpy()
    equal = _logreg(f_tr, y[train], f_q)
    eq_s = time.perf_counter() - t3
    info: dict[str, float | str] = {"structure": model.structure,
                                    "depth": float(len(model.steps)), "knn_k": float(k)}
    c_model = cost(model, x[:1])
    lr = (f_tr.shape[1] + 1) * n_classes
    c_equal = Cost(c_model.params + lr, c_model.flops + 2 * f_tr.shape[1] * n_classes,
                   c_model.bytes + 4 * lr)
    return {
        "xtransfer": Outcome(pred, cost(head, x[:1]), search_s + ft_s, info, head),
        "xtransfer_knn": Outcome(knn, c_model, search_s + knn_s, info, model),
        "xtransfer_official": Outcome(official, cost(head.model, x[:1]),
                                      search_s + ft_s + off_s, info),
        "xtransfer_equal": Outcome(equal, c_equal, search_s + eq_s, info),
    }


def _logreg(f_tr: np.ndarray, y_tr: np.ndarray, f_te: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(f_tr)
    model = LogisticRegression(max_iter=2000).fit(scaler.transform(f_tr), y_tr)
    pred: np.ndarray = model.predict(scaler.transform(f_te))
    return pred


def stats_logreg(x: torch.Tensor, y: np.ndarray, train: np.ndarray, query: np.ndarray
                 ) -> Outcome:
    """Handcrafted per-channel statistics + logistic regression."""
    from flowerbed.data.har_data import window_features

    def feats(rows: np.ndarray) -> np.ndarray:
        w = x[rows].numpy().transpose(0, 2, 1)
        return np.concatenate([window_features(s, s.shape[0], s.shape[0]) for s in w])

    def fit() -> tuple[np.ndarray, Cost, dict[str, float | str]]:
        f_tr = feats(train)
        pred = _logreg(f_tr, y[train], feats(query))
        n_f, n_c = f_tr.shape[1], len(np.unique(y))
        flops = 2 * n_f * n_c + x.shape[1] * x.shape[2] * 6  # logits + the statistics
        return pred, Cost((n_f + 1) * n_c, flops, 4 * (n_f + 1) * n_c), {}

    return _timed(fit)


class Conv1dNet(nn.Module):
    """Conv4-1D (the code's sensing backbone): 4 x (conv3, BN, ReLU, maxpool 2), GAP, linear."""

    def __init__(self, channels: int, n_classes: int, width: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(4):
            layers += [nn.Conv1d(channels if i == 0 else width, width, 3, padding=1),
                       nn.BatchNorm1d(width), nn.ReLU(), nn.MaxPool1d(2)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits."""
        out: torch.Tensor = self.head(gap(self.body(x)))
        return out


def _train(model: nn.Module, x: torch.Tensor, y: np.ndarray, steps: int, lr: float) -> None:
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    yt = torch.as_tensor(y, dtype=torch.long)
    model.train()
    for _ in range(steps):
        loss = F.cross_entropy(model(x), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def scratch_cnn(x: torch.Tensor, y: np.ndarray, train: np.ndarray, query: np.ndarray,
                seed: int, steps: int = 300) -> Outcome:
    """A Conv4-1D trained from scratch: Adam lr 1e-3, ``steps`` full-batch epochs."""
    def fit() -> tuple[np.ndarray, Cost, dict[str, float | str]]:
        torch.manual_seed(seed)
        net = Conv1dNet(x.shape[1], len(np.unique(y)))
        _train(net, x[train], y[train], steps, 1e-3)
        with torch.no_grad():
            pred = net(x[query]).argmax(1).numpy()
        return pred, cost(net, x[:1]), {}

    return _timed(fit)


class SourceNet(nn.Module):
    """A whole source (its pool layers, heads and tails) on the parameter-free input map."""

    def __init__(self, name: str, layers: list[PoolLayer], n_classes: int | None,
                 image_size: int, tokens: int) -> None:
        super().__init__()
        self.name, self.image_size, self.tokens = name, image_size, tokens
        self.layers = nn.ModuleList(layers)
        self.head: nn.Linear | None = None
        if n_classes is not None:
            dim = int(layers[-1].out_channels)  # type: ignore[arg-type]
            self.head = nn.Linear(dim, n_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled output of the last layer."""
        h = src.source_input(self.name, x, self.image_size, self.tokens)
        for layer in self.layers:
            assert isinstance(layer, PoolLayer)
            h = layer.apply_tail(layer(h))
        return gap(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (with a head) or pooled features."""
        f = self.embed(x)
        return f if self.head is None else self.head(f)


def _source_net(name: str, pool: list[xs.SourceLayer], n_classes: int | None,
                image_size: int, tokens: int) -> SourceNet:
    import copy

    layers = [copy.deepcopy(e.layer) for e in pool if e.source == name]
    return SourceNet(name, layers, n_classes, image_size, tokens).eval()


def linear_probe(name: str, pool: list[xs.SourceLayer], x: torch.Tensor, y: np.ndarray,
                 train: np.ndarray, query: np.ndarray, image_size: int, tokens: int) -> Outcome:
    """Frozen source features + logistic regression."""
    def fit() -> tuple[np.ndarray, Cost, dict[str, float | str]]:
        net = _source_net(name, pool, None, image_size, tokens)
        with torch.no_grad():
            f_tr, f_te = net(x[train]).numpy(), net(x[query]).numpy()
        pred = _logreg(f_tr, y[train], f_te)
        c = cost(net, x[:1])
        n_c = len(np.unique(y))
        head = (f_tr.shape[1] + 1) * n_c
        return pred, Cost(c.params + head, c.flops + 2 * f_tr.shape[1] * n_c,
                          c.bytes + 4 * head), {}

    return _timed(fit)


def finetune_source(name: str, pool: list[xs.SourceLayer], x: torch.Tensor, y: np.ndarray,
                    train: np.ndarray, query: np.ndarray, image_size: int, tokens: int,
                    seed: int, steps: int = 100) -> Outcome:
    """Every weight of the source plus a new linear head: Adam lr 1e-3, full batch."""
    def fit() -> tuple[np.ndarray, Cost, dict[str, float | str]]:
        torch.manual_seed(seed)
        net = _source_net(name, pool, len(np.unique(y)), image_size, tokens)
        net.requires_grad_(True)
        _train(net, x[train], y[train], steps, 1e-3)
        with torch.no_grad():
            pred = net(x[query]).argmax(1).numpy()
        return pred, cost(net, x[:1]), {}

    return _timed(fit)
