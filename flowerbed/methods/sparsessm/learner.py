"""SparseSSM client (arXiv 2506.09613): calibration statistics of a Mamba on local text.

As a local task (``run_local``) a client prunes ``A_log`` of the Mamba with
every method in ``methods`` calibrated on its own training windows and scores
each pruned model on the dataset's held-out split (the ``centralized``
baseline is the paper's setting: one pooled calibration set). For the
``sparsessm`` strategy it answers ``query.sparsessm_stats``: per asked layer,
the sums ``Σ Ā_t``, ``Σ h_{t-1}²``, the state Gram and the window count of its
calibration windows, with the masks the server sent applied to earlier
layers (one exchange per layer for the exact layer-sequential form, or all
layers of the dense model at once). The maths is in
:mod:`flowerbed.methods.sparsessm.algorithm` and :mod:`flowerbed.methods.sparsessm.algorithm_scan`.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from flowerbed.clients.learner import Learner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData
from flowerbed.methods.sparsessm.model import SparseSsmModelParams

#: Message type and record keys shared with ``flowerbed.methods.sparsessm.strategy``.
STATS_MESSAGE = "query.sparsessm_stats"
LAYERS, STEPS = "layers", "steps"
ABAR, H2, GRAM, KEEP, ALOG = "abar_", "h2_", "gram_", "keep_", "alog_"

METHOD_NAMES = ("sparsessm", "magnitude", "random", "sparsegpt", "uniform_time")
PATTERN_NAMES = ("unstructured", "nm", "structured")
TIME_MODES = ("power", "discount", "linear", "window", "uniform")


class SparseSsmLearnerParams(Params):
    """The Mamba, the calibration set, and the pruning cells of a local run."""

    model: SparseSsmModelParams = SparseSsmModelParams()
    n_calib: int = Field(16, ge=1, description="calibration windows per client (paper: 64)")
    calib_window: int | None = Field(None, ge=2, description="tokens per calibration window "
                                     "(default: the dataset's window)")
    eval_windows: int | None = Field(None, ge=1, description="held-out windows scored "
                                     "(default: all)")
    methods: tuple[str, ...] = Field(METHOD_NAMES, min_length=1)
    pattern: str = Field("unstructured", description="unstructured, nm or structured")
    sparsity: float = Field(0.5, ge=0, le=1)
    prunen: int = Field(2, ge=1)
    prunem: int = Field(4, ge=2)
    time_mode: str | None = Field(None, description="default: power (unstructured) / window (nm)")
    sequential: bool = Field(True, description="layer-sequential calibration (the paper's)")
    batch_size: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _known(self) -> SparseSsmLearnerParams:
        for name in self.methods:
            if name not in METHOD_NAMES:
                raise ValueError(f"methods: unknown {name!r}; known: {', '.join(METHOD_NAMES)}")
        if self.pattern not in PATTERN_NAMES:
            raise ValueError(f"pattern: {self.pattern!r}; known: {', '.join(PATTERN_NAMES)}")
        if self.time_mode is not None and self.time_mode not in TIME_MODES:
            raise ValueError(f"time_mode: {self.time_mode!r}; known: {', '.join(TIME_MODES)}")
        if self.prunen >= self.prunem:
            raise ValueError(f"prunen ({self.prunen}) must be below prunem ({self.prunem})")
        return self


_MODELS: dict[str, Any] = {}


def cached_model(params: SparseSsmModelParams) -> Any:
    """The dense model (loaded once per process; callers copy before pruning)."""
    from flowerbed.methods.sparsessm.model import load_model

    key = params.model_dump_json()
    if key not in _MODELS:
        _MODELS.clear()
        _MODELS[key] = load_model(params)
    return _MODELS[key]


def calibration_windows(x: np.ndarray, n: int, seed: int, length: int | None) -> np.ndarray:
    """``n`` seeded training windows (inputs only: the first ``length`` ids of each row)."""
    pick = np.random.default_rng(seed).choice(len(x), min(n, len(x)), replace=False)
    rows = x[np.sort(pick), :-1]
    return rows if length is None else rows[:, :length]


def spec_of(p: SparseSsmLearnerParams, method: str, seed: int) -> Any:
    """The :class:`~flowerbed.methods.sparsessm.algorithm.PruneSpec` of one method."""
    from flowerbed.methods.sparsessm.algorithm import PruneSpec

    return PruneSpec(method=method, pattern=p.pattern, sparsity=p.sparsity,  # type: ignore[arg-type]
                     prunen=p.prunen, prunem=p.prunem, time_mode=p.time_mode,  # type: ignore[arg-type]
                     sequential=p.sequential, seed=seed)


def keeps_to_arrays(keeps: list[Any]) -> Arrays:
    """Masks as message arrays (``keep_<i>`` uint8; dense layers are left out)."""
    return {f"{KEEP}{i}": k.numpy().astype(np.uint8) for i, k in enumerate(keeps)
            if k is not None}


def keeps_from_arrays(arrays: Arrays, layers: int) -> list[Any]:
    """Masks from message arrays (``None`` for layers without one)."""
    import torch

    return [torch.as_tensor(arrays[f"{KEEP}{i}"].astype(bool)) if f"{KEEP}{i}" in arrays
            else None for i in range(layers)]


@register("learner", "sparsessm")
class SparseSsmLearner(Learner):
    """SparseSSM on a client: local pruning runs, and calibration sums for the server."""

    Params = SparseSsmLearnerParams

    def heldout(self) -> np.ndarray:
        """The dataset's held-out windows (the same for every client), at most ``eval_windows``."""
        from flowerbed.data.federated import federated_data

        x = federated_data(self.scenario).dataset.x_test
        cap = self.params.eval_windows  # type: ignore[attr-defined]
        return x if cap is None else x[:cap]

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Dense and pruned held-out perplexity for each method, calibrated on local windows."""
        from flowerbed.methods.sparsessm import algorithm as ss
        from flowerbed.methods.sparsessm.algorithm_scan import collect_layer_stats, perplexity

        p: SparseSsmLearnerParams = self.params  # type: ignore[assignment]
        dense = cached_model(p.model)
        calib = calibration_windows(data.x_train, p.n_calib, derive_seed(ctx.seed, "calib"),
                                    p.calib_window)
        test = self.heldout()
        metrics = {"ppl_dense": perplexity(dense, test)}
        for method in p.methods:
            model = copy.deepcopy(dense)

            def stats_for(layers: Any, keeps: Any, model: Any = model) -> Any:
                return collect_layer_stats(model, calib, layers, keeps, p.batch_size)

            res = ss.prune_model(model, spec_of(p, method, ctx.seed), stats_for)
            metrics[f"ppl_{method}"] = perplexity(model, test, res.keeps)
        return Payload(metrics=metrics, num_examples=len(calib))

    def query_sparsessm_stats(self, data: ClientData, payload: Payload,
                              ctx: TaskContext) -> Payload:
        """Calibration sums of the asked layers under the sent masks (and compensated A_log)."""
        import torch

        from flowerbed.methods.sparsessm.algorithm_scan import collect_layer_stats

        p: SparseSsmLearnerParams = self.params  # type: ignore[assignment]
        model = copy.deepcopy(cached_model(p.model))
        n_layers = len(model.backbone.layers)
        with torch.no_grad():
            for i, block in enumerate(model.backbone.layers):
                if f"{ALOG}{i}" in payload.arrays:
                    block.mixer.A_log.copy_(torch.as_tensor(payload.arrays[f"{ALOG}{i}"]))
        keeps = keeps_from_arrays(payload.arrays, n_layers)
        layers = [int(i) for i in payload.config[LAYERS]]
        calib = calibration_windows(data.x_train, p.n_calib, derive_seed(
            self.scenario.seed, "calib", data.partition_id), p.calib_window)
        stats = collect_layer_stats(model, calib, layers, keeps, p.batch_size)
        steps = int(payload.config.get(STEPS, 0)) or None
        arrays: Arrays = {}
        for i, s in stats.items():
            arrays[f"{ABAR}{i}"] = s.abar_sum[:steps]
            arrays[f"{H2}{i}"] = s.h2_sum[:steps]
            arrays[f"{GRAM}{i}"] = s.gram
        return Payload(arrays=arrays, num_examples=len(calib))
