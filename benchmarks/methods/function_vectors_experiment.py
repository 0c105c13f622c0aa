"""Function vectors in ICL: Todd et al.'s FV and Wang et al.'s decomposition claims.

Wang, Wang, Bakalova, Hahn, "How Few-Shot Examples Add Up" (ICML 2026, arXiv
2605.16591) on top of Todd et al., "Function Vectors in Large Language Models"
(ICLR 2024). Claims checked (the abstract gives no numbers, only these):

1. an n-shot FV is well approximated by a linear combination of example-level
   sub-FVs (variant A: isolated 1-shot prompts, per-prompt least squares), beyond
   the equal-weight mean and beyond what a random-init model gives;
2. contextualisation reweights demonstrations: attention moves toward the less
   ambiguous ones (variant B masses, in context vs isolated);
3. QK routing is the most consistent contribution of contextualisation to FV
   quality, especially with ambiguous demonstrations; V effects are heterogeneous;
4. (flowerbed mapping) the global FV is a combination of client FVs, with
   larger weights on less ambiguous clients.

Models: ``fv_toy`` (tiny GPT-2 trained on the synthetic permutation tasks;
random-init control of the same shape) and SmolLM2-135M-Instruct (word tasks;
random-init control of the same architecture). Todd et al.'s protocol: prompts
start with the model's start-of-text prefix (SmolLM2: ``<|endoftext|>``), the
mean activations (100 clean prompts), the head scan (25 shuffled-label prompts)
and the accuracies use only prompts the model answers correctly in context, and
the FV is injected at every layer. Several seeds (prompt draws; the models are
fixed); the QK/V hybrids use position-aligned isolated runs.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python \
        benchmarks/methods/function_vectors_experiment.py [--models toy smollm2]
        [--seeds 0 1 2] [--tasks antonym eng_fra ...] [--quick]
        [--out benchmarks/results/function_vectors] [--report-only]

Resumable cell by cell: every head scan (one model, seed and task) and every task
analysis is appended to ``cells.jsonl`` as it finishes (the scan's mean head
activations to ``scans/``), and a rerun skips the cells already there. Per seed,
the scans of every task come first, then the analyses, which use the universal
heads of that seed (top-k of the mean AIE over the tasks given). ``--report-only``
prints the tables and redraws the plots from the cells.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowerbed.core.seeds import derive_seed
from flowerbed.methods.function_vectors import algorithm as fva
from flowerbed.methods.function_vectors import model as fl
from flowerbed.methods.function_vectors import model_task as ft
from flowerbed.methods.function_vectors.data import (
    PERMUTATION_TEMPLATE,
    is_identity,
    permutation_tasks,
    word_pairs,
)
from flowerbed.methods.function_vectors.learner import FunctionVectorsParams
from flowerbed.methods.function_vectors.model_toy import FvToyPretrainParams, tiny_spec
from flowerbed.models.icl import DEFAULT_TEMPLATE, Example, Template
from flowerbed.models.lm import build_lm
from flowerbed.models.lm_tiny import build_tiny

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "function_vectors"
IMG = ROOT / "docs" / "methods" / "img"
SEED = 0
#: Our probe's numbers (a 2-layer toy transformer; the paper states none).
SPEC = {"icl_by_shots": [0.41, 0.69, 0.91, 1.00, 1.00], "r2_trained": 0.905, "cos_trained": 0.950,
        "r2_random": 0.653, "cos_random": 0.809, "mass_unamb": 0.162, "mass_amb": 0.044,
        "fv_before1": (0.37, 0.47)}
#: The pre-implementation feasibility probe (not in this repository): SmolLM2 antonyms,
#: 10-shot first token 0.38, FV at layer 12: 0.40.
FEAS = {"icl": 0.38, "fv": 0.40}
WORD_TASKS = ("antonym", "eng_fra", "plural_singular", "past_lemma")
#: Frequency filter per word task (WordNet tag count of the input or its lemma): common
#: words where enough exist, as in Todd et al.'s curated lists (plural_singular: 22 pairs
#: at 3, so every irregular plural with a tagged lemma).
MIN_TAGS = {"antonym": 3, "eng_fra": 5, "plural_singular": 1, "past_lemma": 3}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def defaults(**kw: Any) -> FunctionVectorsParams:
    """The learner's parameters (their defaults are the experiment's unless overridden)."""
    return FunctionVectorsParams(lm={"name": "fv_toy"}, **kw)


def sizes(p: FunctionVectorsParams) -> dict[str, Any]:
    return {"shots": p.shots, "n_clean": p.n_clean, "n_corrupt": p.n_corrupt,
            "n_analysis": p.n_analysis, "n_quality": p.n_quality, "batch_size": p.batch_size,
            "chunk": p.chunk, "max_rows": p.max_rows, "draws": p.draws}


# --- cells ----------------------------------------------------------------------------------


class Cells:
    """``cells.jsonl`` (one JSON object per finished cell) and ``scans/`` (mean activations)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.path = folder / name
        self.scans = folder / "scans"
        self.rows = [json.loads(line) for line in self.path.read_text().splitlines()
                     if line.strip()] if self.path.exists() else []

    def get(self, kind: str, model: str, seed: int, task: str) -> dict[str, Any] | None:
        for row in self.rows:
            if (row["kind"], row["model"], row["seed"], row["task"]) == (kind, model, seed, task):
                return row
        return None

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=float) + "\n")

    def mean_heads_path(self, model: str, seed: int, task: str) -> Path:
        return self.scans / f"{model}_seed{seed}_{task}.npz"


def scan_cell(cells: Cells, lm, prompter, pool, p, model: str, seed: int, name: str) -> None:
    """Todd's scan on one task (filtered prompts), unless stored."""
    if cells.get("scan", model, seed, name) is not None:
        return
    start = time.perf_counter()
    scan = ft.find_heads(lm, prompter, pool, shots=p.shots, n_clean=p.n_clean,
                         n_corrupt=p.n_corrupt, seed=derive_seed(seed, name),
                         batch_size=p.batch_size, chunk=p.chunk, draws=p.draws)
    cells.scans.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cells.mean_heads_path(model, seed, name), mean_heads=scan.mean_heads)
    row = {"kind": "scan", "model": model, "seed": seed, "task": name,
           "aie": scan.aie.tolist(), "survival": scan.survival, "p_corrupt": scan.p_corrupt,
           "seconds": {"total": time.perf_counter() - start, "clean": scan.seconds[0],
                       "scan": scan.seconds[1],
                       "per_corrupted_prompt": scan.seconds[1] / max(
                           1, scan.survival["corrupt_kept"]),
                       "prompt_tokens": float(np.mean([len(c.ids) for c in scan.clean]))},
           "sizes": sizes(p)}
    cells.add(row)
    sv = scan.survival
    log(f"  scan {model} seed {seed} {name}: {row['seconds']['total']:.0f} s; clean "
        f"{sv['clean_kept']}/{sv['clean_drawn']} drawn kept, corrupted "
        f"{sv['corrupt_kept']}/{sv['corrupt_drawn']}; top {fva.top_heads(scan.aie, 3)}")


def universal_heads(cells: Cells, model: str, seed: int, names, k: int):
    """The top-k heads of the mean AIE over the tasks' stored scans of this seed."""
    aies = [np.array(cells.get("scan", model, seed, n)["aie"]) for n in names]
    return fva.top_heads(np.mean(aies, axis=0), k)


def control_additivity(control, prompter_c, prompts, heads, p) -> dict[str, float]:
    """Variant-A fits of the random-init model on the same prompts and heads."""
    w_o = fl.output_matrices(control, heads)
    ids = [prompter_c.build(q.demos, q.query) for q in prompts]
    an = ft.analyse_prompts(control, prompter_c, ids, heads, w_o, p.max_rows)
    return ft.additivity(an).summary()


def regime_prompts(prompter, pool, amb, n, shots, seed, queries, heavy) -> list[fl.Prompt]:
    """Prompts whose demonstrations lean ambiguous (``heavy``) or unambiguous (x4 weight)."""
    weighted = [e for e in pool for _ in range(4 if (e.x in amb) == heavy else 1)]
    return fl.sample_prompts(prompter, weighted, n, shots, seed, queries=queries)


def regimes(lm, prompter, pool, queries, amb, heads, layer, p, seed) -> dict[str, Any]:
    """Masses and QK/V effects on ambiguity-heavy vs clear prompts."""
    w_o = fl.output_matrices(lm, heads)
    zero = [prompter.build([], q) for q in queries][: p.n_quality]
    out = {}
    for name, heavy in (("ambiguous", True), ("clear", False)):
        prompts = regime_prompts(prompter, pool, amb, p.n_analysis, p.shots,
                                 derive_seed(seed, name), queries, heavy)
        an = ft.analyse_prompts(lm, prompter, prompts, heads, w_o, p.max_rows, amb)
        q = ft.hybrid_quality(lm, an, zero, layer, p.batch_size)
        qm = {f"{a}_{b}": float(v.mean()) for (a, b), v in q.items()}
        out[name] = {
            "ambiguous_share": float(np.mean([a.ambiguous.mean() for a in an])),
            **ft.attention_mass_summary(an), **ft.hybrid_cosines(an), "quality": qm,
            "qk_effect": qm["ctx_iso"] - qm["iso_iso"], "v_effect": qm["iso_ctx"] - qm["iso_iso"],
            "qk_effect_sd": float(np.std(q[("ctx", "iso")] - q[("iso", "iso")], ddof=1)),
            "v_effect_sd": float(np.std(q[("iso", "ctx")] - q[("iso", "iso")], ddof=1)),
        }
    return out


def task_block(lm, control, prompter, prompter_c, pool, queries, heads, layers, amb, p,
               name, mean_heads, seed) -> dict[str, Any]:
    """One task: the learner's analysis, the random-init control, the ambiguity regimes."""
    start = time.perf_counter()
    tseed = derive_seed(seed, name)
    res = ft.analyse_task(lm, prompter, pool, queries, shots=p.shots, n_clean=p.n_clean,
                          n_corrupt=p.n_corrupt, n_top_heads=len(heads), layers=layers,
                          n_analysis=p.n_analysis, n_quality=p.n_quality, seed=tseed,
                          batch_size=p.batch_size, chunk=p.chunk, max_rows=p.max_rows,
                          heads=heads, mean_heads=mean_heads, ambiguous_inputs=amb,
                          draws=p.draws)
    out: dict[str, Any] = {"metrics": res.metrics()}
    prompts = fl.sample_prompts(prompter, pool, p.n_analysis, p.shots,
                                derive_seed(tseed, "fv.sub"), queries=queries)
    out["control"] = control_additivity(control, prompter_c, prompts, heads, p)
    c_fv = fl.function_vector(fl.output_matrices(control, heads), fl.mean_head_activations(
        control, [prompter_c.build(q.demos, q.query) for q in prompts], p.batch_size), heads)
    zero_c = [prompter_c.build([], q) for q in queries]
    out["control"]["zero_shot_accuracy"] = ft.accuracy(control, zero_c, p.batch_size)[0]
    out["control"]["fv_accuracy"] = ft.accuracy(control, zero_c, p.batch_size, c_fv,
                                                int(res.accuracy["fv_layer"]))[0]
    out["scatter"] = {"v": [a.v.tolist() for a in res.analyses[:3]],
                      "fitted": [f.fitted.tolist() for f in res.fits.lsq[:3]]} if res.fits else {}
    out["prompt_r2"] = [f.r2 for f in res.fits.lsq] if res.fits else []
    out["prompt_equal_r2"] = [f.r2 for f in res.fits.equal] if res.fits else []
    out["mass_by_slot"] = np.stack([a.mass.mean(0) for a in res.analyses]).mean(0).tolist()
    out["analyses"] = res.analyses  # dropped before saving
    if amb:
        out["regimes"] = regimes(lm, prompter, pool, queries, amb, heads,
                                 int(res.accuracy["fv_layer"]), p, tseed)
    out["seconds"] = time.perf_counter() - start
    m = out["metrics"]
    log(f"  {name} seed {seed}: icl {m['icl_accuracy']:.2f} ({m['n_eval_correct']:.0f} correct) "
        f"zero {m['zero_shot_accuracy_heldout']:.2f} fv {m['fv_accuracy']:.2f}@{m['fv_layer']:.0f}"
        f" R2 {m['additivity_r2']:.3f} (random {out['control']['additivity_r2']:.3f}) "
        f"{out['seconds']:.0f} s")
    return out


def task_cell(cells: Cells, model: str, seed: int, name: str, heads, names, fn) -> None:
    """Run one task analysis (``fn()`` -> its block) unless stored; append it."""
    if cells.get("task", model, seed, name) is not None:
        return
    block = fn()
    block.pop("analyses", None)
    scan = cells.get("scan", model, seed, name)
    cells.add({"kind": "task", "model": model, "seed": seed, "task": name,
               "heads": [list(h) for h in heads], "heads_from": list(names),
               "survival": scan["survival"] if scan else {}, **block})


# --- the two models ----------------------------------------------------------------------------


def toy(args: argparse.Namespace, cells: Cells) -> None:
    p = defaults(shots=8, n_top_heads=2, draws=args.draws,
                 **({"n_clean": 30, "n_corrupt": 8, "n_analysis": 8} if args.quick else {}))
    tasks = permutation_tasks()
    lm = build_lm(p.lm)
    control = build_tiny(tiny_spec(FvToyPretrainParams(), seed=12345))
    tmpl = Template(PERMUTATION_TEMPLATE)
    prompter, prompter_c = fl.Prompter(lm, tmpl, bos=True), fl.Prompter(control, tmpl, bos=True)
    names = [f"perm{t}" for t in range(2 if args.quick else tasks.num_tasks)]
    pools = {n: [Example(x, y) for x, y in tasks.pairs(int(n[4:]))] for n in names}
    for seed in args.seeds:
        for n in names:  # ICL accuracy by shots, all 16 queries x 8 prompts each
            if cells.get("shots", "toy", seed, n) is None:
                acc = []
                for k in (0, 1, 2, 4, 8):
                    prompts = fl.sample_prompts(prompter, pools[n], 64, k,
                                                derive_seed(seed, n, k), queries=pools[n])
                    acc.append(ft.accuracy(lm, prompts, 64)[0])
                cells.add({"kind": "shots", "model": "toy", "seed": seed, "task": n,
                           "curve": acc})
        for n in names:
            scan_cell(cells, lm, prompter, pools[n], p, "toy", seed, n)
        heads = universal_heads(cells, "toy", seed, names, p.n_top_heads)
        for n in names:
            t = int(n[4:])
            amb = frozenset(tasks.symbol(x) for x in np.flatnonzero(tasks.ambiguous(t)))
            mean = np.load(cells.mean_heads_path("toy", seed, n))["mean_heads"]

            def run(n=n, t=t, amb=amb, mean=mean, seed=seed, heads=heads) -> dict[str, Any]:
                block = task_block(lm, control, prompter, prompter_c, pools[n], pools[n],
                                   heads, [-1, 0], amb, p, n, mean, seed)
                block["informativeness"] = informativeness(tasks, t, block["analyses"],
                                                           prompter, pools[n], p, seed)
                return block

            task_cell(cells, "toy", seed, n, heads, names, run)


def informativeness(tasks, t, analyses, prompter, pool, p, seed) -> dict[str, float]:
    """Attention mass by the bits a demonstration removes from the candidate tasks."""
    prompts = fl.sample_prompts(prompter, pool, p.n_analysis, p.shots,
                                derive_seed(derive_seed(seed, f"perm{t}"), "fv.sub"),
                                queries=pool)
    gains, masses = [], []
    for prompt, an in zip(prompts, analyses, strict=True):
        cons = np.stack([tasks.consistent("abcdefghijklmnopqrstuvwxyz".index(d.x),
                                          "abcdefghijklmnopqrstuvwxyz".index(d.y[0]))
                         for d in prompt.demos])
        gains += fva.information_gain(cons).tolist()
        masses += an.mass.mean(0).tolist()
    g, m = np.array(gains), np.array(masses)
    return {"mass_informative": float(m[g > 0].mean()) if (g > 0).any() else float("nan"),
            "mass_uninformative": float(m[g == 0].mean()) if (g == 0).any() else float("nan"),
            "share_uninformative": float((g == 0).mean()),
            "spearman_gain_mass": fva.rank_correlation(g, m)}


def smollm2(args: argparse.Namespace, cells: Cells) -> None:
    quick = {"n_clean": 20, "n_corrupt": 4, "n_analysis": 6, "n_eval": 24, "n_quality": 8}
    p = FunctionVectorsParams(lm={"name": "smollm2", "device": args.device}, draws=args.draws, **(
        quick if args.quick else {"n_clean": args.n_clean, "n_corrupt": args.n_corrupt,
                                  "n_analysis": args.n_analysis, "batch_size": args.batch_size,
                                  "chunk": args.chunk, "max_rows": args.max_rows}))
    lm = build_lm(p.lm)
    control = fl.random_like(lm, seed=12345)
    tmpl = Template(DEFAULT_TEMPLATE)
    prompter, prompter_c = fl.Prompter(lm, tmpl, bos=False), fl.Prompter(control, tmpl, bos=False)
    names = WORD_TASKS[:1] if args.quick else tuple(args.tasks)
    pools, queries, ambs = {}, {}, {}
    for n in names:
        pairs = word_pairs(n, min_tag_count=MIN_TAGS[n])
        order = np.random.default_rng(derive_seed(SEED, "split", n)).permutation(len(pairs))
        ex = [Example(pairs[i][0], pairs[i][1]) for i in order]
        queries[n], pools[n] = ex[: p.n_eval], ex[p.n_eval :]
        ambs[n] = frozenset(e.x for e in ex if is_identity((e.x, e.y)))
    layers = list(range(lm.num_layers))  # every block (Todd's sweep)
    for seed in args.seeds:
        for n in names:
            scan_cell(cells, lm, prompter, pools[n], p, "smollm2", seed, n)
        heads = universal_heads(cells, "smollm2", seed, names, p.n_top_heads)
        log(f"smollm2 seed {seed} universal heads over {list(names)}: {heads}")
        for n in names:
            mean = np.load(cells.mean_heads_path("smollm2", seed, n))["mean_heads"]
            amb = ambs[n] if len(ambs[n]) >= p.shots else frozenset()

            def run(n=n, mean=mean, amb=amb, seed=seed, heads=heads) -> dict[str, Any]:
                return task_block(lm, control, prompter, prompter_c, pools[n], queries[n],
                                  heads, layers, amb, p, n, mean, seed)

            task_cell(cells, "smollm2", seed, n, heads, names, run)


def as_result(cells: Cells, model: str, seed: int) -> dict[str, Any] | None:
    """One seed's cells in the layout the tables and plots read (``None``: nothing stored)."""
    tasks = {r["task"]: r for r in cells.rows
             if (r["kind"], r["model"], r["seed"]) == ("task", model, seed)}
    scans = [r for r in cells.rows if (r["kind"], r["model"], r["seed"]) == ("scan", model, seed)]
    if not tasks or not scans:
        return None
    first = next(iter(tasks.values()))
    aie = np.mean([np.array(r["aie"]) for r in scans if r["task"] in first["heads_from"]], 0)
    out = {"sizes": scans[0]["sizes"], "heads": first["heads"], "aie": aie.tolist(),
           "scan_seconds": {r["task"]: r["seconds"] for r in scans}, "tasks": tasks}
    if model == "toy":
        out["shots_curve"] = {r["task"]: r["curve"] for r in cells.rows
                              if (r["kind"], r["model"], r["seed"]) == ("shots", model, seed)}
    return out


def seed_summary(cells: Cells) -> None:
    """Mean (sample sd over seeds) of the headline metrics, and the prompts that survived."""
    for model in ("toy", "smollm2"):
        rows = [r for r in cells.rows if r["kind"] == "task" and r["model"] == model]
        if not rows:
            continue
        print(f"\n## {model}: every seed (mean ± sample sd over seeds; n = seeds)")
        print("| task | seeds | clean: correct / drawn | corrupted: correct / drawn | "
              "queries correct in context |"
              " ICL | zero-shot held-out | +FV held-out | R² trained | R² random-init |"
              " QK effect | V effect |")
        print("|---|" + "---|" * 11)
        for task in dict.fromkeys(r["task"] for r in rows):
            mine = [r for r in rows if r["task"] == task]

            def ms(get, mine=mine) -> str:
                v = np.array([get(r) for r in mine], dtype=float)
                sd = f" ± {v.std(ddof=1):.3f}" if len(v) > 1 else ""
                return f"{v.mean():.3f}{sd}"

            sv = [r["survival"] for r in mine if r["survival"]]
            surv = tuple(f"{sum(s[k + '_correct'] for s in sv)}/{sum(s[k + '_drawn'] for s in sv)}"
                         for k in ("clean", "corrupt"))
            print(f"| {task} | {len(mine)} | {surv[0]} | {surv[1]} | "
                  f"{ms(lambda r: r['metrics']['n_eval_correct'])} | "
                  f"{ms(lambda r: r['metrics']['icl_accuracy'])} | "
                  f"{ms(lambda r: r['metrics']['zero_shot_accuracy_heldout'])} | "
                  f"{ms(lambda r: r['metrics']['fv_accuracy'])} | "
                  f"{ms(lambda r: r['metrics']['additivity_r2'])} | "
                  f"{ms(lambda r: r['control']['additivity_r2'])} | "
                  f"{ms(lambda r: r['metrics']['qk_effect'])} | "
                  f"{ms(lambda r: r['metrics']['v_effect'])} |")


def federated(args: argparse.Namespace, smollm2: dict[str, Any] | None) -> dict[str, Any]:
    """The client-level analogue: ``federated`` on the toy, ``federated_smollm2`` on SmolLM2."""
    import yaml

    import flowerbed

    out = {}
    if "federated" in args.models:
        scenario = yaml.safe_load((ROOT / "scenarios/function_vectors/toy_federated.yaml")
                                  .read_text())
        if args.quick:
            scenario["learner"].update(n_clean=30, n_corrupt=8)
        start = time.perf_counter()
        res = flowerbed.run(scenario, save=False)
        out["toy"] = {**res.summary["results"]["federated"],
                      "seconds": time.perf_counter() - start}
        log(f"federated toy: R2 {out['toy']['test/decomp_r2']:.3f} "
            f"({out['toy']['seconds']:.0f} s)")
    if "federated_smollm2" in args.models and smollm2 is None:
        raise SystemExit("federated_smollm2 needs the smollm2 results (its heads): run "
                         "--models smollm2 first")
    if "federated_smollm2" in args.models and smollm2 is not None:
        scenario = yaml.safe_load((ROOT / "scenarios/function_vectors/smollm2_federated.yaml")
                                  .read_text())
        scenario["learner"]["heads"] = [list(h) for h in smollm2["heads"]]
        fra = smollm2["tasks"].get("eng_fra", next(iter(smollm2["tasks"].values())))
        scenario["learner"]["layers"] = [int(fra["metrics"]["fv_layer"])]
        if args.quick:
            scenario["learner"].update(n_clean=10, n_eval=12)
        elif args.fed_n_clean is not None:
            scenario["learner"].update(n_clean=args.fed_n_clean)
        start = time.perf_counter()
        res = flowerbed.run(scenario, save=False)
        out["smollm2"] = {**res.summary["results"]["federated"],
                          "seconds": time.perf_counter() - start}
        log(f"federated smollm2: R2 {out['smollm2']['test/decomp_r2']:.3f}")
    return out


# --- report ------------------------------------------------------------------------------------


def fmt(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def report(res: dict[str, Any]) -> None:
    for model in ("toy", "smollm2"):
        if model not in res:
            continue
        r = res[model]
        cost = [c if isinstance(c, dict) else {"total": c, "per_corrupted_prompt": c
                                               / r["sizes"]["n_corrupt"], "prompt_tokens": 0}
                for c in r["scan_seconds"].values()]
        print(f"\n## {model}: heads {r['heads']}  (scans {sum(c['total'] for c in cost):.0f} s; "
              f"{np.mean([c['per_corrupted_prompt'] for c in cost]):.1f} s per corrupted prompt "
              f"for all {np.size(r['aie'])} heads, prompts of "
              f"{np.mean([c['prompt_tokens'] for c in cost]):.0f} tokens)")
        if model == "toy":
            curve = np.mean(list(r["shots_curve"].values()), axis=0)
            print("ICL accuracy by shots 0/1/2/4/8: ours "
                  + "/".join(f"{a:.2f}" for a in curve) + "; spec probe "
                  + "/".join(f"{a:.2f}" for a in SPEC["icl_by_shots"]))
        layers = sorted({int(k.split("@")[1]) for t in r["tasks"].values()
                         for k in t["metrics"] if k.startswith("fv_accuracy@")})
        print("first-token accuracy (P(answer)) on all queries; +FV at the output of block L "
              "(-1: embeddings); held-out: layer chosen on half the queries, scored on the rest")
        print("| task | ICL | zero-shot | " + " | ".join(f"+FV @{L}" for L in layers)
              + " | held-out zero-shot -> +FV (layer) | shuffled -> +FV | random-init zero-shot"
              " -> +FV |")
        print("|---|" + "---|" * (len(layers) + 5))
        for n, t in r["tasks"].items():
            m, c = t["metrics"], t["control"]
            per = " | ".join(f"{m[f'fv_accuracy@{L}']:.2f} ({m.get(f'fv_prob@{L}', np.nan):.3f})"
                             for L in layers)
            print(f"| {n} | {m['icl_accuracy']:.2f} | {m['zero_shot_accuracy']:.2f} "
                  f"({m.get('zero_shot_prob', np.nan):.3f}) | {per} | "
                  f"{m['zero_shot_accuracy_heldout']:.2f} -> {m['fv_accuracy']:.2f} "
                  f"({m['fv_layer']:.0f}) | {m['shuffled_accuracy']:.2f} -> "
                  f"{m['fv_shuffled_accuracy']:.2f} | {c['zero_shot_accuracy']:.2f} -> "
                  f"{c['fv_accuracy']:.2f} |")
        print("\nvariant A (per-prompt R² / cosine of v(P) fitted on its isolated sub-FVs)")
        print("| task | R² lsq | cos | R² equal weights | R² per-slot | chance R² | R² random-init"
              " | cos random-init | acc +mean v(P) | acc +mean fit |")
        print("|---|" + "---|" * 9)
        for n, t in r["tasks"].items():
            m, c = t["metrics"], t["control"]
            print(f"| {n} | {m['additivity_r2']:.3f} | {m['additivity_cos']:.3f} | "
                  f"{m['equal_r2']:.3f} | {m['slot_r2']:.3f} | {m['chance_r2']:.3f} | "
                  f"{c['additivity_r2']:.3f} | {c['additivity_cos']:.3f} | "
                  f"{m['fv_prompt_mean_accuracy']:.2f} | {m['fv_additive_accuracy']:.2f} |")
        if model == "toy":
            print(f"spec probe: R² {SPEC['r2_trained']} / cos {SPEC['cos_trained']} trained vs "
                  f"{SPEC['r2_random']} / {SPEC['cos_random']} random init; FV before block 1 "
                  f"{SPEC['fv_before1'][0]} -> {SPEC['fv_before1'][1]}")
        else:
            print(f"feasibility probe (antonym): ICL {FEAS['icl']}, FV at layer 12 {FEAS['fv']}")
        print("\nvariant B masses and QK/V hybrids (quality q: mean P(answer) of zero-shot queries"
              " with the hybrid FV; cos: cosine with the clean FV)")
        print("| task | regime | ambiguous share | mass amb | mass unamb | gap by slot |"
              " share shift amb | share shift unamb | QK effect | V effect | q(iso,iso) |"
              " q(ctx,ctx) | cos QK effect | cos V effect |")
        print("|---|" + "---|" * 13)
        for n, t in r["tasks"].items():
            for reg, g in t.get("regimes", {}).items():
                q = g["quality"]
                print(f"| {n} | {reg} | {g['ambiguous_share']:.2f} | "
                      f"{fmt(g.get('mass_ambiguous'))} | {fmt(g.get('mass_unambiguous'))} | "
                      f"{fmt(g.get('mass_gap_by_slot'))} | {fmt(g.get('share_shift_ambiguous'))}"
                      f" | {fmt(g.get('share_shift_unambiguous'))} | {g['qk_effect']:+.4f} | "
                      f"{g['v_effect']:+.4f} | {q['iso_iso']:.4f} | {q['ctx_ctx']:.4f} | "
                      f"{g.get('cos_qk_effect', np.nan):+.3f} | "
                      f"{g.get('cos_v_effect', np.nan):+.3f} |")
        if model == "toy":
            print(f"spec probe: mass {SPEC['mass_unamb']} unambiguous vs {SPEC['mass_amb']} "
                  "ambiguous")
            for n, t in r["tasks"].items():
                print(f"  {n} informativeness: " + ", ".join(
                    f"{k} {v:.3f}" for k, v in t["informativeness"].items()))
    if "federated" in res:
        for name, f in res["federated"].items():
            ws = [f"{f[k]:+.2f}" for k in sorted(f) if k.startswith("test/weight_client")]
            sh = [f"{f[k]:.2f}" for k in sorted(f) if k.startswith("test/ambiguous_share")]
            print(f"\n## federated {name}: R² {f['test/decomp_r2']:.3f} (cos "
                  f"{f['test/decomp_cos']:.3f}), data-share average R² {f['test/fedavg_r2']:.3f},"
                  f" equal weights R² {f['test/equal_r2']:.3f}, chance {f['test/chance_r2']:.3f}")
            print(f"  weights {ws} vs ambiguous shares {sh}: Spearman "
                  f"{f['test/weight_ambiguity_spearman']:+.2f}")
            print("  zero-shot accuracy: none {:.2f}, global FV {:.2f}, fitted combination {:.2f},"
                  " data-share average {:.2f}".format(
                      f["test/accuracy_fv_none"], f["test/accuracy_fv_global"],
                      f["test/accuracy_fv_combination"], f["test/accuracy_fv_fedavg"]))


# --- plots -------------------------------------------------------------------------------------


def plot_all(res: dict[str, Any], folder: Path, suffix: str = "") -> list[Path]:
    """Head-AIE heat maps, additivity, attention mass vs ambiguity, QK/V bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    models = [m for m in ("toy", "smollm2") if m in res]
    written = []

    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.8), squeeze=False)
    for ax, m in zip(axes[0], models, strict=True):
        aie = np.array(res[m]["aie"])
        im = ax.imshow(aie.T, aspect="auto", cmap="viridis", origin="lower")
        for layer, h in res[m]["heads"]:
            ax.plot(layer, h, "s", mfc="none", mec="red", ms=9)
        ax.set(xlabel="layer", ylabel="head", title=f"{m}: mean AIE over tasks (red: FV heads)",
               yticks=range(aie.shape[1]))
        if aie.shape[0] <= 8:
            ax.set_xticks(range(aie.shape[0]))
        fig.colorbar(im, ax=ax, label="average indirect effect")
    written.append(_save(fig, folder / f"function_vectors_aie{suffix}.png"))

    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 8.5), squeeze=False)
    for col, m in enumerate(models):
        tasks = res[m]["tasks"]
        first = next(iter(tasks))
        ax = axes[0, col]
        sc = tasks[first]["scatter"]
        for i, (v, f) in enumerate(zip(sc["v"], sc["fitted"], strict=True)):
            v, f = np.array(v), np.array(f)
            ax.scatter(v / np.linalg.norm(v), f / np.linalg.norm(v), s=6, alpha=0.6,
                       label=f"prompt {i} (R² {fva.r2_score(v, f):.2f})")
        lim = ax.get_xlim()
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set(xlabel="v(P) coordinate / |v|", ylabel="least-squares fit from 1-shot sub-FVs",
               title=f"{m} {first}: n-shot FV vs its sub-FV fit")
        ax.legend(loc="upper left", fontsize=8)
        ax = axes[1, col]
        keys = [("additivity_r2", "per-prompt LSQ"), ("equal_r2", "equal weights"),
                ("slot_r2", "per-slot weights"), ("control", "random-init LSQ"),
                ("chance_r2", "unrelated vectors")]
        x = np.arange(len(tasks))
        for j, (k, label) in enumerate(keys):
            vals = [t["control"]["additivity_r2"] if k == "control" else t["metrics"][k]
                    for t in tasks.values()]
            ax.bar(x + (j - 2) * 0.16, vals, 0.16, label=label)
        ax.set_xticks(x, list(tasks), rotation=20)
        ax.set(ylabel="R² of v(P)", ylim=(min(0, ax.get_ylim()[0]), 1.3),
               title=f"{m}: additivity (variant A) vs controls")
        ax.legend(fontsize=7, ncol=3, loc="upper center", framealpha=0.9)
    written.append(_save(fig, folder / f"function_vectors_additivity{suffix}.png"))

    rows = [(m, n, reg, g) for m in models for n, t in res[m]["tasks"].items()
            for reg, g in t.get("regimes", {}).items()]
    if rows:
        fig, axes = plt.subplots(1, 2, figsize=(14, 5.4))
        labels = [f"{m}:{n} {reg}" for m, n, reg, _ in rows]
        x = np.arange(len(rows))
        for j, key in enumerate(("mass_unambiguous", "mass_ambiguous")):
            axes[0].bar(x + (j - 0.5) * 0.4, [g.get(key, np.nan) for *_, g in rows], 0.4,
                        label=key.replace("mass_", "on ") + " demonstrations")
        axes[0].set_xticks(x, labels, fontsize=7, rotation=40, ha="right")
        axes[0].set(ylabel="attention mass from the final token (mean over FV heads)",
                    title="attention mass vs ambiguity")
        axes[0].legend(fontsize=8)
        for j, key in enumerate(("share_shift_unambiguous", "share_shift_ambiguous")):
            axes[1].bar(x + (j - 0.5) * 0.4, [g.get(key, np.nan) for *_, g in rows], 0.4,
                        label=key.replace("share_shift_", "") + " demonstrations")
        axes[1].axhline(0, color="k", lw=0.8)
        axes[1].set_xticks(x, labels, fontsize=7, rotation=40, ha="right")
        axes[1].set(ylabel="share of demo attention: in context - isolated",
                    title="contextual reweighting")
        axes[1].legend(fontsize=8)
        written.append(_save(fig, folder / f"function_vectors_mass{suffix}.png"))

        fig, ax = plt.subplots(figsize=(11, 5.2))
        for j, key in enumerate(("qk_effect", "v_effect")):
            ax.bar(x + (j - 0.5) * 0.4, [g[key] for *_, g in rows], 0.4,
                   yerr=[g[key + "_sd"] / np.sqrt(max(1, res[m]["sizes"]["n_analysis"]))
                         for m, *_, g in rows],
                   capsize=3, label={"qk_effect": "QK (routing): q(ctx,iso) - q(iso,iso)",
                                     "v_effect": "V (values): q(iso,ctx) - q(iso,iso)"}[key])
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(x, labels, fontsize=7, rotation=40, ha="right")
        ax.set(ylabel="change in P(answer), zero-shot + hybrid FV",
               title="contextualisation effect on FV quality (error bars: s.e. over prompts)")
        ax.legend(fontsize=8)
        written.append(_save(fig, folder / f"function_vectors_qk_v{suffix}.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["toy", "smollm2"],
                    choices=["toy", "smollm2", "federated", "federated_smollm2"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                    help="prompt-draw seeds (run in order: every cell of a seed first)")
    ap.add_argument("--tasks", nargs="+", default=list(WORD_TASKS), choices=WORD_TASKS,
                    help="SmolLM2 word tasks (the universal heads average their scans)")
    ap.add_argument("--fed-n-clean", type=int, default=None,
                    help="clean prompts per client FV in federated_smollm2 (scenario: 50)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where SmolLM2 computes (the same numbers to float rounding)")
    ap.add_argument("--n-clean", type=int, default=100, help="SmolLM2 clean prompts (Todd: 100)")
    ap.add_argument("--n-corrupt", type=int, default=25, help="SmolLM2 corrupted prompts "
                    "(Todd: 25)")
    ap.add_argument("--n-analysis", type=int, default=20, help="SmolLM2 n-shot prompts of the "
                    "sub-FV fits and hybrids per task")
    ap.add_argument("--batch-size", type=int, default=16, help="SmolLM2 prompts per forward "
                    "pass (lower it to use less memory; results do not depend on it)")
    ap.add_argument("--chunk", type=int, default=96, help="SmolLM2 heads patched per step")
    ap.add_argument("--max-rows", type=int, default=32, help="SmolLM2 rows per value readout")
    ap.add_argument("--draws", type=int, default=4, help="Todd's filter: keep prompts answered "
                    "correctly in context among up to draws x n drawn (0: no filter)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="print the tables and draw the plots from the stored cells")
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    cells = Cells(args.out, "cells_quick.jsonl" if args.quick else "cells.jsonl")
    if not args.report_only:
        for model in [m for m in ("toy", "smollm2") if m in args.models]:
            toy(args, cells) if model == "toy" else smollm2(args, cells)
        if {"federated", "federated_smollm2"} & set(args.models):
            path = args.out / ("federated_quick.json" if args.quick else "federated.json")
            old = json.loads(path.read_text()) if path.exists() else {}
            path.write_text(json.dumps({**old, **federated(args, as_result(cells, "smollm2",
                                                                           args.seeds[0]))},
                                       indent=1, default=float) + "\n")
    res = {m: r for m in ("toy", "smollm2") if (r := as_result(cells, m, args.seeds[0]))}
    fed = args.out / ("federated_quick.json" if args.quick else "federated.json")
    if fed.exists():
        res["federated"] = json.loads(fed.read_text())
    print(f"# seed {args.seeds[0]}")
    report(res)
    seed_summary(cells)
    if not args.no_plots:
        for png in plot_all(res, IMG, suffix="_quick" if args.quick else ""):
            print("wrote", png)
    print(f"\nresults in {cells.path}")


if __name__ == "__main__":
    main()
