"""Array encoding: byte-identical to Flower's, and decoding agrees with Flower's reader."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from flowerbed.clients.torch_learner import seed_torch
from flowerbed.core.messages import Payload, decode_array, encode_array

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_]


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from(DTYPES),
        shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6),
    )
)
def test_encode_is_byte_identical_to_flower_and_decodes_back(x: np.ndarray) -> None:
    ours, flowers = encode_array(x), Array(x)
    assert (ours.dtype, tuple(ours.shape), ours.stype) == (
        flowers.dtype,
        tuple(flowers.shape),
        flowers.stype,
    )
    assert ours.data == flowers.data
    back = decode_array(flowers)
    np.testing.assert_array_equal(back, flowers.numpy())
    assert back.dtype == x.dtype and back.shape == x.shape


def test_decoded_array_is_writable_and_owns_its_memory() -> None:
    a = encode_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = decode_array(a)
    out += 1  # strategies update arrays in place
    np.testing.assert_array_equal(decode_array(a), np.arange(6).reshape(2, 3))


@pytest.mark.parametrize(
    "x",
    [
        np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),  # Fortran-ordered bytes
        np.arange(10, dtype=">i4"),  # big-endian
        np.zeros(3, dtype=[("a", "<f4"), ("b", "<i2")]),  # structured dtype
    ],
)
def test_other_layouts_fall_back_to_flowers_reader(x: np.ndarray) -> None:
    """Arrays serialised by Flower itself in layouts our header cache never writes."""
    a = Array(x)
    np.testing.assert_array_equal(decode_array(a), x)
    np.testing.assert_array_equal(decode_array(encode_array(x)), x)


def test_header_disagreeing_with_metadata_is_not_trusted() -> None:
    good = Array(np.arange(4, dtype=np.float32))
    # Metadata claims float64 of shape (2,): the same 16 bytes, another meaning.
    lying = Array(dtype="float64", shape=(2,), stype=good.stype, data=good.data)
    np.testing.assert_array_equal(decode_array(lying), np.arange(4, dtype=np.float32))


def test_payload_round_trip_through_a_record() -> None:
    arrays = {"w": np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)}
    p = Payload(arrays=arrays, config={"lr": 0.1, "tags": {"a": 1}}, num_examples=7)
    back = Payload.from_record(RecordDict(p.to_record()))
    np.testing.assert_array_equal(back.arrays["w"], arrays["w"])
    assert back.config == {"lr": 0.1, "tags": {"a": 1}} and back.num_examples == 7


def test_seed_torch_gives_the_same_numbers_as_manual_seed() -> None:
    torch.manual_seed(123)
    expected = (torch.rand(5), torch.randn(3), torch.randperm(10))
    seed_torch(123, torch.device("cpu"))
    got = (torch.rand(5), torch.randn(3), torch.randperm(10))
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e, g)
