"""One task's function-vector analysis on a language model, end to end.

:func:`find_heads` runs Todd et al.'s recipe (mean head activations over clean
n-shot prompts; average indirect effect of every head on shuffled-label
prompts); :func:`analyse_prompts` computes, for n-shot prompts, the FV ``v(P)``,
the isolated sub-FVs ``u_i`` (variant A), the exact split by demonstration
(variant B, with attention masses, in context and isolated) and the four
QK/V hybrids; :func:`analyse_task` puts them together with the injection
experiments and returns one :class:`TaskResult`. Every size is an explicit
argument: the defaults live in the learner's parameters
(:class:`flowerbed.methods.function_vectors.learner.FunctionVectorsParams`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from flowerbed.core.seeds import derive_seed
from flowerbed.methods.function_vectors import algorithm as fva
from flowerbed.methods.function_vectors import algorithm_decomp as fvd
from flowerbed.methods.function_vectors import model as fl
from flowerbed.models.icl import Example
from flowerbed.models.lm import CausalLM

Head = tuple[int, int]


@dataclass(frozen=True)
class HeadScan:
    """Mean clean head activations ``(L, H, head_dim)``, the AIE ``(L, H)``, the clean prompts.

    ``seconds``: wall time of the clean activations and of the patching scan;
    ``survival``: prompts kept and drawn for each step (``clean_kept``,
    ``clean_drawn``, ``corrupt_kept``, ``corrupt_drawn``; kept = answered
    correctly in context, when filtering).
    """

    mean_heads: np.ndarray
    aie: np.ndarray
    p_corrupt: float
    clean: list[fl.Prompt]
    seconds: tuple[float, float] = (0.0, 0.0)
    survival: dict[str, int] = field(default_factory=dict)


def clean_prompts(
    lm: CausalLM,
    prompter: fl.Prompter,
    pool: Sequence[Example],
    *,
    n: int,
    shots: int,
    seed: int,
    batch_size: int,
    draws: int,
    read_heads: bool = False,
    queries: Sequence[Example] | None = None,
) -> fl.Filtered:
    """``n`` prompts the model answers correctly in context, from up to ``draws * n`` drawn.

    ``draws == 0`` keeps the first ``n`` drawn, right or wrong (no filter).
    """
    if draws == 0:
        prompts = fl.sample_prompts(prompter, pool, n, shots, seed, queries=queries)
        heads = fl.last_head_outputs(lm, prompts, range(lm.num_layers), batch_size) \
            if read_heads else None
        return fl.Filtered(prompts, n, n, heads)
    cands = fl.sample_prompts(prompter, pool, draws * n, shots, seed, queries=queries)
    got = fl.answered_correctly(lm, cands, n, batch_size, read_heads)
    if not got.prompts:
        raise ValueError(f"none of {got.drawn} {shots}-shot prompts is answered correctly in "
                         "context: the model does not do this task")
    return got


def find_heads(
    lm: CausalLM,
    prompter: fl.Prompter,
    pool: Sequence[Example],
    *,
    shots: int,
    n_clean: int,
    n_corrupt: int,
    seed: int,
    batch_size: int,
    chunk: int,
    draws: int = 0,
) -> HeadScan:
    """Todd's mean activations and average indirect effects for one task's pool.

    With ``draws > 0`` both use only prompts answered correctly in context (Todd's
    filter; the corrupted prompts are shuffled versions of such prompts).
    """
    start = time.perf_counter()
    clean = clean_prompts(lm, prompter, pool, n=n_clean, shots=shots,
                          seed=derive_seed(seed, "fv.clean"), batch_size=batch_size,
                          draws=draws, read_heads=True)
    assert clean.heads is not None
    mean = np.asarray(clean.heads.mean(axis=0))
    middle = time.perf_counter()
    base = clean_prompts(lm, prompter, pool, n=n_corrupt, shots=shots,
                         seed=derive_seed(seed, "fv.corrupt"), batch_size=batch_size, draws=draws)
    corrupted = [prompter.shuffled(p, derive_seed(seed, "fv.shuffle", i))
                 for i, p in enumerate(base.prompts)]
    patched, corrupt = fl.head_patch_effects(lm, corrupted, mean, chunk)
    survival = {"clean_kept": len(clean.prompts), "clean_drawn": clean.drawn,
                "clean_correct": clean.correct, "corrupt_kept": len(base.prompts),
                "corrupt_drawn": base.drawn, "corrupt_correct": base.correct}
    return HeadScan(mean, fva.indirect_effects(patched, corrupt), float(corrupt.mean()),
                    clean.prompts, (middle - start, time.perf_counter() - middle), survival)


def accuracy(
    lm: CausalLM,
    prompts: Sequence[fl.Prompt],
    batch_size: int,
    fv: np.ndarray | None = None,
    layer: int = -1,
) -> tuple[float, float]:
    """Top-1 first-token accuracy and mean answer probability (with ``fv`` injected)."""
    lp = fl.next_logprobs(lm, prompts, batch_size, fv, layer)
    return float(fl.top1_correct(lp, prompts).mean()), float(fl.target_probability(lp, prompts)
                                                            .mean())


@dataclass(frozen=True)
class PromptAnalysis:
    """Variant A, variant B and hybrids of one n-shot prompt (all vectors in model space ``d``).

    ``v``: the prompt's FV; ``u`` ``(n, d)``: isolated sub-FVs (1-shot prompts);
    ``parts`` ``(n, d)`` / ``rest``: variant B; ``mass`` / ``mass_iso`` ``(A, n)``:
    attention mass on each demonstration in context / in its 1-shot prompt;
    ``iso_parts`` ``(n, d)``: the demonstration part of each 1-shot FV;
    ``hybrids``: the FV of each (QK, V) source pair, the isolated source being
    ``e_i`` alone at its n-shot positions (:func:`fl.aligned_isolated`);
    ``ambiguous`` ``(n,)``.
    """

    v: np.ndarray
    u: np.ndarray
    parts: np.ndarray
    rest: np.ndarray
    mass: np.ndarray
    mass_iso: np.ndarray
    iso_parts: np.ndarray
    hybrids: dict[tuple[str, str], np.ndarray]
    ambiguous: np.ndarray


def analyse_prompts(
    lm: CausalLM,
    prompter: fl.Prompter,
    prompts: Sequence[fl.Prompt],
    heads: Sequence[Head],
    w_o: np.ndarray,
    max_rows: int,
    ambiguous_inputs: frozenset[str] = frozenset(),
) -> list[PromptAnalysis]:
    """Sub-FVs, the exact split and the hybrids of each prompt (see the module docstring)."""
    ctx = fl.head_activations(lm, prompts, heads, max_rows)
    iso_prompts = [prompter.isolated(p, i) for p in prompts for i in range(len(p.demos))]
    iso = fl.head_activations(lm, iso_prompts, heads, max_rows)
    out, k = [], 0
    for prompt, act in zip(prompts, ctx, strict=True):
        n = len(prompt.demos)
        runs, runs_p = iso[k : k + n], iso_prompts[k : k + n]
        k += n
        dec = fvd.decompose(act.alpha, act.values, w_o, prompt.spans)
        iso_dec = [fvd.decompose(r.alpha, r.values, w_o, p.spans) for r, p in zip(runs, runs_p,
                                                                                   strict=True)]
        aligned = fl.aligned_isolated(lm, prompt, heads, max_rows)
        alpha_iso, values_iso = fvd.place_isolated(
            len(prompt.ids), prompt.spans, [r.alpha for r in aligned],
            [r.values for r in aligned], prompt.spans)
        out.append(PromptAnalysis(
            v=np.einsum("adh,ah->d", w_o, act.z),
            u=np.stack([np.einsum("adh,ah->d", w_o, r.z) for r in runs]),
            parts=dec.parts, rest=dec.rest, mass=dec.mass,
            mass_iso=np.stack([d.mass[:, 0] for d in iso_dec], axis=1),
            iso_parts=np.stack([d.parts[0] for d in iso_dec]),
            hybrids=fvd.hybrid_vectors(act.alpha, act.values, alpha_iso, values_iso, w_o,
                                       prompt.spans),
            ambiguous=np.array([d.x in ambiguous_inputs for d in prompt.demos]),
        ))
    return out


@dataclass(frozen=True)
class Additivity:
    """Variant-A fits per prompt: least squares, equal weights, per-slot weights; chance R²."""

    lsq: list[fva.LinearFit]
    equal: list[fva.LinearFit]
    slot: fva.SlotFit
    chance_r2: float

    def summary(self, prefix: str = "") -> dict[str, float]:
        """Mean R² and cosine of each fit."""
        return {
            f"{prefix}additivity_r2": float(np.mean([f.r2 for f in self.lsq])),
            f"{prefix}additivity_cos": float(np.mean([f.cosine for f in self.lsq])),
            f"{prefix}equal_r2": float(np.mean([f.r2 for f in self.equal])),
            f"{prefix}equal_cos": float(np.mean([f.cosine for f in self.equal])),
            f"{prefix}slot_r2": float(np.mean(self.slot.r2)),
            f"{prefix}slot_cos": float(np.mean(self.slot.cosine)),
            f"{prefix}chance_r2": self.chance_r2,
        }


def additivity(analyses: Sequence[PromptAnalysis]) -> Additivity:
    """Fit every prompt's FV on its isolated sub-FVs (variant A) and the two controls."""
    v = np.stack([a.v for a in analyses])
    u = np.stack([a.u for a in analyses])
    return Additivity(
        lsq=[fva.fit_weights(a.v, a.u) for a in analyses],
        equal=[fva.fit_equal_weights(a.v, a.u) for a in analyses],
        slot=fva.fit_slot_weights(v, u),
        chance_r2=fva.chance_r2(u.shape[1], u.shape[2]),
    )


def hybrid_quality(
    lm: CausalLM,
    analyses: Sequence[PromptAnalysis],
    queries: Sequence[fl.Prompt],
    layer: int,
    batch_size: int,
) -> dict[tuple[str, str], np.ndarray]:
    """``(P,)`` mean answer probability of zero-shot ``queries`` with each prompt's hybrid FV."""
    out: dict[tuple[str, str], np.ndarray] = {}
    for key in fvd.HYBRIDS:
        rows, vecs = [], []
        for a in analyses:
            rows += list(queries)
            vecs += [a.hybrids[key]] * len(queries)
        lp = fl.next_logprobs(lm, rows, batch_size, np.stack(vecs), layer)
        out[key] = fl.target_probability(lp, rows).reshape(len(analyses), len(queries)).mean(1)
    return out


@dataclass
class TaskResult:
    """Everything :func:`analyse_task` measured on one task; :meth:`metrics` flattens it."""

    heads: list[Head]
    fv: np.ndarray
    aie: np.ndarray
    layers: list[int]
    accuracy: dict[str, float] = field(default_factory=dict)
    layer_accuracy: dict[int, float] = field(default_factory=dict)
    layer_prob: dict[int, float] = field(default_factory=dict)
    analyses: list[PromptAnalysis] = field(default_factory=list)
    fits: Additivity | None = None
    quality: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """Flat scalar metrics (bare names: the test split)."""
        m = dict(self.accuracy)
        m.update({f"fv_accuracy@{layer}": acc for layer, acc in self.layer_accuracy.items()})
        m.update({f"fv_prob@{layer}": prob for layer, prob in self.layer_prob.items()})
        if self.fits is not None:
            m.update(self.fits.summary())
        m.update(attention_mass_summary(self.analyses))
        m.update(hybrid_cosines(self.analyses))
        if self.quality:
            q = {key: float(v.mean()) for key, v in self.quality.items()}
            m.update({f"quality_{a}_{b}": x for (a, b), x in q.items()})
            m["qk_effect"] = q[("ctx", "iso")] - q[("iso", "iso")]
            m["v_effect"] = q[("iso", "ctx")] - q[("iso", "iso")]
        return m


def hybrid_cosines(analyses: Sequence[PromptAnalysis]) -> dict[str, float]:
    """Mean cosine of each hybrid FV with the prompt's clean FV, and the QK / V effects on it."""
    if not analyses:
        return {}
    cos = {key: float(np.mean([fva.cosine(a.hybrids[key], a.v) for a in analyses]))
           for key in fvd.HYBRIDS}
    out = {f"cos_{a}_{b}": c for (a, b), c in cos.items()}
    out["cos_qk_effect"] = cos[("ctx", "iso")] - cos[("iso", "iso")]
    out["cos_v_effect"] = cos[("iso", "ctx")] - cos[("iso", "iso")]
    return out


def attention_mass_summary(analyses: Sequence[PromptAnalysis]) -> dict[str, float]:
    """Mean attention mass (over FV heads) on ambiguous and unambiguous demonstrations.

    ``mass_*`` are plain means; ``mass_gap_by_slot`` averages, over the slots
    holding both kinds, the unambiguous minus ambiguous mean (position held
    fixed, since masses depend strongly on the slot); ``share_shift_*`` is the
    in-context share of the demonstrations' attention minus the isolated one.
    """
    if not analyses:
        return {}
    mass = np.stack([a.mass.mean(axis=0) for a in analyses])  # (P, n)
    amb = np.stack([a.ambiguous for a in analyses])
    shares = [fvd.routing_shares(a.mass, a.mass_iso) for a in analyses]
    shift = np.stack([c - i for c, i in shares])
    out = {"mass_mean": float(mass.mean())}
    for name, sel in (("ambiguous", amb), ("unambiguous", ~amb)):
        if sel.any():
            out[f"mass_{name}"] = float(mass[sel].mean())
            out[f"share_shift_{name}"] = float(shift[sel].mean())
    gaps = [mass[~amb[:, i], i].mean() - mass[amb[:, i], i].mean()
            for i in range(mass.shape[1]) if amb[:, i].any() and (~amb[:, i]).any()]
    if gaps:
        out["mass_gap_by_slot"] = float(np.mean(gaps))
    return out


def analyse_task(
    lm: CausalLM,
    prompter: fl.Prompter,
    pool: Sequence[Example],
    queries: Sequence[Example],
    *,
    shots: int,
    n_clean: int,
    n_corrupt: int,
    n_top_heads: int,
    layers: Sequence[int],
    n_analysis: int,
    n_quality: int,
    seed: int,
    batch_size: int,
    chunk: int,
    max_rows: int,
    heads: Sequence[Head] | None = None,
    mean_heads: np.ndarray | None = None,
    ambiguous_inputs: frozenset[str] = frozenset(),
    draws: int = 0,
) -> TaskResult:
    """Heads, FV, injection accuracies, sub-FV fits, masses and hybrid qualities of one task.

    Demonstrations come from ``pool``, evaluation queries from ``queries``.
    ``layers`` are the injection layers tried (:func:`fl.inject_site`); the
    first-token accuracy of the FV is reported at each, and ``fv_accuracy`` at
    the layer chosen on the even-indexed queries, measured on the odd ones.
    With ``heads`` given, the scan is skipped (the AIE is then empty), and
    ``mean_heads`` (from an earlier :func:`find_heads`) spares recomputing the
    mean activations. With ``draws > 0`` (Todd's filter) the mean activations
    and the scan use prompts answered correctly in context, and the zero-shot,
    FV and shuffled accuracies (and the hybrids' queries) only the queries whose
    n-shot prompt is answered correctly (``n_eval_correct`` of them); the ICL and
    plain zero-shot accuracies stay over every query.
    """
    if heads is None:
        scan = find_heads(lm, prompter, pool, shots=shots, n_clean=n_clean,
                          n_corrupt=n_corrupt, seed=seed, batch_size=batch_size, chunk=chunk,
                          draws=draws)
        top = fva.top_heads(scan.aie, n_top_heads)
        mean, aie = scan.mean_heads, scan.aie
    else:
        top, aie = list(heads), np.zeros(0)
        if mean_heads is None:
            clean = clean_prompts(lm, prompter, pool, n=n_clean, shots=shots,
                                  seed=derive_seed(seed, "fv.clean"), batch_size=batch_size,
                                  draws=draws, read_heads=True)
            assert clean.heads is not None
            mean_heads = np.asarray(clean.heads.mean(axis=0))
        mean = mean_heads
    w_o = fl.output_matrices(lm, top)
    fv = fl.function_vector(w_o, mean, top)
    res = TaskResult(top, fv, aie, list(layers))
    icl = fl.sample_prompts(prompter, pool, len(queries), shots, derive_seed(seed, "fv.eval"),
                            queries=queries)
    lp = fl.next_logprobs(lm, icl, batch_size)
    ok = fl.top1_correct(lp, icl)
    res.accuracy["icl_accuracy"] = float(ok.mean())
    res.accuracy["icl_prob"] = float(fl.target_probability(lp, icl).mean())
    res.accuracy["zero_shot_accuracy"], res.accuracy["zero_shot_prob"] = accuracy(
        lm, [prompter.zero_shot(p) for p in icl], batch_size)
    if draws > 0:
        icl = [p for p, keep in zip(icl, ok, strict=True) if keep]
        if len(icl) < 2:
            raise ValueError(f"{len(icl)} of {len(ok)} queries answered correctly in context; "
                             "the filtered accuracies need 2 or more")
    res.accuracy["n_eval_correct"] = float(len(icl))
    _fv_accuracies(lm, prompter, icl, fv, layers, batch_size, seed, res)
    zero = [prompter.zero_shot(p) for p in icl]
    test = zero[1::2] or zero
    best = int(res.accuracy["fv_layer"])
    prompts = fl.sample_prompts(prompter, pool, n_analysis, shots, derive_seed(seed, "fv.sub"),
                                queries=queries)
    res.analyses = analyse_prompts(lm, prompter, prompts, top, w_o, max_rows, ambiguous_inputs)
    res.fits = additivity(res.analyses)
    fitted = np.mean([f.fitted for f in res.fits.lsq], axis=0)
    res.accuracy["fv_prompt_mean_accuracy"], _ = accuracy(
        lm, test, batch_size, np.mean([a.v for a in res.analyses], axis=0), best)
    res.accuracy["fv_additive_accuracy"], _ = accuracy(lm, test, batch_size, fitted, best)
    res.quality = hybrid_quality(lm, res.analyses, zero[:n_quality], best, batch_size)
    return res


def _fv_accuracies(lm: CausalLM, prompter: fl.Prompter, icl: Sequence[fl.Prompt],
                   fv: np.ndarray, layers: Sequence[int], batch_size: int, seed: int,
                   res: TaskResult) -> None:
    """Zero-shot, +FV (layer chosen on the even queries, scored on the odd) and shuffled."""
    zero = [prompter.zero_shot(p) for p in icl]
    shuffled = [prompter.shuffled(p, derive_seed(seed, "fv.eval_shuffle", i))
                for i, p in enumerate(icl)]
    res.accuracy["shuffled_accuracy"], _ = accuracy(lm, shuffled, batch_size)
    val, test = zero[0::2], zero[1::2] or zero
    by_layer = {layer: accuracy(lm, val, batch_size, fv, layer)[0] for layer in layers}
    best = max(layers, key=lambda layer: (by_layer[layer], -layer))
    for layer in layers:  # every query (the choice above used half of them)
        res.layer_accuracy[layer], res.layer_prob[layer] = accuracy(lm, zero, batch_size, fv,
                                                                    layer)
    res.accuracy["fv_layer"] = float(best)
    res.accuracy["fv_accuracy"], _ = accuracy(lm, test, batch_size, fv, best)
    res.accuracy["zero_shot_accuracy_heldout"], _ = accuracy(lm, test, batch_size)
    res.accuracy["fv_shuffled_accuracy"], _ = accuracy(lm, shuffled, batch_size, fv, best)
