"""Candidate zoo for the weak-monotonicity experiment: seeded scikit-learn models.

Method: "Hedging on the Frontier" (arXiv 2605.30997; ``docs/methods/frontier.md``
section 1). The server trains M candidates on its own clean rows with varied
hyperparameters and training augmentations; rotation specialists (trained only on
rotated images) are mediocre on every benchmark but good on a rotated new task,
which is how the experiment breaks weak monotonicity on purpose.

Models travel as pickled bytes (``uint8`` arrays): the federation's own server
is the only producer, and re-training on every client would cost K+1 zoo fits.
"""

# mypy cannot type lambdas with bound default arguments (the zoo's factories).
# mypy: disable-error-code="misc"

from __future__ import annotations

import functools
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

from flowerbed.methods.frontier.data import parse_corruption


@dataclass(frozen=True)
class Candidate:
    """One zoo entry: a name, an estimator factory (seed in) and a training augmentation."""

    name: str
    make: Callable[[int], Any]
    augment: str = ""
    replace: bool = False  # train on augmented rows only (a specialist)


#: Pixel scale the zoo divides by (digits pixels lie in 0..16). A global factor, not
#: per-column standardisation: blank border pixels have zero variance on clean rows,
#: so a per-column scaler would blow up any noise there.
PIXEL_SCALE = 16.0


def unit_scale(x: np.ndarray) -> np.ndarray:
    """Divide by :data:`PIXEL_SCALE` (module-level so pipelines pickle)."""
    return np.asarray(x, dtype=np.float64) / PIXEL_SCALE


def _scaled(est: Any) -> Any:
    return make_pipeline(FunctionTransformer(unit_scale), est)


def _standard() -> list[Candidate]:
    out = [Candidate(f"lr_C{c:g}", lambda s, c=c: _scaled(LogisticRegression(C=c, max_iter=300)))
           for c in (0.001, 0.01, 0.1, 1.0)]
    out += [Candidate(f"knn_k{k}", lambda s, k=k: KNeighborsClassifier(k))
            for k in (1, 3, 5, 9, 15)]
    out += [Candidate(f"svc_C{c:g}_g{g:g}", lambda s, c=c, g=g: _scaled(
        SVC(C=c, gamma=g, probability=True, random_state=s % 2**31)))
        for c in (0.5, 5.0) for g in (0.02, 0.1, 0.5)]
    out += [Candidate(f"tree_d{d}", lambda s, d=d: DecisionTreeClassifier(
        max_depth=d, random_state=s % 2**31)) for d in (4, 8, None)]
    out += [Candidate(f"rf_{t}_d{d}", lambda s, t=t, d=d: RandomForestClassifier(
        t, max_depth=d, random_state=s % 2**31)) for t, d in ((10, 6), (30, None), (60, None))]
    out.append(Candidate("gnb", lambda s: GaussianNB()))
    out += [Candidate(f"mlp_h{h}_a{a:g}", lambda s, h=h, a=a: _scaled(MLPClassifier(
        (h,), alpha=a, max_iter=300, random_state=s % 2**31)))
        for h in (16, 64) for a in (1e-4, 1.0)]
    return out + _augmented()


def _augmented() -> list[Candidate]:
    lr = lambda s: _scaled(LogisticRegression(C=0.1, max_iter=300))  # noqa: E731
    svc = lambda s: _scaled(SVC(C=5.0, gamma=0.1, probability=True,  # noqa: E731
                                random_state=s % 2**31))
    mlp = lambda s: _scaled(MLPClassifier((64,), alpha=1e-2, max_iter=300,  # noqa: E731
                                          random_state=s % 2**31))
    knn = lambda s: KNeighborsClassifier(5)  # noqa: E731
    out = [Candidate("lr_aug_noise", lr, "noise:0.5"),
           Candidate("svc_aug_noise_blur", svc, "noise:0.4+blur:0.8"),
           Candidate("mlp_aug_noise", mlp, "noise:0.5"),
           Candidate("knn_aug_blur", knn, "blur:0.8")]
    for name, make in (("lr", lr), ("svc", svc), ("mlp", mlp), ("knn", knn)):
        out.append(Candidate(f"{name}_rot_specialist", make, "rotation:30", replace=True))
    return out


def _small() -> list[Candidate]:
    """Eight fast models (tests and smoke runs)."""
    out = [Candidate(f"lr_C{c:g}", lambda s, c=c: _scaled(LogisticRegression(C=c, max_iter=200)))
           for c in (0.001, 0.1)]
    out += [Candidate(f"knn_k{k}", lambda s, k=k: KNeighborsClassifier(k)) for k in (1, 7)]
    out += [Candidate("tree_d6", lambda s: DecisionTreeClassifier(max_depth=6, random_state=0)),
            Candidate("gnb", lambda s: GaussianNB())]
    lr = lambda s: _scaled(LogisticRegression(C=0.1, max_iter=200))  # noqa: E731
    return [*out, Candidate("lr_aug_noise", lr, "noise:0.5"),
            Candidate("lr_rot_specialist", lr, "rotation:30", replace=True)]


ZOOS: dict[str, Callable[[], list[Candidate]]] = {"standard": _standard, "small": _small}


def _training_rows(
    cand: Candidate, x: np.ndarray, y: np.ndarray, shape: tuple[int, ...], seed: int
) -> tuple[np.ndarray, np.ndarray]:
    if not cand.augment:
        return x, y
    peak = float(np.abs(x).max()) or 1.0
    xa = parse_corruption(cand.augment, shape, peak, seed)(x)
    if cand.replace:
        return xa, y
    return np.concatenate([x, xa]), np.concatenate([y, y])


def train_zoo(
    zoo: str, x: np.ndarray, y: np.ndarray, shape: tuple[int, ...], seed: int
) -> tuple[list[str], list[bytes]]:
    """Fit every candidate of ``zoo`` on ``(x, y)``; return names and pickled models."""
    names, blobs = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", FutureWarning)  # SVC(probability=True) in sklearn 1.9
        for j, cand in enumerate(ZOOS[zoo]()):
            xt, yt = _training_rows(cand, x, y, shape, seed + j)
            model = cand.make(seed + j).fit(xt, yt)
            names.append(cand.name)
            blobs.append(pickle.dumps(model))
    return names, blobs


@functools.lru_cache(maxsize=4)
def cached_zoo(
    zoo: str, x_bytes: bytes, y_bytes: bytes, width: int, shape: tuple[int, ...], seed: int
) -> tuple[list[str], list[bytes]]:
    """:func:`train_zoo` cached per process (sweep points share their zoo)."""
    x = np.frombuffer(x_bytes, dtype=np.float32).reshape(-1, width)
    y = np.frombuffer(y_bytes, dtype=np.int64)
    return train_zoo(zoo, x, y, shape, seed)


def to_array(blob: bytes) -> np.ndarray:
    """Pickled model bytes as a ``uint8`` array (what a Payload carries)."""
    return np.frombuffer(blob, dtype=np.uint8)


def from_array(arr: np.ndarray) -> Any:
    """The model a :func:`to_array` array holds (trusted source: the federation's server)."""
    return pickle.loads(np.asarray(arr, dtype=np.uint8).tobytes())


def predict_all(models: list[Any], x: np.ndarray, num_classes: int) -> np.ndarray:
    """``(M, n, C)`` class probabilities (classes a model never saw get 0)."""
    out = np.zeros((len(models), len(x), num_classes))
    for j, model in enumerate(models):
        out[j][:, np.asarray(model.classes_, dtype=int)] = model.predict_proba(x)
    return out
