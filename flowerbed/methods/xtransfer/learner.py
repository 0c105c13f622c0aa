"""Learner ``xtransfer``: modality-agnostic few-shot transfer on one client's sensor windows.

Method: "XTransfer: Modality-Agnostic Few-Shot Model Transfer for Human Sensing at
the Edge" (Zhang et al., arXiv 2506.22726; code github.com/zhangy10/XTransfer). Maths
in :mod:`flowerbed.methods.xtransfer.algorithm` and
:mod:`flowerbed.methods.xtransfer.algorithm_search`; sources in
:mod:`flowerbed.methods.xtransfer.model_sources`. A local task: each client (a
subject) draws ``shots`` support and ``val`` validation windows per class from its
own rows, recombines layers of the source models on them, and is
scored on its remaining windows (or on its held-out rows when
``clients.local_test_fraction > 0``); the ``centralized`` baseline does the
same once on every subject's rows pooled. Baselines named in ``baselines``
run on the same shots in the same call; each metric is prefixed by its method.
The chosen structure and the search record go to ``client_state("xtransfer")``.

Strategy ``xtransfer_fedavg`` uses three more messages: ``train.xtransfer_search``
(the same episode, also returning the linear head's arrays and what groups it),
``train.xtransfer_fedavg`` (train a group's average further) and
``evaluate.xtransfer_fedavg`` (score it on the query windows); the head of round
1 waits in ``client_state("xtransfer_fedavg")`` between them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from flowerbed.clients.learner import Learner, TaskContext, client_seed
from flowerbed.core import keys
from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.data.base import ClientData

if TYPE_CHECKING:
    import torch

    from flowerbed.methods.xtransfer.algorithm_search import LinearHead, SearchConfig, SourceLayer
    from flowerbed.methods.xtransfer.model_baselines import Split

Source = Literal["efficientnet", "minilm", "crepe", "fmnist_cnn", "signal_cnn"]
Baseline = Literal["scratch_cnn", "stats_logreg", "linear_probe", "finetune", "single_source"]


class XTransferParams(Params):
    """Source pool, few-shot protocol, and the method's knobs (``configs/hhar_single.yaml``)."""

    sources: tuple[Source, ...] = Field(
        ("efficientnet", "minilm", "fmnist_cnn", "signal_cnn"), min_length=1,
        description="source models of the pool (crepe: CREPE-tiny audio, slow on CPU)")
    shots: int = Field(5, ge=1, description="support windows per class (the search needs 2+)")
    val: int = Field(5, ge=1, description="validation windows per class (the code's 5)")
    search_depth: int = Field(3, ge=1, description="layers ahead examined per position")
    break_depth: int = Field(9, ge=0, description="deepest layer index searched")
    pca_components: int = Field(2, ge=1, description="anchor-space dimensions")
    episodes: int = Field(200, ge=1, description="repair steps (full batch)")
    rotation_steps: int = Field(20, ge=0, description="steps fitting the 2x2 rotation")
    quick_check: bool = Field(True, description="pre-search check prunes the candidates")
    resource_switch: bool = Field(True, description="rank candidates by s / resource")
    rollback: bool = Field(True, description="undo a repair that lowered the S-score")
    best_validation: bool = Field(True, description="S-scores of support and validation")
    repair: bool = Field(True, description="train connector + layer on the repair loss")
    prune: bool = Field(True, description="PCA-based channel removal")
    max_prune_range: float = Field(1.0, gt=0, le=1, description="share of channels searched")
    max_mflops: float | None = Field(None, gt=0, description="budget, MFLOPs per inference")
    init_pick_range: float = Field(0.5, gt=0, le=1, description="quick-check share kept")
    finetune_steps: int = Field(100, ge=0, description="steps of the final linear head")
    knn_k: int = Field(5, ge=1, description="neighbours of the KNN heads (capped at shots)")
    image_size: int = Field(64, ge=32, description="EfficientNet input side")
    efficientnet_blocks: int = Field(8, ge=1, le=16, description="MBConv blocks in the pool")
    tokens: int = Field(16, ge=4, description="MiniLM sequence length")
    anchors_per_class: int = Field(50, ge=2, description="source samples per anchor class")
    baselines: tuple[Baseline, ...] = Field(
        (), description="scratch_cnn, stats_logreg, linear_probe, finetune, single_source")

    @model_validator(mode="after")
    def _distinct(self) -> XTransferParams:
        if len(set(self.sources)) != len(self.sources):
            raise ValueError(f"sources: each source once, got {list(self.sources)}")
        if self.shots < 2:
            raise ValueError(
                f"shots: XTransfer's search needs at least 2 support windows per class, got "
                f"{self.shots} (a singleton class has no silhouette; the paper uses 3, 5, 10)")
        return self


def search_config(p: XTransferParams, seed: int) -> SearchConfig:
    """The algorithm's :class:`~flowerbed.methods.xtransfer.algorithm_search.SearchConfig`."""
    from flowerbed.methods.xtransfer.algorithm_search import SearchConfig

    return SearchConfig(
        search_depth=p.search_depth, break_depth=p.break_depth, n_components=p.pca_components,
        episodes=p.episodes, rotation_steps=p.rotation_steps, quick_check=p.quick_check,
        resource_switch=p.resource_switch, rollback=p.rollback,
        best_validation=p.best_validation, max_prune_range=p.max_prune_range,
        max_mflops=p.max_mflops, init_pick_range=p.init_pick_range, repair=p.repair,
        prune=p.prune, seed=seed % 2**31,
    )


def build_pool(p: XTransferParams, names: tuple[str, ...] | None = None) -> list[SourceLayer]:
    """The pool layers of ``names`` (default: ``p.sources``), built once per process."""
    from flowerbed.methods.xtransfer.model_sources import source_pool

    return [e for n in (names or p.sources)
            for e in source_pool(n, p.image_size, p.efficientnet_blocks, p.tokens,
                                 p.anchors_per_class)]


@dataclass
class EpisodeInputs:
    """One episode's windows, labels remapped to ``0..K-1``, the split, and the classes."""

    x: torch.Tensor
    y: np.ndarray
    split: Split
    classes: np.ndarray


def episode_inputs(p: XTransferParams, x: np.ndarray, y: np.ndarray, seed: int,
                   query: tuple[np.ndarray, np.ndarray] | None = None) -> EpisodeInputs:
    """The windows and split of an episode (the same for the same ``seed``).

    ``x`` is ``(n, C, T)``. Without ``query`` the query windows are the rows
    left after drawing the shots; with it, they are ``query`` appended after ``x``.
    """
    import torch

    from flowerbed.methods.xtransfer import model_baselines as xb

    classes, yy = np.unique(y, return_inverse=True)
    split = xb.fewshot_split(yy, p.shots, p.val, seed, query_rows=query is None)
    xt = torch.as_tensor(x, dtype=torch.float32)
    if query is not None:
        xq, yq = query
        yq = np.searchsorted(classes, yq)
        xt = torch.cat([xt, torch.as_tensor(xq, dtype=torch.float32)])
        offset = len(yy)
        yy = np.concatenate([yy, yq])
        split = xb.Split(split.support, split.val, offset + np.arange(len(yq)))
    return EpisodeInputs(xt, yy, split, classes)


def episode_metrics(p: XTransferParams, x: np.ndarray, y: np.ndarray, seed: int,
                    query: tuple[np.ndarray, np.ndarray] | None = None,
                    finetune_sources: tuple[str, ...] | None = None,
                    save_model: str | Path | None = None,
                    ) -> tuple[dict[str, float], dict[str, object]]:
    """Run XTransfer and ``p.baselines`` on one episode; metrics and a JSON-able record.

    Labels are remapped to ``0..K-1`` (see :func:`episode_inputs`). ``finetune_sources``
    restricts the ``finetune`` baseline to those sources (default: every source;
    the benchmark skips the slow EfficientNet / MiniLM fine-tunes on a loaded machine).
    ``save_model``: a file to keep the searched model in (before any head;
    :func:`refit_heads` re-fits the heads from it without searching again).
    """
    metrics, record, _ = episode(p, episode_inputs(p, x, y, seed, query), seed,
                                 finetune_sources, save_model)
    return metrics, record


def episode(p: XTransferParams, inputs: EpisodeInputs, seed: int,
            finetune_sources: tuple[str, ...] | None = None,
            save_model: str | Path | None = None,
            ) -> tuple[dict[str, float], dict[str, object], LinearHead]:
    """:func:`episode_metrics` on prepared inputs, also returning XTransfer's linear head."""
    import torch

    from flowerbed.methods.xtransfer import model_baselines as xb
    from flowerbed.methods.xtransfer.algorithm_search import LinearHead

    pool = build_pool(p)
    out = xb.run_xtransfer(pool, inputs.x, inputs.y, inputs.split, search_config(p, seed),
                           p.finetune_steps, p.knn_k)
    if save_model is not None:
        torch.save(out["xtransfer_knn"].model, save_model)
    out |= _baselines(p, pool, inputs, seed, finetune_sources)
    metrics, record = _scores(out, inputs)
    metrics["xtransfer_depth"] = float(out["xtransfer"].extra["depth"])
    head = out["xtransfer"].model
    assert isinstance(head, LinearHead)
    return metrics, record, head


def refit_heads(p: XTransferParams, model_file: str | Path, x: np.ndarray, y: np.ndarray,
                seed: int, query: tuple[np.ndarray, np.ndarray] | None = None
                ) -> dict[str, float]:
    """XTransfer's heads re-fitted on a searched model saved by :func:`episode_metrics`.

    The episode (``x``, ``y``, ``seed``, ``query``) must be the one the model was
    searched on; only the heads run (:func:`~flowerbed.methods.xtransfer.
    model_baselines.xtransfer_heads`), so their training seconds exclude the search.
    """
    import torch

    from flowerbed.methods.xtransfer import model_baselines as xb

    inputs = episode_inputs(p, x, y, seed, query)
    # Our own pickled module, written by episode_metrics, not foreign data.
    model = torch.load(model_file, weights_only=False)
    out = xb.xtransfer_heads(model, inputs.x, inputs.y, inputs.split, p.finetune_steps,
                             p.knn_k, search_config(p, seed).seed)
    metrics, _ = _scores(out, inputs)
    return metrics


def baseline_metrics(p: XTransferParams, x: np.ndarray, y: np.ndarray, seed: int,
                     query: tuple[np.ndarray, np.ndarray] | None = None,
                     finetune_sources: tuple[str, ...] | None = None
                     ) -> tuple[dict[str, float], dict[str, object]]:
    """Only ``p.baselines`` of :func:`episode_metrics`'s episode, without the XTransfer search.

    Every arm draws from ``seed`` alone, so its figures equal those of the same arm
    run beside the search; the benchmark uses this to add arms to saved episodes.
    """
    inputs = episode_inputs(p, x, y, seed, query)
    # Only the probes and fine-tunes read the full pool; loading it costs seconds.
    needs_pool = {"linear_probe", "finetune"} & set(p.baselines)
    out = _baselines(p, build_pool(p) if needs_pool else [], inputs, seed, finetune_sources)
    return _scores(out, inputs)


#: Metric prefix of each per-source baseline: ``<prefix>_<source>``.
ARM_PREFIX = {"linear_probe": "probe", "finetune": "finetune", "single_source": "single"}


def arm_names(baseline: str, sources: tuple[str, ...]) -> list[str]:
    """The metric prefixes ``baseline`` writes for ``sources`` (``scratch_cnn``: itself)."""
    if baseline not in ARM_PREFIX:
        return [baseline]
    return [f"{ARM_PREFIX[baseline]}_{src}" for src in sources]


def _baselines(p: XTransferParams, pool: list[SourceLayer], inputs: EpisodeInputs, seed: int,
               finetune_sources: tuple[str, ...] | None) -> dict[str, Any]:
    """Each of ``p.baselines``' arms on the episode, keyed by its metric prefix."""
    from flowerbed.methods.xtransfer import model_baselines as xb

    xt, yy, split = inputs.x, inputs.y, inputs.split
    train = np.concatenate([split.support, split.val])
    out: dict[str, Any] = {}
    for name in p.baselines:
        if name == "scratch_cnn":
            out[name] = xb.scratch_cnn(xt, yy, train, split.query, seed)
            continue
        if name == "stats_logreg":
            out[name] = xb.stats_logreg(xt, yy, train, split.query)
            continue
        for src, arm in zip(p.sources, arm_names(name, p.sources), strict=True):
            if name == "linear_probe":
                out[arm] = xb.linear_probe(src, pool, xt, yy, train, split.query,
                                           p.image_size, p.tokens)
            elif name == "finetune" and (finetune_sources is None or src in finetune_sources):
                out[arm] = xb.finetune_source(src, pool, xt, yy, train, split.query,
                                              p.image_size, p.tokens, seed)
            elif name == "single_source":
                one = build_pool(p, (src,))
                res = xb.run_xtransfer(one, xt, yy, split, search_config(p, seed),
                                       p.finetune_steps, p.knn_k)
                out[arm] = res["xtransfer"]
    return out


def _scores(out: dict[str, Any], inputs: EpisodeInputs
            ) -> tuple[dict[str, float], dict[str, object]]:
    """Macro-F1, accuracy and costs of each arm on the query windows; each arm's record."""
    from flowerbed.methods.xtransfer import model_baselines as xb

    metrics: dict[str, float] = {}
    record: dict[str, object] = {}
    y_q = inputs.y[inputs.split.query]
    for method, o in out.items():
        for k, v in xb.scores(y_q, o.pred).items():
            metrics[f"{method}_{k}"] = v
        metrics[f"{method}_params"] = float(o.cost.params)
        metrics[f"{method}_mflops"] = o.cost.mflops
        metrics[f"{method}_bytes"] = float(o.cost.bytes)
        metrics[f"{method}_train_seconds"] = o.seconds
        record[method] = dict(o.extra.items())
    metrics["query_windows"] = float(len(inputs.split.query))
    return metrics, record


#: Client-state folder and file of the model a ``xtransfer_fedavg`` run trains further.
FEDAVG_STATE = "xtransfer_fedavg"
HEAD_FILE = "head.pt"


def head_arrays(head: LinearHead) -> dict[str, np.ndarray]:
    """The head's state (recombined layers, connectors, linear layer, BN buffers) as arrays."""
    return {k: v.detach().cpu().numpy().copy() for k, v in head.state_dict().items()}


def load_head_arrays(head: LinearHead, arrays: dict[str, np.ndarray]) -> None:
    """Put ``arrays`` (e.g. an average) into ``head``, each in its tensor's dtype."""
    import torch

    state = head.state_dict()
    missing = sorted(set(state) ^ set(arrays))
    if missing:
        raise ValueError(f"xtransfer_fedavg: the arrays do not match the client's model "
                         f"(differing names: {missing[:3]})")
    head.load_state_dict({k: torch.as_tensor(arrays[k], dtype=v.dtype)
                          for k, v in state.items()})


@register("learner", "xtransfer")
class XTransferLearner(Learner):
    """XTransfer (SRR + layer-wise search) on a client's few shots; scored on its other rows."""

    Params = XTransferParams

    def _inputs(self, data: ClientData, seed: int) -> EpisodeInputs:
        """The episode's windows and split on this client's rows."""
        p: XTransferParams = self.params  # type: ignore[assignment]
        shape = data.meta.input_shape
        if len(shape) != 2 or data.meta.task != "classification":
            raise ValueError(
                f"learner xtransfer: dataset {data.meta.name!r} must be multichannel windows "
                f"(input_shape (channels, length), classification); it has {shape or '()'} "
                "(use watch_raw or basic_motions)")
        x = data.x_train.reshape(len(data.x_train), *shape)
        query = None
        if len(data.y_test):
            query = (data.x_test.reshape(len(data.x_test), *shape), data.y_test)
        return episode_inputs(p, x, data.y_train, seed, query)

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """One episode on ``data`` (seeded by ``ctx.seed``); metrics of every method."""
        p: XTransferParams = self.params  # type: ignore[assignment]
        metrics, record, _ = episode(p, self._inputs(data, ctx.seed), ctx.seed)
        if ctx.state_root is not None:
            ctx.client_state("xtransfer").put("episode", record)
        return Payload(metrics=metrics, num_examples=int(metrics["query_windows"]))

    def train_xtransfer_search(self, data: ClientData, payload: Payload,
                               ctx: TaskContext) -> Payload:
        """Round 1 of ``xtransfer_fedavg``: :meth:`run_local`, plus the model to average.

        Seeded as ``run_local`` in strategy ``local`` is (so the local figures are
        the same); the linear head is kept in the client's state for the rounds
        after, and its arrays go to the server with what groups it: the structure,
        the classes and the arrays' names and shapes.
        """
        import torch

        from flowerbed.methods.xtransfer.algorithm_fedavg import signature

        del payload
        p: XTransferParams = self.params  # type: ignore[assignment]
        seed = client_seed(ctx.scenario, ctx.partition_id, keys.LOCAL_TASK, ctx.server_round)
        inputs = self._inputs(data, seed)
        metrics, record, head = episode(p, inputs, seed)
        ctx.client_state("xtransfer").put("episode", record)
        buf = io.BytesIO()
        torch.save(head, buf)
        ctx.client_state(FEDAVG_STATE).write_bytes(HEAD_FILE, buf.getvalue())
        arrays = head_arrays(head)
        structure = str(record["xtransfer"]["structure"])  # type: ignore[index]
        sig = signature(structure, inputs.classes.tolist(),
                        {k: a.shape for k, a in arrays.items()})
        metrics["train_windows"] = float(len(inputs.split.val))
        return Payload(arrays=arrays, metrics=metrics,
                       config={"structure": structure, "signature": sig},
                       num_examples=int(metrics["query_windows"]))

    def _head(self, ctx: TaskContext, arrays: dict[str, np.ndarray]) -> LinearHead:
        import torch

        state = ctx.client_state(FEDAVG_STATE)
        if not state.exists(HEAD_FILE):
            raise RuntimeError(f"client {ctx.partition_id}: no searched model in its state "
                               "(xtransfer_fedavg sends train.xtransfer_search first)")
        # Our own pickled module from round 1 of this run, not foreign data.
        head: LinearHead = torch.load(state.file(HEAD_FILE), weights_only=False)
        load_head_arrays(head, arrays)
        return head

    def train_xtransfer_fedavg(self, data: ClientData, payload: Payload,
                               ctx: TaskContext) -> Payload:
        """One FedAvg round: the group's average, ``steps`` steps of the head's training.

        The same training as the local head's (:func:`~flowerbed.methods.
        xtransfer.algorithm_search.train_head`, on the validation windows, connectors frozen).
        """
        import torch

        from flowerbed.methods.xtransfer.algorithm_search import train_head

        p: XTransferParams = self.params  # type: ignore[assignment]
        inputs = self._inputs(data, client_seed(ctx.scenario, ctx.partition_id,
                                                keys.LOCAL_TASK, 1))
        head = self._head(ctx, payload.arrays)
        torch.manual_seed(ctx.seed % 2**31)
        rows = inputs.split.val
        steps = int(payload.config.get("steps", p.finetune_steps))
        train_head(head, inputs.x[rows], inputs.y[rows], steps)
        return Payload(arrays=head_arrays(head), num_examples=len(rows))

    def evaluate_xtransfer_fedavg(self, data: ClientData, payload: Payload,
                                  ctx: TaskContext) -> Payload:
        """Macro-F1 and accuracy of the group's model on the client's query windows."""
        import torch

        from flowerbed.methods.xtransfer.model_baselines import scores

        inputs = self._inputs(data, client_seed(ctx.scenario, ctx.partition_id,
                                                keys.LOCAL_TASK, 1))
        head = self._head(ctx, payload.arrays)
        q = inputs.split.query
        with torch.no_grad():
            pred = head(inputs.x[q]).argmax(1).numpy()
        metrics = {f"xtransfer_fedavg_{k}": v for k, v in scores(inputs.y[q], pred).items()}
        return Payload(metrics=metrics, num_examples=len(q))
