"""Datasets whose every client is a device generating its own data, for any population.

``synthetic_fedprox`` is Synthetic(alpha, beta) of the FedProx paper (Li et al.,
"Federated Optimization in Heterogeneous Networks", MLSys 2020, §5.1,
https://arxiv.org/abs/1812.06127), after Shamir et al.: device ``k`` labels
its inputs with its own softmax model,

- ``u_k ~ N(0, alpha)``, ``W_k ~ N(u_k, 1)`` (10 x 60), ``b_k ~ N(u_k, 1)`` (10),
- ``B_k ~ N(0, beta)``, ``v_k ~ N(B_k, 1)`` (60), ``x ~ N(v_k, Sigma)`` with
  ``Sigma = diag(j^-1.2)``, ``j = 1..60``,
- ``y = argmax(W_k x + b_k)``,

so alpha sets how much the devices' models differ and beta how much their inputs
do. alpha and beta are variances, as the paper writes them (the same as standard
deviations for Synthetic(1, 1)). Device sizes follow the paper's power-law
shape as a log-normal: ``floor(exp(size_mu + size_sigma z)) + min_size``.

``synthetic_images`` gives each device CIFAR-shaped images (3 x 32 x 32 by
default) of class templates plus noise, a stand-in for image workloads whose
real data is not on this machine; ``classes_per_device`` gives the two-class
shards of FedAvg-style splits.

Each device's rows come from its own derived seed (never a shared pool), so a
population of a million costs nothing until a device is asked for. The
server's test split is ``test_devices`` further devices drawn the same way
(not members of the population).

Examples
--------
>>> data = synthetic_fedprox(SyntheticFedProxParams(), seed=0)
>>> x, y = data.device(123_456)
>>> x.shape[1], x.dtype.name, int(y.max()) < 10
(60, 'float32', True)
>>> bool(np.array_equal(data.device(5)[0], data.device(5)[0]))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import DatasetMeta
from flowerbed.data.population import DeviceDataset


class DevicesOnly(Params):
    """A device dataset is split one client per device: partition ``devices``."""

    def scenario_problems(self, scenario: Any) -> list[str]:
        """Refuse a shared-pool partition (this dataset has no pool to split)."""
        from flowerbed.core.registry import name_of

        name = name_of(scenario.component("partition"))
        if name != "devices":
            return [f"{name_of(self)} generates each client's own data: set "
                    f"partition: {{name: devices}} (not {name})"]
        return []


class SyntheticFedProxParams(DevicesOnly):
    """Synthetic(alpha, beta) of FedProx: per-device softmax models and input means."""

    alpha: float = Field(1.0, ge=0, description="variance of the devices' model means u_k")
    beta: float = Field(1.0, ge=0, description="variance of the devices' input means B_k")
    num_features: int = Field(60, ge=1)
    num_classes: int = Field(10, ge=2)
    size_mu: float = Field(4.0, description="log-normal sizes: mean of log(size - min_size)")
    size_sigma: float = Field(2.0, ge=0, description="log-normal sizes: std of the log")
    min_size: int = Field(50, ge=1, description="rows every device has at least")
    max_size: int | None = Field(None, ge=1, description="cap on a device's rows (default: none)")
    test_devices: int = Field(100, ge=1, description="further devices forming the test split")


def device_size(
    gen: np.random.Generator, mu: float, sigma: float, min_size: int, max_size: int | None
) -> int:
    """``floor(exp(mu + sigma z)) + min_size`` rows, capped at ``max_size``."""
    size = math.floor(math.exp(mu + sigma * gen.standard_normal())) + min_size
    return size if max_size is None else min(size, max_size)


@dataclass(frozen=True)
class SyntheticFedProx(DeviceDataset):
    """Synthetic(alpha, beta) devices (see the module docstring)."""

    params: Any = None
    seed: int = 0

    def device(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """Device ``pid``'s rows (negative ids are the test devices)."""
        p: SyntheticFedProxParams = self.params
        gen = rng(self.seed, "synthetic_fedprox", pid)
        d, c = p.num_features, p.num_classes
        u = gen.normal(0.0, math.sqrt(p.alpha))
        big_b = gen.normal(0.0, math.sqrt(p.beta))
        w = gen.normal(u, 1.0, (c, d))
        b = gen.normal(u, 1.0, c)
        v = gen.normal(big_b, 1.0, d)
        n = device_size(gen, p.size_mu, p.size_sigma, p.min_size, p.max_size)
        scale = np.arange(1, d + 1, dtype=np.float64) ** -0.6  # sqrt of j^-1.2
        x = v + gen.standard_normal((n, d)) * scale
        y = np.argmax(x @ w.T + b, axis=1)
        return x.astype(np.float32), y.astype(np.int64)


def _test_split(data: DeviceDataset, count: int) -> tuple[np.ndarray, np.ndarray]:
    parts = [data.device(-1 - j) for j in range(count)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _empty(num_features: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, num_features), np.float32), np.zeros(0, np.int64)


@register("dataset", "synthetic_fedprox", params=SyntheticFedProxParams)
def synthetic_fedprox(params: SyntheticFedProxParams, *, seed: int) -> SyntheticFedProx:
    """FedProx's Synthetic(alpha, beta): every client a device with its own model and inputs."""
    meta = DatasetMeta(
        "synthetic_fedprox", "classification", params.num_features, params.num_classes,
        source="generated: Li et al. 2020 (FedProx), Synthetic(alpha, beta)",
    )
    x0, y0 = _empty(params.num_features)
    shell = SyntheticFedProx(x0, y0, x0, y0, meta, params=params, seed=seed)
    x_test, y_test = _test_split(shell, params.test_devices)
    return SyntheticFedProx(x0, y0, x_test, y_test, meta, params=params, seed=seed)


class SyntheticImagesParams(DevicesOnly):
    """CIFAR-shaped images per device: a class template plus Gaussian noise."""

    channels: int = Field(3, ge=1)
    side: int = Field(32, ge=4, description="images are channels x side x side")
    num_classes: int = Field(10, ge=2)
    samples_per_device: int = Field(500, ge=1)
    classes_per_device: int | None = Field(
        None, ge=1, description="classes a device holds (drawn per device); default: all"
    )
    signal: float = Field(0.5, gt=0, description="template scale against unit noise")
    test_devices: int = Field(4, ge=1, description="further devices forming the test split")


@dataclass(frozen=True)
class SyntheticImages(DeviceDataset):
    """Devices of noisy class-template images (see the module docstring)."""

    params: Any = None
    seed: int = 0
    templates: np.ndarray | None = None

    def device(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """Device ``pid``'s images (flattened rows) and labels."""
        p: SyntheticImagesParams = self.params
        assert self.templates is not None  # set by synthetic_images
        gen = rng(self.seed, "synthetic_images", pid)
        classes = np.arange(p.num_classes)
        if p.classes_per_device is not None and pid >= 0:
            k = min(p.classes_per_device, p.num_classes)
            classes = np.sort(gen.choice(p.num_classes, size=k, replace=False))
        y = classes[gen.integers(0, len(classes), p.samples_per_device)]
        noise = gen.standard_normal((p.samples_per_device, self.templates.shape[1]), np.float32)
        x = self.templates[y] * np.float32(p.signal) + noise
        return x, y.astype(np.int64)


@register("dataset", "synthetic_images", params=SyntheticImagesParams)
def synthetic_images(params: SyntheticImagesParams, *, seed: int) -> SyntheticImages:
    """Image-shaped devices (default 3 x 32 x 32, 10 classes) for CNN workloads at any scale."""
    width = params.channels * params.side * params.side
    meta = DatasetMeta(
        "synthetic_images", "classification", width, params.num_classes,
        source="generated: class templates plus Gaussian noise",
        input_shape=(params.channels, params.side, params.side),
    )
    templates = rng(seed, "synthetic_images", "templates").standard_normal(
        (params.num_classes, width), np.float32
    )
    x0, y0 = _empty(width)
    shell = SyntheticImages(x0, y0, x0, y0, meta, params=params, seed=seed, templates=templates)
    x_test, y_test = _test_split(shell, params.test_devices)
    return SyntheticImages(
        x0, y0, x_test, y_test, meta, params=params, seed=seed, templates=templates
    )
