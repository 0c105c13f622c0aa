"""Domain shift: severity 0 is the identity, transforms do what they say, data flow."""

from __future__ import annotations

import numpy as np
import pytest
from data_helpers import build_dataset, build_partition
from scipy import ndimage

from flowerbed.core.scenario import load_scenario
from flowerbed.data.domain_shift import AffineShift, ImageShift
from flowerbed.data.federated import federated_data


@pytest.fixture(scope="module")
def digits():
    return build_dataset("digits", standardize=False)


def test_severity_zero_is_the_identity(digits):
    plain = build_partition("iid", digits, 5, seed=4)
    for space in ("image", "features"):
        shifted = build_partition("domain_shift", digits, 5, seed=4, severity=0.0, space=space)
        for pid in range(5):
            assert np.array_equal(shifted.indices[pid], plain.indices[pid])
            x = digits.x_train[shifted.indices[pid]]
            assert np.array_equal(shifted.transform(pid)(x), x)


@pytest.mark.parametrize("kind", ["rotation", "contrast", "noise", "blur"])
def test_image_kinds_change_images_and_grow_with_severity(digits, kind):
    x = digits.x_train[:50]
    changes = []
    for severity in (0.3, 1.0):
        part = build_partition("domain_shift", digits, 1, severity=severity, kinds=[kind])
        assert part.domains[0].startswith(f"d0: {kind}")
        out = part.transform(0)(x)
        assert out.shape == x.shape and out.dtype == x.dtype
        changes.append(np.abs(out - x).mean())
    assert 0 < changes[0] < changes[1]


def test_image_shift_matches_scipy_and_closed_forms():
    img = np.random.default_rng(0).random((3, 6, 6)).astype(np.float32)
    x = img.reshape(3, 36)
    rotated = ImageShift((6, 6), "rotation", 90.0)(x).reshape(3, 6, 6)
    assert np.allclose(rotated, np.rot90(img, k=1, axes=(1, 2)), atol=1e-5)
    blurred = ImageShift((6, 6), "blur", 1.0)(x).reshape(3, 6, 6)
    assert np.allclose(blurred[0], ndimage.gaussian_filter(img[0].astype(np.float64), 1.0,
                                                           mode="nearest"), atol=1e-6)
    flat = ImageShift((6, 6), "contrast", 0.0)(x)
    assert np.allclose(flat, x.mean(axis=1, keepdims=True))
    noise = ImageShift((6, 6), "noise", 0.1, seed=3)
    assert np.array_equal(noise(x), noise(x.copy()))  # pure function of the rows
    assert not np.array_equal(noise(x)[:2], noise(x[:2] + 1)[:2] - 1)
    assert abs((noise(np.zeros((200, 36), np.float32))).std() - 0.1) < 0.01


def test_affine_shift_on_feature_vectors():
    wine = build_dataset("wine")
    part = build_partition("domain_shift", wine, 3, severity=0.5)
    assert all(isinstance(part.transform(p), AffineShift) for p in range(3))
    x = wine.x_train[:20]
    a, b = part.transform(0)(x), part.transform(1)(x)
    assert not np.allclose(a, x) and not np.allclose(a, b)
    t = part.transform(0)
    assert np.allclose(a, x @ t.matrix + t.offset, atol=1e-5)
    with pytest.raises(ValueError, match="space=image"):
        build_partition("domain_shift", wine, 3, space="image")


def test_num_domains_shares_transforms(digits):
    part = build_partition("domain_shift", digits, 6, num_domains=2)
    assert part.transforms[0] is part.transforms[2] is part.transforms[4]
    assert part.transforms[1] is part.transforms[3] is not part.transforms[0]


def test_label_and_domain_shift_combines_dirichlet_and_domains(digits):
    joint = build_partition("label_and_domain_shift", digits, 5, seed=2, alpha=0.3)
    labels = build_partition("dirichlet", digits, 5, seed=2, alpha=0.3)
    assert all(np.array_equal(a, b) for a, b in zip(joint.indices, labels.indices, strict=True))
    assert joint.transforms is not None and len(joint.domains) == 5


def test_clients_and_pooled_baseline_see_shifted_data():
    scenario = load_scenario(
        "scenarios/quickstart.yaml",
        ["partition={name: domain_shift, severity: 1.0, kinds: [noise]}", "num_clients=3"],
    )
    data = federated_data(scenario)
    raw = data.dataset.x_train
    client = data.client(1)
    assert client.extra["domain"].startswith("d1: noise")
    assert not np.allclose(client.x_train, raw[data.local_train[1]])
    assert np.array_equal(client.x_train, data.client(1).x_train)
    x, _ = data.pooled_train()
    assert len(x) == sum(len(t) for t in data.local_train)
    start = len(data.local_train[0])
    assert np.array_equal(x[start : start + client.num_train], client.x_train)
