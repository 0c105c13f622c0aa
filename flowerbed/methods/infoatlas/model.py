"""The pre-trained InfoAtlas network: ``flowerbed pretrain infoatlas`` and loading.

The default network (``InfoAtlasPretrainParams()`` defaults, seed 0) ships with the
package as ``flowerbed/methods/infoatlas/default_estimator.pt`` (~2 MB), so nothing is trained
on first use. Rebuild it with::

    OMP_NUM_THREADS=1 flowerbed pretrain infoatlas --force \
        --output flowerbed/methods/infoatlas/default_estimator.pt

Other settings (``--set steps=... --set seed=...``) are cached under the
artefact folder (``FLOWERBED_CACHE``), keyed by their values, and built on first
use with progress in the log. See ``flowerbed/methods/infoatlas/algorithm.py`` for the method.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path

import torch
from pydantic import Field

from flowerbed.core.artefacts import PretrainTarget, ensure_artefact
from flowerbed.core.cache import cached_file
from flowerbed.core.registry import Params
from flowerbed.methods.infoatlas import algorithm as ia
from flowerbed.methods.infoatlas import algorithm_training as iat

log = logging.getLogger("flowerbed.pretrain")

SHIPPED = Path(__file__).resolve().parent / "default_estimator.pt"


class InfoAtlasPretrainParams(Params):
    """Network size and training schedule (defaults: the shipped network)."""

    max_dim: int = Field(16, ge=1, le=64, description="largest dimension per side")
    width: int = Field(64, ge=8, description="token width of the set encoder")
    blocks: int = Field(1, ge=0, le=4, description="ISAB blocks")
    inducing: int = Field(16, ge=1)
    critic_hidden: int = Field(32, ge=4)
    steps: int = Field(1500, ge=1)
    batch: int = Field(16, ge=1, description="episodes per step")
    n_min: int = Field(64, ge=8)
    n_max: int = Field(1024, ge=8)
    lr: float = Field(1e-3, gt=0)
    seed: int = 0

    def configs(self) -> tuple[ia.NetConfig, iat.TrainConfig]:
        """The algorithm's network and training configurations."""
        net = ia.NetConfig(
            max_dim=self.max_dim,
            width=self.width,
            blocks=self.blocks,
            inducing=self.inducing,
            critic_hidden=self.critic_hidden,
        )
        train = iat.TrainConfig(
            steps=self.steps,
            batch=self.batch,
            n_min=self.n_min,
            n_max=self.n_max,
            lr=self.lr,
            seed=self.seed,
            validate_every=max(1, min(250, self.steps // 4)),
        )
        return net, train


def default_path(params: InfoAtlasPretrainParams) -> Path:
    """Cache file for these parameters (hash of their values)."""
    digest = hashlib.sha256(json.dumps(params.model_dump(), sort_keys=True).encode()).hexdigest()[
        :12
    ]
    return cached_file("infoatlas", f"infoatlas-{digest}.pt")


def run(params: InfoAtlasPretrainParams, output: Path) -> dict[str, float]:
    """Train on synthetic episodes (progress in the log) and write ``output`` atomically."""
    net_cfg, train_cfg = params.configs()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def progress(step: int, metrics: dict[str, float]) -> None:
        log.warning(
            "infoatlas: step %d/%d  train DV %.3f  validation MAE %.3f nats  %.0f s",
            step,
            train_cfg.steps,
            metrics["train_dv"],
            metrics["val_mae_gaussian"],
            metrics["seconds"],
        )

    try:
        net, metrics = iat.pretrain(net_cfg, train_cfg, progress)
    finally:
        torch.set_num_threads(threads)
    tmp = output.with_name(output.name + f".tmp{os.getpid()}")
    ia.save(net, str(tmp), {"params": params.model_dump(), "metrics": metrics})
    tmp.replace(output)
    return metrics


PRETRAIN_TARGET = PretrainTarget(
    name="infoatlas",
    params=InfoAtlasPretrainParams,
    run=run,
    default_path=default_path,
    help="amortized mutual-information estimator (InfoAtlas, CPU size)",
)


@functools.cache
def _load(path: str) -> ia.InfoAtlasNet:
    net, _ = ia.load(path)
    return net


def load_model(
    weights: str | None = None, params: InfoAtlasPretrainParams | None = None
) -> ia.InfoAtlasNet:
    """The network at ``weights``; else the shipped default; else trained once and cached.

    Loaded networks are cached per path within a process.
    """
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"InfoAtlas weights {path} not found; build them with "
                "'flowerbed pretrain infoatlas --output PATH'"
            )
        return _load(str(path))
    params = params or InfoAtlasPretrainParams()
    if params == InfoAtlasPretrainParams() and SHIPPED.exists():
        return _load(str(SHIPPED))
    return _load(str(ensure_artefact("infoatlas", params)))
