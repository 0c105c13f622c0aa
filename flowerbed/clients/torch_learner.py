"""Mini-batch SGD on a torch model: the generic learner behind FedAvg-style strategies."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner, TaskContext
from flowerbed.core import keys, registry
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData, DatasetMeta

if TYPE_CHECKING:
    import torch
    from torch import nn


class SGDParams(Params):
    """Local optimisation settings."""

    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(32, ge=1)
    local_epochs: int = Field(1, ge=1)
    optimizer: Literal["sgd", "adam"] = "sgd"


@dataclass(frozen=True)
class FitHooks:
    """What a method adds to the plain mini-batch loop of :meth:`SGDLearner.fit`.

    One loop serves FedAvg, FedProx and the methods that change a local step
    (drift corrections, contrastive or proximal terms, frozen parts), so a
    method writes its term, not another training loop.

    Attributes
    ----------
    extra_loss
        ``(model, x_batch, y_batch, output) -> tensor`` added to the batch loss
        before ``backward`` (the reported ``loss`` stays the data loss).
    after_backward
        ``(model) -> None`` called between ``backward`` and the optimiser
        step, e.g. to correct gradients in place.
    trainable
        Parameter names the optimiser updates (default: all); the others
        keep their received values but still take part in the forward pass.
    """

    extra_loss: (
        Callable[[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None
    ) = None
    after_backward: Callable[[nn.Module], None] | None = None
    trainable: Callable[[str], bool] | None = None


@register("learner", "sgd")
class SGDLearner(SupervisedLearner):
    """Mini-batch SGD/Adam on the scenario's torch model (cross-entropy or MSE)."""

    Params = SGDParams
    needs_model = True

    def __init__(self, params: SGDParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        if scenario.model is None:
            raise ValueError("learner 'sgd' needs a 'model:' block (e.g. model: mlp)")
        self.p: SGDParams = params

    def _build(self, meta: DatasetMeta) -> nn.Module:
        if meta.task == "language_modeling":
            raise ValueError(
                f"learner {registry.name_of(self.params)!r} does not train language models "
                f"({meta.name!r} is "
                "token windows); use learner: lm_sgd"
            )
        out = meta.num_classes if meta.task == "classification" else 1
        spec = self.scenario.model
        assert spec is not None  # checked in __init__
        module: nn.Module = registry.build(
            "model", spec, in_features=meta.num_features, out_features=out
        )
        return module

    def device(self) -> torch.device:
        """CUDA when the scenario reserves GPUs for clients and one is visible, else CPU.

        Results on a GPU can differ in the last digits from CPU runs, and CUDA
        kernels are not all deterministic: the bit-for-bit reproducibility
        guarantee holds on CPU.
        """
        # torch only once a learner runs: validating a scenario must stay light.
        import torch

        wants_gpu = self.scenario.engine.client_resources.num_gpus > 0
        return torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")

    def _load(self, meta: DatasetMeta, arrays: Arrays) -> nn.Module:
        import torch

        model = self._build(meta)
        state = OrderedDict((k, torch.from_numpy(np.array(v))) for k, v in arrays.items())
        model.load_state_dict(state, strict=True)
        return model.to(self.device())

    @staticmethod
    def _arrays(model: nn.Module) -> Arrays:
        return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Weights of a freshly initialised model (torch's default init, seeded)."""
        seed_torch(seed, self.device())
        return self._arrays(self._build(meta))

    def epochs_per_round(self) -> int:
        """Local epochs per ``train`` message."""
        return self.p.local_epochs

    def warm(self) -> None:
        """Import what torch's optimisers load on their first step (its compiler stack)."""
        import torch._dynamo  # noqa: F401 - imported for its side effect, once per process

    def _loss(self, meta: DatasetMeta) -> nn.Module:
        from torch import nn

        return nn.CrossEntropyLoss() if meta.task == "classification" else nn.MSELoss()

    def _optimizer(
        self, model: nn.Module, trainable: Callable[[str], bool] | None = None
    ) -> torch.optim.Optimizer:
        import torch

        params = [w for n, w in model.named_parameters() if trainable is None or trainable(n)]
        if self.p.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.p.lr, weight_decay=self.p.weight_decay)
        return torch.optim.SGD(
            params,
            lr=self.p.lr,
            momentum=self.p.momentum,
            weight_decay=self.p.weight_decay,
        )

    def fit(
        self,
        arrays: Arrays,
        x: np.ndarray,
        y: np.ndarray,
        meta: DatasetMeta,
        seed: int,
        epochs: int | None = None,
        proximal_mu: float = 0.0,
        hooks: FitHooks | None = None,
    ) -> tuple[Arrays, dict[str, float]]:
        """Run ``epochs`` (default ``local_epochs``) of seeded mini-batch training.

        With ``proximal_mu`` = μ > 0 each step minimises the batch loss plus
        FedProx's μ/2‖w - wᵗ‖² (Li et al., 2020), wᵗ being the received
        trainable parameters (buffers such as BatchNorm statistics are not
        pulled); the reported ``loss`` is the data loss alone. μ = 0 runs the
        plain loop, so it equals FedAvg's training exactly. ``hooks`` add a
        method's own term, gradient step or frozen parameters (:class:`FitHooks`).
        """
        import torch

        hooks = hooks or FitHooks()
        seed_torch(seed, self.device())
        model = self._load(meta, arrays)
        model.train()
        opt, loss_fn = self._optimizer(model, hooks.trainable), self._loss(meta)
        xt, yt = _tensors(x, y, meta, self.device())
        anchor = [w.detach().clone() for w in model.parameters()] if proximal_mu else []
        gen = torch.Generator().manual_seed(seed)
        total, count = 0.0, 0
        for _ in range(epochs or self.p.local_epochs):
            order = torch.randperm(len(yt), generator=gen)
            for start in range(0, len(yt), self.p.batch_size):
                idx = order[start : start + self.p.batch_size].to(xt.device)
                opt.zero_grad()
                xb, yb = xt[idx], yt[idx]
                out = _squeeze(model(xb), meta)
                loss = loss_fn(out, yb)
                objective = loss
                if anchor:
                    objective = objective + proximal_term(model, anchor, proximal_mu)
                if hooks.extra_loss is not None:
                    objective = objective + hooks.extra_loss(model, xb, yb, out)
                objective.backward()
                if hooks.after_backward is not None:
                    hooks.after_backward(model)
                opt.step()
                total += float(loss.detach()) * len(idx)
                count += len(idx)
        return self._arrays(model), {"loss": total / max(count, 1)}

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local training from the received weights (FedProx's term when the config asks)."""
        mu = float(payload.config.get(keys.PROXIMAL_MU, 0.0))
        arrays, metrics = self.fit(
            payload.arrays, data.x_train, data.y_train, data.meta, ctx.seed, proximal_mu=mu
        )
        return Payload(arrays=arrays, metrics=metrics, num_examples=data.num_train)

    def score(
        self, arrays: Arrays, x: np.ndarray, y: np.ndarray, meta: DatasetMeta
    ) -> dict[str, float]:
        """Loss, plus accuracy for classification."""
        import torch

        model = self._load(meta, arrays)
        model.eval()
        xt, yt = _tensors(x, y, meta, self.device())
        with torch.no_grad():
            out = _squeeze(model(xt), meta)
            metrics = {"loss": float(self._loss(meta)(out, yt))}
            if meta.task == "classification":
                metrics["accuracy"] = float((out.argmax(dim=1) == yt).float().mean())
        return metrics


def proximal_term(model: nn.Module, anchor: list[torch.Tensor], mu: float) -> torch.Tensor:
    """FedProx's μ/2 Σ‖w - wᵗ‖² over the model's trainable parameters and their anchors."""
    total = sum(((w - a) ** 2).sum() for w, a in zip(model.parameters(), anchor, strict=True))
    return 0.5 * mu * total  # type: ignore[return-value]


def seed_torch(seed: int, device: torch.device) -> None:
    """Seed torch's CPU generator, and CUDA's when ``device`` is a GPU.

    Same numbers as ``torch.manual_seed`` on that device. ``torch.manual_seed``
    also queues a CUDA seeding, recording a stack trace, even where CUDA is
    never used: about 0.3 ms per call, 5% of a small client's update.
    """
    import torch

    torch.random.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(seed)


def _tensors(
    x: np.ndarray, y: np.ndarray, meta: DatasetMeta, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    xt = torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)
    dtype = np.int64 if meta.task == "classification" else np.float32
    return xt, torch.as_tensor(np.asarray(y, dtype=dtype), device=device)


def _squeeze(out: torch.Tensor, meta: DatasetMeta) -> torch.Tensor:
    return out if meta.task == "classification" else out.squeeze(-1)
