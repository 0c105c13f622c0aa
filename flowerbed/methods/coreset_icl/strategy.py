"""Strategy ``coreset_icl``: a global demonstration bank from locally selected coresets.

Federated mapping of PACS: every client holds an
unlabelled pool and its equal share ``B_i`` of the global annotation budget
``B``. Round 1 (``query.coreset``): each client runs the selector on its own
embeddings and uploads the selected rows' (embedding, text, label); the server
merges them into one bank of ``B`` demonstrations. Optionally
(``server_reselect``) clients upload ``ceil(oversample B_i)`` *unlabelled*
candidates, the server re-runs the selector on the union to pick ``B``, and
round 2 (``query.annotate``) fetches only those labels, so the annotation
budget is still ``B``. Last round (``evaluate.bank``): the bank is broadcast and
every client answers its own queries with it; the summary is the
example-weighted accuracy over all clients' queries.

With ``baselines: [centralized, local_only]`` the same run also scores each
client's own bank on its queries (``local_only``) and the selector run once on
the pooled data with budget ``B`` (``centralized``), on exactly the same queries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.coreset_icl import algorithm as cs
from flowerbed.methods.coreset_icl import algorithm_baselines as cb
from flowerbed.methods.coreset_icl import algorithm_demos as cd
from flowerbed.methods.coreset_icl import learner as cl
from flowerbed.methods.coreset_icl import learner_prompts as pr
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation
from flowerbed.strategies.local import client_summary

SELECT_ROUND, ANNOTATE_ROUND, EVAL_ROUND = 1, 2, 3


class CoresetIclStrategyParams(Params):
    """Whether the server re-selects on the union, and from how many candidates."""

    server_reselect: bool = Field(False, description="re-run the selector on the union of "
                                  "the clients' candidates (labels fetched afterwards)")
    oversample: float = Field(2.0, ge=1, description="server_reselect: candidates per client "
                              "= ceil(oversample x its budget share)")


def _bytes(arrays: Arrays) -> int:
    return int(sum(a.nbytes for a in arrays.values()))


class _Union:
    """One bank's candidates from every client, in partition order."""

    def __init__(self, replies: Replies, name: str) -> None:
        ok = sorted(replies.ok.items())
        self.emb = np.concatenate([r.arrays[f"{name}.emb"] for _, r in ok]).astype(np.float32)
        self.texts = [t for _, r in ok for t in pr.unpack_texts(r.arrays[f"{name}.text"],
                                                                r.arrays[f"{name}.offsets"])]
        self.owner = np.concatenate([np.full(len(r.arrays[f"{name}.row"]), pid) for pid, r in ok])
        self.row = np.concatenate([r.arrays[f"{name}.row"] for _, r in ok]).astype(np.int64)
        labelled = all(f"{name}.label" in r.arrays for _, r in ok)
        self.label = (np.concatenate([r.arrays[f"{name}.label"] for _, r in ok]).astype(np.int64)
                      if labelled else np.full(len(self.row), -1, dtype=np.int64))


@register("strategy", "coreset_icl", requires=((cl.SELECT_MESSAGE, cl.EVAL_MESSAGE),))
class CoresetIclStrategy(Strategy):
    """Clients select coresets locally; the server merges (or re-selects) one global bank."""

    Params = CoresetIclStrategyParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Select, (annotate,) broadcast the banks and summarise the clients' accuracies."""
        p: CoresetIclStrategyParams = self.params  # type: ignore[assignment]
        learner = ctx.learner
        if not isinstance(learner, cl.CoresetIclLearner):
            raise TypeError(f"strategy coreset_icl needs learner coreset_icl, got "
                            f"{type(learner).__name__}")
        over = p.oversample if p.server_reselect else 1.0
        sel = fed.ask(cl.SELECT_MESSAGE, Payload(config={cl.OVERSAMPLE: over}),
                      server_round=SELECT_ROUND)
        if not sel.ok:
            raise RuntimeError("strategy coreset_icl: no client answered query.coreset")
        server: dict[str, float] = {
            "comm/bytes_up_per_client": float(np.mean([_bytes(r.arrays) for r in sel.ok.values()]))}
        unions: dict[str, tuple[_Union, np.ndarray]] = {}
        for selector in learner.p.selectors:
            for budget in learner.p.budgets:
                name = cl.tag(selector, budget)
                union = _Union(sel, name)
                keep = np.arange(len(union.row))
                if p.server_reselect and len(keep) > budget:
                    keep = self._reselect(union, selector, budget, name, learner.p)
                unions[name] = (union, keep)
                server[f"bank_size.{name}"] = float(len(keep))
                if len(keep) >= 2:
                    server[f"redundancy.{name}"] = cd.redundancy(union.emb[keep], np.arange(
                        len(keep)))
        if p.server_reselect:
            self._annotate(fed, unions)
        arrays: Arrays = {}
        for name, (union, keep) in unions.items():
            text, offsets = pr.pack_texts([union.texts[i] for i in keep])
            arrays.update({f"{name}.emb": union.emb[keep], f"{name}.label": union.label[keep],
                           f"{name}.text": text, f"{name}.offsets": offsets})
        server["comm/bytes_down_per_client"] = float(_bytes(arrays))
        ev = fed.ask(cl.EVAL_MESSAGE, Payload(arrays=arrays), server_round=EVAL_ROUND)
        summary = client_summary(ev.ok)
        ctx.recorder.metrics(EVAL_ROUND, "coreset_icl", {**summary, **server})
        return {**summary, **server}

    def _reselect(self, union: _Union, selector: str, budget: int, name: str,
                  lp: cl.CoresetIclParams) -> np.ndarray:
        """``budget`` of the union's candidates by the same selector (vote-k: fast vote-k)."""
        chosen = "fast_votek" if selector == "votek" else selector
        graph = cs.knn_graph(union.emb, max(lp.density_k, cb.GRAPH_K.get(chosen, 1)))
        extra: dict[str, Any] = ({"k": lp.density_k, "lam": lp.lam, "a": lp.fixed_a}
                 if chosen in cb.PACS_VARIANTS else {})
        seed = derive_seed(self.scenario.seed, "coreset", "server", name)
        return np.asarray(cb.select(chosen, union.emb, budget, seed=seed, graph=graph,
                                    **extra), dtype=np.int64)

    def _annotate(self, fed: Federation, unions: dict[str, tuple[_Union, np.ndarray]]) -> None:
        """Ask each owner for the labels of its picked rows; fill them into the unions."""
        owners = sorted({int(o) for union, keep in unions.values() for o in union.owner[keep]})
        payloads = {}
        for pid in owners:
            picked = {name: union.row[keep][union.owner[keep] == pid].tolist()
                      for name, (union, keep) in unions.items()}
            payloads[pid] = Payload(config={cl.PICKED: picked})
        replies = fed.ask(cl.ANNOTATE_MESSAGE, payloads, owners, server_round=ANNOTATE_ROUND)
        for name, (union, keep) in unions.items():
            for pid in owners:
                mine = keep[union.owner[keep] == pid]
                reply = replies.ok.get(pid)
                if reply is not None and len(mine):
                    union.label[mine] = reply.arrays[f"{name}.label"]
            missing = keep[union.label[keep] < 0]
            if len(missing):  # an owner did not answer: its picks leave the bank
                unions[name] = (union, keep[union.label[keep] >= 0])
