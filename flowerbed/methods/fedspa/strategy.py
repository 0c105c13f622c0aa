"""FedSPA server (github.com/eejiarong/FedSPA-main): semantic alignment of uploaded prototypes.

Before round 1 the clients send per-class feature sums and counts; the server
sets the round-0 visual prototypes ``P0`` to the pooled class means (``T0`` rows
for classes no client holds). Each round it broadcasts the semantic prototypes
``T`` (and ``P0`` in round 1), the clients train their own ``P_k`` and report
personalised accuracy (so round ``r`` uses the ``T`` of round ``r - 1``), and
the server trains ``T`` on the uploaded ``(P_k[c], c)`` pairs
(:func:`flowerbed.methods.fedspa.algorithm.align_text`). The final ``T`` is scored
on the pooled test rows (global accuracy). The comparison arms run in the same
run and land in ``ctx.extra_results``: zero-shot ``T0``, FedAvg of a linear head
on frozen features, PromptFL (FedAvg of CoOp context vectors) and local-only
prototypes (``T = T0``, no server step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import Field

from flowerbed.algorithms import adapter_training as at
from flowerbed.core.messages import Arrays, Payload, Replies
from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed
from flowerbed.methods.fedspa import algorithm as fs
from flowerbed.methods.fedspa import learner as keys
from flowerbed.methods.fedspa.learner import FedSpaLearner
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

Baseline = Literal["zero_shot", "fedavg_linear", "promptfl", "local_only"]
BASELINES: tuple[Baseline, ...] = ("zero_shot", "fedavg_linear", "promptfl", "local_only")


class FedSpaParams(Params):
    """Local schedule, server alignment (authors' defaults) and the comparison arms."""

    local_epochs: int = Field(5, ge=0)
    local_epochs_last: int = Field(
        100, ge=0, description="last round's epochs of every training arm (FedSPA, local-only, "
        "FedAvg linear head, PromptFL); 0: their usual epochs")
    server_epochs: int = Field(100, ge=0, description="alignment epochs per round")
    global_lr: float = Field(2e-3, gt=0)
    global_batch_size: int = Field(8, ge=1)
    lam: float = Field(0.2, ge=0, description="weight of the semantic-stability term")
    temperature: float = Field(fs.TEMPERATURE, gt=0)
    baselines: tuple[Baseline, ...] = Field(BASELINES)
    baseline_epochs: int | None = Field(
        None, ge=1, description="local epochs of the FedAvg / PromptFL arms before the last "
        "round (default local_epochs)"
    )


def _bytes(arrays: Arrays) -> int:
    return int(sum(a.nbytes for a in arrays.values()))


def personal(replies: Replies) -> tuple[float, float, float]:
    """(mean over clients with test rows, std, pooled accuracy) of ``accuracy`` replies."""
    scored = [r.metrics for r in replies.ok.values() if r.metrics.get("n_test", 0) > 0]
    accs = [m["accuracy"] for m in scored]
    pooled = sum(m["correct"] for m in scored) / max(1.0, sum(m["n_test"] for m in scored))
    return float(np.mean(accs)), float(np.std(accs)), float(pooled)


class _Arm:
    """Per-round bookkeeping of one arm: accuracy curve, bytes and client time."""

    def __init__(self, name: str, ctx: ServerContext) -> None:
        self.name, self.ctx = name, ctx
        self.curve: list[float] = []
        self.down: list[float] = []
        self.up: list[float] = []
        self.seconds: list[float] = []

    def round(self, r: int, acc: tuple[float, float, float], down: int, replies: Replies,
              extra: dict[str, float] | None = None) -> None:
        ok = list(replies.ok.values())
        self.curve.append(acc[0])
        self.down.append(down)
        self.up.append(float(np.mean([_bytes(x.arrays) for x in ok])) if ok else 0.0)
        self.seconds.extend(x.metrics.get("train_seconds", 0.0) for x in ok)
        self.ctx.recorder.metrics(r, self.name, {
            "local_test/accuracy": acc[0], "local_test/accuracy_std": acc[1],
            "comm/bytes_down_per_client": down, "comm/bytes_up_per_client": self.up[-1],
            "time/client_train_s": float(np.mean([x.metrics.get("train_seconds", 0.0)
                                                  for x in ok] or [0.0])),
            **{f"align/{k}": v for k, v in (extra or {}).items()}})

    def state_dict(self) -> dict[str, list[float]]:
        """The arm's curves so far (what a resumed run's summary is computed from)."""
        return {"curve": self.curve, "down": self.down, "up": self.up, "seconds": self.seconds}

    def load_state_dict(self, state: dict[str, list[float]]) -> None:
        """Put back what :meth:`state_dict` returned."""
        self.curve, self.down = list(state["curve"]), list(state["down"])
        self.up, self.seconds = list(state["up"]), list(state["seconds"])

    def final(self, global_acc: float, std: float) -> dict[str, float]:
        tail = self.curve[-min(10, len(self.curve)):] or [float("nan")]
        return {"local_test/accuracy": self.curve[-1] if self.curve else float("nan"),
                "local_test/accuracy_std": std,
                "local_test/accuracy_last10_mean": float(np.mean(tail)),
                "local_test/accuracy_last10_std": float(np.std(tail)),
                "test/accuracy": global_acc,
                "comm/bytes_down_per_client_round": float(np.mean(self.down or [0.0])),
                "comm/bytes_up_per_client_round": float(np.mean(self.up or [0.0])),
                "time/client_train_s": float(np.mean(self.seconds or [0.0]))}


# Every arm's handler: the default arms use them all.
@register("strategy", "fedspa", requires=((
    keys.STATS_MESSAGE, keys.TRAIN_MESSAGE, keys.EVAL_MESSAGE, keys.LINEAR_MESSAGE,
    keys.PROMPT_MESSAGE,
),))
class FedSpaStrategy(Strategy):
    """FedSPA: client visual prototypes, server InfoNCE alignment of text prototypes; baselines."""

    Params = FedSpaParams
    # FedSPA's own rounds checkpoint; a run resumed after them repeats the
    # comparison arms, which start from the state the checkpoint restored.
    checkpointing = True

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """FedSPA for ``scenario.rounds`` rounds, then each comparison arm."""
        p: FedSpaParams = self.params  # type: ignore[assignment]
        learner = ctx.learner
        if not isinstance(learner, FedSpaLearner):
            raise TypeError(f"strategy fedspa needs learner fedspa, got {type(learner).__name__}")
        self.learner = learner
        self.t0 = learner.text_features(ctx.data.dataset.meta)
        final = self._fedspa(fed, ctx)
        arms: dict[str, Callable[[Federation, ServerContext], dict[str, float]]] = {
            "zero_shot": self._zero_shot, "fedavg_linear": self._linear,
            "promptfl": self._prompt, "local_only": self._local_only}
        for name in p.baselines:
            ctx.extra_results[name] = arms[name](fed, ctx)
        return final

    def epochs(self, r: int, every: int | None = None) -> int:
        """Local epochs of round ``r`` (1-based): ``local_epochs_last`` in the last round.

        ``every`` is the arm's epochs in the other rounds (default ``local_epochs``);
        every training arm gets the same last round, so none has a larger final budget.
        """
        p: FedSpaParams = self.params  # type: ignore[assignment]
        last = r == self.scenario.rounds and p.local_epochs_last > 0
        return p.local_epochs_last if last else (p.local_epochs if every is None else every)

    def _init_prototypes(self, fed: Federation, ctx: ServerContext) -> tuple[np.ndarray, int]:
        """P0 from the clients' class sums and counts; bytes uploaded per client."""
        ok = fed.ask(keys.STATS_MESSAGE, Payload(), server_round=0).ok
        sums = sum(np.asarray(r.arrays[keys.SUMS], np.float64) for r in ok.values())
        counts = sum(np.asarray(r.arrays[keys.COUNTS], np.float64) for r in ok.values())
        p0, missing = fs.init_prototypes(sums, counts, self.t0)  # type: ignore[arg-type]
        ctx.recorder.metrics(0, "fedspa", {"init/classes_from_text": float(missing.sum())})
        return p0, int(np.mean([_bytes(r.arrays) for r in ok.values()]))

    def state_dict(self) -> dict[str, Any]:
        """FedSPA's server state after a round: ``T``, ``P0``, the curves, the last alignment."""
        return dict(self.loop)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned."""
        self.loop = dict(state)

    def _fedspa(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        p: FedSpaParams = self.params  # type: ignore[assignment]
        arm, checkpoints = _Arm("fedspa", ctx), ctx.checkpoints
        restored = checkpoints.restore() if checkpoints is not None else None
        if restored is None:
            p0, init_up = self._init_prototypes(fed, ctx)
            start, self.loop = 0, {"t": self.t0.copy(), "p0": p0, "init_up": init_up,
                                   "std": 0.0, "info": {}}
        else:
            start, state = restored
            self.load_state_dict(state["strategy"])
            ctx.recorder.event("resumed", round=start)
        loop = self.loop
        arm.load_state_dict(loop.get("arm", arm.state_dict()))
        for r in range(start + 1, self.scenario.rounds + 1):
            t = loop["t"]
            arrays = {keys.TEXT: t, **({keys.INIT_PROTOS: loop["p0"]} if r == 1 else {})}
            config = {keys.ARM: "fedspa", keys.EPOCHS: self.epochs(r)}
            replies = fed.ask(keys.TRAIN_MESSAGE, Payload(arrays, config), server_round=r)
            acc = personal(replies)
            info: dict[str, float] = loop["info"]
            if p.server_epochs > 0:
                ok = list(replies.ok.values())
                protos = np.concatenate([x.arrays[keys.PROTOS] for x in ok])
                labels = np.tile(np.arange(len(t)), len(ok))
                cfg = at.TrainConfig(p.global_lr, p.server_epochs, p.global_batch_size,
                                     derive_seed(self.scenario.seed, "fedspa", "server", r))
                t, info = fs.align_text(t, self.t0, protos, labels, cfg, lam=p.lam,
                                        temperature=p.temperature)
            norms = np.linalg.norm(t, axis=1)
            info = {**info, "t_row_norm_max_dev": float(np.abs(norms - 1).max()),
                    "t_drift_from_t0": float(np.linalg.norm(t - self.t0))}
            arm.round(r, acc, _bytes(arrays), replies, info)
            loop.update(t=t, std=acc[1], info=info, arm=arm.state_dict())
            if checkpoints is not None and checkpoints.due(r):
                checkpoints.save(r, {"strategy": self.state_dict()})
        self.t_final = t = loop["t"]
        info, std = loop["info"], loop["std"]
        glob = self._evaluate(fed, {keys.TEXT: t}, "text")
        return {**arm.final(glob[2], std), "comm/bytes_init_up_per_client": float(loop["init_up"]),
                **{f"align/{k}": v for k, v in info.items()}}

    def _evaluate(self, fed: Federation, arrays: Arrays, head: str, r: int = 0
                  ) -> tuple[float, float, float]:
        replies = fed.ask(keys.EVAL_MESSAGE, Payload(arrays, {keys.HEAD: head}),
                          server_round=r)
        return personal(replies)

    def _zero_shot(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """T0 alone: personalised = per-client zero-shot accuracy, global = pooled."""
        arm = _Arm("zero_shot", ctx)
        acc = self._evaluate(fed, {keys.TEXT: self.t0}, "text")
        arm.curve = [acc[0]] * self.scenario.rounds
        for r in range(1, self.scenario.rounds + 1):
            ctx.recorder.metrics(r, "zero_shot", {"local_test/accuracy": acc[0]})
        return arm.final(acc[2], acc[1])

    def _local_only(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """FedSPA's client objective with T = T0 and local P0; no communication."""
        arm = _Arm("local_only", ctx)
        acc = (0.0, 0.0, 0.0)
        for r in range(1, self.scenario.rounds + 1):
            config = {keys.ARM: "local_only", keys.EPOCHS: self.epochs(r)}
            replies = fed.ask(keys.TRAIN_MESSAGE, Payload(config=config), server_round=r)
            acc = personal(replies)
            arm.round(r, acc, 0, replies)
        zero = self._evaluate(fed, {keys.TEXT: self.t0}, "text")
        return arm.final(zero[2], acc[1])

    def _averaged(self, fed: Federation, ctx: ServerContext, name: str, message: str,
                  init: Arrays, head: str) -> dict[str, float]:
        """FedAvg rounds of ``init`` (weighted by examples), each scored on every client."""
        p: FedSpaParams = self.params  # type: ignore[assignment]
        arm, arrays, acc = _Arm(name, ctx), init, (0.0, 0.0, 0.0)
        every = p.baseline_epochs or p.local_epochs
        for r in range(1, self.scenario.rounds + 1):
            config = {keys.EPOCHS: self.epochs(r, every)}
            replies = fed.ask(message, Payload(arrays, config), server_round=r)
            trained = [x for x in replies.ok.values() if x.num_examples > 0]
            arrays = {k: at.weighted_average([x.arrays[k] for x in trained],
                                             [x.num_examples for x in trained]) for k in init}
            acc = self._evaluate(fed, arrays, head, r)
            arm.round(r, acc, _bytes(init), replies)
        return arm.final(acc[2], acc[1])

    def _linear(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """FedAvg of a zero-initialised linear head on the frozen normalised features."""
        c, d = self.t0.shape
        init = {keys.HEAD_W: np.zeros((c, d), np.float32), keys.HEAD_B: np.zeros(c, np.float32)}
        return self._averaged(fed, ctx, "fedavg_linear", keys.LINEAR_MESSAGE, init, "linear")

    def _prompt(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """PromptFL: FedAvg of CoOp context vectors (from ``prompt_init``, CoOp's default)."""
        lp = self.learner.params
        vlm = self.learner.vlm
        ctx0 = (vlm.init_context(lp.n_ctx, derive_seed(self.scenario.seed, "promptfl"))  # type: ignore[attr-defined]
                if lp.prompt_init is None else vlm.context_from_text(lp.prompt_init))  # type: ignore[attr-defined]
        init = {keys.CONTEXT: np.asarray(ctx0.detach(), dtype=np.float32)}
        return self._averaged(fed, ctx, "promptfl", keys.PROMPT_MESSAGE, init, "prompt")
