"""The federated data of a scenario, written once to the artefact cache and memory-mapped.

Every process of a run (the driver, each Ray worker, each SuperNode on the
same machine) needs the same dataset, partition and local splits. Building
them means importing the dataset's libraries (scikit-learn, flwr-datasets,
pyarrow, ...) and running the partitioner: seconds per process. The first
process writes the arrays as ``.npy`` files under
``$FLOWERBED_CACHE/federated/<key>/``; the others open them memory-mapped.

The key hashes what decides the data (dataset and partition parameters,
number of clients, seed, per-client settings), the source of the code that
computes it (the dataset's and partitioner's modules, every module of
``flowerbed/data`` and the seeding) and the versions of the libraries that
generate or split data, so editing a generator or upgrading a library
invalidates its entries. Not cached, rebuilt in every process as before:
partitions with per-client transforms (callables), partition or dataset
subclasses with fields of their own (few-shot test splits), datasets carrying text, and
components registered outside a discovered plugin module (a test or script
defining its own dataset, whose source may change under the same name). A
user's table file is part of the key by its size and modification time, so
an edited CSV is read again; a folder (Fashion-MNIST's idx files, an image
folder) by the size and modification time of every file in it.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from flowerbed.core import registry
from flowerbed.core.cache import cache_dir
from flowerbed.core.scenario import Scenario
from flowerbed.data.base import Dataset, DatasetMeta, Partition

log = logging.getLogger("flowerbed.data")

#: Bump when the file layout below changes.
LAYOUT = 1
_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def _source_hash(obj: Any) -> str:
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    if path is None:
        return "?"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


#: Libraries whose version can change the data a dataset or partitioner produces.
_LIBRARIES = ("numpy", "scikit-learn", "scipy", "flwr-datasets", "statsmodels", "scikit-image")


def _versions() -> list[str]:
    from importlib import metadata

    found = []
    for name in _LIBRARIES:
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return found


def _components(scenario: Scenario) -> list[tuple[str, str]]:
    return [
        (kind, registry.name_of(scenario.component(kind))) for kind in ("dataset", "partition")
    ]


def discovered(scenario: Scenario) -> bool:
    """Whether the data may be cached: components of a discovered plugin module.

    Components registered outside a discovered plugin module (a test or a
    script) may change under the same name. User files and folders are cached,
    keyed by the size and modification time of each file (:func:`_user_files`).
    """
    from flowerbed.core.plugins import component_source

    return not any(component_source(kind, name) == "?" for kind, name in _components(scenario))


def _paths(scenario: Scenario) -> list[Path]:
    """Existing files and folders named by the dataset's string parameters."""
    found = []
    for value in scenario.component("dataset").model_dump().values():
        if isinstance(value, str) and value and ("/" in value or "." in value):
            path = Path(value).expanduser()
            if path.exists():
                found.append(path)
    return found


def _user_files(scenario: Scenario) -> list[str]:
    """Identity of each user file the dataset reads, every file of a folder included.

    An edited, added or removed file gives a new key; a folder's own stat
    does not change when a file inside it is rewritten, so its files are listed.
    """
    out = []
    for path in _paths(scenario):
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            st = file.stat()
            out.append(f"{file.resolve()}:{st.st_size}:{st.st_mtime_ns}")
    return out


def cache_key(scenario: Scenario, data_key: str) -> str:
    """Digest of the data-deciding settings, the code that computes the data and its libraries."""
    from flowerbed.core import seeds

    targets = [registry.get(kind, name).target for kind, name in _components(scenario)]
    package = sorted(Path(__file__).parent.glob("*.py"))
    code = [_source_hash(t) for t in (*targets, seeds)]
    code += [hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in package]
    parts = [data_key, str(LAYOUT), *code, *_versions(), *_user_files(scenario)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def cacheable(dataset: Dataset, partition: Partition) -> bool:
    """Whether the data can be stored as plain arrays and read back unchanged.

    A subclass of :class:`Partition` (a few-shot partition that also splits the
    test set) or of :class:`Dataset` carries fields this layout does not store,
    so it is rebuilt in every process instead.
    """
    no_text = all(
        getattr(dataset, f, None) is None
        for f in ("text_train", "text_test", "refs_train", "refs_test")
    )
    plain = type(partition) is Partition and type(dataset) is Dataset
    return plain and no_text and partition.transforms is None


def storable_ids(groups: np.ndarray) -> np.ndarray:
    """Natural client ids as an array ``np.save`` writes without pickling.

    Numbers and strings are kept; any other hashable id (a pandas object
    column of site names, mixed types) becomes its text, which is also what
    ``natural_id`` groups clients by.

    Examples
    --------
    >>> storable_ids(np.array(["hosp_A", 2], dtype=object)).tolist()
    ['hosp_A', '2']
    """
    groups = np.asarray(groups)
    return groups.astype(str) if groups.dtype.hasobject else groups


def _ragged(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated rows and the offsets that split them back."""
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return flat.astype(np.int64, copy=False), np.concatenate([[0], np.cumsum(sizes)])


def _split(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [flat[a:b] for a, b in itertools.pairwise(offsets.tolist())]


def write(
    key: str,
    dataset: Dataset,
    partition: Partition,
    local_train: list[np.ndarray],
    local_test: list[np.ndarray],
) -> None:
    """Store the data under ``key``; a folder written concurrently by another process wins."""
    final = cache_dir() / "federated" / key
    if final.exists():
        return
    tmp = final.with_name(f".{key}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in _ARRAYS:
        np.save(tmp / f"{name}.npy", getattr(dataset, name), allow_pickle=False)
    if dataset.groups_train is not None:
        np.save(tmp / "groups_train.npy", storable_ids(dataset.groups_train), allow_pickle=False)
    ragged = {"indices": partition.indices, "local_train": local_train, "local_test": local_test}
    if partition.columns is not None:
        ragged["columns"] = partition.columns
    for name, parts in ragged.items():
        flat, offsets = _ragged(parts)
        np.save(tmp / f"{name}.npy", flat)
        np.save(tmp / f"{name}_offsets.npy", offsets)
    info = {"meta": asdict(dataset.meta), "domains": partition.domains}
    (tmp / "info.json").write_text(json.dumps(info))
    try:
        os.replace(tmp, final)
    except OSError:  # another process stored it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)


def read(key: str) -> tuple[Dataset, Partition, list[np.ndarray], list[np.ndarray]] | None:
    """The data stored under ``key``, memory-mapped; ``None`` when absent or unreadable."""
    folder = cache_dir() / "federated" / key
    if not (folder / "info.json").is_file():
        return None
    try:
        return _read(folder)
    except (OSError, ValueError, KeyError) as exc:
        log.warning("federated data cache %s unreadable (%s); rebuilding", folder, exc)
        return None


def _read(folder: Path) -> tuple[Dataset, Partition, list[np.ndarray], list[np.ndarray]]:
    def load(name: str) -> np.ndarray:
        arr: np.ndarray = np.load(folder / f"{name}.npy", mmap_mode="c", allow_pickle=False)
        return arr

    def ragged(name: str) -> list[np.ndarray]:
        return _split(np.asarray(load(name)), np.asarray(load(f"{name}_offsets")))

    info = json.loads((folder / "info.json").read_text())
    meta = info["meta"]
    for field in ("feature_names", "class_names", "input_shape"):
        meta[field] = tuple(meta[field])
    groups = load("groups_train") if (folder / "groups_train.npy").is_file() else None
    x_train, y_train, x_test, y_test = (load(n) for n in _ARRAYS)
    dataset = Dataset(x_train, y_train, x_test, y_test, DatasetMeta(**meta), groups)
    columns = ragged("columns") if (folder / "columns.npy").is_file() else None
    partition = Partition(ragged("indices"), columns, None, info["domains"])
    return dataset, partition, ragged("local_train"), ragged("local_test")
