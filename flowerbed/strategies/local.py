"""Strategy ``local``: every client runs the method on its own data once, and reports.

For client-local methods (a restoration from one image, a pruned model, a chosen
coreset, an in-context accuracy): the learner's ``run_local`` is the whole
method, and the federation only decides who runs it and collects the reports.
There is no aggregation of models; the server summarises the clients' metrics
(:func:`client_summary`), keeps each client's figures in
``client_metrics.jsonl`` and the arrays a client returns in
``local_arrays/local/client_<pid>.npz``. With ``baselines: [centralized,
local_only]`` the same code runs once on the pooled data and per client.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from flowerbed.core import keys
from flowerbed.core.messages import Payload
from flowerbed.core.records import LOCAL_ARRAYS_DIR
from flowerbed.core.registry import LOCAL_TASK, Params, register
from flowerbed.strategies.base import ServerContext, Strategy
from flowerbed.strategies.federation import Federation

#: The round a local task is recorded at (it runs once).
LOCAL_ROUND = 1


class LocalParams(Params):
    """Which clients run the local task."""

    fraction: float = Field(
        1.0, gt=0, le=1, description="share of clients that run it (a cohort drawn from the seed)"
    )


def _split_name(name: str) -> str:
    """A bare metric name is on the test split, as everywhere else in a summary."""
    return name if "/" in name else f"test/{name}"


def client_summary(payloads: dict[int, Payload]) -> dict[str, float]:
    """Across clients, for every metric ``m`` they report: the summary of a local run.

    ``m`` is the mean weighted by each client's ``num_examples`` (the plain
    mean when no client reports examples); ``m_mean``, ``m_std`` (population
    standard deviation), ``m_min`` and ``m_max`` are over clients, each
    client counting once. A bare name ``m`` becomes ``test/m``.

    Examples
    --------
    >>> s = client_summary({0: Payload(metrics={"acc": 1.0}, num_examples=3),
    ...                     1: Payload(metrics={"acc": 0.0}, num_examples=1)})
    >>> s["test/acc"], s["test/acc_mean"], s["test/acc_min"]
    (0.75, 0.5, 0.0)
    """
    names = sorted({k for p in payloads.values() for k in p.metrics})
    out: dict[str, float] = {}
    for name in names:
        rows = [(float(p.metrics[name]), p.num_examples) for p in payloads.values()
                if name in p.metrics]
        values = np.array([v for v, _ in rows])
        weights = np.array([w for _, w in rows], dtype=float)
        key = _split_name(name)
        total = weights.sum()
        out[key] = float(values @ weights / total) if total > 0 else float(values.mean())
        out[f"{key}_mean"] = float(values.mean())
        out[f"{key}_std"] = float(values.std())
        out[f"{key}_min"] = float(values.min())
        out[f"{key}_max"] = float(values.max())
    return out


def save_local_arrays(ctx: ServerContext, source: str, payloads: dict[int, Payload]) -> None:
    """Keep the arrays each client returned, one ``.npz`` per client."""
    for pid, payload in sorted(payloads.items()):
        name = "pooled" if pid < 0 else f"client_{pid}"
        ctx.recorder.write_arrays(f"{LOCAL_ARRAYS_DIR}/{source}/{name}.npz", payload.arrays)


@register("strategy", "local", requires=(LOCAL_TASK,))
class LocalStrategy(Strategy):
    """Each client runs the learner's ``run_local`` on its own data; metrics summarised."""

    Params = LocalParams

    def run(self, fed: Federation, ctx: ServerContext) -> dict[str, float]:
        """Ask the cohort for ``train.local`` once; return the clients' summary."""
        p: LocalParams = self.params  # type: ignore[assignment]
        cohort = fed.sample(p.fraction, LOCAL_ROUND, phase="local")
        replies = fed.ask(keys.LOCAL_TASK, Payload(), cohort, server_round=LOCAL_ROUND)
        ctx.local_results = dict(replies.ok)
        summary = client_summary(replies.ok)
        ctx.recorder.metrics(LOCAL_ROUND, "local", summary)
        save_local_arrays(ctx, "local", replies.ok)
        return summary
