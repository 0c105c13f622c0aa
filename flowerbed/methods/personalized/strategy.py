"""Personalized FL servers: FedPer, FedRep, FedBN, Ditto and local fine-tuning.

Papers: FedPer (Arivazhagan et al., 2019, arXiv:1912.00818), FedRep (Collins
et al., 2021, arXiv:2102.07078), FedBN (Li et al., 2021, arXiv:2102.07623),
Ditto (Li et al., 2021, arXiv:2012.04221); fine-tuning the FedAvg model
locally before evaluation is the usual personalization baseline.

The server of all five is Flower's FedAvg over the *shared* arrays (run
seeded and recorded like ``fedavg``): the body (FedPer, FedRep), everything
but BatchNorm (FedBN), or the whole global model (Ditto, fine-tuning). After
each round every evaluating client scores its *personalized* model on its
own held-out split (``evaluate/local_test/*``, example-weighted; each
client's row in ``client_metrics.jsonl`` and the last round's in
``personalized_clients.json``). Where the shared arrays are a whole model
(Ditto's ``w``, the FedAvg model before fine-tuning) the server also scores
it on the global test split (``test/*``); FedPer, FedRep and FedBN have no
global model (the head, or the BatchNorm layers, exist only per client), so
they report no ``test/*``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from flowerbed.core import registry
from flowerbed.core.messages import Payload
from flowerbed.core.registry import SUPERVISED, Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.personalized.learner import PersonalConfig, PersonalSGDLearner
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

if TYPE_CHECKING:
    from flwr.app import ArrayRecord, Message, MetricRecord


class PersonalizedParams(Params):
    """Client fractions per round (Flower's FedAvg arguments)."""

    fraction_train: float = Field(1.0, gt=0, le=1)
    fraction_evaluate: float = Field(
        1.0, gt=0, le=1, description="clients scoring their personalized model each round"
    )


class FedPerParams(PersonalizedParams):
    """FedPer: the last ``head_layers`` layers are private, trained jointly with the body."""

    head_layers: int = Field(1, ge=1, description="private final layers (modules with arrays)")


class FedRepParams(FedPerParams):
    """FedRep: many head epochs with the body frozen, then the body with the head frozen."""

    head_epochs: int = Field(10, ge=1, description="epochs of the private head, body frozen")
    body_epochs: int = Field(1, ge=1, description="epochs of the shared body, head frozen")


class FedBNParams(PersonalizedParams):
    """FedBN: BatchNorm weights and statistics private (needs a model with BatchNorm)."""


class DittoParams(PersonalizedParams):
    """Ditto: FedAvg for w, and a personal v_k on F_k(v) + λ/2‖v - w‖²."""

    lam: float = Field(1.0, ge=0, description="λ of Ditto's proximal term")
    personal_epochs: int = Field(
        0, ge=0, description="epochs of v per round; 0: the learner's local_epochs"
    )


class FineTuneParams(PersonalizedParams):
    """FedAvg, then each client fine-tunes the global model before its evaluation."""

    epochs: int = Field(5, ge=0, description="local fine-tuning epochs; 0 is FedAvg")


@register("strategy", "fedper", params=FedPerParams, requires=(SUPERVISED,))
@register("strategy", "fedrep", params=FedRepParams, requires=(SUPERVISED,))
@register("strategy", "fedbn", params=FedBNParams, requires=(SUPERVISED,))
@register("strategy", "ditto", params=DittoParams, requires=(SUPERVISED,))
@register("strategy", "finetune", params=FineTuneParams, requires=(SUPERVISED,))
class PersonalizedStrategy(Strategy):
    """FedPer, FedRep, FedBN, Ditto or fine-tuning: FedAvg of the shared arrays, personalized.

    Needs learner ``personal_sgd``. Only shared arrays leave a client (a
    reply carrying any other array fails, as it would not match the model
    the server sent).
    """

    # Flower's FedAvg loop (:func:`~flowerbed.strategies.fedavg.drive`); the
    # private parts live in the clients' state, which checkpoints copy.
    checkpointing = True

    def config(self) -> PersonalConfig:
        """The method and its settings, as sent to the clients."""
        p: Any = self.params
        return PersonalConfig(
            method=registry.name_of(p),  # type: ignore[arg-type]
            head_layers=getattr(p, "head_layers", 1),
            head_epochs=getattr(p, "head_epochs", 1),
            body_epochs=getattr(p, "body_epochs", 1),
            lam=getattr(p, "lam", 0.0),
            personal_epochs=getattr(p, "personal_epochs", 0),
            finetune_epochs=getattr(p, "epochs", 0),
        )

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """``scenario.rounds`` rounds; return personalized and (where defined) global metrics."""
        from flwr.app import ConfigRecord, MetricRecord

        from flowerbed.strategies.fedavg import drive
        from flowerbed.strategies.flower_fedavg import FlowerGridView

        learner = ctx.learner
        cfg = self.config()
        if not isinstance(learner, PersonalSGDLearner):
            raise TypeError(
                f"strategy {cfg.method} needs learner personal_sgd, got {type(learner).__name__}"
            )
        p: PersonalizedParams = self.params  # type: ignore[assignment]
        meta, data = ctx.data.dataset.meta, ctx.data
        init = learner.init_arrays(meta, derive_seed(self.scenario.seed, "init"))
        private = learner.private_keys(cfg, meta)
        shared = {k: v for k, v in init.items() if k not in private}
        view = FlowerGridView(fed)
        strategy = _strategy_class()(
            self.scenario.seed,
            view,
            ctx,
            fraction_train=p.fraction_train,
            fraction_evaluate=p.fraction_evaluate,
            min_train_nodes=1,
            min_evaluate_nodes=1,
            min_available_nodes=len(fed.partition_ids),
        )
        final: dict[str, float] = {}

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            if private or (server_round and not ctx.should_evaluate(server_round)):
                return None  # FedPer/FedRep/FedBN: no global model to score
            weights = Payload.from_record_arrays(arrays)
            scores = learner.score(weights, data.dataset.x_test, data.dataset.y_test, meta)
            ctx.recorder.metrics(
                server_round, "server_eval", {f"test/{k}": v for k, v in scores.items()}
            )
            final.update({f"test/{k}": v for k, v in scores.items()})
            return MetricRecord(scores)  # type: ignore[arg-type]

        config = ConfigRecord(cfg.to_config())  # type: ignore[arg-type]
        initial = Payload(arrays=shared).to_array_record()
        drive(strategy, view, initial, ctx, evaluate, final, config)
        ctx.recorder.write_json("personalized_clients.json", strategy.last_clients)
        return {**final, **personalized_summary(strategy.last_clients)}


def personalized_summary(clients: dict[str, dict[str, float]]) -> dict[str, float]:
    """Example-weighted mean of each client metric, and accuracy's spread over clients."""
    rows = [c for c in clients.values() if c.get("num_examples", 0) > 0]
    if not rows:
        return {}
    n = np.array([c["num_examples"] for c in rows], dtype=np.float64)
    out = {}
    for k in rows[0]:
        if k != "num_examples":
            out[f"local_test/{k}"] = float(np.dot(n, [c[k] for c in rows]) / n.sum())
    if "accuracy" in rows[0]:
        acc = [c["accuracy"] for c in rows]
        out["local_test/accuracy_client_std"] = float(np.std(acc))
        out["local_test/accuracy_client_min"] = float(np.min(acc))
    return out


def _strategy_class() -> Any:
    """Flower's seeded FedAvg that also keeps the last round's per-client evaluations.

    Averaged arrays keep the dtypes sent (``KeepDtypes``): Flower's average
    turns a shared BatchNorm's integer ``num_batches_tracked`` into a float,
    which the next round's replies (integers again) would not match.
    """
    from flowerbed.strategies.flower_fedavg import KeepDtypes

    class PersonalizedFedAvg(KeepDtypes):
        last_clients: dict[str, dict[str, float]] = {}

        def aggregate_evaluate(
            self, server_round: int, replies: Iterable[Message]
        ) -> MetricRecord | None:
            replies = list(replies)
            clients = {}
            for m in replies:
                if m.has_error():
                    continue
                body = Payload.from_record(m.content)
                pid = self.view.client_of(m)
                clients[str(pid)] = {**body.metrics, "num_examples": float(body.num_examples)}
            self.last_clients = dict(sorted(clients.items(), key=lambda kv: int(kv[0])))
            return super().aggregate_evaluate(server_round, replies)

    return PersonalizedFedAvg
