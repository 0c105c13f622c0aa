"""Federated prompt learning with ManiPT's local objective (PromptFL-style averaging).

PromptFL (Guo et al., 2023, arXiv 2208.11625) keeps the VLM frozen on every
client and federates only the prompts: each round the server broadcasts them,
each client tunes them on its own few-shot rows (here with the objective of
the scenario's ``manipt`` learner: ManiPT, CoOp, KgCoOp or MaPLe-style) and the
server takes their example-weighted mean
(:func:`flowerbed.methods.manipt.algorithm.average_prompts`). The consistency targets
``t0`` and ``f0`` come from each client's frozen model, so nothing but the
prompts travels. Under Dirichlet label skew the clients hold different base
classes, which is the federated form of the drift ManiPT bounds; the final
prompts are scored on every client's test rows of the base and of the novel
classes (never tuned on by anyone).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload, Replies
from flowerbed.core.registry import Params, register
from flowerbed.methods.manipt import algorithm as mp
from flowerbed.methods.manipt import learner as keys
from flowerbed.methods.manipt.learner import ManiptLearner
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation


class ManiptFlParams(Params):
    """Local epochs per round (the learner's ``epochs`` when unset)."""

    local_epochs: int | None = Field(None, ge=0, description="default: learner.epochs")


def pooled(replies: Replies, split: str, metric: str = "accuracy") -> float:
    """Test-row-weighted mean of ``<split>_<metric>`` over the replying clients."""
    rows = [(r.metrics[f"{split}_{metric}"], r.metrics.get(f"{split}_n_test", 0.0))
            for r in replies.ok.values() if f"{split}_{metric}" in r.metrics]
    total = sum(n for _, n in rows)
    return float(sum(a * n for a, n in rows) / total) if total else float("nan")


@register("strategy", "manipt_promptfl", requires=((keys.TRAIN_MESSAGE, keys.EVAL_MESSAGE),))
class ManiptPromptFl(Strategy):
    """FedAvg of prompt tensors; each client's update is the learner's prompt objective."""

    Params = ManiptFlParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """``scenario.rounds`` rounds of broadcast, local tuning and averaging; then scoring."""
        p: ManiptFlParams = self.params  # type: ignore[assignment]
        learner = ctx.learner
        if not isinstance(learner, ManiptLearner):
            raise TypeError("strategy manipt_promptfl needs learner manipt, got "
                            f"{type(learner).__name__}")
        epochs = learner.p.epochs if p.local_epochs is None else p.local_epochs
        prompts = learner.initial_prompts()
        for r in range(1, self.scenario.rounds + 1):
            replies = fed.ask(keys.TRAIN_MESSAGE, Payload(prompts, {keys.EPOCHS: epochs}),
                              server_round=r)
            ok = [x for x in replies.ok.values() if x.num_examples > 0]
            if ok:
                prompts = mp.average_prompts([dict(x.arrays) for x in ok],
                                             [x.num_examples for x in ok])
            ctx.recorder.metrics(r, "federated", {
                f"client_train/train/{k}": float(np.mean([x.metrics.get(k, 0.0) for x in ok]))
                for k in ("loss", "drift_text", "drift_image")} | {
                "client_train/clients_with_base_rows": float(len(ok))})
        replies = fed.ask(keys.EVAL_MESSAGE, Payload(prompts), server_round=self.scenario.rounds)
        out = {f"{k}_accuracy": pooled(replies, k) for k in ("base", "novel")}
        zs = {f"{k}_zero_shot_accuracy": pooled(replies, k, "zero_shot_accuracy")
              for k in ("base", "novel")}
        out["hm_accuracy"] = mp.harmonic_mean(out["base_accuracy"], out["novel_accuracy"])
        zs["hm_zero_shot_accuracy"] = mp.harmonic_mean(zs["base_zero_shot_accuracy"],
                                                       zs["novel_zero_shot_accuracy"])
        for k in ("drift_text", "drift_image"):
            out[f"base_{k}"] = pooled(replies, "base", k)
        comm = float(sum(a.nbytes for a in prompts.values()))
        return {f"test/{k}": v for k, v in (out | zs).items()} | {
            "comm/bytes_per_client_round": comm}
