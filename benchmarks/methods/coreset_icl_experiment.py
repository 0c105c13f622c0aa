"""Coreset selection for few-shot ICL: PACS (reconstructed) vs baselines, CPU experiment.

Paper: "Unsupervised Process-Aware Coreset Selection for In-Context Learning", ICML 2026
poster 64776 (abstract only; spec methods_b.md §6). Claim checked: PACS gives better
downstream ICL than state-of-the-art coreset selectors (the paper: on 7 NLP datasets),
without the peripheral, locally redundant coresets of geometry-based selection.

Parts (each writes to --out, default benchmarks/results/coreset_icl/):

- ``lm``: SmolLM2-135M ICL accuracy vs budget (8/18/50/100), 4 offline tasks, 5 seeds,
  every selector; k = 4 demonstrations per query, retrieved by MiniLM cosine and drawn at
  random from the bank (10 queries share a draw). One JSON line per cell
  (``lm_cells.jsonl``); a rerun skips the cells already there.
- ``proxy``: the spec's ICL proxy (similarity-weighted vote of the 4 most similar
  annotated examples) on the same pools with 300 queries, every selector, plus the
  spec's digits/PCA-32 check with its numbers printed beside ours.
- ``timing``: selection time for 10k and 100k synthetic 384-d pools.
- ``federated``: the ``coreset_icl`` scenarios, each run once per seed: local-only
  banks, the merged (or server re-selected) bank and selection on the pooled data, in
  one run on the same queries (``federated.json``).
- ``report``: tables (printed, ``report.md``) and plots from the files above.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/coreset_icl_experiment.py lm
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/coreset_icl_experiment.py proxy
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/coreset_icl_experiment.py timing
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/methods/coreset_icl_experiment.py federated
    .venv/bin/python benchmarks/methods/coreset_icl_experiment.py report
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from flowerbed.core import registry
from flowerbed.core.seeds import derive_seed
from flowerbed.data.base import ClientData
from flowerbed.methods.coreset_icl import algorithm as cs
from flowerbed.methods.coreset_icl import algorithm_baselines as cb
from flowerbed.methods.coreset_icl import algorithm_demos as cd
from flowerbed.methods.coreset_icl.learner import CoresetIclLearner, CoresetIclParams, Pool

OUT = Path(__file__).resolve().parents[1] / "results" / "coreset_icl"
BUDGETS = (8, 18, 50, 100)
SEEDS = (0, 1, 2, 3, 4)
LM_METHODS = (
    "pacs",
    "pacs_full",
    "random",
    "kmeans",
    "kcenter",
    "fast_votek",
    "votek",
    "subsa",
    "mfl",
)
PROXY_METHODS = (
    "pacs",
    "pacs_fixed",
    "pacs_full",
    "random",
    "kmeans",
    "kcenter",
    "diversity",
    "fast_votek",
    "subsa",
    "mfl",
)
SUPERSENSE6 = (
    "noun.animal",
    "noun.plant",
    "noun.food",
    "noun.person",
    "noun.location",
    "noun.artifact",
)
FORTUNES6 = ("computers", "food", "law", "love", "politics", "sports")
#: task -> (dataset spec, demonstration template, label words)
TASKS: dict[str, tuple[dict, str, tuple[str, ...]]] = {
    "supersense": (
        {"name": "wordnet_supersense", "lexnames": SUPERSENSE6},
        "Definition: {x}\nCategory: {y}\n\n",
        (),
    ),
    "fortunes": ({"name": "fortunes", "categories": FORTUNES6}, "Quote: {x}\nTopic: {y}\n\n", ()),
    "sentiment": ({"name": "negation_sentiment"}, "Review: {x}\nSentiment: {y}\n\n", ()),
    "antsyn": (
        {"name": "antonym_synonym"},
        "Words: {x}\nRelation: {y}\n\n",
        ("opposite", "similar"),
    ),
}
#: spec methods_b.md §6.4 (digits, PCA-32, kNN-vote proxy): method -> (B=18, B=50) accuracy
SPEC_DIGITS = {
    "random": (0.542, 0.780),
    "kcenter": (0.654, 0.851),
    "kmeans": (0.811, 0.893),
    "fast_votek": (0.614, 0.784),
    "subsa": (0.330, 0.709),
    "pacs_fixed": (0.760, 0.879),
    "pacs_full": (0.822, 0.891),
}
SPEC_DIGITS_PERIPHERAL = {
    "random": (0.04, 0.08),
    "kcenter": (0.29, 0.40),
    "kmeans": (0.00, 0.00),
    "fast_votek": (0.04, 0.04),
    "subsa": (0.21, 0.19),
    "pacs_fixed": (0.00, 0.00),
}


def client_data(task: str, seed: int, pool: int, queries: int) -> ClientData:
    spec, _, _ = TASKS[task]
    entry = registry.get("dataset", spec["name"])
    ds = entry.target(
        entry.params.model_validate({**spec, "n_train": pool, "n_test": queries}), seed=seed
    )
    return ClientData(
        -1,
        ds.x_train,
        ds.y_train,
        ds.x_test,
        ds.y_test,
        ds.meta,
        text_train=ds.text_train,
        text_test=ds.text_test,
    )


def learner(task: str, **kw) -> CoresetIclLearner:
    _, template, words = TASKS[task]
    params = CoresetIclParams(
        template=template, label_words=words, max_words=25, random_share=10, **kw
    )
    return CoresetIclLearner(params, scenario=None)  # type: ignore[arg-type]


def select(method: str, pool: Pool, budget: int, seed: int, conf=None) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    idx = cb.select(
        method,
        pool.emb,
        budget,
        seed=derive_seed(seed, "bench", method, budget),
        graph=pool.graph,
        confidence=conf,
    )
    return np.asarray(idx), time.perf_counter() - start


def diagnostics(pool: Pool, idx: np.ndarray) -> dict:
    assert pool.density is not None
    return {
        "peripheral": cd.peripheral_fraction(pool.density, idx),
        "redundancy": cd.redundancy(pool.emb, idx),
        "classes": len(set(pool.y[idx].tolist())),
    }


def done_cells(path: Path) -> set[tuple]:
    if not path.exists():
        return set()
    return {
        (r["task"], r["seed"], r["method"], r["budget"])
        for r in map(json.loads, path.read_text().splitlines())
    }


# --- lm ------------------------------------------------------------------------------------


def run_lm(args: argparse.Namespace) -> None:
    path = args.out / "lm_cells.jsonl"
    have = done_cells(path)
    for seed in args.seeds:
        for task in args.tasks:
            todo = [
                (m, b) for b in args.budgets for m in args.methods if (task, seed, m, b) not in have
            ]
            zero = (task, seed, "zero_shot", 0) not in have
            if not todo and not zero:
                continue
            data = client_data(task, seed, args.pool, args.queries)
            lrn = learner(task, selectors=tuple(args.methods))
            pool = Pool(lrn, data)
            q = args.lm_queries
            pool.qx, pool.qy, pool.qemb = pool.qx[:q], pool.qy[:q], pool.qemb[:q]
            words = lrn.words(data)
            cells = [("zero_shot", 0)] * zero + todo
            for method, budget in cells:
                start = time.perf_counter()
                if method == "zero_shot":
                    idx, sel_s = np.zeros(0, dtype=np.int64), 0.0
                else:
                    conf = (
                        lrn.confidence(pool, words, derive_seed(seed, "votek", budget))
                        if method == "votek"
                        else None
                    )
                    idx, sel_s = select(method, pool, budget, seed, conf)
                accs = lrn.score_bank(
                    pool,
                    [pool.x[i] for i in idx],
                    pool.y[idx],
                    pool.emb[idx],
                    words,
                    seed,
                    f"{method}@{budget}",
                )
                row = {
                    "task": task,
                    "seed": seed,
                    "method": method,
                    "budget": budget,
                    "acc_retrieved": accs[f"acc_retrieved.{method}@{budget}"],
                    "acc_random": accs[f"acc_random.{method}@{budget}"],
                    "n_queries": len(pool.qx),
                    "select_s": sel_s,
                    "scoring": lrn.p.scoring,
                    "wall_s": time.perf_counter() - start,
                    **(diagnostics(pool, idx) if len(idx) >= 2 else {}),
                }
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


# --- proxy ---------------------------------------------------------------------------------


def proxy_cell(emb, y, qemb, qy, idx, graph, num_classes) -> dict:
    pred = cd.knn_vote(emb[idx], y[idx], qemb, 4, num_classes)
    return {
        "acc": float(np.mean(pred == qy)),
        "peripheral": cd.peripheral_fraction(graph.density(cs.DENSITY_K), idx),
        "redundancy": cd.redundancy(emb, idx),
    }


def run_proxy(args: argparse.Namespace) -> None:
    rows = []
    for seed in args.seeds:
        for task in args.tasks:
            data = client_data(task, seed, args.pool, args.queries)
            pool = Pool(learner(task, selectors=PROXY_METHODS, embedding=args.embedding), data)
            for budget in args.budgets:
                for method in PROXY_METHODS:
                    idx, _ = select(method, pool, budget, seed)
                    rows.append(
                        {
                            "task": task,
                            "seed": seed,
                            "method": method,
                            "budget": budget,
                            **proxy_cell(
                                pool.emb,
                                pool.y,
                                pool.qemb,
                                pool.qy,
                                idx,
                                pool.graph,
                                len(data.meta.class_names or ()),
                            ),
                        }
                    )
            print(f"proxy {task} seed {seed} done", flush=True)
    if args.embedding == "minilm":
        rows += digits_check(args)
    suffix = "" if args.embedding == "minilm" else f"_{args.embedding}"
    name = f"proxy_cells{suffix}.json"
    (args.out / name).write_text(json.dumps(rows, indent=1))


def digits_check(args: argparse.Namespace) -> list[dict]:
    """The spec's probe: digits -> PCA-32 -> unit norm; pool 1300, test 497, 5 splits."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    x, y = load_digits(return_X_y=True)
    rows = []
    for split in range(5):
        order = np.random.default_rng(split).permutation(len(y))
        tr, te = order[:1300], order[1300:]
        pca = PCA(32, random_state=split).fit(x[tr])
        emb, qemb = cs.unit_rows(pca.transform(x[tr])), cs.unit_rows(pca.transform(x[te]))
        graph = cs.knn_graph(emb, cb.VOTEK_K)
        for budget in (18, 50):
            for method in PROXY_METHODS:
                idx = np.asarray(cb.select(method, emb, budget, seed=split, graph=graph))
                rows.append(
                    {
                        "task": "digits",
                        "seed": split,
                        "method": method,
                        "budget": budget,
                        **proxy_cell(emb, y[tr], qemb, y[te], idx, graph, 10),
                    }
                )
    return rows


# --- timing --------------------------------------------------------------------------------


def synthetic_pool(n: int, d: int = 384, centers: int = 50, seed: int = 0) -> np.ndarray:
    gen = np.random.default_rng(seed)
    c = gen.standard_normal((centers, d))
    sizes = gen.dirichlet(np.ones(centers))
    lab = gen.choice(centers, n, p=sizes)
    return cs.unit_rows(c[lab] + 0.9 * gen.standard_normal((n, d)))


def run_timing(args: argparse.Namespace) -> None:
    rows: list[dict] = []
    budget = 100
    for n in args.sizes:
        emb = synthetic_pool(n)
        reach = cs.kernel_reach(n, budget, "budget")
        start, cpu = time.perf_counter(), time.process_time()
        graph = cs.knn_graph(emb, cb.VOTEK_K, ranks=(reach,))
        row = {
            "n": n,
            "budget": budget,
            "load_avg": os.getloadavg()[0],
            "knn_graph_k150_s": time.perf_counter() - start,
            "knn_graph_k150_cpu_s": time.process_time() - cpu,
        }
        for method in (
            "pacs",
            "pacs_dense",
            "pacs_full",
            "pacs_full_dense",
            "random",
            "kmeans",
            "kcenter",
            "fast_votek",
            "subsa",
            "mfl",
        ):
            if method == "mfl" and n > args.mfl_max:
                row["mfl_s"] = None  # exact facility location touches all n^2 pairs
                continue
            start, cpu = time.perf_counter(), time.process_time()
            if method in ("pacs_full", "pacs_full_dense"):
                sel = cs.pacs_select(
                    emb, budget, graph=graph, support="full", lazy=method == "pacs_full"
                )
                row[f"{method}_evals"] = sel.evaluations
            elif method == "pacs_dense":
                sel = cs.pacs_select(emb, budget, graph=graph, lazy=False)
                row["pacs_dense_evals"] = sel.evaluations
            elif method == "pacs":
                sel = cs.pacs_select(emb, budget, graph=graph)
                row["pacs_lazy_evals"] = sel.evaluations
                lazy_idx = sel.indices
            else:
                cb.select(method, emb, budget, seed=0, graph=graph)
            row[f"{method}_s"] = time.perf_counter() - start
            row[f"{method}_cpu_s"] = time.process_time() - cpu
            if method == "pacs_dense":
                row["lazy_equals_dense"] = bool(np.array_equal(lazy_idx, sel.indices))
            print(n, method, round(row[f"{method}_s"], 2), flush=True)
        (args.out / "timing.json").write_text(json.dumps([*rows, row], indent=1))
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "timing.json").write_text(json.dumps(rows, indent=1))


# --- federated -----------------------------------------------------------------------------


def run_federated(args: argparse.Namespace) -> None:
    import flowerbed

    path = args.out / "federated.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    for scenario in args.scenarios:
        for seed in args.fed_seeds:
            if any(
                r["scenario"] == scenario
                and r["seed"] == seed
                and r.get("overrides", []) == args.fed_set
                for r in rows
            ):
                continue
            start = time.perf_counter()
            result = flowerbed.run(scenario, [f"seed={seed}", *args.fed_set], save=False)
            rows.append(
                {
                    "scenario": scenario,
                    "seed": seed,
                    "overrides": args.fed_set,
                    "wall_s": time.perf_counter() - start,
                    "results": result.summary["results"],
                }
            )
            print(json.dumps(rows[-1], default=float)[:2000], flush=True)
            path.write_text(json.dumps(rows, indent=1, default=float))


# --- report --------------------------------------------------------------------------------


def mean_sd(vals: list[float]) -> str:
    v = np.asarray([x for x in vals if x == x], dtype=float)
    return f"{v.mean():.3f} ± {v.std():.3f}" if len(v) else "—"


def lm_tables(rows: list[dict]) -> list[str]:
    out = []
    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    methods = [m for m in LM_METHODS if any(r["method"] == m for r in rows)]
    for mode in ("acc_retrieved", "acc_random"):
        out += [
            f"\n### SmolLM2 ICL accuracy, {mode.split('_')[1]} demonstrations "
            "(mean ± sd over seeds; best mean per cell in bold)\n"
        ]
        header = "| task | B | seeds | zero-shot | " + " | ".join(methods) + " |"
        out += [header, "|" + "---|" * (4 + len(methods))]
        wins = {m: 0 for m in methods}
        for task in tasks:
            zs = [r[mode] for r in rows if r["task"] == task and r["method"] == "zero_shot"]
            for b in BUDGETS:
                cell = {
                    m: [
                        r[mode]
                        for r in rows
                        if r["task"] == task and r["budget"] == b and r["method"] == m
                    ]
                    for m in methods
                }
                if not any(cell.values()):
                    continue
                means = {m: np.mean(v) for m, v in cell.items() if v}
                best = max(means.values())
                for m, v in means.items():
                    wins[m] += int(v == best)
                counts = sorted({len(v) for v in cell.values() if v})
                seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
                out.append(
                    f"| {task} | {b} | {seeds} | {np.mean(zs):.3f} | "
                    + " | ".join(
                        (
                            f"**{mean_sd(cell[m])}**"
                            if cell[m] and means[m] == best
                            else mean_sd(cell[m])
                        )
                        for m in methods
                    )
                    + " |"
                )
        out.append(
            "\nbest (ties count for each): " + ", ".join(f"{m} {w}" for m, w in wins.items())
        )
        cells = sum(
            1
            for t in tasks
            for b in BUDGETS
            if any(r["task"] == t and r["budget"] == b and r["method"] in methods for r in rows)
        )
        out.append(
            f"\npaper (abstract, no numbers): PACS gives the best ICL on 7 NLP datasets; "
            f"here pacs is best or tied in {wins.get('pacs', 0)} of {cells} "
            f"(task, budget) cells, {mode.split('_')[1]} demonstrations"
        )
    out += [
        "\n### Peripheral share / redundancy of the coresets (LM pools, mean over "
        "tasks and seeds)\n",
        "| B | " + " | ".join(methods) + " |",
        "|" + "---|" * (1 + len(methods)),
    ]
    for b in BUDGETS:
        shares = []
        for m in methods:
            sel = [r for r in rows if r["budget"] == b and r["method"] == m and "peripheral" in r]
            shares.append(
                f"{np.mean([r['peripheral'] for r in sel]):.2f} / "
                f"{np.mean([r['redundancy'] for r in sel]):.2f}"
                if sel
                else "—"
            )
        out.append(f"| {b} | " + " | ".join(shares) + " |")
    return out


def proxy_tables(rows: list[dict]) -> list[str]:
    out = ["\n### kNN-vote proxy (spec §6.4): accuracy / peripheral share, mean over seeds\n"]
    tasks = [t for t in [*TASKS, "digits"] if any(r["task"] == t for r in rows)]
    out += [
        "| task | B | " + " | ".join(PROXY_METHODS) + " |",
        "|" + "---|" * (2 + len(PROXY_METHODS)),
    ]
    wins, beats, n_cells = 0, 0, 0
    for task in tasks:
        for b in BUDGETS:
            cell = {
                m: [r for r in rows if r["task"] == task and r["budget"] == b and r["method"] == m]
                for m in PROXY_METHODS
            }
            if not any(cell.values()):
                continue
            best = max(np.mean([r["acc"] for r in v]) for v in cell.values() if v)
            means = {m: np.mean([r["acc"] for r in v]) for m, v in cell.items() if v}
            n_cells += 1
            wins += int(means.get("pacs", -1.0) == best)
            beats += int(
                all(
                    means.get("pacs", -1.0) >= v
                    for m, v in means.items()
                    if not m.startswith("pacs")
                )
            )
            out.append(
                f"| {task} | {b} | "
                + " | ".join(
                    ("**" if np.mean([r["acc"] for r in v]) == best else "")
                    + f"{np.mean([r['acc'] for r in v]):.3f} / "
                    f"{np.mean([r['peripheral'] for r in v]):.2f}"
                    + ("**" if np.mean([r["acc"] for r in v]) == best else "")
                    if v
                    else "—"
                    for v in cell.values()
                )
                + " |"
            )
    out.append(
        f"\npacs best of all in {wins} of {n_cells} cells; at least as good as every "
        f"non-PACS baseline in {beats} of {n_cells} (paper: best on 7 NLP datasets)"
    )
    dig = [r for r in rows if r["task"] == "digits"]
    if dig:
        out += [
            "\n### Digits check against the spec's probe (accuracy, B = 18 / 50)\n",
            "| method | spec | ours | spec peripheral | ours peripheral |",
            "|---|---|---|---|---|",
        ]
        for m in PROXY_METHODS:
            ours = [
                np.mean([r["acc"] for r in dig if r["method"] == m and r["budget"] == b])
                for b in (18, 50)
            ]
            per = [
                np.mean([r["peripheral"] for r in dig if r["method"] == m and r["budget"] == b])
                for b in (18, 50)
            ]
            spec, sp = SPEC_DIGITS.get(m), SPEC_DIGITS_PERIPHERAL.get(m)
            spec_s = f"{spec[0]:.3f} / {spec[1]:.3f}" if spec else "—"
            sp_s = f"{sp[0]:.2f} / {sp[1]:.2f}" if sp else "—"
            out.append(
                f"| {m} | {spec_s} | {ours[0]:.3f} / {ours[1]:.3f} | {sp_s} | "
                f"{per[0]:.2f} / {per[1]:.2f} |"
            )
    return out


def federated_tables(rows: list[dict]) -> list[str]:
    out = [
        "\n### Federated vs local-only vs centralized selection (same queries, one run each)\n",
        "| scenario | seed | bank | demos | local_only | federated | centralized | "
        "federated - centralized |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        res = r["results"]
        fed = res.get("federated", {})
        names = sorted(
            {
                k.split(".", 1)[1]
                for k in fed
                if k.startswith("test/acc_") and not k.endswith(("_mean", "_std", "_min", "_max"))
            }
        )
        for name in names:
            for mode in ("retrieved", "random"):
                key = f"test/acc_{mode}.{name}"
                if key not in fed:
                    continue
                vals = [
                    res.get(src, {}).get(key) for src in ("local_only", "federated", "centralized")
                ]
                gap = (
                    f"{vals[1] - vals[2]:+.3f}"
                    if vals[1] is not None and vals[2] is not None
                    else "—"
                )
                out.append(
                    f"| {Path(r['scenario']).stem} | {r['seed']} | {name} | {mode} | "
                    + " | ".join("—" if v is None else f"{v:.3f}" for v in vals)
                    + f" | {gap} |"
                )
        out.append(
            f"| {Path(r['scenario']).stem} | {r['seed']} | wall {r['wall_s']:.0f} s | | | | | |"
        )
    for r in rows:
        if r.get("overrides"):
            out.append(
                f"\n{Path(r['scenario']).stem}, seed {r['seed']}: run with "
                + " ".join(f"`{o}`" for o in r["overrides"])
            )
    return out


def plot_lm(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    methods = [m for m in LM_METHODS if any(r["method"] == m for r in rows)]
    fig, axes = plt.subplots(
        3, len(tasks), figsize=(max(10.0, 4.2 * len(tasks)), 11.0), squeeze=False
    )
    colors = plt.get_cmap("tab10")
    for col, task in enumerate(tasks):
        for row_i, mode in enumerate(("acc_retrieved", "acc_random")):
            ax = axes[row_i][col]
            for i, m in enumerate(methods):
                bs = [
                    b
                    for b in BUDGETS
                    if any(
                        r["task"] == task and r["method"] == m and r["budget"] == b for r in rows
                    )
                ]
                ys = [
                    np.mean(
                        [
                            r[mode]
                            for r in rows
                            if r["task"] == task and r["method"] == m and r["budget"] == b
                        ]
                    )
                    for b in bs
                ]
                style = (
                    dict(lw=2.6, color="black")
                    if m == "pacs"
                    else dict(lw=1.2, color=colors(i), alpha=0.85)
                )
                ax.plot(bs, ys, marker="o", ms=3.5, label=m, **style)
            zs = [r[mode] for r in rows if r["task"] == task and r["method"] == "zero_shot"]
            if zs:
                ax.axhline(np.mean(zs), color="grey", ls=":", lw=1, label="zero-shot")
            ax.set_title(f"{task}: {mode.split('_')[1]} demos", fontsize=10)
            ax.set_ylabel("ICL accuracy (SmolLM2-135M)")
        ax = axes[2][col]
        for i, m in enumerate(methods):
            bs = [
                b
                for b in BUDGETS
                if any(r["task"] == task and r["method"] == m and r["budget"] == b for r in rows)
            ]
            ys = [
                np.mean(
                    [
                        r.get("peripheral", np.nan)
                        for r in rows
                        if r["task"] == task and r["method"] == m and r["budget"] == b
                    ]
                )
                for b in bs
            ]
            style = (
                dict(lw=2.6, color="black")
                if m == "pacs"
                else dict(lw=1.2, color=colors(i), alpha=0.85)
            )
            ax.plot(bs, ys, marker="o", ms=3.5, label=m, **style)
        ax.set_title(f"{task}: coreset in the pool's 10% lowest densities", fontsize=10)
        ax.set_ylabel("peripheral share")
    for ax in axes.ravel():
        ax.set_xscale("log")
        ax.set_xticks(BUDGETS, [str(b) for b in BUDGETS])
        ax.set_xlabel("annotation budget B")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=9)
    fig.suptitle("Coreset selection for 4-shot ICL (mean over seeds)")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_report(args: argparse.Namespace) -> None:
    lines = ["# Coreset ICL results"]
    lm_path = args.out / "lm_cells.jsonl"
    if lm_path.exists():
        cells = {}
        for line in lm_path.read_text().splitlines():
            r = json.loads(line)
            cells[(r["task"], r["seed"], r["method"], r["budget"])] = r  # a rerun's line wins
        rows = list(cells.values())
        lines += lm_tables(rows)
        plot_lm(rows, args.out / "lm_accuracy_vs_budget.png")
        if args.out == OUT:  # the figure the method page shows
            page_img = OUT.parents[2] / "docs" / "methods" / "img"
            plot_lm(rows, page_img / "coreset_icl_accuracy_vs_budget.png")
        wall = sum(r["wall_s"] for r in rows)
        lines.append(f"\n{len(rows)} cells, {wall / 3600:.1f} h of cell wall time")
    proxy = args.out / "proxy_cells.json"
    if proxy.exists():
        lines += proxy_tables(json.loads(proxy.read_text()))
    proxy_lm = args.out / "proxy_cells_lm_mean.json"
    if proxy_lm.exists():
        lines += ["\n(the same proxy with SmolLM2 mean-hidden-state embeddings)"]
        lines += proxy_tables(json.loads(proxy_lm.read_text()))
    fed = args.out / "federated.json"
    if fed.exists():
        lines += federated_tables(json.loads(fed.read_text()))
    timing = args.out / "timing.json"
    if timing.exists():
        lines += ["\n### Selection time (s), B = 100, synthetic 384-d pools\n"]
        for row in json.loads(timing.read_text()):
            lines.append(
                f"- n = {row['n']}: "
                + ", ".join(
                    f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in row.items()
                    if k not in ("n", "budget") and v is not None
                )
            )
    text = "\n".join(lines)
    (args.out / "report.md").write_text(text + "\n")
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["lm", "proxy", "timing", "federated", "report"])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    ap.add_argument("--methods", nargs="+", default=list(LM_METHODS), choices=cb.SELECTORS)
    ap.add_argument("--pool", type=int, default=1000, help="unlabelled pool per task and seed")
    ap.add_argument("--queries", type=int, default=300, help="held-out rows (proxy uses all)")
    ap.add_argument("--lm-queries", type=int, default=30, help="of which the LM answers")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument(
        "--mfl-max",
        type=int,
        default=20_000,
        help="timing: largest pool facility location is timed on",
    )
    ap.add_argument(
        "--scenarios",
        nargs="+",
        default=[
            "scenarios/coreset_icl/supersense.yaml",
            "scenarios/coreset_icl/sentiment_reselect.yaml",
        ],
    )
    ap.add_argument("--fed-seeds", type=int, nargs="+", default=[0])
    ap.add_argument(
        "--fed-set",
        nargs="*",
        default=[],
        help="federated: scenario overrides, e.g. learner.selectors=[pacs,random]",
    )
    ap.add_argument(
        "--embedding",
        choices=["minilm", "lm_mean"],
        default="minilm",
        help="proxy: pool embeddings (lm_mean: SmolLM2's mean last hidden state)",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    {
        "lm": run_lm,
        "proxy": run_proxy,
        "timing": run_timing,
        "federated": run_federated,
        "report": run_report,
    }[args.part](args)


if __name__ == "__main__":
    main()
