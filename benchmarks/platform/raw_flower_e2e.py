"""A hand-written Flower app as a whole process: the baseline arm of ``time_to_result.py``.

It does the work a user would write by hand for the same experiment as a
flowerbed scenario: read the clients' arrays (an ``.npz`` prepared once, before
any timing, with ``x<pid>``/``y<pid>`` per client, ``x_test``/``y_test``,
``hidden`` and ``num_classes``), run Flower's own ``FedAvg`` through
``run_simulation`` with a server-side evaluation of the global model on the
test split every round, print the final accuracy and exit. It imports nothing
of flowerbed.

Usage: ``python benchmarks/platform/raw_flower_e2e.py DATA.npz --rounds 10 --fraction 1.0``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

STARTED = time.time()
HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument("--ray-num-cpus", type=int, default=None)
    parser.add_argument("--num-cpus", type=float, default=1.0,
                        help="Ray CPUs per client (its torch threads: the integer part)")
    parser.add_argument("--eval-every", type=int, default=1,
                        help="server evaluation every N rounds (and the last)")
    args = parser.parse_args()

    threads = str(max(1, int(args.num_cpus)))
    os.environ["FLOWERBED_BENCH_DATA"] = str(Path(args.data).resolve())
    os.environ["FLOWERBED_BENCH_THREADS"] = threads
    os.environ["OMP_NUM_THREADS"] = threads
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(HERE))

    import numpy as np
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    from raw_flower_app import client_data, model_for, train_app

    data = client_data()
    num_nodes = sum(1 for k in data if k.startswith("y") and k[1:].isdigit())
    x_test = torch.as_tensor(data["x_test"], dtype=torch.float32)
    y_test = torch.as_tensor(data["y_test"], dtype=torch.int64)
    torch.manual_seed(0)
    model = model_for(data, x_test.shape[1])
    outcome: dict[str, float] = {}

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        # One line per round: when it ended, on the process's clock.
        print(f"raw-round {server_round} {time.time() - STARTED:.3f}", flush=True)
        if server_round % args.eval_every and server_round != args.rounds:
            return None
        model.load_state_dict(arrays.to_torch_state_dict())
        with torch.no_grad():
            acc = float((model(x_test).argmax(1) == y_test).float().mean())
        outcome["accuracy"] = acc
        return MetricRecord({"accuracy": acc})

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        del context
        strategy = FedAvg(
            fraction_train=args.fraction, fraction_evaluate=0.0,
            min_train_nodes=1, min_available_nodes=num_nodes,
        )
        config = ConfigRecord({
            "lr": args.lr, "momentum": args.momentum, "batch-size": float(args.batch_size),
            "local-epochs": float(args.local_epochs),
        })
        strategy.start(
            grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
            num_rounds=args.rounds, train_config=config, evaluate_fn=evaluate,
        )

    init_args: dict[str, object] = {"logging_level": "ERROR", "log_to_driver": False}
    if args.ray_num_cpus:
        init_args["num_cpus"] = args.ray_num_cpus
    run_simulation(
        server_app=app, client_app=train_app, num_supernodes=num_nodes,
        backend_config={"client_resources": {"num_cpus": args.num_cpus, "num_gpus": 0.0},
                        "init_args": init_args},  # type: ignore[dict-item]
    )
    del np
    print(f"raw-flower accuracy={outcome.get('accuracy', float('nan')):.4f} "
          f"wall={time.time() - STARTED:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
