"""SparseSSM (arXiv 2506.09613) claim experiment on the pre-trained byte Mamba.

Prunes every layer's ``A_log`` of ``flowerbed pretrain sparsessm_mamba``
(d_model 64, 4 layers, D 128, N 16, trained here on glosses / fortunes /
stdlib code) and scores held-out per-byte perplexity:

- ``main``: 50 % unstructured, every method, calibration seeds (``--seeds``);
- ``curve``: sparsity 10-90 % per method (first seed);
- ``nm``: 2:4 per method; ``structured``: 25 / 50 % state columns;
- ``federated``: the three sources as clients; summed client statistics vs
  pooled (masks compared), layer-sequential vs one-round calibration;
- ``cloze``: zero-shot 4-way continuation choice on held-out windows;
- ``timing``: structured 50 % vs dense inference time and memory, and our
  scan vs transformers' reference path.

Cells are appended to ``benchmarks/results/sparsessm/cells.jsonl`` and skipped
when present (resumable); ``--report-only`` rebuilds the table and plot.

    nice -n 10 env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
        .venv/bin/python benchmarks/methods/sparsessm_experiment.py [--seeds 0 1 2] [--report-only]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "sparsessm"
IMG = ROOT / "docs" / "methods" / "img" / "sparsessm_curve.png"
METHODS = ("sparsessm", "uniform_time", "magnitude", "random", "sparsegpt")
#: README table of the paper, Mamba-130M WikiText2, 50 % unstructured A_log.
PAPER = {"dense": 20.60, "sparsessm": 21.26, "magnitude": 740.3, "sparsegpt": 2.4e7}


def load_cells(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    cells = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            cells[row["key"]] = row
    return cells


class Runner:
    """Shared model, data and the resumable cell log."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        from flowerbed.methods.sparsessm.data import SparseSsmTextParams, sparsessm_text
        from flowerbed.methods.sparsessm.model import SparseSsmModelParams, load_model

        torch.set_num_threads(1)
        self.args = args
        self.path = OUT / "cells.jsonl"
        self.cells = load_cells(self.path)
        self.dense = load_model(SparseSsmModelParams())
        self.data = sparsessm_text(SparseSsmTextParams(n_train=3000, n_test=args.eval_windows),
                                   seed=0)
        self.test = self.data.x_test

    def calib(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``n_calib`` training windows (inputs) of one calibration seed, and their sources."""
        pick = np.random.default_rng([7, seed]).choice(len(self.data.x_train),
                                                       self.args.n_calib, replace=False)
        return self.data.x_train[pick, :-1], self.data.groups_train[pick]

    def cell(self, key: str, fn: Any) -> dict[str, Any]:
        if key in self.cells:
            return self.cells[key]
        start = time.perf_counter()
        row = {"key": key, **fn(), "seconds": round(time.perf_counter() - start, 2)}
        with self.path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        self.cells[key] = row
        print(f"  {key}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in row.items() if k != "key"), flush=True)
        return row

    def prune(self, method: str, pattern: str, sparsity: float, seed: int,
              sequential: bool = True, clients: bool = False) -> tuple[Any, Any]:
        from flowerbed.methods.sparsessm import algorithm as ss
        from flowerbed.methods.sparsessm.algorithm_scan import collect_layer_stats, merge_stats

        model = copy.deepcopy(self.dense)
        calib, groups = self.calib(seed)
        parts = [calib[groups == g] for g in sorted(set(groups))]

        def pooled(ls: Any, ks: Any) -> Any:
            return collect_layer_stats(model, calib, ls, ks)

        def federated(ls: Any, ks: Any) -> Any:
            got = [collect_layer_stats(model, part, ls, ks) for part in parts]
            return {i: merge_stats([g[i] for g in got]) for i in ls}

        spec = ss.PruneSpec(method=method, pattern=pattern, sparsity=sparsity,  # type: ignore[arg-type]
                            sequential=sequential, seed=seed)
        res = ss.prune_model(model, spec, federated if clients else pooled)
        return model, res

    def ppl(self, model: Any, keeps: Any) -> float:
        from flowerbed.methods.sparsessm.algorithm_scan import perplexity

        return perplexity(model, self.test, keeps)


def run_main(r: Runner) -> None:
    print("main: 50% unstructured, seeds", r.args.seeds, flush=True)
    r.cell("dense", lambda: {"ppl": r.ppl(r.dense, None)})
    for seed in r.args.seeds:
        for m in METHODS:
            def go(m: str = m, seed: int = seed) -> dict[str, Any]:
                model, res = r.prune(m, "unstructured", 0.5, seed)
                return {"ppl": r.ppl(model, res.keeps)}
            r.cell(f"unstructured/{m}/0.5/{seed}", go)


def run_curve(r: Runner) -> None:
    print("curve: sparsity sweep, seed", r.args.seeds[0], flush=True)
    seed = r.args.seeds[0]
    for s in r.args.sparsities:
        for m in r.args.curve_methods:
            def go(m: str = m, s: float = s) -> dict[str, Any]:
                model, res = r.prune(m, "unstructured", s, seed)
                return {"ppl": r.ppl(model, res.keeps)}
            r.cell(f"unstructured/{m}/{s:g}/{seed}", go)


def run_patterns(r: Runner) -> None:
    seed = r.args.seeds[0]
    print("nm 2:4 and structured, seed", seed, flush=True)
    for m in r.args.curve_methods:
        def go(m: str = m) -> dict[str, Any]:
            model, res = r.prune(m, "nm", 0.5, seed)
            return {"ppl": r.ppl(model, res.keeps)}
        r.cell(f"nm/{m}/0.5/{seed}", go)
    for s in (0.25, 0.5):
        for m in ("sparsessm", "magnitude", "random"):
            def go2(m: str = m, s: float = s) -> dict[str, Any]:
                model, res = r.prune(m, "structured", s, seed)
                return {"ppl": r.ppl(model, res.keeps),
                        "state": int(model.backbone.layers[0].mixer.A_log.shape[1])}
            r.cell(f"structured/{m}/{s:g}/{seed}", go2)


def run_federated(r: Runner) -> None:
    import torch

    print("federated: clients = sources; sequential vs one-round", flush=True)
    for seed in r.args.seeds:
        def go(seed: int = seed) -> dict[str, Any]:
            m_pool, r_pool = r.prune("sparsessm", "unstructured", 0.5, seed)
            m_fed, r_fed = r.prune("sparsessm", "unstructured", 0.5, seed, clients=True)
            m_one, r_one = r.prune("sparsessm", "unstructured", 0.5, seed, sequential=False,
                                   clients=True)
            same = all(torch.equal(a, b) for a, b in zip(r_pool.keeps, r_fed.keeps, strict=True))
            return {"ppl_pooled": r.ppl(m_pool, r_pool.keeps),
                    "ppl_federated": r.ppl(m_fed, r_fed.keeps),
                    "ppl_one_round": r.ppl(m_one, r_one.keeps), "masks_equal": bool(same),
                    "rounds_sequential": r_fed.rounds, "rounds_one_round": r_one.rounds,
                    "clients": len(set(r.calib(seed)[1]))}
        r.cell(f"federated/sparsessm/0.5/{seed}", go)


def cloze_items(r: Runner, per_source: int = 40, prefix: int = 96, cont: int = 32) -> Any:
    """4-way continuation choice from held-out windows, per source (distractors: same source)."""
    from flowerbed.methods.sparsessm.data import SparseSsmTextParams, source_blocks

    blocks = source_blocks(SparseSsmTextParams())
    gen = np.random.default_rng(11)
    items = {}
    for src, (_, held) in blocks.items():
        pick = gen.choice(len(held), per_source * 4, replace=False).reshape(per_source, 4)
        seqs = np.stack([np.concatenate([np.repeat(held[row[0], None, :prefix], 4, 0),
                                         held[row, prefix:prefix + cont]], 1) for row in pick])
        items[src] = seqs  # (q, 4, prefix + cont); option 0 is the true continuation
    return items, prefix


def cloze_accuracy(model: Any, keeps: Any, items: Any, prefix: int) -> dict[str, float]:
    import torch

    from flowerbed.methods.sparsessm.algorithm_scan import model_logits

    out = {}
    for src, seqs in items.items():
        flat = torch.as_tensor(seqs.reshape(-1, seqs.shape[-1]), dtype=torch.long)
        scores = []
        with torch.no_grad():
            for s in range(0, len(flat), 32):
                ids = flat[s:s + 32]
                lp = model_logits(model, ids[:, :-1], keeps).log_softmax(-1)
                tok = lp.gather(-1, ids[:, 1:, None])[..., 0][:, prefix - 1:]
                scores.append(tok.sum(-1))
        score = torch.cat(scores).reshape(seqs.shape[0], 4)
        out[f"acc_{src}"] = float((score.argmax(-1) == 0).float().mean())
    out["acc_mean"] = float(np.mean(list(out.values())))
    return out


def run_cloze(r: Runner) -> None:
    print("cloze: zero-shot continuation choice", flush=True)
    items, prefix = cloze_items(r)
    seed = r.args.seeds[0]
    r.cell("cloze/dense", lambda: cloze_accuracy(r.dense, None, items, prefix))
    for m in r.args.curve_methods:
        def go(m: str = m) -> dict[str, Any]:
            model, res = r.prune(m, "unstructured", 0.5, seed)
            return cloze_accuracy(model, res.keeps, items, prefix)
        r.cell(f"cloze/{m}/0.5/{seed}", go)


def run_ffn(r: Runner) -> None:
    """RECONSTRUCTED: SparseGPT on the linear layers, uniform vs sensitivity-allocated."""
    from flowerbed.methods.sparsessm import algorithm_ffn as ffn

    seed = r.args.seeds[0]
    print("ffn: SparseGPT on in/x/dt/out_proj at 50 % overall, seed", seed, flush=True)
    pick = np.random.default_rng([7, seed]).choice(len(r.data.x_train), r.args.n_calib,
                                                   replace=False)
    rows = r.data.x_train[pick]

    def go(mode: str) -> dict[str, Any]:
        model = copy.deepcopy(r.dense)
        out: dict[str, Any] = {}
        if mode == "uniform":
            alloc = dict.fromkeys(ffn.COMPONENTS, 0.5)
        else:
            deltas = ffn.sensitivity(model, rows)
            alloc = ffn.allocate(0.5, ffn.component_sizes(model), deltas)
            out.update({f"delta_{c}": v for c, v in deltas.items()})
        ffn.prune_linear(model, rows[:, :-1], alloc)
        out.update({f"s_{c}": v for c, v in alloc.items()})
        out["ppl"] = r.ppl(model, None)
        return out

    for mode in ("uniform", "allocated"):
        r.cell(f"ffn/{mode}/0.5/{seed}", lambda mode=mode: go(mode))


def best_time(fn: Any, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run_timing(r: Runner) -> None:
    import torch

    from flowerbed.methods.sparsessm.algorithm_scan import model_logits

    print("timing: structured vs dense; our scan vs transformers' path", flush=True)
    ids = torch.as_tensor(r.test[:16, :-1], dtype=torch.long)

    def structured() -> dict[str, Any]:
        model, _ = r.prune("sparsessm", "structured", 0.5, r.args.seeds[0])
        out = {}
        for name, m in (("dense", r.dense), ("structured50", model)):
            with torch.no_grad():
                out[f"s_{name}"] = best_time(lambda m=m: model_logits(m, ids))
            d, n = m.backbone.layers[0].mixer.A_log.shape
            out[f"state_mb_{name}"] = 16 * 128 * d * n * 4 * len(m.backbone.layers) / 2**20
            out[f"params_{name}"] = int(sum(p.numel() for p in m.parameters()))
        return out

    def scan() -> dict[str, Any]:
        m = r.dense
        out = {}
        with torch.no_grad():
            out["fwd_s_ours"] = best_time(lambda: model_logits(m, ids), 2)
            out["fwd_s_transformers"] = best_time(lambda: m(ids).logits, 2)

        def step(fn: Any) -> None:
            logits = fn()
            torch.nn.functional.cross_entropy(logits.reshape(-1, 256),
                                              ids[:, 1:].reshape(-1)).backward()
            m.zero_grad()
        out["train_step_s_ours"] = best_time(lambda: step(lambda: model_logits(m, ids[:, :-1])),
                                             1)
        out["train_step_s_transformers"] = best_time(lambda: step(lambda: m(ids[:, :-1]).logits),
                                                     1)
        return out

    r.cell("timing/structured", structured)
    r.cell("timing/scan", scan)


def stat(cells: dict[str, Any], prefix: str, field: str = "ppl") -> tuple[float, float, int]:
    vals = [c[field] for k, c in cells.items() if k.startswith(prefix)]
    if not vals:
        return float("nan"), float("nan"), 0
    return float(np.mean(vals)), float(np.std(vals)), len(vals)


def report(seeds: list[int], sparsities: list[float]) -> None:
    cells = load_cells(OUT / "cells.jsonl")
    if not cells:
        print("no cells yet")
        return
    dense = cells.get("dense", {}).get("ppl", float("nan"))
    from flowerbed.methods.sparsessm.model import SparseSsmPretrainParams, default_path

    src = default_path(SparseSsmPretrainParams()) / "flowerbed_source.json"
    if src.exists():
        meta = json.loads(src.read_text())["metrics"]
        print(f"pre-trained Mamba: held-out ppl {meta['test_ppl']:.3f}; unigram "
              f"{meta['unigram_ppl']:.2f}, bigram {meta['bigram_ppl']:.2f}; "
              f"{meta['params']:.0f} params, {meta['seconds']:.0f} s")
    print("\n50% unstructured A_log, held-out per-byte ppl (mean ± std over calibration seeds)")
    print("| method | paper (Mamba-130M, WikiText2) | ours | ours / dense |")
    print("|---|---|---|---|")
    print(f"| dense | {PAPER['dense']} | {dense:.3f} | 1.000 |")
    for m in METHODS:
        mu, sd, n = stat(cells, f"unstructured/{m}/0.5/")
        paper = PAPER.get(m, "—")
        print(f"| {m} | {paper:g} | {mu:.4f} ± {sd:.4f} (n={n}) | {mu / dense:.4f} |"
              if isinstance(paper, float) else
              f"| {m} | — | {mu:.4f} ± {sd:.4f} (n={n}) | {mu / dense:.4f} |")
    print("\nsparsity curve (seed", seeds[0], ")")
    print("| method | " + " | ".join(f"{s:g}" for s in sparsities) + " |")
    print("|---|" + "---|" * len(sparsities))
    for m in METHODS:
        row = [cells.get(f"unstructured/{m}/{s:g}/{seeds[0]}", {}).get("ppl", float("nan"))
               for s in sparsities]
        print(f"| {m} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    print("\nN:M 2:4 and structured (state columns removed)")
    for k, c in sorted(cells.items()):
        if k.startswith(("nm/", "structured/")):
            print(f"  {k}: ppl {c['ppl']:.3f}" + (f" (N={c['state']})" if "state" in c else ""))
    for k, c in sorted(cells.items()):
        if k.startswith(("federated/", "cloze/", "timing/", "ffn/")):
            print(f"  {k}: " + ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else f"{a}={b}"
                                         for a, b in c.items() if a not in ("key",)))
    plot(cells, dense, seeds[0], sparsities)


def plot(cells: dict[str, Any], dense: float, seed: int, sparsities: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = cells.get(f"unstructured/magnitude/1/{seed}", {}).get("ppl")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6))
    for m in METHODS:
        xs = [s for s in sparsities if f"unstructured/{m}/{s:g}/{seed}" in cells]
        ys = [cells[f"unstructured/{m}/{s:g}/{seed}"]["ppl"] for s in xs]
        ax.plot([100 * s for s in xs], ys, marker="o", label=m)
    for a in (ax, bx):
        a.axhline(dense, color="k", ls="--", lw=1, label="dense")
        if floor is not None:
            a.axhline(floor, color="grey", ls=":", lw=1.5, label="all of A_log pruned")
        a.set_ylabel("held-out per-byte perplexity")
    ax.set_xlabel("A_log sparsity (%), every layer")
    ax.set_title("unstructured")
    ax.legend(fontsize=8)
    short = {"sparsessm": "SparseSSM", "magnitude": "MP", "random": "random",
             "sparsegpt": "SparseGPT"}
    labels, vals = [], []
    for pattern, s in (("nm", "0.5"), ("structured", "0.25"), ("structured", "0.5")):
        for m in short:
            hit = cells.get(f"{pattern}/{m}/{s}/{seed}")
            if hit:
                tag = "2:4" if pattern == "nm" else f"cols {float(s):.0%}"
                labels.append(f"{tag}\n{short[m]}")
                vals.append(hit["ppl"])
    bx.bar(range(len(vals)), vals, color="tab:blue")
    bx.set_xticks(range(len(vals)), labels, fontsize=7, rotation=45)
    bx.set_ylim(dense - 0.02, max([*vals, floor or dense]) + 0.02)
    bx.set_title("2:4 and structured (state columns removed)")
    bx.legend(fontsize=8)
    fig.tight_layout()
    IMG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG, dpi=110)
    print("plot:", IMG.relative_to(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sparsities", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--curve-methods", nargs="+", default=list(METHODS),
                    help="methods of the sparsity curve and the cloze cells")
    ap.add_argument("--n-calib", type=int, default=16)
    ap.add_argument("--eval-windows", type=int, default=200)
    ap.add_argument("--parts", nargs="+", default=["main", "federated", "curve", "patterns",
                                                   "cloze", "timing"])
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        start = time.perf_counter()
        r = Runner(args)
        parts = {"main": run_main, "curve": run_curve, "patterns": run_patterns,
                 "federated": run_federated, "cloze": run_cloze, "timing": run_timing,
                 "ffn": run_ffn}
        for name in args.parts:
            parts[name](r)
        print(f"wall {time.perf_counter() - start:.0f} s")
    report(args.seeds, args.sparsities)


if __name__ == "__main__":
    main()
