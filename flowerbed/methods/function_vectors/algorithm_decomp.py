"""Function vectors split by demonstration: variant B and the QK-vs-V hybrids.

For one prompt and the FV heads ``A`` (``a = 1..|A|``), at the final token:
``alpha[a, k]`` is head ``a``'s attention probability on key position ``k``,
``values[a, k]`` its value vector there (``head_dim``), ``w_o[a]`` its slice of
the output projection ``(d, head_dim)``, so the head's output is
``z_a = sum_k alpha[a, k] values[a, k]`` and the prompt's FV is
``v = sum_a w_o[a] z_a``.

- **Variant B** (:func:`decompose`): ``c_i = sum_a sum_{k in e_i} alpha[a, k] w_o[a]
  values[a, k]`` for each demonstration span ``e_i``, and ``c_rest`` for every
  other position (BOS, the query); ``v = sum_i c_i + c_rest`` exactly. The
  attention mass ``m[a, i] = sum_{k in e_i} alpha[a, k]`` is the reweighting
  statistic.
- **Hybrids** (:func:`hybrid_vectors`, RECONSTRUCTED; the paper's exact
  construction is not public): each demonstration's positions carry either its
  *contextualised* attention weights / values (from the n-shot prompt) or its
  *isolated* ones (from ``(e_i, query)`` alone with every token at its position
  in the n-shot prompt: the other demonstrations hidden from every position,
  :func:`flowerbed.methods.function_vectors.model.aligned_isolated`, so the two
  sources differ in context only, not in position). The weights on the
  demonstration positions ``D`` are renormalised so that they keep the
  contextualised total mass ``M_a = sum_{k in D} alpha_ctx[a, k]``; the other
  positions keep their contextualised weights and values. So only the routing
  *among* demonstrations (QK) and what each carries (V) change:

      z_a(qk, v) = M_a * sum_{k in D} alpha_qk[a, k] values_v[a, k] / sum_{k in D} alpha_qk[a, k]
                   + sum_{k not in D} alpha_ctx[a, k] values_ctx[a, k]

  ``(ctx, ctx)`` is the clean FV exactly; ``(iso, iso)`` is ``c_rest`` plus the
  isolated runs' demonstration parts summed and rescaled to mass ``M_a``.
  The QK effect of contextualisation is ``quality(ctx, iso) - quality(iso, iso)``,
  the V effect ``quality(iso, ctx) - quality(iso, iso)``.

Examples
--------
>>> import numpy as np
>>> alpha = np.array([[0.5, 0.25, 0.25]])            # one head, three positions
>>> values = np.array([[[1.0], [2.0], [4.0]]])       # head_dim 1
>>> w_o = np.ones((1, 2, 1))                         # d = 2
>>> dec = decompose(alpha, values, w_o, [(1, 2), (2, 3)])
>>> dec.parts.tolist(), dec.rest.tolist(), dec.total.tolist()
([[0.5, 0.5], [1.0, 1.0]], [0.5, 0.5], [2.0, 2.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Span = tuple[int, int]
#: The four (QK source, V source) combinations of :func:`hybrid_vectors`.
HYBRIDS: tuple[tuple[str, str], ...] = (("iso", "iso"), ("ctx", "iso"), ("iso", "ctx"),
                                        ("ctx", "ctx"))


def _check(alpha: np.ndarray, values: np.ndarray, w_o: np.ndarray) -> None:
    if alpha.ndim != 2 or values.shape[:2] != alpha.shape or w_o.ndim != 3:
        raise ValueError(
            f"need alpha (A, K), values (A, K, dh), w_o (A, d, dh); got {alpha.shape}, "
            f"{values.shape}, {w_o.shape}"
        )
    if w_o.shape[0] != alpha.shape[0] or w_o.shape[2] != values.shape[2]:
        raise ValueError(f"w_o {w_o.shape} does not match values {values.shape}")


def span_mask(num_keys: int, spans: Sequence[Span]) -> np.ndarray:
    """``(n, K)`` bool: row ``i`` marks span ``i``'s positions (spans must not overlap)."""
    mask = np.zeros((len(spans), num_keys), dtype=bool)
    for i, (s, e) in enumerate(spans):
        if not 0 <= s < e <= num_keys:
            raise ValueError(f"span {i} ({s}, {e}) outside 0..{num_keys}")
        mask[i, s:e] = True
    if (mask.sum(axis=0) > 1).any():
        raise ValueError("demonstration spans overlap")
    return mask


@dataclass(frozen=True)
class Decomposition:
    """Variant B of one prompt: ``total = parts.sum(0) + rest``, per head and summed.

    ``parts`` ``(n, d)``, ``rest`` ``(d,)``; ``head_parts`` ``(A, n, d)``,
    ``head_rest`` ``(A, d)``; ``mass`` ``(A, n)`` attention mass per demonstration,
    ``rest_mass`` ``(A,)``.
    """

    head_parts: np.ndarray
    head_rest: np.ndarray
    mass: np.ndarray
    rest_mass: np.ndarray

    @property
    def parts(self) -> np.ndarray:
        """``c_i``, summed over heads."""
        return np.asarray(self.head_parts.sum(axis=0))

    @property
    def rest(self) -> np.ndarray:
        """``c_rest``, summed over heads."""
        return np.asarray(self.head_rest.sum(axis=0))

    @property
    def total(self) -> np.ndarray:
        """``sum_i c_i + c_rest``: the prompt's FV."""
        return np.asarray(self.parts.sum(axis=0) + self.rest)


def decompose(
    alpha: np.ndarray, values: np.ndarray, w_o: np.ndarray, spans: Sequence[Span]
) -> Decomposition:
    """Split each head's output-projected last-token output by demonstration (variant B)."""
    alpha, values, w_o = (np.asarray(a, dtype=np.float64) for a in (alpha, values, w_o))
    _check(alpha, values, w_o)
    mask = span_mask(alpha.shape[1], spans).astype(np.float64)
    rest = 1.0 - mask.sum(axis=0)
    projected = np.einsum("adh,akh->akd", w_o, values)  # W_O v at every position
    weighted = alpha[:, :, None] * projected
    return Decomposition(
        head_parts=np.einsum("ik,akd->aid", mask, weighted),
        head_rest=np.einsum("k,akd->ad", rest, weighted),
        mass=alpha @ mask.T,
        rest_mass=alpha @ rest,
    )


def place_isolated(
    num_keys: int,
    spans: Sequence[Span],
    iso_alpha: Sequence[np.ndarray],
    iso_values: Sequence[np.ndarray],
    iso_spans: Sequence[Span],
) -> tuple[np.ndarray, np.ndarray]:
    """Isolated weights and values at the n-shot prompt's demonstration positions.

    Demonstration ``i`` occupies ``spans[i]`` in the n-shot prompt and
    ``iso_spans[i]`` in its own 1-shot run (same tokens, same length), whose
    attention row is ``iso_alpha[i]`` ``(A, K_i)`` and values ``iso_values[i]``
    ``(A, K_i, dh)``. Returns ``alpha (A, K)`` and ``values (A, K, dh)``, zero
    outside the demonstrations.
    """
    if not (len(spans) == len(iso_alpha) == len(iso_values) == len(iso_spans)):
        raise ValueError("one isolated run (alpha, values, span) per demonstration")
    heads, dh = iso_values[0].shape[0], iso_values[0].shape[2]
    alpha = np.zeros((heads, num_keys))
    values = np.zeros((heads, num_keys, dh))
    for (s, e), (si, ei), a, v in zip(spans, iso_spans, iso_alpha, iso_values, strict=True):
        if e - s != ei - si:
            raise ValueError(f"span {(s, e)} and its isolated span {(si, ei)} differ in length")
        alpha[:, s:e] = np.asarray(a)[:, si:ei]
        values[:, s:e] = np.asarray(v)[:, si:ei]
    return alpha, values


def hybrid_head_outputs(
    alpha_ctx: np.ndarray,
    values_ctx: np.ndarray,
    alpha_iso: np.ndarray,
    values_iso: np.ndarray,
    spans: Sequence[Span],
) -> dict[tuple[str, str], np.ndarray]:
    """``(A, dh)`` head outputs for each (QK source, V source) in :data:`HYBRIDS`."""
    alpha = {"ctx": np.asarray(alpha_ctx, float), "iso": np.asarray(alpha_iso, float)}
    values = {"ctx": np.asarray(values_ctx, float), "iso": np.asarray(values_iso, float)}
    demo = span_mask(alpha["ctx"].shape[1], spans).any(axis=0)
    mass = alpha["ctx"][:, demo].sum(axis=1, keepdims=True)
    rest = np.einsum("ak,akh->ah", alpha["ctx"][:, ~demo], values["ctx"][:, ~demo])
    out = {}
    for qk, v in HYBRIDS:
        w = alpha[qk][:, demo]
        total = w.sum(axis=1, keepdims=True)
        w = np.divide(w * mass, total, out=np.zeros_like(w), where=total > 0)
        out[(qk, v)] = rest + np.einsum("ak,akh->ah", w, values[v][:, demo])
    return out


def hybrid_vectors(
    alpha_ctx: np.ndarray,
    values_ctx: np.ndarray,
    alpha_iso: np.ndarray,
    values_iso: np.ndarray,
    w_o: np.ndarray,
    spans: Sequence[Span],
) -> dict[tuple[str, str], np.ndarray]:
    """The FV ``(d,)`` of each hybrid: ``sum_a w_o[a] z_a(qk, v)``."""
    w_o = np.asarray(w_o, dtype=float)
    _check(np.asarray(alpha_ctx), np.asarray(values_ctx), w_o)
    z = hybrid_head_outputs(alpha_ctx, values_ctx, alpha_iso, values_iso, spans)
    return {key: np.einsum("adh,ah->d", w_o, out) for key, out in z.items()}


def routing_shares(mass_ctx: np.ndarray, mass_iso: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each demonstration's share of the demonstrations' attention, in context and isolated.

    ``mass_ctx`` ``(A, n)``: masses in the n-shot prompt; ``mass_iso`` ``(A, n)``:
    demonstration ``i``'s mass in its own 1-shot run. Both are averaged over
    heads and normalised over demonstrations; contextual reweighting is their
    difference.
    """
    ctx = np.asarray(mass_ctx, float).mean(axis=0)
    iso = np.asarray(mass_iso, float).mean(axis=0)
    return ctx / ctx.sum(), iso / iso.sum()
