"""DNA's claims on a CPU-sized stand-in (issue 31).

Dou et al., "DNA: Uncovering Universal Latent Forgery Knowledge", arXiv 2601.22515.
Claims checked: (1) a probe on the few forgery-discriminative units (FDUs) of a frozen
backbone detects generated images few-shot as well as or better than a probe on all
units, on the final layer (UnivFD) or fine-tuning; (2) it generalises to unseen
generators; (3) masking the FDUs hurts far more than masking random units; (4) it is
robust to heavy JPEG; plus the federated statistics round (same FDUs as pooled, bytes).

Backbone: ImageNet EfficientNet-Lite0 at 64 px. Reals: Fashion-MNIST test rows 0-4999.
Fakes: four generator families trained here (``flowerbed pretrain dna_generator``). All
images post-processed (random JPEG 60-95 and resize 0.6-0.9, both classes). For every
training generator g (the others are unseen), shots k in {4, 16, 64} per class and
seeds 0..N-1: draw k reals and k fakes of g, run DNA and every baseline, score on 1000
test reals against 1000 test fakes of each generator. Layer candidates are the
intermediate blocks (block1-block16); the localisation score is decoupling plus the
bias-corrected map shift (issue 51); arms add the attribution triad, the entropy
``window``, and localisation by leave-one-out probe AUC; every run stores an all-unit
probe per layer.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/dna_experiment.py [--quick] \
        [--seeds 5] [--shots 16 4 64] [--out benchmarks/results/dna] [--img docs/methods/img] \
        [--no-federated] [--report-only]

Each finished run (generator, shots, seed) is appended to ``<out>/runs.jsonl``, every
shot count and generator of a seed before the next seed (so a cut-short grid is paired
across arms and generators); a re-run skips finished runs, so an interrupted grid
resumes; ``--report-only`` rebuilds the tables and plots from that file (and the
federated table from ``<out>/dna_experiment.json``), and writes ``<out>/per_run.jsonl``:
one row per run and arm with its seen / unseen accuracy and AUC, the units
``benchmarks/claims/dna.yaml`` pairs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from flowerbed.core.seeds import derive_seed, rng
from flowerbed.data.base import DatasetMeta
from flowerbed.data.image_data import FASHION_DIR
from flowerbed.methods.dna import algorithm as dna
from flowerbed.methods.dna import algorithm_probe as probe
from flowerbed.methods.dna.data import (
    FAMILIES,
    PostProcess,
    generator_bank,
    jpeg,
    postprocess,
    real_images,
)
from flowerbed.methods.dna.model import (
    DnaBackboneParams,
    extract,
    finetune_parts,
    intermediate_layers,
    unit_gradients,
)

META = DatasetMeta(name="dna_fakes", task="classification", num_features=784,
                   input_shape=(28, 28))
BACKBONE = DnaBackboneParams(name="efficientnet_lite0", image_size=64)
FINAL, FT_BLOCKS, FOLDS, S = 17, 2, 10, 10
CUT = 16 - FT_BLOCKS
#: Null draws of the map-shift term; ``window`` of the window arm (layers either side of
#: the map-entropy transition, among the intermediate blocks).
NULL_DRAWS, WINDOW = 20, 4
ARMS = ("fdu", "fdu_attr", "all_units", "random_units", "top_d", "fdu_window", "fdu_auc",
        "all_units_auc", "final_layer", "finetune")
LABEL = {"fdu": "DNA: FDU probe", "fdu_attr": "FDUs by the attribution triad (ablation)",
         "all_units": "all units of the chosen layer", "random_units": "as many random units",
         "top_d": "top-k by discriminability",
         "fdu_window": f"FDUs, layer within {WINDOW} of the entropy transition",
         "fdu_auc": "FDUs, layer by LOO probe AUC", "all_units_auc": "all units, layer by LOO AUC",
         "final_layer": "final layer (UnivFD)",
         "finetune": f"fine-tune last {FT_BLOCKS} blocks"}
#: STATED-2nd figures (wizwand / arxivlens summaries of the paper), other benchmarks.
PAPER = {"GenImage mean acc": 96.5, "ForenSynths mean acc": 97.2,
         "unseen generators acc": 96.4, "heavy JPEG acc": 92.4}
TRAIN_REALS, TEST_N, TRAIN_FAKES = 2000, 1000, 1500
#: Layer names of the EfficientNet-Lite0 backbone (for --report-only without a summary JSON).
NAMES = ("stem", *(f"block{i}" for i in range(1, 17)), "head")
#: Candidate layers: the learner's default, the intermediate blocks (block1-block16).
CAND = tuple(intermediate_layers(NAMES))


class Pool:
    """Post-processed images of one source, their features, and a train/test split."""

    def __init__(self, name, images, labels, n_train, seed=0):
        self.name, self.labels = name, labels
        order = rng(seed, "dna-bench", "split", name).permutation(len(images))
        self.train, self.test = order[:n_train], order[n_train : n_train + TEST_N]
        self.pixels = postprocess(images, PostProcess(), rng(seed, "dna-bench", "post", name))
        flat = self.pixels.reshape(len(images), -1)
        feats = extract(BACKBONE, flat, META, maps=True, cut_after=CUT)
        # maps are only read for training shots: keep those rows (memory), found by `pos`
        self.pos = np.full(len(images), -1)
        self.pos[self.train] = np.arange(len(self.train))
        self.feats = type(feats)(feats.names, feats.pooled,
                                 tuple(m[self.train] for m in feats.maps), feats.cut)
        heavy = np.stack([jpeg(im, 30) for im in self.pixels[self.test]]).reshape(TEST_N, -1)
        self.heavy = extract(BACKBONE, heavy, META, maps=False, cut_after=CUT)


def load_pools():
    start = time.perf_counter()
    reals, ry = real_images("fashion_mnist", "task")
    pools = {"real": Pool("real", reals, ry, TRAIN_REALS)}
    for f in FAMILIES:
        img, lab = generator_bank(f, "fashion_mnist", {}, FASHION_DIR)
        pools[f] = Pool(f, img, lab, TRAIN_FAKES)
        print(f"  pool {f}: {len(img)} images ({time.perf_counter() - start:.0f} s)", flush=True)
    return pools


def layer_stats(pools, g, ri, fi):
    real, fake = pools["real"], pools[g]
    pix = np.concatenate([real.pixels[ri], fake.pixels[fi]]).reshape(len(ri) + len(fi), -1)
    lab = np.repeat([0, 1], [len(ri), len(fi)])
    sem = np.concatenate([real.labels[ri], fake.labels[fi]])
    folds = dna.fold_ids(pix, FOLDS)
    null = dna.null_labels(pix, NULL_DRAWS)
    return [dna.layer_stats(np.concatenate([real.feats.pooled[k][ri], fake.feats.pooled[k][fi]]),
                            lab, folds, sem, FOLDS, S,
                            np.concatenate([real.feats.maps[k][real.pos[ri]],
                                            fake.feats.maps[k][fake.pos[fi]]]),
                            null)
            for k in range(len(real.feats.names))], lab, pix


def test_sets(pools, heavy=False):
    """``(features of reals, {family: features of its fakes})`` of the test split."""
    def get(pool):
        return pool.heavy if heavy else _subset(pool.feats, pool.test)
    return get(pools["real"]), {f: get(pools[f]) for f in FAMILIES}


def _subset(feats, rows):
    return type(feats)(feats.names, tuple(p[rows] for p in feats.pooled), feats.maps,
                       feats.cut[rows])


def scores(predict, tests):
    """acc/auc of ``predict(features) -> P(fake)`` for reals against each family."""
    reals, fakes = tests
    pr = predict(reals)
    out = {}
    for f, feats in fakes.items():
        p = np.concatenate([pr, predict(feats)])
        y = np.repeat([0, 1], [len(pr), len(p) - len(pr)])
        out[f] = (probe.accuracy(p, y), probe.auc(p, y))
    return out


def select_intermediate(stats, **kw):
    """:func:`dna.select` over the intermediate blocks, with the layer index mapped back."""
    sub = dna.select([stats[i] for i in CAND], **kw)
    return dna.Selection(sub.profile, CAND[sub.layer], sub.scores, sub.fdus, sub.knee)


def fit_probe(stats, train, lab, layer, units):
    mean, std = dna.standardisation(stats[layer], units)
    z = (train[layer][:, units] - mean) / std
    return probe.Detector(units, mean, std, *probe.fit_logistic(z, lab))


def loo_aucs(stats, train, lab):
    """Leave-one-out AUC of the all-unit probe of every intermediate block."""
    out = []
    for j in CAND:
        mean, std = dna.standardisation(stats[j], np.arange(stats[j].num_units))
        out.append(probe.loo_auc((train[j] - mean) / std, lab))
    return out


def attribution_fdus(stats, sel, dets, pix, lab):
    """FDUs at the chosen layer by the attribution triad (activation x gradient x weight)."""
    final = dets["final_layer"]
    small = BACKBONE.model_copy(update={"batch_size": 32})  # same gradients, less memory
    grads = unit_gradients(small, pix, META, sel.layer, final.w, final.mean, final.std)
    sc = dna.attribution_scores(stats[sel.layer], grads, dets["all_units"].w)
    return dna.truncate(sc.triadic)[0]


def one_run(pools, g, k, seed, tests, heavy_tests):
    gen = rng(seed, "dna-bench", "shots", g, k)
    ri = gen.choice(pools["real"].train, k, replace=False)
    fi = gen.choice(pools[g].train, k, replace=False)
    stats, lab, pix = layer_stats(pools, g, ri, fi)
    train = [np.concatenate([pools["real"].feats.pooled[j][ri], pools[g].feats.pooled[j][fi]])
             for j in range(len(stats))]
    sel = select_intermediate(stats)
    sets = dna.unit_sets(sel, FINAL, stats[FINAL].num_units, derive_seed(seed, "random"))
    win = select_intermediate(stats, window=WINDOW)
    sets["fdu_window"] = (win.layer, win.fdus)
    aucs = loo_aucs(stats, train, lab)
    by_auc = select_intermediate(stats, auc=aucs)
    sets["fdu_auc"] = (by_auc.layer, by_auc.fdus)
    sets["all_units_auc"] = (by_auc.layer, np.arange(stats[by_auc.layer].num_units))
    rec = {"g": g, "k": k, "seed": seed, "layer": sel.layer, "fdus": len(sel.fdus),
           "knee": sel.knee, "window_layer": win.layer, "auc_layer": by_auc.layer,
           "profile": {n: getattr(sel.profile, n).tolist() for n in (
               "shift", "semantic", "decoupling", "map_shift", "map_null", "map_excess",
               "entropy", "score")} | {"loo_auc": aucs},
           "transition": CAND[sel.profile.transition], "arms": {}, "heavy": {}}
    dets = {arm: fit_probe(stats, train, lab, layer, units)
            for arm, (layer, units) in sets.items()}
    fdus_attr = attribution_fdus(stats, sel, dets, pix, lab)
    sets["fdu_attr"] = (sel.layer, fdus_attr)
    dets["fdu_attr"] = fit_probe(stats, train, lab, sel.layer, fdus_attr)
    rec["fdus_attr"] = len(fdus_attr)
    for arm, det in dets.items():
        layer = sets[arm][0]
        rec["arms"][arm] = scores(lambda f, d=det, j=layer: d.proba(f.pooled[j]), tests)
        if heavy_tests is not None:
            rec["heavy"][arm] = scores(lambda f, d=det, j=layer: d.proba(f.pooled[j]),
                                       heavy_tests)
    rec["arms"]["finetune"], heavy_ft = finetune(pools, g, ri, fi, lab, seed, tests,
                                                 heavy_tests)
    if heavy_ft is not None:
        rec["heavy"]["finetune"] = heavy_ft
    rec["masking"] = masking(dets["all_units"], sel, stats, tests, seed) if k == 64 else None
    rec["per_layer"] = []
    for j, st in enumerate(stats):
        det = fit_probe(stats, train, lab, j, np.arange(st.num_units))
        rec["per_layer"].append(scores(lambda f, d=det, i=j: d.proba(f.pooled[i]), tests))
    if seed == 0:
        rec["triadic_sorted"] = np.sort(sel.scores.triadic)[::-1].tolist()
    return rec


def finetune(pools, g, ri, fi, lab, seed, tests, heavy_tests):
    import torch

    tail, _ = finetune_parts(BACKBONE, FT_BLOCKS, derive_seed(seed, "ft"))
    cut = np.concatenate([pools["real"].feats.cut[ri], pools[g].feats.cut[fi]])
    probe.finetune_tail(tail, cut, lab, 60, 1e-3, seed)

    def predict(feats):
        with torch.no_grad():
            return probe.sigmoid(tail(torch.as_tensor(feats.cut)).reshape(-1).numpy())

    return scores(predict, tests), None if heavy_tests is None else scores(predict, heavy_tests)


MASK_M = (1, 2, 4, 8, 16, 32, 64)


def masking(det, sel, stats, tests, seed):
    """All-unit probe at the chosen layer: top-m triadic units vs m random units masked."""
    order = np.argsort(-sel.scores.triadic, kind="stable")
    d = len(order)
    out = {"fdu": [], "random": [], "m": [m for m in MASK_M if m <= d]}
    gen = np.random.default_rng(derive_seed(seed, "mask"))
    for m in out["m"]:
        out["fdu"].append(scores(lambda f, mm=m: det.proba(f.pooled[sel.layer],
                                                           masked=order[:mm]), tests))
        draws = []
        for _ in range(5):
            rand = gen.choice(d, m, replace=False)
            draws.append(scores(lambda f, r=rand: det.proba(f.pooled[sel.layer], masked=r),
                                tests))
        out["random"].append({f: tuple(np.mean([dr[f][i] for dr in draws]) for i in (0, 1))
                              for f in draws[0]})
    return out


def seen_unseen(res, g):
    """Mean (acc, auc) on the seen family and over the unseen ones."""
    seen = res[g]
    unseen = np.mean([res[f] for f in res if f != g], axis=0)
    return seen, unseen


def per_run_rows(runs, names):
    """One row per (run, arm) with its seen / unseen accuracy and AUC: the claims' units.

    Arms are the probes and the fine-tune (``arms``), the same probes on heavy-JPEG test
    images (``heavy_<arm>``, 16 shots), the all-unit probe of the chosen layer with its top
    ``m`` triadic units or ``m`` random units masked (``mask_fdu_<m>``, ``mask_random_<m>``,
    64 shots) and the all-unit probe of every layer (``layer_<name>``, 16 shots, seeds 0-2).
    """
    rows = []
    for r in runs:
        head = {"g": r["g"], "k": r["k"], "seed": r["seed"], "layer": names[r["layer"]]}
        results = {arm: res for arm, res in r["arms"].items()}
        results |= {f"heavy_{arm}": res for arm, res in (r.get("heavy") or {}).items()}
        mask = r.get("masking") or {}
        for kind in ("fdu", "random"):
            results |= {f"mask_{kind}_{m}": res
                        for m, res in zip(mask.get("m", []), mask.get(kind, []), strict=True)}
        results |= {f"layer_{names[j]}": res for j, res in enumerate(r.get("per_layer") or [])}
        for arm, res in results.items():
            seen, unseen = seen_unseen(res, r["g"])
            rows.append({**head, "arm": arm, "seen_acc": float(seen[0]),
                         "seen_auc": float(seen[1]), "unseen_acc": float(unseen[0]),
                         "unseen_auc": float(unseen[1])})
    return rows


def summarise(runs, key="arms"):
    table = {}
    for arm in ARMS:
        for k in sorted({r["k"] for r in runs if r[key]}):
            rows = [seen_unseen(r[key][arm], r["g"]) for r in runs if r["k"] == k and r[key]]
            a = np.array([[s[0], s[1], u[0], u[1]] for s, u in rows])
            sd = a.std(0, ddof=1) if len(a) > 1 else np.full(4, np.nan)
            table[(arm, k)] = (a.mean(0), sd)
    return table


def print_table(table, title):
    """Print (and return) the markdown table of ``summarise``."""
    shots = sorted({k for _, k in table})
    lines = [f"\n### {title}\n", "| method | shots | seen acc | seen AUC | unseen acc | "
             "unseen AUC |", "|---|---|---|---|---|---|"]
    for arm in ARMS:
        for k in shots:
            m, s = table[(arm, k)]
            cells = " | ".join(f"{100 * m[i]:.1f} ± {100 * s[i]:.1f}" for i in range(4))
            lines.append(f"| {LABEL[arm]} | {k} | {cells} |")
    text = "\n".join(lines)
    print(text)
    return text


def layer_table(runs, names):
    """Mean unseen accuracy (%) of every layer's all-unit probe, per shot count, and runs."""
    shots = sorted({r["k"] for r in runs if r.get("per_layer")})
    lines = ["\n### All-unit probe per layer: unseen accuracy (%), mean ± sd over runs\n",
             "| layer | " + " | ".join(f"{k} shots" for k in shots) + " |",
             "|---|" + "---|" * len(shots)]
    for j, name in enumerate(names):
        cells = []
        for k in shots:
            acc = [seen_unseen(r["per_layer"][j], r["g"])[1][0] for r in runs
                   if r["k"] == k and r.get("per_layer")]
            sd = np.std(acc, ddof=1) if len(acc) > 1 else float("nan")
            cells.append(f"{100 * np.mean(acc):.1f} ± {100 * sd:.1f} (n={len(acc)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    return text


def plot_shots(table, path):
    shots = sorted({k for _, k in table})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), sharey=True)
    for ax, col, name in ((axes[0], 0, "seen generator"), (axes[1], 2, "unseen generators")):
        for arm in ARMS:
            ax.errorbar(shots, [100 * table[(arm, k)][0][col] for k in shots],
                        yerr=[100 * table[(arm, k)][1][col] for k in shots], marker="o",
                        capsize=3, label=LABEL[arm], lw=2.5 if arm == "fdu" else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_xticks(shots, [str(k) for k in shots])
        ax.set_xlabel("shots per class (real and fake)")
        ax.set_title(f"accuracy, {name}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("DNA FDU probe vs baselines (EfficientNet-Lite0, Fashion-MNIST fakes; "
                 "mean ± sd over train generators x seeds)", fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_layers(runs, names, path):
    k = 16 if any(r["k"] == 16 for r in runs) else runs[0]["k"]
    sub = [r for r in runs if r["k"] == k]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.6))
    x = np.arange(len(names))
    ax = axes[0]
    cand = np.array(CAND)
    for key, lab in (("shift", "activation shift (Hellinger², / max)"),
                     ("semantic", "semantic ε² (/ max)"), ("map_shift", "raw map JS (/ max)"),
                     ("map_excess", "map excess over its null (share)"),
                     ("score", "decoupling + map excess"),
                     ("loo_auc", "LOO probe AUC")):
        vals = np.array([r["profile"][key] for r in sub], dtype=float)
        top = np.nanmax(np.abs(vals)) if key in ("shift", "semantic", "map_shift") else 1.0
        ax.plot(cand, np.nanmean(vals, 0) / top, marker=".", label=lab)
    chosen = 100 * np.bincount([r["layer"] for r in sub], minlength=len(names)) / len(sub)
    for a in (ax, axes[1]):
        twin = a.twinx()
        twin.bar(x, chosen, color="0.6", alpha=0.35, width=0.6)
        twin.set_ylim(0, 100)
        twin.set_ylabel("runs choosing the layer (%, grey bars)", fontsize=8)
        a.set_zorder(twin.get_zorder() + 1)
        a.patch.set_visible(False)
    ax.set_xticks(x, names, rotation=70, fontsize=7)
    ax.set_title(f"localisation signals, intermediate blocks ({k} shots, mean of runs)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    ax = axes[1]
    with_layers = [r for r in sub if "per_layer" in r]
    if with_layers:
        for col, lab in ((0, "seen"), (1, "unseen")):
            acc = []
            for r in with_layers:
                acc.append([seen_unseen(pl, r["g"])[col][0] for pl in r["per_layer"]])
            ax.plot(x, 100 * np.mean(acc, 0), marker="o", label=f"all-unit probe, {lab}")
        ax.set_ylim(40, 100)
        ax.set_xticks(x, names, rotation=70, fontsize=7)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"all-unit probe accuracy per layer ({k} shots)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    ax = axes[2]
    r = next(q for q in sub if "triadic_sorted" in q)
    t = np.array(r["triadic_sorted"])
    ax.plot(np.arange(len(t)), t, label=f"sorted triadic score, layer {names[r['layer']]}")
    if r["knee"] is not None:
        ax.axvline(r["knee"], color="C3", ls="--",
                   label=f"Kneedle elbow at rank {r['knee']}: {r['fdus']} FDUs")
    ax.set_xlim(0, min(len(t), 200))
    ax.set_xlabel("unit rank")
    ax.set_ylabel("T = d·s·u")
    ax.set_title(f"curvature truncation (train {r['g']}, seed {r['seed']})")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_masking(runs, names, path):
    """Masking curves per group of runs with the same chosen layer (m = 0: no masking)."""
    sub = [r for r in runs if r["masking"]]
    if not sub:
        return None
    groups: dict[str, list] = {}
    for r in sub:
        groups.setdefault(names[r["layer"]], []).append(r)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    out = {}
    for gi, (layer, rs) in enumerate(sorted(groups.items(), key=lambda kv: -len(kv[1]))):
        ms = [0, *rs[0]["masking"]["m"]]
        for ax, col, name in ((axes[0], 0, "seen"), (axes[1], 1, "unseen")):
            for kind, style in (("fdu", "-o"), ("random", "--s")):
                acc = np.array([[seen_unseen(r["arms"]["all_units"], r["g"])[col][0]]
                                + [seen_unseen(step, r["g"])[col][0]
                                   for step in r["masking"][kind]] for r in rs])
                out[(layer, len(rs), kind, name)] = (ms, acc.mean(0))
                what = "top-m triadic units" if kind == "fdu" else "m random units (5 draws)"
                colour = f"C{2 * gi + (kind != 'fdu')}"
                ax.plot(np.array(ms) + 0.5, 100 * acc.mean(0), style, color=colour,
                        label=f"{what} masked; chosen layer {layer} ({len(rs)} runs)")
    for ax, name in ((axes[0], "seen"), (axes[1], "unseen")):
        ax.set_xscale("log", base=2)
        ticks = [0, 1, 2, 4, 8, 16, 32, 64]
        ax.set_xticks(np.array(ticks) + 0.5, [str(t) for t in ticks])
        ax.set_xlabel("units masked (set to their mean)")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"all-unit probe of the chosen layer, {name} generator(s)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("FDU masking, 64 shots (the all-unit probe of the chosen intermediate block)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return out


def federated(out_dir):
    import flowerbed

    start = time.perf_counter()
    res = flowerbed.run("scenarios/dna/fmnist_fakes.yaml", output_dir=out_dir)
    r = dict(res.summary["results"])
    r["seconds"] = time.perf_counter() - start
    return print_federated(r)


def print_federated(r):
    """The federated / centralized / local_only table and the bytes of one run's summary."""
    wall = f", {r['seconds']:.0f} s" if "seconds" in r else ""
    print(f"\n### Federated run (scenarios/dna/fmnist_fakes.yaml{wall})\n")
    print("| arm | federated seen / unseen acc | centralized | local_only (mean) |")
    print("|---|---|---|---|")
    for arm in ("fdu", "all_units", "random_units", "top_d", "final_layer", "finetune"):
        cells = []
        for src in ("federated", "centralized", "local_only"):
            m = r.get(src, {})
            seen = m.get(f"test/{arm}_acc_seen", float("nan"))
            unseen = m.get(f"test/{arm}_acc_unseen", float("nan"))
            cells.append(f"{100 * seen:.1f} / {100 * unseen:.1f}")
        print(f"| {arm} | " + " | ".join(cells) + " |")
    fed = r["federated"]
    print(f"\nFDU set equals the pooled one: {bool(fed['test/dna_fdus_match_pooled'])}; "
          f"layer {fed['test/dna_layer']:.0f}, {fed['test/dna_num_fdus']:.0f} FDUs; "
          f"statistics {fed['comm/stats_bytes_per_client'] / 1e6:.2f} MB per client vs "
          f"{fed['comm/image_bytes_per_client'] / 1e3:.1f} kB of its images (uint8); FDU "
          f"probe {fed['comm/fdu_probe_bytes_up_per_client_round']:.0f} B up per round, "
          f"fine-tuned tail {fed['comm/finetune_bytes_up_per_client_round'] / 1e6:.1f} MB")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 2 train generators")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/dna"))
    ap.add_argument("--img", type=Path, default=Path("docs/methods/img"))
    ap.add_argument("--no-federated", action="store_true")
    ap.add_argument("--seeds", type=int, default=5, help="seeds up to N-1 (default 5)")
    ap.add_argument("--seed-from", type=int, default=0,
                    help="first seed (a second process can run later seeds into another "
                    "--out; concatenate the runs.jsonl files, cells are distinct)")
    ap.add_argument("--shots", type=int, nargs="+", default=[16, 4, 64],
                    help="shot counts, in the order they are run within a seed")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild the tables and plots from <out>/runs.jsonl (no new runs)")
    ap.add_argument("--replot", type=Path, help="tables and plots from a saved JSON only")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.img.mkdir(parents=True, exist_ok=True)
    summary = args.out / "dna_experiment.json"
    if args.replot:
        saved = json.loads(args.replot.read_text())
        report(saved["runs"], tuple(saved["names"]), args)
        return
    runs_path = args.out / "runs.jsonl"
    runs = load_runs(runs_path)
    saved = json.loads(summary.read_text()) if summary.is_file() else {}
    if args.report_only:
        if not runs:
            raise SystemExit(f"--report-only: no finished runs in {runs_path}")
        report(runs, tuple(saved.get("names") or NAMES), args)
        if saved.get("federated"):
            print_federated(saved["federated"])
        return
    start = time.perf_counter()
    print("building pools and features (cached after the first run)", flush=True)
    pools = load_pools()
    tests, heavy = test_sets(pools), test_sets(pools, heavy=True)
    seeds = range(args.seed_from, 2 if args.quick else args.seeds)
    gens = FAMILIES[:2] if args.quick else FAMILIES
    done = {(r["g"], r["k"], r["seed"]) for r in runs}
    print(f"{len(done)} runs already in {runs_path}; they are skipped", flush=True)
    with runs_path.open("a") as fh:  # one line per finished run: a re-run resumes
        for s in seeds:  # every shot count and generator of a seed before the next seed
            for k in args.shots:
                for g in gens:
                    if (g, k, s) in done:
                        continue
                    rec = one_run(pools, g, k, s, tests, heavy if k == 16 else None)
                    fh.write(json.dumps(rec, default=float) + "\n")
                    fh.flush()
                    runs.append(rec)
                    print(f"  seed {s}, {k} shots, train {g}: done "
                          f"({time.perf_counter() - start:.0f} s)", flush=True)
    names = pools["real"].feats.names
    report(runs, names, args)
    fed = saved.get("federated")
    if not args.no_federated:
        fed = federated(Path("runs/dna_benchmark"))
    elif fed:
        print_federated(fed)
    summary.write_text(json.dumps(
        {"runs": runs, "names": list(names), "federated": fed,
         "seconds": time.perf_counter() - start}, default=float))
    print(f"\nwall time {time.perf_counter() - start:.0f} s")


def load_runs(path):
    """Finished runs of ``path`` (JSON lines; a truncated last line is dropped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"skipping an unfinished line of {path}")
    return out


def report(runs, names, args):
    """Tables and plots of finished runs."""
    table, heavy_table = summarise(runs), summarise(runs, "heavy")
    per_run = args.out / "per_run.jsonl"
    per_run.write_text("".join(json.dumps(row) + "\n" for row in per_run_rows(runs, names)))
    print(f"per-run rows of every arm: {per_run}")
    texts = [print_table(table, "Accuracy / AUC (%), mean ± sd (sample sd) over train "
                         "generators x seeds"),
             print_table(heavy_table, "Same probes, test images re-compressed at JPEG "
                         "quality 30"),
             layer_table(runs, names)]
    (args.out / "table.md").write_text("\n".join(texts).lstrip() + "\n")
    print("\n### Paper (STATED-2nd; other benchmarks, CLIP-scale backbone) vs ours\n")
    fdu16 = table[("fdu", 16)][0]
    heavy16 = heavy_table[("fdu", 16)][0]
    print(f"| claim | paper | ours (FDU probe, 16 shots) |\n|---|---|---|\n"
          f"| unseen generators acc | {PAPER['unseen generators acc']} | {100 * fdu16[2]:.1f} |\n"
          f"| heavy JPEG acc | {PAPER['heavy JPEG acc']} | {100 * heavy16[2]:.1f} (unseen), "
          f"{100 * heavy16[0]:.1f} (seen) |\n"
          f"| GenImage / ForenSynths mean acc | {PAPER['GenImage mean acc']} / "
          f"{PAPER['ForenSynths mean acc']} | n/a (not available offline) |")
    layers = np.bincount([r["layer"] for r in runs], minlength=len(names))
    print("\nchosen layer counts: " + ", ".join(f"{names[i]}={c}" for i, c in enumerate(layers)
                                                if c))
    for k in (4, 16, 64):
        sub = [r for r in runs if r["k"] == k]
        if not sub:
            continue
        print(f"  {k} shots: FDUs {np.mean([r['fdus'] for r in sub]):.1f} "
              f"(range {min(r['fdus'] for r in sub)}-{max(r['fdus'] for r in sub)}) of the "
              f"chosen layer's units")
    plot_shots(table, args.img / "dna_shots.png")
    plot_layers(runs, names, args.img / "dna_layers.png")
    curves = plot_masking(runs, names, args.img / "dna_masking.png")
    if curves:
        print("\n### Masking (64 shots): accuracy of the all-unit probe (%), m = 0 unmasked\n")
        for (layer, n, kind, name), (ms, acc) in curves.items():
            print(f"| {layer} ({n} runs), {kind} masked, {name} | m = "
                  + ", ".join(f"{m}: {100 * a:.1f}" for m, a in zip(ms, acc, strict=True))
                  + " |")


if __name__ == "__main__":
    main()
