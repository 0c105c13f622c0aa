"""Strategy ``token_intervention_split``: clients decode with their base, the server hosts R.

Split inference of disagreement-guided token intervention (the spec's
"flowerbed mapping"; Shen et al., ICML 2026, arXiv 2605.16874). Every client
keeps the small base model and its own prompts; the server keeps the reasoning
model. For each trigger of the learner, in turn:

1. the server calibrates the trigger's threshold to the target reasoner share
   ``rho`` on held-out prompts it holds (the dataset's global test prompts,
   disjoint from the clients'), with both models;
2. rounds of ``query.ti_step``: each client applies the server's answers,
   decodes locally until each of its prompts ends or needs the reasoner, and
   sends its requests (the tokens the server lacks; the prompt on first
   contact); the server extends one reasoner cache per (client, prompt) and
   answers a token (``entropy``, ``random``, ``first_k``: the client asks only
   when its own gate opens) or the full ``p_R`` (``js`` every step,
   ``js_and_entropy`` at uncertain steps);
3. a client whose prompts have all ended reports accuracy, reasoner share and
   its traffic per response (server calls, bytes up and down).

Metrics (split ``test``): ``<trigger>/accuracy``, ``/rate``,
``/calls_per_response``, ``/bytes_up_per_response``, ``/bytes_down_per_response``,
``/rounds``, example-weighted over clients.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core.messages import Payload
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.token_intervention import learner as tl
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation


class TokenInterventionSplitParams(Params):
    """How many rounds a trigger may take at most."""

    max_rounds: int = Field(400, ge=1, description="rounds per trigger before giving up")


@register("strategy", "token_intervention_split", requires=(tl.STEP_MESSAGE,))
class TokenInterventionSplit(Strategy):
    """Clients run the base locally and ask the server's reasoner only when triggered."""

    Params = TokenInterventionSplitParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Calibrate each trigger, run the rounds, summarise accuracy and traffic."""
        learner = ctx.learner
        if not isinstance(learner, tl.TokenInterventionLearner):
            raise TypeError(f"strategy token_intervention_split needs learner "
                            f"token_intervention, got {type(learner).__name__}")
        ds = ctx.data.dataset
        cal_p, cal_r = tl.prompts_of(ds.text_test, ds.refs_test, "global test")
        out: dict[str, float] = {}
        server_round = 0
        for kind in learner.p.triggers:
            seed = derive_seed(self.scenario.seed, "ti.calibrate", kind)
            trigger, cal_rate = learner.trigger(kind, cal_p, cal_r, seed)
            metrics, server_round = self._decode(fed, ctx, learner, kind, trigger, server_round)
            metrics["calibration_rate"] = cal_rate
            if trigger.kind in ("js", "js_and_entropy"):
                metrics["tau"] = trigger.tau
            if trigger.kind in ("entropy", "js_and_entropy"):
                metrics["h"] = trigger.h
            out.update({f"test/{kind}/{k}": float(v) for k, v in metrics.items()
                        if np.isfinite(v)})
        ctx.recorder.metrics(server_round, "server_eval", out)
        return out

    def _decode(self, fed: Federation, ctx: ServerContext, learner: tl.TokenInterventionLearner,
                kind: str, trigger: tl.Trigger, server_round: int
                ) -> tuple[dict[str, float], int]:
        from flowerbed.methods.token_intervention.algorithm_split import ReasonerServer

        p: TokenInterventionSplitParams = self.params  # type: ignore[assignment]
        reasoner = learner.reasoner()
        server = ReasonerServer(reasoner)
        config = {tl.PHASE: kind, tl.TRIGGER: tl.trigger_config(trigger)}
        answers: dict[int, dict[int, object]] = {pid: {} for pid in fed.partition_ids}
        active, done = set(fed.partition_ids), {}
        rounds = 0
        while active and rounds < p.max_rounds:
            rounds += 1
            server_round += 1
            payloads = {pid: Payload(arrays=tl.pack_answers(answers[pid], reasoner.vocab_size),
                                     config=config) for pid in sorted(active)}
            replies = fed.ask(tl.STEP_MESSAGE, payloads, sorted(active),
                              server_round=server_round)
            active -= set(replies.failed) | set(replies.missing)
            for pid, reply in replies.ok.items():
                if reply.metrics.get(tl.DONE):
                    done[pid] = reply
                    active.discard(pid)
                else:
                    answers[pid] = server.answer(pid, tl.unpack_requests(reply.arrays))
        if not done:
            raise RuntimeError(f"token_intervention_split: no client finished trigger {kind}")
        weights = np.array([r.num_examples for r in done.values()], dtype=float)
        names = sorted(set.intersection(*(set(r.metrics) for r in done.values())) - {tl.DONE})
        summary = {n: float(np.average([r.metrics[n] for r in done.values()], weights=weights))
                   for n in names}
        summary.update(rounds=float(rounds), clients_done=float(len(done)),
                       server_prefill_tokens=float(server.prefilled_tokens))
        return summary, server_round
