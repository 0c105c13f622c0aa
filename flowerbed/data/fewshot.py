"""Few-shot federated splits for CLIP-style adaptation, and a synthetic CLIP-like world.

``fewshot_dirichlet`` follows the FedSPA / CoOp protocol
(github.com/eejiarong/FedSPA-main): draw ``num_shots`` training examples per
class, draw one Dirichlet(alpha) vector of client shares per class, and cut
both the few-shot training rows and the whole test split of each class by the
same shares (``floor(p_k n_c)`` rows each, leftovers to uniformly random
clients). Each client's test rows are its personal test set; the partition
carries them as :attr:`FewShotPartition.test_indices`.

``synthetic_clip`` is a toy / test asset: unit-norm "image features"
``normalise(cone + u_c + noise)`` around seeded class centres ``u_c``. Its class
names (``w<world>-c<i>``) let the ``synthetic_clip`` vision-language model
(``flowerbed.methods.fedspa.learner``) rebuild the same centres and give each
class the text feature ``normalise(text offset + u_c + noise)``, so the two
always form a coherent pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from flowerbed.core.registry import Params, register
from flowerbed.core.seeds import rng
from flowerbed.data.base import Dataset, DatasetMeta, Partition
from flowerbed.data.partitioners import PartitionError, check_clients


@dataclass(frozen=True)
class FewShotPartition(Partition):
    """A partition of few-shot training rows that also splits ``Dataset.x_test``.

    ``test_indices[k]`` indexes ``Dataset.x_test``: client ``k``'s personal test set.
    """

    def test_pool(self) -> np.ndarray:
        """Sorted test rows some client holds (the union of ``test_indices``)."""
        parts = self.test_indices or []
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    test_indices: list[np.ndarray] | None = None


def fewshot_rows(
    y: np.ndarray, num_classes: int, num_shots: int, seed: int, pool_rows: int | None = None
) -> np.ndarray:
    """``num_shots`` rows of each class among the first ``pool_rows``, without replacement."""
    rows = []
    among = f" among the first pool_rows={pool_rows}" if pool_rows is not None else ""
    for c in range(num_classes):
        pool = np.flatnonzero(y[:pool_rows] == c)
        if len(pool) < num_shots:
            raise PartitionError(
                f"partition.num_shots={num_shots} needs {num_shots} training rows of each "
                f"class; class {c} has {len(pool)} training rows{among}"
            )
        rows.append(rng(seed, "fewshot", "shots", c).choice(pool, num_shots, replace=False))
    return np.sort(np.concatenate(rows)) if rows else np.zeros(0, dtype=np.int64)


def class_shares(num_classes: int, num_clients: int, alpha: float, seed: int) -> np.ndarray:
    """``(C, K)`` client shares: row ``c`` ~ Dirichlet(alpha 1_K), seeded per class."""
    return np.stack([
        rng(seed, "fewshot", "dirichlet", c).dirichlet(np.full(num_clients, alpha))
        for c in range(num_classes)
    ])


def split_by_shares(
    y: np.ndarray, rows: np.ndarray, shares: np.ndarray, seed: int, label: str
) -> list[np.ndarray]:
    """Cut each class's ``rows`` among clients: ``floor(p_k n_c)`` each, leftovers at random."""
    num_classes, num_clients = shares.shape
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in range(num_classes):
        gen = rng(seed, "fewshot", label, c)
        mine = gen.permutation(rows[y[rows] == c])
        counts = np.floor(shares[c] * len(mine)).astype(np.int64)
        extra = gen.integers(0, num_clients, size=len(mine) - counts.sum())
        counts += np.bincount(extra, minlength=num_clients)
        for k, chunk in enumerate(np.split(mine, np.cumsum(counts)[:-1])):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


class FewShotDirichletParams(Params):
    """Shots per class and the Dirichlet concentration of the per-class client shares."""

    num_shots: int = Field(8, ge=1, description="training examples per class, all clients together")
    alpha: float = Field(0.1, gt=0, description="Dirichlet concentration; small = more skew")
    pool_rows: int | None = Field(
        None, ge=1, description="draw shots from the first N training rows only (e.g. to keep "
        "a vlm's pre-training slice out); default: all")
    test_rows: int | None = Field(
        None, ge=1, description="split only the first N test rows (the same rows for every "
        "seed, so encoded features are reused); default: all")


@register("partition", "fewshot_dirichlet", params=FewShotDirichletParams)
def fewshot_dirichlet(
    params: FewShotDirichletParams, data: Dataset, num_clients: int, *, seed: int
) -> FewShotPartition:
    """Few-shot train rows and the test split cut by the same per-class Dirichlet shares."""
    if data.meta.task != "classification":
        raise ValueError("fewshot_dirichlet partitioning needs class labels")
    check_clients(data, num_clients)
    c = data.meta.num_classes
    if num_clients > params.num_shots * c:
        raise PartitionError(
            f"num_clients={num_clients} exceeds the {params.num_shots * c} few-shot training "
            f"rows (partition.num_shots={params.num_shots} x {c} classes of {data.meta.name})"
        )
    shares = class_shares(c, num_clients, params.alpha, seed)
    shots = fewshot_rows(data.y_train, c, params.num_shots, seed, params.pool_rows)
    train = split_by_shares(data.y_train, shots, shares, seed, "train")
    n_test = min(len(data.y_test), params.test_rows or len(data.y_test))
    test = split_by_shares(data.y_test, np.arange(n_test), shares, seed, "test")
    domains = [f"{len(tr)} shots, {len(te)} test rows" for tr, te in zip(train, test, strict=True)]
    return FewShotPartition(train, domains=domains, test_indices=test)


# --- a synthetic CLIP-like world ----------------------------------------------------------


def world_class_name(world: int, c: int) -> str:
    """The class name that tells the synthetic text tower which centre to use."""
    return f"w{world}-c{c}"


def world_centre(world: int, c: int, dim: int) -> np.ndarray:
    """Unit-norm image class centre ``u_c`` of world ``world``."""
    u = rng(world, "clip-world", "centre", c).standard_normal(dim)
    return u / np.linalg.norm(u)


def world_offset(world: int, dim: int, norm: float, modality: str) -> np.ndarray:
    """The direction of length ``norm`` shared by every ``image`` (or ``text``) feature.

    CLIP's features of each modality sit in a narrow cone (random images have
    cosine ~0.5) and the two cones are apart (the modality gap).
    """
    g = rng(world, "clip-world", modality).standard_normal(dim)
    return norm * g / np.linalg.norm(g)


class SyntheticClipParams(Params):
    """Size and noise of the toy image features (the text side lives in the vlm)."""

    world: int = Field(0, ge=0, description="seed of the class centres (shared with the vlm)")
    num_classes: int = Field(10, ge=2)
    dim: int = Field(64, ge=2)
    train_per_class: int = Field(40, ge=1)
    test_per_class: int = Field(100, ge=1)
    cone: float = Field(1.5, ge=0, description="length of the offset shared by all images")
    image_noise: float = Field(1.0, ge=0, description="norm of the isotropic noise (about)")


@register("dataset", "synthetic_clip", params=SyntheticClipParams)
def synthetic_clip(params: SyntheticClipParams, *, seed: int) -> Dataset:
    """Toy CLIP-like image features: normalise(cone + u_c + noise), for the synthetic_clip vlm."""
    centres = np.stack([world_centre(params.world, c, params.dim)
                        for c in range(params.num_classes)])
    centres += world_offset(params.world, params.dim, params.cone, "image")

    def draw(per_class: int, split: str) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(params.num_classes), per_class)
        noise = rng(seed, "synthetic_clip", split).standard_normal((len(y), params.dim))
        x = centres[y] + params.image_noise * noise / np.sqrt(params.dim)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), y

    (x_tr, y_tr), (x_te, y_te) = draw(params.train_per_class, "train"), \
        draw(params.test_per_class, "test")
    meta = DatasetMeta(
        name="synthetic_clip", task="classification", num_features=params.dim,
        num_classes=params.num_classes,
        class_names=tuple(world_class_name(params.world, c) for c in range(params.num_classes)),
        source="synthetic CLIP-like features (toy/test asset; pair with the synthetic_clip vlm)",
        license="generated",
    )
    return Dataset(x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64), meta)
