"""Client side of FedPer, FedRep, FedBN, Ditto and local fine-tuning, on ``sgd``'s loop.

The maths (which arrays are private, merging, Ditto's term) is in
:mod:`flowerbed.methods.personalized.algorithm`; the server drivers are in
:mod:`flowerbed.methods.personalized.strategy`. Every private part (a head, the
BatchNorm layers, Ditto's personal model) lives in the client's state folder
``ctx.client_state("personalized")``, never in the learner, and never leaves
the client: a ``train`` reply carries the shared arrays only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flowerbed.clients.learner import TaskContext
from flowerbed.clients.torch_learner import FitHooks, SGDLearner
from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.registry import register
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData, DatasetMeta
from flowerbed.methods.personalized import algorithm as pz

if TYPE_CHECKING:
    import torch
    from torch import nn

#: Config key prefix of :class:`PersonalConfig` in train and evaluate messages.
PREFIX = "pfl-"
#: Client-state folder of the private arrays (``<key>`` or ``personal.<key>`` for Ditto).
STATE = "personalized"
#: File prefix of Ditto's personal model in the state folder.
PERSONAL = "personal."


@dataclass(frozen=True)
class PersonalConfig:
    """What the server tells a client about the method, in every train/evaluate config.

    Defaults live in the strategies' parameter models; this only carries them.
    """

    method: pz.Method
    head_layers: int
    head_epochs: int
    body_epochs: int
    lam: float
    personal_epochs: int
    finetune_epochs: int

    def to_config(self) -> dict[str, Any]:
        """Flat config entries, each key prefixed with :data:`PREFIX`."""
        return {PREFIX + k.replace("_", "-"): v for k, v in asdict(self).items()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PersonalConfig | None:
        """Read back what :meth:`to_config` wrote; ``None`` from any other strategy."""
        if PREFIX + "method" not in config:
            return None
        return cls(
            method=config[PREFIX + "method"],
            head_layers=int(config[PREFIX + "head-layers"]),
            head_epochs=int(config[PREFIX + "head-epochs"]),
            body_epochs=int(config[PREFIX + "body-epochs"]),
            lam=float(config[PREFIX + "lam"]),
            personal_epochs=int(config[PREFIX + "personal-epochs"]),
            finetune_epochs=int(config[PREFIX + "finetune-epochs"]),
        )


@register("learner", "personal_sgd")
class PersonalSGDLearner(SGDLearner):
    """``sgd`` plus the client steps of FedPer, FedRep, FedBN, Ditto and fine-tuning.

    Same parameters and loop as ``sgd`` (FedRep's head and body epochs and
    Ditto's personal epochs come from the strategy); ``evaluate`` scores the
    client's *personalized* model on its held-out local split. Under any other
    strategy (no method in the message) it is exactly ``sgd``.
    """

    def private_keys(self, cfg: PersonalConfig, meta: DatasetMeta) -> frozenset[str]:
        """Names of the arrays this method keeps on the client."""
        model = self._build(meta)
        return pz.private_keys(
            cfg.method,
            list(model.state_dict()),
            head_layers=cfg.head_layers,
            bn_keys=pz.batchnorm_keys(model),
        )

    def _template(self, meta: DatasetMeta) -> Arrays:
        """The run's initial weights: private parts of a client's first round."""
        return self.init_arrays(meta, derive_seed(self.scenario.seed, "init"))

    def _full(
        self, payload: Payload, meta: DatasetMeta, cfg: PersonalConfig, ctx: TaskContext
    ) -> tuple[Arrays, frozenset[str]]:
        """The received shared arrays merged with this client's own private ones."""
        private = self.private_keys(cfg, meta)
        state = ctx.client_state(STATE)
        own = {k: a for k in private if (a := state.load_array(k)) is not None}
        return pz.merge(self._template(meta), payload.arrays, own), private

    def train(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """One round of the method; reply with the shared arrays only."""
        cfg = PersonalConfig.from_config(payload.config)
        if cfg is None or cfg.method == "finetune":
            return super().train(data, payload, ctx)  # FedAvg's update; tuned at evaluation
        if cfg.method == "ditto":
            return self._train_ditto(data, payload, ctx, cfg)
        full, private = self._full(payload, data.meta, cfg, ctx)
        if cfg.method == "fedrep":
            arrays, metrics = self._fedrep(full, private, data, ctx.seed, cfg)
        else:  # FedPer and FedBN: every array trained together
            arrays, metrics = self.fit(full, data.x_train, data.y_train, data.meta, ctx.seed)
        shared, own = pz.split(arrays, private)
        state = ctx.client_state(STATE)
        for k, a in own.items():
            state.save_array(k, a)
        return Payload(arrays=shared, metrics=metrics, num_examples=data.num_train)

    def _fedrep(
        self, full: Arrays, head: frozenset[str], data: ClientData, seed: int, cfg: PersonalConfig
    ) -> tuple[Arrays, dict[str, float]]:
        """FedRep's client step: the head with the body frozen, then the body."""
        x, y, meta = data.x_train, data.y_train, data.meta
        tuned, head_metrics = self.fit(
            full,
            x,
            y,
            meta,
            derive_seed(seed, "head"),
            epochs=cfg.head_epochs,
            hooks=FitHooks(trainable=lambda n: n in head),
        )
        # A frozen body keeps its buffers too (BatchNorm statistics move in train mode).
        start = {k: tuned[k] if k in head else full[k] for k in full}
        arrays, metrics = self.fit(
            start,
            x,
            y,
            meta,
            derive_seed(seed, "body"),
            epochs=cfg.body_epochs,
            hooks=FitHooks(trainable=lambda n: n not in head),
        )
        return arrays, {**metrics, "head_loss": head_metrics["loss"]}

    def _train_ditto(
        self, data: ClientData, payload: Payload, ctx: TaskContext, cfg: PersonalConfig
    ) -> Payload:
        """Ditto's Algorithm 1: FedAvg's update of w, then v on F_k(v) + λ/2‖v - wᵗ‖²."""
        x, y, meta = data.x_train, data.y_train, data.meta
        w = payload.arrays
        new_w, metrics = self.fit(w, x, y, meta, ctx.seed)
        v = self._personal(ctx, w)
        new_v, personal = self.fit(
            v,
            x,
            y,
            meta,
            derive_seed(ctx.seed, "ditto"),
            epochs=cfg.personal_epochs or None,
            hooks=FitHooks(extra_loss=self._ditto_term(w, cfg.lam)),
        )
        state = ctx.client_state(STATE)
        for k, a in new_v.items():
            state.save_array(PERSONAL + k, a)
        return Payload(
            arrays=new_w,
            metrics={**metrics, "personal_loss": personal["loss"]},
            num_examples=data.num_train,
        )

    @staticmethod
    def _personal(ctx: TaskContext, w: Arrays) -> Arrays:
        """Ditto's stored v_k, else (before its first round) the received w."""
        state = ctx.client_state(STATE)
        stored = {k: state.load_array(PERSONAL + k) for k in w}
        if any(a is None for a in stored.values()):
            return dict(w)
        return stored  # type: ignore[return-value]

    def _ditto_term(self, w: Arrays, lam: float) -> Any:
        """``extra_loss`` hook adding λ/2‖v - wᵗ‖² over the parameters (not buffers)."""
        import torch

        anchor = {k: torch.as_tensor(np.asarray(a), device=self.device()) for k, a in w.items()}

        def term(
            model: nn.Module, xb: torch.Tensor, yb: torch.Tensor, out: torch.Tensor
        ) -> torch.Tensor:
            del xb, yb, out
            named = list(model.named_parameters())
            return pz.ditto_penalty([p for _, p in named], [anchor[n] for n, _ in named], lam)

        return term

    def personal_model(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Arrays:
        """The model this client is scored with under the method of ``payload``."""
        cfg = PersonalConfig.from_config(payload.config)
        if cfg is None:
            return payload.arrays
        if cfg.method == "finetune":
            if cfg.finetune_epochs == 0:
                return payload.arrays
            tuned, _ = self.fit(
                payload.arrays,
                data.x_train,
                data.y_train,
                data.meta,
                derive_seed(ctx.seed, "finetune"),
                epochs=cfg.finetune_epochs,
            )
            return tuned
        if cfg.method == "ditto":
            return self._personal(ctx, payload.arrays)
        return self._full(payload, data.meta, cfg, ctx)[0]

    def evaluate(self, data: ClientData, payload: Payload, ctx: TaskContext) -> Payload:
        """Personalized metrics: the client's own model on its held-out local split."""
        if len(data.y_test) == 0:
            return Payload(num_examples=0)
        arrays = self.personal_model(data, payload, ctx)
        metrics = self.score(arrays, data.x_test, data.y_test, data.meta)
        return Payload(metrics=metrics, num_examples=len(data.y_test))
