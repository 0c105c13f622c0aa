"""Hedging on the frontier (arXiv 2605.30997): excess Brier risk vs n and novelty.

Runs ``scenarios/frontier/digits.yaml`` inline over n x novelty (the zoo is trained
once per process and shared by all points) and writes ``table.md``, ``results.csv``
and ``excess_brier.png`` into ``benchmarks/results/frontier/``.

    OMP_NUM_THREADS=1 python benchmarks/methods/frontier_experiment.py           # ~10 min
    OMP_NUM_THREADS=1 python benchmarks/methods/frontier_experiment.py --quick   # smoke
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import flowerbed

OUT = Path(__file__).resolve().parents[1] / "results" / "frontier"
SHOWN = ("erm_all", "erm_frontier", "bench_avg", "gibbs_frontier", "qagg_frontier",
         "qagg_all", "gibbs_fallback", "qagg_fallback")


def run_point(n: int, novelty: float, repeats: int, root: str) -> dict[str, dict[str, float]]:
    """One scenario point; its results keyed by source, ``federated`` renamed to its variant."""
    result = flowerbed.run(
        "scenarios/frontier/digits.yaml",
        [f"strategy.n_labelled={n}", f"partition.novelty={novelty}",
         f"strategy.repeats={repeats}"],
        output_dir=root,
    )
    res = dict(result.summary["results"])
    res["qagg_frontier"] = res.pop("federated")  # the scenario deploys qagg_frontier
    return res


def write_table(rows: list[dict[str, object]]) -> str:
    """Markdown table of mean excess Brier (x1000) per variant."""
    head = "| novelty | n | WM agree | best on frontier | " + " | ".join(SHOWN) + " |"
    lines = [head, "|" + "---|" * (4 + len(SHOWN))]
    for r in rows:
        cells = [f"{float(r[v]) * 1000:.1f}" for v in SHOWN]  # type: ignore[arg-type]
        lines.append(f"| {r['novelty']} | {r['n']} | {float(r['wm']):.3f} | "  # type: ignore[arg-type]
                     f"{int(r['on_front'])} | " + " | ".join(cells) + " |")  # type: ignore[call-overload]
    return "\n".join(lines)


def plot(rows: list[dict[str, object]], novelties: list[float], path: Path) -> None:
    """One panel per novelty: excess Brier vs n (log x) per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(novelties), figsize=(5 * len(novelties), 4), sharey=True)
    for ax, nov in zip(list(axes) if len(novelties) > 1 else [axes], novelties, strict=True):
        sub = [r for r in rows if r["novelty"] == nov]
        for v in SHOWN:
            style = "-" if v.startswith("qagg") else "--" if v.startswith("erm") else ":"
            ax.plot([r["n"] for r in sub], [r[v] for r in sub], style, marker="o", label=v)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xscale("log")
        ax.minorticks_off()
        ns = [int(r["n"]) for r in sub]  # type: ignore[call-overload]
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_title(f"novelty {nov} (WM agreement {float(sub[0]['wm']):.2f})")  # type: ignore[arg-type]
        ax.set_xlabel("labelled samples n of the new client")
    (list(axes) if len(novelties) > 1 else [axes])[0].set_ylabel("excess Brier vs best model")
    axes_list = list(axes) if len(novelties) > 1 else [axes]
    axes_list[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    """Run the grid, write the table, CSV and plot."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="2 n x 2 novelty, 10 draws")
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--replot", action="store_true", help="redraw the PNG from results.csv")
    args = ap.parse_args()
    if args.replot:
        with open(OUT / "results.csv", newline="") as fh:
            old = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
        plot(old, sorted({float(r["novelty"]) for r in old}), OUT / "excess_brier.png")
        return
    ns, novelties, repeats = [5, 10, 20, 80], [0.0, 0.5, 1.0], args.repeats
    if args.quick:
        ns, novelties, repeats = [5, 80], [0.0, 1.0], 10
    OUT.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    start = time.time()
    with tempfile.TemporaryDirectory() as root:
        for nov in novelties:
            for n in ns:
                res = run_point(n, nov, repeats, root)
                diag = res["diagnostics"]
                row: dict[str, object] = {
                    "novelty": nov, "n": n, "wm": diag["frontier/wm_agreement"],
                    "on_front": diag["frontier/target_best_on_frontier"],
                    **{v: res[v]["test/excess_brier"] for v in SHOWN},
                }
                rows.append(row)
                print(f"novelty {nov} n {n}: " + " ".join(f"{v}={row[v]:.4f}" for v in SHOWN),
                      flush=True)
    with open(OUT / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = write_table(rows)
    (OUT / "table.md").write_text(
        f"Mean excess Brier x1000 over {repeats} draws (lower is better; negative beats the "
        f"best single model). {time.time() - start:.0f} s.\n\n{table}\n"
    )
    plot(rows, novelties, OUT / "excess_brier.png")
    print(table)


if __name__ == "__main__":
    main()
