"""Learner ``imdm``: masked diffusion (MDLM / IMDM) denoiser, ELBO, one-step or SDTT training.

Method: "Infinite Mask Diffusion for Few-Step Distillation" (Yoo, Kim, Lee, Hong, ICML 2026,
arXiv 2605.10518); maths in :mod:`flowerbed.methods.imdm.algorithm` and
:mod:`flowerbed.methods.imdm.algorithm_distill`. Data: any token dataset whose ``x`` rows are
whole sequences of ids below ``meta.num_classes`` (``synthetic_align``, or ``text_corpus``
byte windows, whose ``window + 1`` columns are used as one sequence).

A weights learner (FedAvg averages every weight, the ε-MLP included; ``centralized`` trains
on the pooled rows) and a local task (``run_local``: train on the client's rows, score on
its held-out rows). Objectives:

- ``elbo``: the MDLM continuous-time ELBO (IMDM: fresh ε at every masked position);
- ``one_step``: the spec's RECONSTRUCTED t = 1 mixture likelihood with ``mixture_draws`` ε;
- ``sdtt``: SDTT (MDLM) / IM-SDTT (IMDM) distillation. Under a federated strategy the
  teacher is the frozen *broadcast* global model of the round and the phase (step size)
  is ``(round - 1) // sdtt_rounds_per_phase``; as a local task the whole schedule
  runs locally, after ``pretrain_steps`` of ELBO training if asked.

Metrics: ``nll`` (held-out ELBO bound, nats/token) and, per sampling step count ``k`` of
``eval_steps``, ``aligned@k``, ``entropy@k`` (unigram entropy of samples) and
``freq_min@k`` / ``freq_max@k`` (first-token frequencies x V: 1 is uniform coverage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from flowerbed.clients.learner import SupervisedLearner, TaskContext
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.methods.imdm.model import DenoiserParams

if TYPE_CHECKING:
    import torch

PRETRAINED = "imdm_mdlm"


class ImdmParams(Params):
    """Denoiser, objective, optimisation and evaluation."""

    denoiser: DenoiserParams = Field(DenoiserParams(), description="architecture and ε-mask")
    objective: Literal["elbo", "one_step", "sdtt"] = "elbo"
    mixture_draws: int = Field(64, ge=1, description="one_step: ε draws per sequence (K)")
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(64, ge=1)
    steps: int = Field(300, ge=1, description="optimiser steps per train message / SDTT phase")
    pretrain_steps: int = Field(0, ge=0, description="local sdtt: ELBO steps before distilling")
    init_checkpoint: str | None = Field(
        None, description="MDLM/IMDM checkpoint .pt, or 'imdm_mdlm': the pre-trained artefact "
        "for this architecture and length (text_corpus glosses + fortunes)")
    sdtt_start_steps: int = Field(64, ge=2, description="teacher steps of the first phase")
    sdtt_teacher_steps: int = Field(2, ge=2, description="teacher steps per student step")
    sdtt_rounds_per_phase: int = Field(1, ge=1, description="federated sdtt: rounds per dt")
    posterior: Literal["imdm", "mdlm"] = Field("imdm", description="sampling posterior")
    eval_steps: tuple[int, ...] = Field((1, 2, 4), min_length=1)
    eval_samples: int = Field(256, ge=1)


def _sequences(x: np.ndarray, meta: DatasetMeta) -> torch.Tensor:
    import torch

    arr = np.asarray(x)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"learner 'imdm' needs int token sequences (n, L); got {arr.shape} "
                         f"{arr.dtype} from dataset {meta.name!r}")
    return torch.as_tensor(arr.astype(np.int64, copy=False))


@register("learner", "imdm")
class ImdmLearner(SupervisedLearner):
    """Masked diffusion denoiser (MDLM or IMDM): ELBO, one-step, or SDTT/IM-SDTT training."""

    Params = ImdmParams

    def __init__(self, params: ImdmParams, *, scenario: Scenario) -> None:
        super().__init__(params, scenario=scenario)
        self.p: ImdmParams = params

    # -- weights -----------------------------------------------------------------------------

    def _vocab(self, meta: DatasetMeta) -> int:
        if str(meta.task) != "language_modeling" or meta.num_classes < 2:
            raise ValueError(f"learner 'imdm' needs a token dataset; {meta.name!r} is {meta.task}")
        return int(meta.num_classes)

    def _model(self, meta: DatasetMeta, arrays: Arrays, seed: int = 0) -> torch.nn.Module:
        import torch

        from flowerbed.methods.imdm.model import build_denoiser

        model = build_denoiser(self.p.denoiser, self._vocab(meta), meta.num_features, seed)
        if arrays:
            state = {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}
            model.load_state_dict(state)
        return model

    def init_arrays(self, meta: DatasetMeta, seed: int) -> Arrays:
        """Weights from ``seed``, or the checkpoint's with a zero-init ε-MLP added."""
        import torch

        from flowerbed.methods.imdm.model_denoiser import load_mdlm_into_imdm

        model = self._model(meta, {}, seed)
        path = self.p.init_checkpoint
        if path == PRETRAINED:
            from flowerbed.core.artefacts import ensure_artefact
            from flowerbed.methods.imdm.model import MdlmPretrainParams

            arch = self.p.denoiser.model_copy(update={"imdm": False})
            path = str(ensure_artefact(PRETRAINED, MdlmPretrainParams(
                denoiser=arch, length=meta.num_features)))
        if path is not None:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
            load_mdlm_into_imdm(model, ckpt["state"])  # type: ignore[arg-type]
        return _arrays(model)

    # -- training ----------------------------------------------------------------------------

    def fit(
        self,
        arrays: Arrays,
        x: np.ndarray,
        y: np.ndarray,
        meta: DatasetMeta,
        seed: int,
        epochs: int | None = None,
    ) -> tuple[Arrays, dict[str, float]]:
        """Train from ``arrays`` (federated SDTT: phase 0; see :meth:`train`)."""
        del y, epochs
        return self._fit(arrays, x, meta, seed, server_round=None)

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Local training from the global weights (the round picks the SDTT phase)."""
        arrays, metrics = self._fit(payload.arrays, data.x_train, data.meta, ctx.seed,
                                    server_round=ctx.server_round)
        return Payload(arrays=arrays, metrics=metrics, num_examples=data.num_train)

    def _fit(self, arrays: Arrays, x: np.ndarray, meta: DatasetMeta, seed: int,
             server_round: int | None) -> tuple[Arrays, dict[str, float]]:
        import torch

        from flowerbed.methods.imdm import algorithm as imdm
        from flowerbed.methods.imdm import algorithm_distill as imdm_distill

        torch.manual_seed(seed)
        data = _sequences(x, meta)
        model = self._model(meta, arrays or self.init_arrays(meta, seed))
        gen = torch.Generator().manual_seed(seed)
        p = self.p
        fit = imdm_distill.fit_steps
        if p.objective == "elbo" or (p.objective == "sdtt" and p.pretrain_steps):
            n = p.steps if p.objective == "elbo" else p.pretrain_steps
            loss = fit(model, data, lambda m, b, g: imdm.elbo_loss(m, b, g),  # type: ignore[arg-type]
                       n, p.batch_size, p.lr, gen, optimizer=p.optimizer)
            metrics = {"train_elbo": loss}
        if p.objective == "one_step":
            loss = fit(model, data,
                       lambda m, b, g: imdm.one_step_mixture_nll(m, b, p.mixture_draws, g),  # type: ignore[arg-type]
                       p.steps, p.batch_size, p.lr, gen, optimizer=p.optimizer)
            metrics = {"train_one_step_nll": loss}
        if p.objective == "sdtt":
            metrics = self._distill(model, data, gen, server_round)
        return _arrays(model), metrics

    def _distill(self, model: torch.nn.Module, data: torch.Tensor, gen: torch.Generator,
                 server_round: int | None) -> dict[str, float]:
        from flowerbed.methods.imdm import algorithm_distill as imdm_distill

        p = self.p
        phases = imdm_distill.sdtt_phases(p.sdtt_start_steps, p.sdtt_teacher_steps)
        if server_round is None:  # local task: the whole schedule here
            return imdm_distill.distill(model, data, p.sdtt_start_steps, p.steps, p.batch_size,
                                        p.lr, gen, p.sdtt_teacher_steps)
        # federated: the broadcast global model is this round's frozen teacher
        n = phases[min((server_round - 1) // p.sdtt_rounds_per_phase, len(phases) - 1)]
        out = imdm_distill.distill(model, data, n, p.steps, p.batch_size, p.lr, gen,
                                   p.sdtt_teacher_steps, max_phases=1)
        first = next(iter(out.values()))
        return {"train_kl": first, "student_steps": float(n // p.sdtt_teacher_steps)}

    def distill_arrays(self, arrays: Arrays, x: np.ndarray, meta: DatasetMeta, seed: int,
                       *, start_steps: int, steps_per_phase: int, lr: float,
                       batch_size: int) -> Arrays:
        """The full SDTT / IM-SDTT schedule applied to ``arrays`` on ``x`` (server-side use)."""
        import torch

        from flowerbed.methods.imdm import algorithm_distill as imdm_distill

        torch.manual_seed(seed)
        model = self._model(meta, arrays)
        gen = torch.Generator().manual_seed(seed)
        imdm_distill.distill(model, _sequences(x, meta), start_steps, steps_per_phase,
                             batch_size, lr, gen, self.p.sdtt_teacher_steps)
        return _arrays(model)

    # -- scoring -----------------------------------------------------------------------------

    def score(self, arrays: Arrays, x: np.ndarray, y: np.ndarray,
              meta: DatasetMeta) -> dict[str, float]:
        """Held-out ELBO bound and few-step sample statistics."""
        import torch

        from flowerbed.methods.imdm import algorithm as imdm

        del y
        model = self._model(meta, arrays).eval()
        data = _sequences(x, meta)
        gen = torch.Generator().manual_seed(12345)
        out: dict[str, float] = {}
        with torch.no_grad():
            out["nll"] = float(np.mean([float(imdm.elbo_loss(model, data, gen))  # type: ignore[arg-type]
                                        for _ in range(4)]))
            vocab = self._vocab(meta)
            for k in self.p.eval_steps:
                s = imdm.sample(model, self.p.eval_samples, data.shape[1], k, gen,  # type: ignore[arg-type]
                                self.p.posterior)
                freq = imdm.token_frequencies(s, vocab) * vocab
                out[f"aligned@{k}"] = imdm.aligned_rate(s)
                out[f"entropy@{k}"] = imdm.unigram_entropy(s)
                out[f"freq_min@{k}"] = float(freq.min())
                out[f"freq_max@{k}"] = float(freq.max())
        return out

    def run_local(self, data: ClientData, ctx: TaskContext) -> Payload:
        """Train on the client's rows; ELBO and sample metrics on its held-out rows."""
        arrays, train_metrics = self._fit({}, data.x_train, data.meta, ctx.seed, None)
        metrics = self.score(arrays, data.x_test, data.y_test, data.meta)
        metrics.update({f"train/{k}": v for k, v in train_metrics.items()})
        return Payload(arrays=arrays, metrics=metrics, num_examples=len(data.y_test))


def _arrays(model: torch.nn.Module) -> Arrays:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
