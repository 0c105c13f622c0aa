"""Hand-written minimal Flower ClientApps (no flowerbed): the baseline arms.

Ray workers import this module by name (the benchmarks put this folder on
``PYTHONPATH``), so the ClientApp objects travel by reference, exactly like
flowerbed's. The data file comes from the ``FLOWERBED_BENCH_DATA`` variable:
an ``.npz`` with ``x<pid>`` / ``y<pid>`` per client and a ``hidden`` width,
read once per worker process (flowerbed also caches its data per process).
An optional ``model`` entry names the network (``mlp``, the default, or the
CNNs ``lenet`` and ``simple_cnn``, written out here as a user would); the
``FLOWERBED_BENCH_THREADS`` variable sets each worker's torch threads (1).
"""

from __future__ import annotations

import functools
import os
from collections import OrderedDict

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

DATA_ENV = "FLOWERBED_BENCH_DATA"
THREADS_ENV = "FLOWERBED_BENCH_THREADS"


@functools.cache
def client_data() -> dict[str, np.ndarray]:
    """All clients' arrays, loaded once per process; one torch thread per worker by default."""
    torch.set_num_threads(int(os.environ.get(THREADS_ENV, "1")))
    with np.load(os.environ[DATA_ENV]) as npz:
        return {k: npz[k] for k in npz.files}


def lenet(side: int, channels: int, out_features: int) -> nn.Module:
    """The PyTorch tutorial's LeNet on ``channels x side x side`` rows."""
    flat = 16 * (((side - 4) // 2 - 4) // 2) ** 2
    return nn.Sequential(
        nn.Unflatten(1, (channels, side, side)),
        nn.Conv2d(channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, out_features),
    )


def simple_cnn(side: int, channels: int, out_features: int) -> nn.Module:
    """pfl-research's CIFAR-10 ``simple_cnn`` on ``channels x side x side`` rows."""
    return nn.Sequential(
        nn.Unflatten(1, (channels, side, side)),
        nn.Conv2d(channels, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * ((side - 4) // 2) ** 2, 128), nn.ReLU(), nn.Linear(128, out_features),
    )


def model_for(data: dict[str, np.ndarray], in_features: int) -> nn.Module:
    """The network the data file names (``mlp`` with ``hidden`` units when it names none)."""
    name = str(data["model"]) if "model" in data else "mlp"
    classes = int(data["num_classes"])
    if name == "mlp":
        return mlp(in_features, int(data["hidden"]), classes)
    side = round((in_features / 3) ** 0.5)
    return {"lenet": lenet, "simple_cnn": simple_cnn}[name](side, 3, classes)


def mlp(in_features: int, hidden: int, out_features: int) -> nn.Module:
    """The same network as flowerbed's ``mlp`` model with one hidden layer (``linear`` if 0)."""
    if hidden == 0:
        return nn.Sequential(nn.Linear(in_features, out_features))
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_features))


def train_local(
    state: OrderedDict[str, torch.Tensor],
    x: np.ndarray,
    y: np.ndarray,
    data: dict[str, np.ndarray],
    cfg: dict[str, float],
    seed: int,
) -> tuple[OrderedDict[str, torch.Tensor], float]:
    """Seeded mini-batch SGD with momentum: the work flowerbed's ``sgd`` learner does."""
    torch.manual_seed(seed)
    model = model_for(data, x.shape[1])
    model.load_state_dict(state, strict=True)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    loss_fn = nn.CrossEntropyLoss()
    xt = torch.as_tensor(np.asarray(x, dtype=np.float32))
    yt = torch.as_tensor(np.asarray(y, dtype=np.int64))
    gen = torch.Generator().manual_seed(seed)
    batch = int(cfg["batch-size"])
    total, count = 0.0, 0
    for _ in range(int(cfg["local-epochs"])):
        order = torch.randperm(len(yt), generator=gen)
        for start in range(0, len(yt), batch):
            idx = order[start : start + batch]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
    return model.state_dict(), total / max(count, 1)


train_app = ClientApp()


@train_app.train()
def train(msg: Message, context: Context) -> Message:
    """FedAvg client: local SGD from the received weights."""
    data = client_data()
    pid = int(context.node_config["partition-id"])
    x, y = data[f"x{pid}"], data[f"y{pid}"]
    cfg = {k: float(v) for k, v in msg.content["config"].items()}  # type: ignore[arg-type]
    state = msg.content["arrays"].to_torch_state_dict()
    seed = 1000 * int(cfg["server-round"]) + pid
    new_state, loss = train_local(state, x, y, data, cfg, seed)
    content = RecordDict(
        {
            "arrays": ArrayRecord(new_state),
            "metrics": MetricRecord({"loss": loss, "num-examples": len(y)}),
        }
    )
    return Message(content, reply_to=msg)


trivial_app = ClientApp()


@trivial_app.evaluate()
def trivial(msg: Message, context: Context) -> Message:
    """No work: read the received array, answer with zero examples."""
    del context
    for record in msg.content.array_records.values():
        for arr in record.values():
            arr.numpy()
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": 0})}), reply_to=msg)
