"""Report plots (PNG via matplotlib, when installed): curves per round and final bars."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowerbed.platform.report.runs import RunInfo
from flowerbed.platform.report.tables import _fmt_value, group_label, mean_std

#: Round series preferred for a metric's curve, most global first.
CURVE_PREFIXES = ("server_eval/test/", "evaluate/local_test/", "evaluate/test/")


def curve(rows: Sequence[dict[str, Any]], metric: str) -> tuple[str, dict[int, float]] | None:
    """Extract the per-round series of ``metric`` (``test/accuracy``) from metrics rows.

    Prefers the server's evaluation of the global model, then the clients'
    weighted evaluation; returns the column used and ``{round: value}``.
    """
    base = metric.split("/")[-1]
    for column in (p + base for p in CURVE_PREFIXES):
        series = _series(rows, column)
        if series:
            return column, series
    return None


def _series(rows: Sequence[dict[str, Any]], column: str) -> dict[int, float]:
    """``{round: value}`` of one metrics column, rounds ascending."""
    series = {int(r["round"]): float(r[column]) for r in rows if column in r and "round" in r}
    return dict(sorted(series.items()))


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(run: RunInfo, metric: str, path: Path) -> bool:
    """One run: the metric per round, baselines' final values as dashed lines."""
    plt, found = _pyplot(), curve(run.rows, metric)
    if plt is None or found is None:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for k, prefix in enumerate(CURVE_PREFIXES):
        series = _series(run.rows, prefix + metric.split("/")[-1])
        if series:
            style = {"marker": "o"} if k == 0 else {"marker": ".", "alpha": 0.6}
            ax.plot(list(series), list(series.values()), color="C0", label=prefix.rstrip("/"),
                    linestyle="-" if k == 0 else ":", **style)
    for i, (source, values) in enumerate(run.final().items()):
        if source != "federated" and metric in values:
            ax.axhline(values[metric], linestyle="--", color=f"C{i}", label=source)
    where = " ".join(f"{k}={_fmt_value(v)}" for k, v in run.overrides.items())
    _finish(ax, fig, path, f"{run.scenario.get('name', '')} · {run.name} {where}", metric)
    plt.close(fig)
    return True


def _finish(ax: Any, fig: Any, path: Path, title: str, metric: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _group_curves(
    runs: Sequence[RunInfo], metric: str, keys: Sequence[str]
) -> dict[str, list[dict[int, float]]]:
    groups: dict[str, list[dict[int, float]]] = {}
    for run in runs:
        found = curve(run.rows, metric)
        if found is not None:
            groups.setdefault(group_label(run, keys), []).append(found[1])
    return groups


def plot_curves(runs: Sequence[RunInfo], metric: str, keys: Sequence[str], path: Path) -> bool:
    """All groups: mean federated curve over each group's runs, ±std band."""
    plt, groups = _pyplot(), _group_curves(runs, metric, keys)
    if plt is None or not groups:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, series) in enumerate(groups.items()):
        rounds = sorted({r for s in series for r in s})
        stats = [mean_std([s[r] for s in series if r in s]) for r in rounds]
        means = [m for m, _ in stats]
        stds = [0.0 if math.isnan(s) else s for _, s in stats]
        ax.plot(rounds, means, marker="o", color=f"C{i}", label=f"{label} (n={len(series)})")
        lo = [m - s for m, s in zip(means, stds, strict=True)]
        hi = [m + s for m, s in zip(means, stds, strict=True)]
        ax.fill_between(rounds, lo, hi, color=f"C{i}", alpha=0.2)
    _finish(ax, fig, path, f"federated {metric} per round (mean ± std)", metric)
    plt.close(fig)
    return True


def plot_bars(rows: Sequence[dict[str, Any]], metric: str, path: Path) -> bool:
    """Plot final ``metric`` per group (x) and source (bars), with std error bars."""
    plt = _pyplot()
    if plt is None or not rows:
        return False
    groups = list(dict.fromkeys(r["group"] for r in rows))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    width = 0.8 / len(sources)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(groups) + 2), 4.5))
    for j, source in enumerate(sources):
        by_group = {r["group"]: r for r in rows if r["source"] == source}
        means = [by_group[g][f"{metric} mean"] if g in by_group else math.nan for g in groups]
        stds = [by_group[g][f"{metric} std"] if g in by_group else math.nan for g in groups]
        xs = [i + (j - (len(sources) - 1) / 2) * width for i in range(len(groups))]
        errs = [0.0 if math.isnan(s) else s for s in stds]
        ax.bar(xs, means, width, yerr=errs, capsize=3, label=source, color=f"C{j}")
    ax.set_xticks(range(len(groups)), groups, rotation=15 if len(groups) > 3 else 0, fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"final {metric} (mean ± std)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(sources))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
