"""HIPE (arXiv 2506.04943) data efficiency: accuracy vs samples per client per embedding.

Reads the run folders of the ``scenarios/hipe/data_efficiency.yaml`` sweep
(each has ``scenario.resolved.yaml`` and ``summary.json``), averages test
accuracy over seeds for the federated (FedAvg) and centralized runs, prints a
markdown table (mean +- standard deviation over seeds) and writes the plot.

    flowerbed sweep scenarios/hipe/data_efficiency.yaml            # ~60 points, resumable
    python benchmarks/methods/hipe_experiment.py runs/hipe_data_efficiency  # table + plot

The per-seed accuracies are written to ``benchmarks/results/hipe/runs.jsonl`` (one line
per training, embedding, samples per client and seed) for ``benchmarks/claims.py``.

Several sweep roots (e.g. the sweep split over two processes with
``--set sweep.dataset.n_train=[...] --output-dir ...``) may be given at once.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PLOT = ROOT / "docs" / "methods" / "img" / "hipe_data_efficiency.png"
DEFAULT_ROWS = ROOT / "benchmarks" / "results" / "hipe" / "runs.jsonl"
SOURCES = ("centralized", "federated")

Key = tuple[str, int]  # (embedding label, samples per client)
BySeed = dict[str, dict[Key, dict[int, float]]]  # source -> key -> seed -> accuracy


def label(model: dict[str, object]) -> str:
    """Curve name: the embedding, with the place-field sizes for HIPE."""
    if model["pos_emb"] != "hipe":
        return str(model["pos_emb"])
    sigmas = model["hipe_sigmas"]
    text = ",".join(f"{s:g}" for s in sigmas) if isinstance(sigmas, list) else f"{sigmas:g}"
    return f"hipe \u03c3=({text})"


def collect(roots: list[Path]) -> BySeed:
    """Accuracy per source, keyed by (label, samples per client), then by seed."""
    by_seed: dict[str, dict[Key, dict[int, float]]] = {s: defaultdict(dict) for s in SOURCES}
    for root in roots:
        for summary_path in sorted(root.glob("*/summary.json")):
            summary = json.loads(summary_path.read_text())
            scenario = yaml.safe_load((summary_path.parent / "scenario.resolved.yaml").read_text())
            per_client = scenario["dataset"]["n_train"] // scenario["num_clients"]
            key = (label(scenario["model"]), per_client)
            for source in SOURCES:  # a point run twice (two roots) counts once
                acc = summary["results"][source]["test/accuracy"]
                by_seed[source][key][scenario["seed"]] = acc
    return by_seed


def in_seed_order(by_seed: BySeed) -> dict[str, dict[Key, list[float]]]:
    """The values of :func:`collect` as lists in seed order (the tables' input)."""
    return {src: {k: [v[s] for s in sorted(v)] for k, v in keyed.items()}
            for src, keyed in by_seed.items()}


def seed_rows(by_seed: BySeed) -> list[dict[str, object]]:
    """One row per run and seed, for ``benchmarks/claims.py`` to pair (``runs.jsonl``)."""
    return [{"training": src, "embedding": lab, "samples_per_client": n, "seed": seed,
             "accuracy": acc}
            for src, keyed in by_seed.items() for (lab, n), seeds in sorted(keyed.items())
            for seed, acc in sorted(seeds.items())]


def stats(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), sd


def table(results: dict[str, dict[Key, list[float]]]) -> str:
    """Markdown: one row per (source, samples per client), one column per embedding.

    Cells are mean ± sd over seeds, with the seed count in brackets when it is not 3.
    """
    labels = sorted({k[0] for src in results.values() for k in src}, key=_order)
    sizes = sorted({k[1] for src in results.values() for k in src})
    lines = ["| training | samples/client | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for source in SOURCES:
        for n in sizes:
            cells = []
            for lab in labels:
                vals = results[source].get((lab, n), [])
                if not vals:
                    cells.append("-")
                    continue
                mean, sd = stats(vals)
                seeds = "" if len(vals) == 3 else f" ({len(vals)})"
                cells.append(f"{mean:.3f} ± {sd:.3f}{seeds}")
            lines.append(f"| {source} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired(results: dict[str, dict[Key, list[float]]], ref: str = "rope") -> str:
    """Markdown: each HIPE curve minus ``ref`` per seed (same data and initial weights).

    Only sizes where both have all seeds; cells are the mean difference and the
    number of seeds where HIPE is ahead.
    """
    lines = ["| training | samples/client | curve | HIPE - " + ref + " (mean) | HIPE ahead |",
             "|---|---|---|---|---|"]
    for source in SOURCES:
        for (lab, n), vals in sorted(results[source].items(), key=lambda kv: kv[0][1]):
            base = results[source].get((ref, n), [])
            if not lab.startswith("hipe") or len(base) != len(vals):
                continue
            diffs = [h - r for h, r in zip(vals, base, strict=True)]
            ahead = sum(d > 0 for d in diffs)
            lines.append(f"| {source} | {n} | {lab} | {statistics.fmean(diffs):+.3f} | "
                         f"{ahead}/{len(diffs)} |")
    return "\n".join(lines)


def _order(lab: str) -> tuple[int, str]:
    rank = {"sinusoidal": 0, "learned": 1, "rope": 2, "none": 5}
    return rank.get(lab, 3), lab


def plot(results: dict[str, dict[Key, list[float]]], path: Path, chance: float) -> None:
    """Two panels (centralized, federated): accuracy vs samples per client, error bars = sd."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, source in zip(axes, SOURCES, strict=True):
        labels = sorted({k[0] for k in results[source]}, key=_order)
        for i, lab in enumerate(labels):
            sizes = sorted(n for (lb, n) in results[source] if lb == lab)
            ms = [stats(results[source][(lab, n)]) for n in sizes]
            xs = [n * (1 + 0.025 * (i - len(labels) / 2)) for n in sizes]  # dodge
            style = "-" if lab.startswith("hipe") else "--"
            ax.errorbar(xs, [m for m, _ in ms], yerr=[s for _, s in ms], marker="o",
                        ls=style, capsize=3, label=lab)
        ax.axhline(chance, color="grey", lw=0.6, ls=":", label="chance")
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        sizes = sorted({n for (_, n) in results[source]})
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("training sequences per client" if source == "federated"
                      else "training sequences per client (pooled: 10x)")
        ax.set_title("centralized (pooled data)" if source == "centralized"
                     else "federated (FedAvg, 10 clients)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (mean ± sd over seeds)")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle("Multi-scale majority task: positional embedding vs training-set size")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    """Parse arguments, aggregate the sweep, print the table, save the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="sweep folders (runs/<sweep>)")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--chance", type=float, default=1 / 8)
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS,
                        help="write one JSON line per run and seed here")
    args = parser.parse_args()
    by_seed = collect(args.roots)
    results = in_seed_order(by_seed)
    if not any(results[s] for s in SOURCES):
        raise SystemExit(f"no finished runs (summary.json) under {', '.join(map(str, args.roots))}")
    print(table(results))
    print()
    print(paired(results))
    plot(results, args.plot, args.chance)
    args.rows.parent.mkdir(parents=True, exist_ok=True)
    args.rows.write_text("".join(json.dumps(r) + "\n" for r in seed_rows(by_seed)))
    print(f"\nplot: {args.plot}\nper-seed rows: {args.rows}")


if __name__ == "__main__":
    main()
