"""HIPE: gains, rotary maths against independent references, the sequence task, the model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from flowerbed.methods.hipe import algorithm as hipe
from flowerbed.methods.hipe.data import (
    MultiscaleMajorityParams,
    multiscale_majority,
    ring_of_offset,
    sample,
)
from flowerbed.methods.hipe.model import TransformerParams
from flowerbed.methods.hipe.model_nets import SequenceTransformer

torch.set_num_threads(1)


def rotate_complex(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Reference RoPE: ``z = x_i + i x_{i+d/2}`` times ``e^{i m w_i}`` (complex numbers)."""
    d = x.shape[-1]
    w = theta ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())
    z = z * torch.exp(1j * positions.double()[:, None] * w[None, :])
    return torch.cat([z.real, z.imag], dim=-1)


def logits(
    q: torch.Tensor, k: torch.Tensor, gains: torch.Tensor | None, theta: float
) -> torch.Tensor:
    """``(heads, L, L)`` attention logits after rotary (HIPE when ``gains``) at positions 0..L-1."""
    length, d = q.shape[-2], q.shape[-1]
    cos, sin = hipe.rotary_tables(torch.arange(length), hipe.rope_frequencies(d, theta))
    qr, kr = (hipe.apply_rotary(t, cos, sin, gains) for t in (q, k))
    return qr @ kr.transpose(-1, -2)


# --- gains ------------------------------------------------------------------------


def test_gains_follow_the_decay_formula_and_are_globally_normalised():
    """a = sqrt(w exp(-s^2 w^2 / 2)) per head, both halves, one scalar so mean(a^2) = 1."""
    sigmas, d, theta = [0.5, 3.0, 20.0], 8, 100.0
    a = hipe.hipe_gains(d, sigmas, theta, "gaussian")
    w = np.array([theta ** (-2 * i / d) for i in range(d // 2)])
    raw = np.array([[math.sqrt(wi * math.exp(-(s**2) * wi**2 / 2)) for wi in w] for s in sigmas])
    raw = np.concatenate([raw, raw], axis=1)
    expected = raw / np.sqrt((raw**2).mean())
    np.testing.assert_allclose(a.numpy(), expected, rtol=1e-12)
    assert a.shape == (3, 8)
    assert torch.equal(a[:, :4], a[:, 4:])
    assert abs(float((a**2).mean()) - 1) < 1e-6
    # The normalisation is global, not per head: wide heads get a smaller logit scale.
    per_head = (a**2).mean(dim=1)
    assert per_head[0] > per_head[1] > per_head[2]


@pytest.mark.parametrize(
    ("decay", "g"),
    [
        ("exp", lambda w, s: w / (1 + s**2 * w**2)),
        ("power", lambda w, s: w * math.exp(-s * w)),
    ],
)
def test_other_decays(decay, g):
    a = hipe.hipe_gains(6, [2.0], 10.0, decay)
    w = [10.0 ** (-2 * i / 6) for i in range(3)]
    raw = np.sqrt([g(wi, 2.0) for wi in w] * 2)
    np.testing.assert_allclose(a.numpy()[0], raw / np.sqrt((raw**2).mean()), rtol=1e-12)


def test_sigma_zero_is_not_rope():
    """sigma -> 0 leaves the sqrt(omega) Jacobian tilt: HIPE(0) != RoPE (gains != 1)."""
    a = hipe.hipe_gains(16, [0.0], 100.0)
    w = hipe.rope_frequencies(16, 100.0)
    tilt = torch.sqrt(torch.cat([w, w]))
    torch.testing.assert_close(a[0], tilt / torch.sqrt((tilt**2).mean()))
    assert float((a - 1).abs().max()) > 0.5


def test_bad_gain_arguments_are_refused():
    with pytest.raises(ValueError, match="even"):
        hipe.rope_frequencies(7)
    with pytest.raises(ValueError, match="sigmas"):
        hipe.hipe_gains(8, [])
    with pytest.raises(ValueError, match="decay"):
        hipe.decay_weights(torch.ones(2), torch.ones(1), "cosine")  # type: ignore[arg-type]


# --- rotary maths -------------------------------------------------------------------


def test_rope_matches_complex_rotation_reference():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 11, 16, generator=gen, dtype=torch.float64)
    pos = torch.arange(11)
    cos, sin = hipe.rotary_tables(pos, hipe.rope_frequencies(16, 500.0))
    torch.testing.assert_close(
        hipe.apply_rotary(x, cos, sin), rotate_complex(x, pos, 500.0), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("sigmas", [[4.0, 4.0], [1.0, 16.0]])
def test_hipe_is_rope_on_gain_scaled_queries_and_keys(sigmas):
    """Single- or multi-scale HIPE == RoPE applied to a * q and a * k (to 1e-12)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 2, 9, 8, generator=gen, dtype=torch.float64)
    a = hipe.hipe_gains(8, sigmas, 50.0)
    cos, sin = hipe.rotary_tables(torch.arange(9), hipe.rope_frequencies(8, 50.0))
    torch.testing.assert_close(
        hipe.apply_rotary(x, cos, sin, a),
        rotate_complex(x * a[:, None, :], torch.arange(9), 50.0),
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize("gains", [None, "single", "multi"])
def test_attention_logits_depend_only_on_offset(gains):
    """Same q at every position and same k at every position: logits are Toeplitz in (m, n)."""
    gen = torch.Generator().manual_seed(2)
    heads, length, d, theta = 2, 40, 16, 100.0
    q = torch.randn(heads, 1, d, generator=gen, dtype=torch.float64).expand(heads, length, d)
    k = torch.randn(heads, 1, d, generator=gen, dtype=torch.float64).expand(heads, length, d)
    a = {None: None, "single": hipe.hipe_gains(d, [3.0, 3.0], theta),
         "multi": hipe.hipe_gains(d, [1.0, 12.0], theta)}[gains]
    s = logits(q, k, a, theta)
    for off in range(-length + 1, length):
        diag = torch.diagonal(s, offset=off, dim1=-2, dim2=-1)
        spread = float((diag - diag[..., :1]).abs().max())
        assert spread < 1e-9, (off, spread)
    # and it is the closed form sum_i a_i^2 [(q.k)_i cos(w_i D) - (q x k)_i sin(w_i D)]
    w = hipe.rope_frequencies(d, theta)
    g = torch.ones(heads, d, dtype=torch.float64) if a is None else a
    qa, ka = q[:, 0] * g, k[:, 0] * g
    dot = qa[:, : d // 2] * ka[:, : d // 2] + qa[:, d // 2 :] * ka[:, d // 2 :]
    cross = qa[:, d // 2 :] * ka[:, : d // 2] - qa[:, : d // 2] * ka[:, d // 2 :]
    delta = 7.0  # logit at (m, n) = (7 + n, n)
    closed = (dot * torch.cos(w * delta) - cross * torch.sin(w * delta)).sum(-1)
    torch.testing.assert_close(s[:, 7, 0], closed, rtol=0, atol=1e-10)


def test_model_rotary_is_relative_in_float32():
    """The model's own Rotary module (float32 tables): logits Toeplitz to 1e-5."""
    from flowerbed.methods.hipe.model_nets import Rotary

    rot = Rotary(64, 16, 100.0, hipe.hipe_gains(16, [2.0, 20.0], 100.0))
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 1, 16, generator=gen).expand(1, 2, 64, 16)
    k = torch.randn(1, 2, 1, 16, generator=gen).expand(1, 2, 64, 16)
    s = rot(q)[0] @ rot(k)[0].transpose(-1, -2)
    for off in range(-63, 64):
        diag = torch.diagonal(s, offset=off, dim1=-2, dim2=-1)
        assert float((diag - diag[..., :1]).abs().max()) < 1e-5 * max(1.0, float(s.abs().max()))


def test_single_scale_place_field_is_the_gram_of_a_weighted_sinusoidal_table():
    """q = k = 1: HIPE logit K(D) = 2 (a*P[m]).(a*P[n]); gains 1 give the sinusoidal Gram."""
    d, length, theta = 16, 30, 100.0
    table = hipe.sinusoidal_table(length, d, theta)
    offsets = torch.arange(length, dtype=torch.float64)
    ones = torch.ones(1, d, 1, dtype=torch.float64).expand(1, d, length).transpose(1, 2)
    for a in (hipe.hipe_gains(d, [5.0], theta), torch.ones(1, d, dtype=torch.float64)):
        weighted = table * a[0]
        gram = weighted @ weighted.T
        kernel = hipe.place_field(a, offsets, theta)[0]
        torch.testing.assert_close(2 * gram[:, 0], kernel, rtol=0, atol=1e-10)
        torch.testing.assert_close(2 * gram[12, 5], kernel[7], rtol=0, atol=1e-10)
        s = logits(ones, ones, a, theta)[0]
        torch.testing.assert_close(s[:, 0], kernel, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    ("decay", "low", "high"), [("gaussian", 1.0, 1.4), ("exp", 0.6, 0.85), ("power", 0.9, 1.1)]
)
def test_place_field_width_scales_with_sigma(decay, low, high):
    """d_h = 64, theta = 1e4: HWHM ~ sqrt(2 ln 2) s (gaussian), ln 2 s (exp), s (power)."""
    offsets = torch.arange(0, 400, dtype=torch.float64)
    sigmas = [10.0, 40.0, 85.0]
    kernel = hipe.place_field(hipe.hipe_gains(64, sigmas, 1e4, decay), offsets, 1e4)
    widths = [hipe.half_width(kernel[h], offsets) for h in range(3)]
    for s, w in zip(sigmas, widths, strict=True):
        assert low * s <= w <= high * s, (decay, s, w)
    assert widths == sorted(widths)


# --- data -----------------------------------------------------------------------------


def test_label_is_the_strict_majority_of_the_named_ring():
    p = MultiscaleMajorityParams(n_train=300, n_test=10)
    x, y = sample(p, 300, seed=5, split="train")
    width = p.scales[-1]
    assert x.shape == (300, width + 1)
    edges = (0, *p.scales)
    for row, label in zip(x.astype(int), y, strict=True):
        ring = row[-1] - p.num_symbols
        offsets = np.arange(edges[ring] + 1, edges[ring + 1] + 1)
        counts = np.bincount(row[width - offsets], minlength=p.num_symbols)
        assert counts.argmax() == label and (counts == counts.max()).sum() == 1
        assert counts[label] >= max(1, round(p.planted * len(offsets)))
        # every ring's majority symbol is distinct
        majors = set()
        for r in range(len(p.scales)):
            offs = np.arange(edges[r] + 1, edges[r + 1] + 1)
            majors.add(int(np.bincount(row[width - offs]).argmax()))
        assert len(majors) == len(p.scales)
    assert set(np.unique(x[:, -1]).astype(int)) == {8, 9, 10, 11}
    assert ring_of_offset((1, 4, 16, 48))[[47, 46, 44, 43, 32, 31, 0]].tolist() == [
        0, 1, 1, 2, 2, 3, 3]


def test_training_sets_are_nested_and_the_test_set_fixed():
    small = multiscale_majority(MultiscaleMajorityParams(n_train=100, n_test=50), seed=1)
    big = multiscale_majority(MultiscaleMajorityParams(n_train=700, n_test=50), seed=1)
    np.testing.assert_array_equal(small.x_train, big.x_train[:100])
    np.testing.assert_array_equal(small.x_test, big.x_test)
    assert small.meta.num_features == 49 and small.meta.num_classes == 8
    assert not np.array_equal(
        small.x_test, multiscale_majority(MultiscaleMajorityParams(n_test=50), seed=2).x_test
    )
    with pytest.raises(ValidationError, match="increasing"):
        MultiscaleMajorityParams(scales=(4, 4))
    with pytest.raises(ValidationError, match="distinct"):
        MultiscaleMajorityParams(scales=(1, 2, 3), num_symbols=2)


# --- model ----------------------------------------------------------------------------


def build(pos_emb: str, **kw: object) -> SequenceTransformer:
    torch.manual_seed(0)
    params = TransformerParams(pos_emb=pos_emb, vocab_size=12, **kw)  # type: ignore[arg-type]
    return SequenceTransformer(params, max_len=49, out_features=8)


def test_hipe_model_has_the_rope_model_weights_and_a_frozen_buffer():
    rope, hip = build("rope"), build("hipe", hipe_sigmas=(1.0, 8.0))
    assert rope.state_dict().keys() == hip.state_dict().keys()  # FedAvg sees the same arrays
    assert sum(p.numel() for p in rope.parameters()) == sum(p.numel() for p in hip.parameters())
    assert hip.rotary is not None and hip.rotary.gains is not None
    assert not hip.rotary.gains.requires_grad and hip.rotary.gains.shape == (2, 16)
    learned, sinus = build("learned"), build("sinusoidal")
    assert "pos" in learned.state_dict() and "pos" not in sinus.state_dict()


@pytest.mark.parametrize("sigmas", [4.0, (1.0, 16.0)])
def test_hipe_model_equals_rope_model_with_rescaled_projections(sigmas):
    """HIPE only re-weights q/k channels: copy weights, scale W_q and W_k rows by a, same output."""
    hip = build("hipe", hipe_sigmas=sigmas, rope_theta=100.0)
    rope = build("rope", rope_theta=100.0)
    assert hip.rotary is not None and hip.rotary.gains is not None
    a = hip.rotary.gains.reshape(-1)  # (heads * head_dim,) in q/k channel order
    state = {k: v.clone() for k, v in hip.state_dict().items()}
    for name, value in state.items():
        if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
            d = value.shape[0] // 3
            value[: 2 * d] *= torch.cat([a, a]).view(-1, *([1] * (value.dim() - 1)))
    rope.load_state_dict(state)
    x = torch.tensor(sample(MultiscaleMajorityParams(), 16, 0, "test")[0])
    with torch.no_grad():
        torch.testing.assert_close(hip(x), rope(x), rtol=0, atol=1e-5)
        unscaled = build("rope", rope_theta=100.0)  # same initial weights, no rescaling
        assert float((unscaled(x) - hip(x)).abs().max()) > 1e-3


def test_params_and_inputs_are_checked_with_clear_errors():
    with pytest.raises(ValidationError, match="hipe_sigmas has 3 values, n_heads=2"):
        TransformerParams(pos_emb="hipe", hipe_sigmas=(1.0, 2.0, 3.0))
    TransformerParams(pos_emb="rope", hipe_sigmas=(1.0, 2.0, 3.0))  # ignored unless hipe
    with pytest.raises(ValidationError, match="divisible"):
        TransformerParams(d_model=30, n_heads=4)
    with pytest.raises(ValidationError, match="even head dimension"):
        TransformerParams(d_model=30, n_heads=2)
    model = build("none")
    with pytest.raises(ValueError, match=r"model\.vocab_size=12"):
        model(torch.full((2, 49), 12.0))
    with pytest.raises(ValueError, match="length <= 49"):
        model(torch.zeros(2, 50))


@pytest.mark.parametrize("pos_emb", ["none", "sinusoidal", "learned", "rope", "hipe"])
def test_every_positional_embedding_trains(pos_emb):
    """A few Adam steps on the multi-scale task lower the training loss."""
    x, y = (torch.tensor(a) for a in sample(MultiscaleMajorityParams(), 64, 0, "train"))
    model = build(pos_emb, d_model=16, n_layers=1, rope_theta=100.0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 0.3, losses
    if pos_emb == "none":
        # No position at all: permuting the content tokens cannot change the output.
        perm = torch.cat([torch.randperm(48), torch.tensor([48])])
        torch.testing.assert_close(model(x[:, perm]), model(x), rtol=0, atol=1e-5)


def test_fedavg_run_on_the_hipe_scenario(tmp_path):
    """The data-efficiency scenario runs inline with its centralized baseline (tiny sizes)."""
    import flowerbed

    result = flowerbed.run(
        "scenarios/hipe/data_efficiency.yaml",
        ["num_clients=2", "rounds=2", "dataset.n_train=40", "dataset.n_test=64",
         "model.pos_emb=hipe", "learner.local_epochs=1"],
        output_dir=tmp_path,
    )
    res = result.summary["results"]
    for source in ("federated", "centralized"):
        assert 0.0 <= res[source]["test/accuracy"] <= 1.0
