"""The floor: a scenario's FedAvg as a plain single-process PyTorch loop, no Flower, no messages.

It does exactly the client updates and server evaluations flowerbed's run
does, so its wall time is what the work costs on this machine with nothing
around it: the data built by flowerbed's data layer (data loading counts),
the same initial weights, the same cohorts (Flower's ``random.sample`` seeded
as flowerbed seeds it), each client's seeded mini-batch SGD as the ``sgd``
learner runs it, the example-weighted average in partition-id order as
Flower's ``FedAvg`` sums it (float32), and the server's test evaluation every
``metrics.eval_every`` rounds and the last. Its final accuracy therefore
equals flowerbed's (printed beside it by ``population.py``).

Scope: ``strategy: fedavg`` with ``fraction_evaluate: 0``, learner ``sgd``
(SGD with momentum, no weight decay), classification.

Usage: ``python benchmarks/platform/floor.py SCENARIO.yaml [--set key=value ...]``;
prints one JSON line (phases in seconds since the process started).
"""

from __future__ import annotations

import time

STARTED = time.time()

import argparse  # noqa: E402 - the clock starts before any import
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()

    import numpy as np
    import torch
    from torch import nn

    from flowerbed.core import registry
    from flowerbed.core.scenario import load_scenario
    from flowerbed.core.seeds import derive_seed
    from flowerbed.data.federated import federated_data

    torch.set_num_threads(1)
    imported = time.time() - STARTED
    scenario = load_scenario(args.scenario, args.sets)
    fed = federated_data(scenario)
    meta = fed.dataset.meta
    data_done = time.time() - STARTED

    learner, strategy = scenario.learner, scenario.strategy
    n, seed = scenario.num_clients, scenario.seed

    def build() -> nn.Module:
        module: nn.Module = registry.build(
            "model", scenario.model, in_features=meta.num_features, out_features=meta.num_classes
        )
        return module

    torch.random.default_generator.manual_seed(derive_seed(seed, "init"))
    global_w = {k: v.detach().numpy().copy() for k, v in build().state_dict().items()}
    x_test = torch.as_tensor(np.asarray(fed.dataset.x_test, dtype=np.float32))
    y_test = torch.as_tensor(np.asarray(fed.dataset.y_test, dtype=np.int64))
    loss_fn = nn.CrossEntropyLoss()

    def train(pid: int, r: int) -> tuple[dict[str, np.ndarray], int]:
        client = fed.client(pid)
        s = derive_seed(seed, "client", pid, "train", r)
        torch.random.default_generator.manual_seed(s)
        model = build()
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in global_w.items()})
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=learner.lr, momentum=learner.momentum)
        xt = torch.as_tensor(np.asarray(client.x_train, dtype=np.float32))
        yt = torch.as_tensor(np.asarray(client.y_train, dtype=np.int64))
        gen = torch.Generator().manual_seed(s)
        for _ in range(learner.local_epochs):
            order = torch.randperm(len(yt), generator=gen)
            for start in range(0, len(yt), learner.batch_size):
                idx = order[start : start + learner.batch_size]
                opt.zero_grad()
                loss_fn(model(xt[idx]), yt[idx]).backward()
                opt.step()
        return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}, len(yt)

    def evaluate() -> dict[str, float]:
        model = build()
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in global_w.items()})
        model.eval()
        with torch.no_grad():
            out = model(x_test)
            return {"loss": float(loss_fn(out, y_test)),
                    "accuracy": float((out.argmax(dim=1) == y_test).float().mean())}

    scores = evaluate()
    round_ends: list[float] = []
    for r in range(1, scenario.rounds + 1):
        random.seed(derive_seed(seed, "sample", "train", r))
        cohort = sorted(random.sample(range(n), max(int(n * strategy.fraction_train), 1)))
        updates = [train(pid, r) for pid in cohort]
        total = float(sum(size for _, size in updates))
        new: dict[str, np.ndarray] = {}
        for weights, size in updates:
            for k, v in weights.items():
                new[k] = v * (size / total) if k not in new else new[k] + v * (size / total)
        global_w = {k: v.astype(global_w[k].dtype, copy=False) for k, v in new.items()}
        if r % scenario.metrics.eval_every == 0 or r == scenario.rounds:
            scores = evaluate()
        round_ends.append(time.time() - STARTED)
    out: dict[str, Any] = {
        "imports_s": round(imported, 3),
        "data_done_s": round(data_done, 3),
        "rounds_s": round(round_ends[-1] - data_done, 3) if round_ends else 0.0,
        "wall_s": round(time.time() - STARTED, 3),
        "accuracy": scores["accuracy"],
        "loss": scores["loss"],
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
