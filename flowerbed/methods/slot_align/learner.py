"""SLOT-Align client (arXiv 2606.16655): frozen-encoder features, Gaussian statistics, heads.

Answers ``query.scatter`` (optional pooled-PCA step), ``query.stats`` (n, mean,
Ledoit-Wolf covariance of the encoded local training data), ``train.head``
(a linear head trained on features transported by the received map with a
per-epoch tau, plus per-class feature sums for the prototype classifier) and
``evaluate.heads`` (accuracy of the averaged head, the head ensemble and the
prototypes on the client's test features mapped at ``tau_eval``). The maths is
in ``flowerbed.methods.slot_align.algorithm`` and ``flowerbed.methods.slot_align.algorithm_heads``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData
from flowerbed.data.federated import federated_data
from flowerbed.methods.slot_align import algorithm_heads as heads
from flowerbed.methods.slot_align.algorithm import SPD_EPSILON, gaussian_stats, transport
from flowerbed.models.encoders import build_encoder, encoder_spec_type

#: Message types and record keys shared with ``flowerbed.methods.slot_align.strategy``.
SCATTER_MESSAGE = "query.scatter"
STATS_MESSAGE = "query.stats"
TRAIN_MESSAGE = "train.head"
EVAL_MESSAGE = "evaluate.heads"
MEAN, COV_TRIU, SCATTER = "mean", "cov_triu", "scatter"
PCA_MEAN, PCA_BASIS = "pca_mean", "pca_basis"
MAP_A, MAP_B = "map_a", "map_b"
HEAD_W, HEAD_C, ALL_W, ALL_C = "head_w", "head_c", "all_w", "all_c"
PROTO_SUM, PROTO_COUNT = "proto_sum", "proto_count"
TAUS, TAU_EVAL = "taus", "tau_eval"
PIPELINES = ("fedavg", "ensemble", "prototype")
PIPELINES_KEY = "pipelines"

EncoderSpec = encoder_spec_type()


class SlotAlignLearnerParams(Params):
    """Encoder, statistics floor, local head training (O-FedAvg defaults) and test split."""

    encoder: EncoderSpec = Field(default_factory=lambda: {"name": "identity"})  # type: ignore[valid-type]
    spd_epsilon: float = Field(SPD_EPSILON, gt=0)
    lr: float = Field(1e-3, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-5, ge=0)
    batch_size: int = Field(64, ge=1)
    loss: heads.Loss = Field(
        "double_softmax", description="authors' CE-on-softmax head, or standard_ce"
    )
    eval_split: Literal["domain", "local"] = Field(
        "domain", description="domain: the global test split through this client's domain "
        "transform (balanced, as in the paper); local: the client's held-out rows",
    )


_CACHE: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()


def triu(cov: np.ndarray) -> np.ndarray:
    """Upper triangle of a symmetric matrix, row-major (``d(d+1)/2`` numbers)."""
    return cov[np.triu_indices(len(cov))]


def untriu(values: np.ndarray) -> np.ndarray:
    """Symmetric matrix from :func:`triu`'s output."""
    d = int((np.sqrt(8 * len(values) + 1) - 1) / 2)
    out = np.zeros((d, d))
    out[np.triu_indices(d)] = values
    return out + np.triu(out, 1).T


@register("learner", "slot_align")
class SlotAlignLearner(Learner):
    """Frozen-encoder features: Gaussian statistics, mapped-feature heads and their scores."""

    Params = SlotAlignLearnerParams

    def features(self, data: ClientData, split: str, payload: Payload) -> np.ndarray:
        """Encoded (cached per process) and, when the server sent a PCA basis, projected rows."""
        p: SlotAlignLearnerParams = self.params  # type: ignore[assignment]
        spec = p.encoder.model_dump_json()  # type: ignore[attr-defined]
        key = (self.scenario.digest(), spec, str(data.partition_id), split)
        if key not in _CACHE:
            x = data.x_train if split == "train" else self.test_rows(data)[0]
            _CACHE[key] = build_encoder(p.encoder).encode(x, data.meta).astype(np.float64)
            while len(_CACHE) > 64:
                _CACHE.popitem(last=False)
        z = _CACHE[key]
        if PCA_BASIS in payload.arrays:
            z = (z - payload.arrays[PCA_MEAN]) @ payload.arrays[PCA_BASIS]
        return z

    def test_rows(self, data: ClientData) -> tuple[np.ndarray, np.ndarray]:
        """The client's test rows and labels (see ``eval_split``)."""
        if self.params.eval_split == "local":  # type: ignore[attr-defined]
            return data.x_test, data.y_test
        fed = federated_data(self.scenario)
        x, y = fed.dataset.x_test, fed.dataset.y_test
        transform = fed.partition.transform(data.partition_id)
        return (x if transform is None else transform(x)), y

    def query_scatter(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """``n``, mean and scatter matrix of the local features (for pooled PCA)."""
        z = self.features(data, "train", payload)
        centred = z - z.mean(axis=0)
        arrays = {MEAN: z.mean(axis=0), SCATTER: centred.T @ centred}
        return Payload(arrays=arrays, num_examples=len(z))

    def query_stats(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """``n`` (num_examples), mean and Ledoit-Wolf covariance (upper triangle) of features."""
        g = gaussian_stats(self.features(data, "train", payload), self.params.spd_epsilon)  # type: ignore[attr-defined]
        return Payload(arrays={MEAN: g.mean, COV_TRIU: triu(g.cov)}, num_examples=g.n,
                       metrics={"feature_dim": float(len(g.mean))})

    def train_head(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local linear head on transported features; class sums at ``tau_eval`` for prototypes."""
        p: SlotAlignLearnerParams = self.params  # type: ignore[assignment]
        z, y = self.features(data, "train", payload), data.y_train
        a, b = payload.arrays.get(MAP_A), payload.arrays.get(MAP_B)
        w, c = heads.train_linear_head(
            payload.arrays[HEAD_W], payload.arrays[HEAD_C], z, y, seed=ctx.seed,
            taus=list(payload.config[TAUS]), a=a, b=b, lr=p.lr, momentum=p.momentum,
            weight_decay=p.weight_decay, batch_size=p.batch_size, loss=p.loss,
        )
        tau_eval = float(payload.config[TAU_EVAL])
        mapped = z if a is None or b is None else transport(z, a, b, tau_eval)
        sums, counts = heads.class_sums(mapped, y, data.meta.num_classes)
        arrays = {HEAD_W: w, HEAD_C: c, PROTO_SUM: sums, PROTO_COUNT: counts}
        return Payload(arrays=arrays, num_examples=len(y))

    def evaluate_heads(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Accuracy of each pipeline on this client's test features mapped at ``tau_eval``."""
        _, y = self.test_rows(data)
        if len(y) == 0:
            return Payload(num_examples=0)
        arr = payload.arrays
        z = self.features(data, "test", payload)
        if MAP_A in arr:
            z = transport(z, arr[MAP_A], arr[MAP_B], float(payload.config[TAU_EVAL]))
        logits = {
            "fedavg": lambda: z @ arr[HEAD_W].T + arr[HEAD_C],
            "ensemble": lambda: heads.ensemble_probs(arr[ALL_W], arr[ALL_C], z),
            "prototype": lambda: heads.prototype_logits(arr[PROTO_SUM], arr[PROTO_COUNT], z),
        }
        wanted = payload.config.get(PIPELINES_KEY, list(PIPELINES))
        metrics = {f"{k}_accuracy": heads.accuracy(logits[k](), y) for k in wanted}
        return Payload(metrics=metrics, num_examples=len(y))


def head_arrays(w: np.ndarray, c: np.ndarray) -> Arrays:
    """A head as message arrays."""
    return {HEAD_W: w, HEAD_C: c}
