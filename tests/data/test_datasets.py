"""Every dataset against its source library's own loader or exactly known data."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from data_helpers import build_dataset
from sklearn import datasets as skd

from flowerbed.core import registry
from flowerbed.data import base
from flowerbed.data.base import DataSourceError, MissingExtraError
from flowerbed.data.image_data import FASHION_DIR, read_idx
from flowerbed.data.statsmodels_data import supervised_windows

SKLEARN = {
    "digits": skd.load_digits,
    "breast_cancer": skd.load_breast_cancer,
    "wine": skd.load_wine,
    "iris": skd.load_iris,
    "diabetes": skd.load_diabetes,
}


@pytest.mark.parametrize("name", sorted(SKLEARN))
def test_sklearn_bundled_match_the_loader(name):
    bunch = SKLEARN[name]()
    data = build_dataset(name, standardize=False)
    n, d = bunch.data.shape
    assert len(data.y_train) + len(data.y_test) == n
    assert data.x_train.shape[1] == d == data.meta.num_features
    # Unscaled rows are the loader's rows: the row multiset is preserved.
    rows = np.concatenate([data.x_train, data.x_test]).astype(np.float64)
    ref = bunch.data.astype(np.float32).astype(np.float64)
    assert np.allclose(np.sort(rows, axis=0), np.sort(ref, axis=0))
    if data.meta.task == "classification":
        assert data.meta.num_classes == len(bunch.target_names)
        assert np.array_equal(
            np.bincount(np.concatenate([data.y_train, data.y_test])), np.bincount(bunch.target)
        )
    else:
        assert np.isclose(np.concatenate([data.y_train, data.y_test]).sum(), bunch.target.sum())


def test_standardize_uses_train_statistics():
    data = build_dataset("wine")
    assert np.allclose(data.x_train.mean(axis=0), 0, atol=1e-5)
    assert np.allclose(data.x_train.std(axis=0), 1, atol=1e-4)


def test_every_dataset_has_a_summary_and_cheap_ones_carry_provenance():
    for entry in registry.entries("dataset"):
        assert entry.summary
    for name in ["iris", "engel", "nile", "gaussian_mixture", "wine"]:
        meta = build_dataset(name).meta
        assert meta.source and meta.license, name


STATSMODELS_TABLES = {
    "engel": (235, 1), "randhie": (20190, 9), "fair": (6366, 8), "star98": (303, 20),
}


@pytest.mark.parametrize("name", sorted(STATSMODELS_TABLES))
def test_statsmodels_tables_match_the_loader(name):
    import statsmodels.api as sm

    frame = getattr(sm.datasets, name).load_pandas()
    n, d = STATSMODELS_TABLES[name]
    data = build_dataset(name, standardize=False)
    assert data.meta.task == "regression"
    assert len(data.y_train) + len(data.y_test) == n == len(frame.data)
    assert data.x_train.shape[1] == d
    if name == "engel":
        pooled_x = np.concatenate([data.x_train, data.x_test])[:, 0]
        assert np.isclose(pooled_x.sum(), frame.data["income"].sum(), rtol=1e-5)
        pooled_y = np.concatenate([data.y_train, data.y_test])
        assert np.isclose(pooled_y.sum(), frame.data["foodexp"].sum())
    if name == "star98":
        y = np.concatenate([data.y_train, data.y_test])
        assert ((y > 0) & (y < 1)).all()


def test_supervised_windows_are_exact():
    x, y, t = supervised_windows(np.arange(10.0), window=3, horizon=2)
    assert x.shape == (6, 3)
    assert np.array_equal(x[0], [0, 1, 2]) and y[0] == 4 and t[0] == 4
    assert np.array_equal(y, x[:, -1] + 2)


@pytest.mark.parametrize(
    ("name", "length"), [("sunspots", 309), ("nile", 100), ("co2", 2284), ("elnino", 732),
                          ("macrodata", 203)]
)
def test_time_series_windows_are_chronological(name, length):
    data = build_dataset(name, window=4, standardize=False)
    assert len(data.y_train) + len(data.y_test) == length - 4
    assert data.x_train.shape[1] == 4
    # Chronological: the first test window continues the last training window.
    assert np.allclose(data.x_test[0][:-1], data.x_train[-1][1:])
    assert np.isclose(data.x_test[0][-1], data.y_train[-1])
    assert not np.isnan(data.x_train).any()


def test_nile_values_are_the_statsmodels_series():
    import statsmodels.api as sm

    series = sm.datasets.nile.load_pandas().data["volume"].to_numpy()
    data = build_dataset("nile", window=2, standardize=False, test_fraction=0.1)
    assert np.array_equal(data.x_train[:, 0], series[: len(data.x_train)])
    assert np.array_equal(data.y_test, series[-len(data.y_test):])


def test_macrodata_difference_option():
    import statsmodels.api as sm

    gdp = sm.datasets.macrodata.load_pandas().data["realgdp"].to_numpy()
    data = build_dataset("macrodata", column="realgdp", difference=True, standardize=False,
                         window=1)
    assert np.isclose(data.x_train[0, 0], gdp[1] - gdp[0], rtol=1e-5)


def test_skimage_patches_come_from_the_bundled_pictures():
    import skimage.data

    data = build_dataset("skimage_patches", images=["camera", "coins"], patch_size=8,
                         patches_per_image=40)
    assert data.meta.input_shape == (8, 8) and data.meta.num_classes == 2
    assert np.bincount(data.y_train).tolist() == [30, 30]
    assert np.bincount(data.y_test).tolist() == [10, 10]
    camera = skimage.data.camera() / 255.0
    patch = data.x_train[data.y_train == 0][0].reshape(8, 8)
    # The patch occurs in the top band of the camera picture.
    found = any(
        np.allclose(camera[r : r + 8, c : c + 8], patch, atol=1e-6)
        for r in range(0, 384 - 7) for c in range(0, 512 - 7)
        if abs(camera[r, c] - patch[0, 0]) < 1e-6
    )
    assert found


@pytest.mark.skipif(not (FASHION_DIR and __import__("os").path.isdir(FASHION_DIR)),
                    reason="Debian dataset-fashion-mnist not installed")
def test_fashion_mnist_reads_the_debian_files():
    data = build_dataset("fashion_mnist", max_train=3000, max_test=500)
    assert data.x_train.shape == (3000, 784) and data.x_test.shape == (500, 784)
    assert data.meta.input_shape == (28, 28) and data.meta.num_classes == 10
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    labels = read_idx(__import__("pathlib").Path(FASHION_DIR) / "train-labels-idx1-ubyte.gz")
    assert len(labels) == 60000 and np.bincount(labels).tolist() == [6000] * 10


def test_idx_reader_on_a_hand_made_file(tmp_path):
    pixels = np.arange(2 * 2 * 3, dtype=np.uint8)
    raw = struct.pack(">BBBBIII", 0, 0, 8, 3, 2, 2, 3) + pixels.tobytes()
    (tmp_path / "x-ubyte.gz").write_bytes(gzip.compress(raw))
    assert np.array_equal(read_idx(tmp_path / "x-ubyte.gz"), pixels.reshape(2, 2, 3))


def test_fashion_mnist_missing_names_the_package(tmp_path):
    with pytest.raises(DataSourceError, match="apt-get install dataset-fashion-mnist") as err:
        build_dataset("fashion_mnist", path=str(tmp_path))
    assert "\n" not in str(err.value)


def test_watch_windows_and_subjects_match_seglearn():
    from seglearn.datasets import load_watch

    raw = load_watch()
    data = build_dataset("watch", width=100, step=50)
    expected = sum((len(s) - 100) // 50 + 1 for s in raw["X"])
    assert len(data.y_train) + len(data.y_test) == expected
    assert data.x_train.shape[1] == 6 * 5 and data.meta.num_classes == 7
    assert set(np.unique(data.groups_train)) == set(range(1, 11))
    assert len(data.groups_train) == len(data.y_train)


def test_gaussian_mixture_structure():
    from flowerbed.data.gaussian_mixture import GaussianMixtureParams, mixture_centres

    data = build_dataset("gaussian_mixture", num_classes=3, components=2, dim=8,
                         separation=12.0, n_train=600, n_test=300)
    assert data.x_train.shape == (600, 8)
    assert np.bincount(data.y_train).tolist() == [200, 200, 200]
    centres = mixture_centres(
        GaussianMixtureParams(num_classes=3, components=2, dim=8, separation=12.0), seed=0
    ).reshape(6, 8)
    nearest = np.argmin(((data.x_test[:, None] - centres[None]) ** 2).sum(-1), axis=1) // 2
    assert (nearest == data.y_test).mean() > 0.95
    flat = build_dataset("gaussian_mixture", separation=0.0, n_train=400)
    assert np.abs(flat.x_train[flat.y_train == 0].mean(0)).max() < 0.5


def test_csv_and_parquet_tables(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({
        "a": np.arange(40.0), "b": np.arange(40.0) ** 2, "note": ["x"] * 40,
        "label": ["cat", "dog"] * 20, "site": np.repeat([1, 2, 3, 4], 10),
    })
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet")
    for kind, file in [("csv", "t.csv"), ("parquet", "t.parquet")]:
        with pytest.raises(DataSourceError, match=r"column 'note' .* is not numeric"):
            build_dataset(kind, path=str(tmp_path / file), target="label", group="site")
        data = build_dataset(kind, path=str(tmp_path / file), target="label", group="site",
                             standardize=False, drop_non_numeric=True)
        assert data.meta.feature_names == ("a", "b")  # text column 'note' left out, as asked
        assert data.meta.class_names == ("cat", "dog")
        assert len(data.y_train) == 30 and len(data.groups_train) == 30
        assert np.allclose(data.x_train[:, 1], data.x_train[:, 0] ** 2)
    reg = build_dataset("csv", path=str(tmp_path / "t.csv"), target="b", features=["a"],
                        task="regression")
    assert reg.meta.task == "regression" and reg.y_train.dtype == np.float64


def test_table_errors_name_the_path_or_column(tmp_path):
    with pytest.raises(DataSourceError, match=r"file not found: .*nope\.csv"):
        build_dataset("csv", path=str(tmp_path / "nope.csv"), target="y")
    (tmp_path / "t.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    with pytest.raises(DataSourceError, match=r"column 'y' not in .*columns: a, b"):
        build_dataset("csv", path=str(tmp_path / "t.csv"), target="y")
    with pytest.raises(DataSourceError, match="column 'zz'"):
        build_dataset("csv", path=str(tmp_path / "t.csv"), target="a", features=["zz"])


def test_image_folder(tmp_path):
    from PIL import Image

    for k, cls in enumerate(["bright", "dark"]):
        (tmp_path / cls).mkdir()
        for i in range(6):
            value = 200 if k == 0 else 30
            Image.new("L", (40, 30), color=value + i).save(tmp_path / cls / f"{i}.png")
    data = build_dataset("image_folder", path=str(tmp_path), size=10)
    assert data.meta.input_shape == (10, 10) and data.meta.class_names == ("bright", "dark")
    assert len(data.y_train) + len(data.y_test) == 12
    bright = np.concatenate([data.x_train[data.y_train == 0], data.x_test[data.y_test == 0]])
    assert np.all(bright > 0.75)
    with pytest.raises(DataSourceError, match="folder not found"):
        build_dataset("image_folder", path=str(tmp_path / "missing"))


def test_missing_extra_gives_a_pip_hint(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *args, **kwargs):
        if name.startswith("statsmodels"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(MissingExtraError, match="pip install statsmodels") as err:
        build_dataset("engel")
    assert "\n" not in str(err.value)
    assert base.require("numpy", "numpy", "x") is np
