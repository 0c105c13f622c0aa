"""Benchmark clients with known corruptions, a newly joining client, and a server share.

Data side of the weak-monotonicity experiment (``docs/methods/frontier.md`` section 1,
"Hedging on the Frontier", arXiv 2605.30997). The ``frontier_benchmarks`` partition
keeps ``pretrain_fraction`` of the training rows for no client (the server trains its
candidate zoo on them), gives the last partition id (the new client) its own share,
and splits the rest IID among the benchmark clients. Each benchmark client sees one
corruption; the new client sees a composite corruption plus a rotation of
``novelty * rotation_max`` degrees that no benchmark has: the heterogeneity knob
under which weak monotonicity degrades.

Corruptions are written ``kind:magnitude`` and composed with ``+``, e.g.
``noise:0.5+occlude_top:2``; kinds: ``noise`` (std as a fraction of the data's peak),
``blur`` (sigma, px), ``contrast`` (factor), ``rotation`` (degrees), ``shift_x`` /
``shift_y`` (px, zero fill), ``occlude_top`` (rows set to zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import derive_seed, rng
from flowerbed.data.base import Dataset, Partition, Transform
from flowerbed.data.domain_shift import ImageShift

KINDS = ("noise", "blur", "contrast", "rotation", "shift_x", "shift_y", "occlude_top")


@dataclass(frozen=True)
class Corruption:
    """A composed image corruption on flattened rows (applied left to right).

    Examples
    --------
    >>> c = parse_corruption("occlude_top:1", (2, 2), peak=1.0)
    >>> c(np.ones((1, 4), dtype=np.float32)).tolist()
    [[0.0, 0.0, 1.0, 1.0]]
    """

    spec: str
    shape: tuple[int, ...]
    steps: tuple[tuple[str, float], ...]
    peak: float = 1.0
    seed: int = 0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Corrupt rows ``x`` of shape ``(n, prod(shape))``; same shape and dtype out."""
        for kind, mag in self.steps:
            x = _apply(kind, mag, x, self.shape, self.peak, self.seed)
        return x

    def describe(self) -> str:
        """The spec string it was parsed from."""
        return self.spec or "clean"


def _apply(
    kind: str, mag: float, x: np.ndarray, shape: tuple[int, ...], peak: float, seed: int
) -> np.ndarray:
    if len(x) == 0 or mag == 0:
        return x
    if kind in ("noise", "blur", "contrast", "rotation"):
        scale = peak if kind == "noise" else 1.0
        return ImageShift(shape, kind, mag * scale, seed)(x)  # type: ignore[arg-type]
    img = x.reshape(len(x), *shape).copy()
    k = round(mag)
    if kind == "occlude_top":
        img[:, :k] = 0
    else:
        axis = 2 if kind == "shift_x" else 1
        img = np.roll(img, k, axis=axis)
        index = [slice(None)] * img.ndim
        index[axis] = slice(0, k) if k > 0 else slice(k, None)
        img[tuple(index)] = 0
    return img.reshape(x.shape)


def parse_corruption(
    spec: str, shape: tuple[int, ...], peak: float = 1.0, seed: int = 0
) -> Corruption:
    """Parse ``kind:mag+kind:mag`` (empty string: clean) into a :class:`Corruption`."""
    steps = []
    for part in filter(None, (p.strip() for p in spec.split("+"))):
        kind, _, mag = part.partition(":")
        if kind not in KINDS or not mag:
            raise ValueError(f"bad corruption {part!r}; write kind:magnitude, kinds: {KINDS}")
        steps.append((kind, float(mag)))
    return Corruption(spec, tuple(shape), tuple(steps), float(peak), seed)


class FrontierBenchmarksParams(Params):
    """Server share, benchmark corruptions, and the new client's task (novelty knob)."""

    pretrain_fraction: float = Field(0.4, gt=0, lt=1, description="rows only the server holds")
    target_fraction: float = Field(
        0.35, gt=0, lt=1, description="share of the non-server rows given to the new client"
    )
    benchmarks: tuple[str, ...] = Field(
        ("noise:0.3", "noise:0.6", "blur:0.8", "shift_x:1", "occlude_top:3", "contrast:0.4"),
        min_length=1, description="corruptions the benchmark clients cycle through",
    )
    target: str = Field("noise:0.5+occlude_top:2", description="the new client's corruption")
    novelty: float = Field(0.0, ge=0, le=1, description="unseen rotation, x rotation_max")
    rotation_max: float = Field(40.0, ge=0, description="degrees of rotation at novelty 1")


def target_spec(params: FrontierBenchmarksParams) -> str:
    """The new client's full corruption string (target plus the novelty rotation)."""
    angle = params.novelty * params.rotation_max
    return "+".join(filter(None, [params.target, f"rotation:{angle:g}" if angle else ""]))


def split_rows(
    n: int, num_clients: int, params: FrontierBenchmarksParams, seed: int
) -> list[np.ndarray]:
    """Row indices per client: benchmarks ``0..K-1`` IID, the new client last.

    The first ``pretrain_fraction`` of a seeded permutation goes to nobody.
    """
    order = rng(seed, "frontier-split").permutation(n)
    rest = order[round(params.pretrain_fraction * n):]
    n_target = round(params.target_fraction * len(rest))
    bench = np.array_split(rest[n_target:], max(num_clients - 1, 1))
    return [np.sort(b) for b in bench[: num_clients - 1]] + [np.sort(rest[:n_target])]


@register("partition", "frontier_benchmarks", params=FrontierBenchmarksParams)
def frontier_benchmarks(
    params: FrontierBenchmarksParams, data: Dataset, num_clients: int, *, seed: int
) -> Partition:
    """Corrupted benchmark clients + a new client (last id); unassigned rows are the server's."""
    if num_clients < 2:
        raise ValueError("frontier_benchmarks needs >= 2 clients (benchmarks + the new one)")
    shape = data.meta.input_shape
    if int(np.prod(shape or (0,))) != data.meta.num_features:
        raise ValueError(f"frontier_benchmarks needs image rows; {data.meta.name!r} has none")
    peak = float(np.abs(data.x_train).max()) or 1.0
    specs = [params.benchmarks[k % len(params.benchmarks)] for k in range(num_clients - 1)]
    specs.append(target_spec(params))
    transforms: list[Transform | None] = [
        parse_corruption(s, shape, peak, derive_seed(seed, "corruption", pid))
        for pid, s in enumerate(specs)
    ]
    names = [f"benchmark: {s}" for s in specs[:-1]] + [f"new client: {specs[-1] or 'clean'}"]
    rows = split_rows(len(data.y_train), num_clients, params, seed)
    return Partition(rows, transforms=transforms, domains=names)
