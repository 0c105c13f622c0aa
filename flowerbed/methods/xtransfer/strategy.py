"""Strategy ``xtransfer_fedavg``: local XTransfer per subject, then FedAvg where models agree.

Round 1 is strategy ``local``'s episode (the same seeds, so the same local
figures): every client searches, repairs and recombines its own model on its
shots. The server groups the clients whose recombined models have the same
structure, classes and parameter shapes
(:func:`~flowerbed.methods.xtransfer.algorithm_fedavg.groups`) and averages each
group's models, weighted by the clients' training windows (FedAvg, McMahan et
al. 2017). Each round after the first, a group's clients train the average
further with the local head's own training (``local_steps`` steps on their
validation windows, connectors frozen) and the server averages again. The
final average of each group is scored on its clients' query windows
(``xtransfer_fedavg_macro_f1``), beside the same clients' local models
(``xtransfer_local_macro_f1``); a client alone in its group keeps its local
model, and ``xtransfer_fedavg_all_macro_f1`` counts every client that way.
With ``average: false`` the same clients run the same rounds and steps on
their own models, nothing averaged: the control that tells the averaging's
gain from the extra training's.
XTransfer itself (arXiv 2506.22726) has no federated part: this is the
issue's optional FedAvg of the recombined models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Arrays, Payload
from flowerbed.core.records import LOCAL_ARRAYS_DIR
from flowerbed.core.registry import Params, register
from flowerbed.methods.xtransfer.algorithm_fedavg import groups
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.local import LOCAL_ROUND, client_summary
from flowerbed.strategies.oneshot_average import weighted_average

SEARCH = "train.xtransfer_search"
TRAIN = "train.xtransfer_fedavg"
EVALUATE = "evaluate.xtransfer_fedavg"
F1 = "xtransfer_fedavg_macro_f1"


class XTransferFedAvgParams(Params):
    """Who runs, how large a group must be, and the local steps per FedAvg round."""

    fraction: float = Field(1.0, gt=0, le=1, description="share of clients that run it")
    min_group: int = Field(2, ge=2, description="clients an architecture needs to be averaged")
    local_steps: int | None = Field(
        None, ge=0, description="head-training steps per round (default: learner.finetune_steps)")
    average: bool = Field(
        True, description="false: the control, the same members and steps without averaging")


def _weighted(values: Sequence[tuple[float, float]]) -> float:
    """Mean of ``values`` weighted by the second element (plain mean when all weights are 0)."""
    total = sum(w for _, w in values)
    return sum(v * w for v, w in values) / total if total > 0 else float(
        np.mean([v for v, _ in values]))


@register("strategy", "xtransfer_fedavg", requires=((SEARCH, TRAIN, EVALUATE),))
class XTransferFedAvg(Strategy):
    """Local XTransfer episodes, then FedAvg of the recombined models within each architecture."""

    Params = XTransferFedAvgParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Search locally, group, ``rounds - 1`` FedAvg rounds per group, score the averages."""
        p: XTransferFedAvgParams = self.params  # type: ignore[assignment]
        cohort = fed.sample(p.fraction, LOCAL_ROUND, phase="local")
        replies = fed.ask(SEARCH, Payload(), cohort, server_round=LOCAL_ROUND)
        local = dict(replies.ok)
        # The local_only baseline reuses the episodes (their seeds are run_local's).
        ctx.local_results = {pid: Payload(metrics=dict(r.metrics), num_examples=r.num_examples)
                             for pid, r in local.items()}
        summary = client_summary(local)
        ctx.recorder.metrics(LOCAL_ROUND, "local", summary)
        found = groups({pid: str(r.config["signature"]) for pid, r in local.items()},
                       p.min_group)
        # What is averaged: each group, or (the control) each member alone.
        units = found if p.average else [[pid] for g in found for pid in g]
        models = {i: self._average(local, u) for i, u in enumerate(units)}
        config = {} if p.local_steps is None else {"steps": p.local_steps}
        for r in range(LOCAL_ROUND + 1, self.scenario.rounds + 1):
            members = {pid: i for i, u in enumerate(units) for pid in u}
            if not members:
                break
            asked = {pid: Payload(arrays=models[i], config=config) for pid, i in members.items()}
            trained = fed.ask(TRAIN, asked, sorted(members), server_round=r)
            models = {i: self._average(trained.ok, [pid for pid in u if pid in trained.ok])
                      or models[i] for i, u in enumerate(units)}
            ctx.recorder.metrics(r, "fedavg", {"fedavg/replies": float(len(trained.ok))})
        for i, w in models.items():
            name = f"group_{i}" if p.average else f"client_{units[i][0]}"
            ctx.recorder.write_arrays(f"{LOCAL_ARRAYS_DIR}/xtransfer_fedavg/{name}.npz", w)
        final = self._evaluate(fed, ctx, found, units, models, local)
        summary.update(final)
        return summary

    @staticmethod
    def _average(replies: dict[int, Payload], pids: list[int]) -> Arrays:
        """The group's FedAvg: models weighted by their clients' training windows."""
        if not pids:
            return {}
        return weighted_average([replies[pid].arrays for pid in pids],
                                [replies[pid].metrics.get("train_windows", 1.0) for pid in pids])

    def _evaluate(self, fed: Federation, ctx: ServerContext, found: list[list[int]],
                  units: list[list[int]], models: dict[int, Arrays],
                  local: dict[int, Payload]) -> dict[str, float]:
        """Scores of the final models on their clients' query windows, beside the local ones."""
        p: XTransferFedAvgParams = self.params  # type: ignore[assignment]
        members = {pid: i for i, u in enumerate(units) for pid in u}
        group = {pid: i for i, g in enumerate(found) for pid in g}
        scored = (fed.ask(EVALUATE, {pid: Payload(arrays=models[i]) for pid, i in members.items()},
                          sorted(members), server_round=self.scenario.rounds).ok
                  if members else {})
        ctx.recorder.write_json("xtransfer_fedavg_groups.json", {
            "groups": found,
            "averaged": p.average,
            "structures": [str(local[g[0]].config["structure"]) for g in found],
            "clients": {str(pid): {"group": group.get(pid),
                                   "local_macro_f1": r.metrics.get("xtransfer_macro_f1"),
                                   "fedavg_macro_f1": scored[pid].metrics.get(F1)
                                   if pid in scored else None}
                        for pid, r in sorted(local.items())},
        })
        out = {"fedavg/clients": float(len(local)), "fedavg/groups": float(len(found)),
               "fedavg/grouped_clients": float(len(scored)),
               "fedavg/averaged": float(p.average)}
        if scored:
            out[f"test/{F1}"] = _weighted([(s.metrics[F1], s.num_examples)
                                           for s in scored.values()])
            out["test/xtransfer_local_macro_f1"] = _weighted(
                [(local[pid].metrics["xtransfer_macro_f1"], local[pid].num_examples)
                 for pid in scored])
        everyone = [((scored[pid].metrics[F1] if pid in scored
                      else r.metrics["xtransfer_macro_f1"]), r.num_examples)
                    for pid, r in local.items()]
        if everyone:
            out["test/xtransfer_fedavg_all_macro_f1"] = _weighted(everyone)
        ctx.recorder.metrics(self.scenario.rounds, "fedavg_eval", out)
        return out
