"""``lm_sgd``: next-token cross-entropy training of a causal LM on token windows.

The learner behind federated text tasks: FedAvg (or any weight-averaging
strategy) of a language model whose clients hold token windows, and the
``centralized`` baseline on the pooled windows, through the
:class:`~flowerbed.clients.learner.SupervisedLearner` contract.

Data convention (the text datasets', e.g. ``text_corpus``): ``meta.task`` is
``language_modeling``, ``x`` is an int64 ``(n, T + 1)`` array of token ids
below ``meta.num_classes`` (the vocabulary; 256 for bytes), each row giving
inputs ``x[:, :-1]`` and next-token targets ``x[:, 1:]``; ``y`` is unused.

Metrics: ``loss`` is the mean next-token cross-entropy in nats over every
target token, ``perplexity`` its exponential, ``accuracy`` the share of
targets that are the argmax prediction. The model (``lm:``, usually
``tiny``) is built from the round's seed for the initial weights; weights
tied between input and output embeddings travel once.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, field_validator

from flowerbed.clients.learner import SupervisedLearner
from flowerbed.core.messages import Arrays
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import DatasetMeta
from flowerbed.models.lm import build_lm, lm_spec_type

if TYPE_CHECKING:
    import torch

    from flowerbed.models.lm import CausalLM

LANGUAGE_MODELING = "language_modeling"
LmSpec = lm_spec_type()


class LmSgdParams(Params):
    """The model and the local optimisation."""

    lm: LmSpec = Field(description="the language model, e.g. {name: tiny, hidden: 64}")  # type: ignore[valid-type]
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = Field(3e-3, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1, description="sgd only")
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(16, ge=1, description="windows per step")
    local_epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="cap on steps per train message")
    grad_clip: float | None = Field(1.0, gt=0, description="max gradient norm (null: none)")
    eval_batch_size: int = Field(64, ge=1)

    @field_validator("lm", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


@functools.lru_cache(maxsize=2)
def _skeleton(spec_json: str, spec: Params) -> CausalLM:
    """A model to load weights into (one per spec and process; always fully overwritten)."""
    del spec_json  # the cache key (pydantic models hash by identity)
    return build_lm(spec, seed=0)


@register("learner", "lm_sgd")
class LmSgdLearner(SupervisedLearner):
    """Next-token cross-entropy training of a causal LM on token windows (perplexity)."""

    Params = LmSgdParams

    def __init__(self, params: LmSgdParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        self.p: LmSgdParams = params

    # -- weights -----------------------------------------------------------------------------

    def _check(self, lm: CausalLM, meta: DatasetMeta) -> None:
        if str(meta.task) != LANGUAGE_MODELING:
            raise ValueError(
                f"learner 'lm_sgd' needs a language-modeling dataset (token windows); "
                f"{meta.name!r} is {meta.task}"
            )
        if meta.num_classes > lm.vocab_size:
            raise ValueError(
                f"dataset {meta.name!r} has {meta.num_classes} token ids but the model's "
                f"vocabulary only {lm.vocab_size}"
            )

    def _model(self, meta: DatasetMeta, arrays: Arrays) -> torch.nn.Module:
        import torch

        spec: Params = self.p.lm
        lm = _skeleton(spec.model_dump_json(), spec)
        self._check(lm, meta)
        module = lm.module
        state = {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}
        missing, unexpected = module.load_state_dict(state, strict=False)
        tied = set(_tied_keys(module))
        if unexpected or set(missing) - tied:
            raise ValueError(
                f"weights do not fit the model: missing {sorted(set(missing) - tied)[:3]}, "
                f"unexpected {sorted(unexpected)[:3]}"
            )
        return module

    @staticmethod
    def _arrays(module: torch.nn.Module) -> Arrays:
        tied = set(_tied_keys(module))
        return {
            k: v.detach().cpu().numpy().copy()
            for k, v in module.state_dict().items()
            if k not in tied
        }

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Weights of the model initialised from ``seed``."""
        lm = build_lm(self.p.lm, seed=seed)
        self._check(lm, meta)
        return self._arrays(lm.module)

    def epochs_per_round(self) -> int:
        """Local epochs per ``train`` message."""
        return self.p.local_epochs

    # -- training and scoring ----------------------------------------------------------------

    def _optimizer(self, module: torch.nn.Module) -> torch.optim.Optimizer:
        import torch

        if self.p.optimizer == "adam":
            return torch.optim.Adam(
                module.parameters(), lr=self.p.lr, weight_decay=self.p.weight_decay
            )
        return torch.optim.SGD(
            module.parameters(), lr=self.p.lr, momentum=self.p.momentum,
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
    ) -> tuple[Arrays, dict[str, float]]:
        """Seeded mini-batch steps over the windows; mean training loss and perplexity."""
        import torch

        del y
        torch.random.default_generator.manual_seed(seed)  # dropout, if any
        module = self._model(meta, arrays)
        module.train()
        opt = self._optimizer(module)
        windows = _windows(x)
        gen = torch.Generator().manual_seed(seed)
        total, tokens, steps = 0.0, 0, 0
        for _ in range(epochs or self.p.local_epochs):
            order = torch.randperm(len(windows), generator=gen)
            for start in range(0, len(windows), self.p.batch_size):
                if self.p.max_steps is not None and steps >= self.p.max_steps:
                    break
                batch = windows[order[start : start + self.p.batch_size]]
                opt.zero_grad()
                loss = _next_token_loss(module, batch)
                loss.backward()
                if self.p.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(module.parameters(), self.p.grad_clip)
                opt.step()
                n = batch[:, 1:].numel()
                total += float(loss.detach()) * n
                tokens += n
                steps += 1
        module.eval()
        mean = total / max(tokens, 1)
        return self._arrays(module), {"loss": mean, "perplexity": _exp(mean)}

    def score(
        self, arrays: Arrays, x: np.ndarray, y: np.ndarray, meta: DatasetMeta
    ) -> dict[str, float]:
        """Held-out next-token loss (nats), perplexity and top-1 accuracy."""
        import torch

        del y
        module = self._model(meta, arrays)
        module.eval()
        windows = _windows(x)
        nll, hits, tokens = 0.0, 0, 0
        with torch.no_grad():
            for start in range(0, len(windows), self.p.eval_batch_size):
                batch = windows[start : start + self.p.eval_batch_size]
                logits = module(input_ids=batch[:, :-1]).logits.float()
                targets = batch[:, 1:]
                nll += float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
                ))
                hits += int((logits.argmax(-1) == targets).sum())
                tokens += targets.numel()
        mean = nll / max(tokens, 1)
        return {"loss": mean, "perplexity": _exp(mean), "accuracy": hits / max(tokens, 1)}


def _windows(x: np.ndarray) -> torch.Tensor:
    import torch

    arr = np.asarray(x)
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise ValueError(f"lm_sgd needs token windows of shape (n, T + 1), T >= 1; got {arr.shape}")
    return torch.as_tensor(arr.astype(np.int64, copy=False))


def _next_token_loss(module: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    import torch

    logits = module(input_ids=batch[:, :-1]).logits.float()
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)
    )


def _tied_keys(module: torch.nn.Module) -> list[str]:
    """State-dict keys whose tensor is an earlier key's (tied embeddings)."""
    seen: set[int] = set()
    tied = []
    for key, value in module.state_dict(keep_vars=True).items():
        ptr = value.data_ptr()
        if ptr in seen:
            tied.append(key)
        seen.add(ptr)
    return tied


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))
