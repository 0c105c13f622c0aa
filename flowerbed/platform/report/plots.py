"""Report plots (PNG via matplotlib, when installed): curves per round, bars, clients.

Curves come in two kinds. ``curves_<metric>`` follow the global model's
evaluation (:data:`CURVE_PREFIXES`) next to the baselines; every other metric
column logged over at least two rounds is drawn by :func:`plot_phases`, one
PNG per ``<split>/<metric>`` with a line per phase, so arms of a method
(``fedspa``, ``screen``...) that log the same quantity share one set of axes.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from flowerbed.platform.report.runs import RunInfo
from flowerbed.platform.report.tables import _number, group_value, mean_std

#: Round series preferred for a metric's curve, most global first.
CURVE_PREFIXES = ("server_eval/test/", "evaluate/local_test/", "evaluate/test/")
#: Beyond this many rounds a curve's markers would hide the line.
MARKER_ROUNDS = 40
#: With more lines than this a legend inside the axes would cover them.
LEGEND_INSIDE = 6
#: Up to this many clients every client id gets a tick.
CLIENT_TICKS = 25

#: ``{"<split>/<metric>": {phase: {round: value}}}``.
RoundColumns = dict[str, dict[str, dict[int, float]]]


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


def round_columns(rows: Sequence[dict[str, Any]]) -> RoundColumns:
    """Every metric column of ``metrics.jsonl``'s rows, by quantity and phase.

    A metric row has a ``round`` and a ``phase`` and names its values
    ``<phase>/<split>/<metric>``; event rows (``replies``, ``baseline_start``)
    are skipped. Quantities and phases keep the order they first appear in;
    rounds are ascending.
    """
    found: RoundColumns = {}
    for row in rows:
        phase, rnd = row.get("phase"), row.get("round")
        if "event" in row or not isinstance(phase, str) or not isinstance(rnd, int):
            continue
        for key, value in row.items():
            if key.startswith(f"{phase}/") and _number(value):
                quantity = key[len(phase) + 1 :]
                found.setdefault(quantity, {}).setdefault(phase, {})[rnd] = float(value)
    return {
        q: {phase: dict(sorted(s.items())) for phase, s in by_phase.items()}
        for q, by_phase in found.items()
    }


def phase_curves(
    rows: Sequence[dict[str, Any]], skip: Collection[str] = ()
) -> list[tuple[str, dict[str, dict[int, float]], dict[str, float]]]:
    """Quantities worth a per-phase plot: ``(quantity, curves, levels)`` each.

    ``curves`` are the phases that logged the quantity in two rounds or more
    (``{phase: {round: value}}``); ``levels`` the phases that logged it once
    (a baseline at the last round), drawn as dashed levels beside the curves
    as :func:`plot_run` draws baselines. A quantity without a curve gets no
    plot. Columns in ``skip`` (``<phase>/<split>/<metric>``, already drawn
    elsewhere) are left out.
    """
    found = []
    for quantity, by_phase in round_columns(rows).items():
        kept = {p: s for p, s in by_phase.items() if f"{p}/{quantity}" not in skip}
        curves = {p: s for p, s in kept.items() if len(s) >= 2}
        levels = {p: next(iter(s.values())) for p, s in kept.items() if len(s) == 1}
        if curves:
            found.append((quantity, curves, levels))
    return found


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
    _finish(ax, fig, path, _run_title(run), metric)
    plt.close(fig)
    return True


def _run_title(run: RunInfo) -> str:
    """``<scenario> · <run folder> <swept key>=<value>...`` (and how far a partial run got)."""
    where = " ".join(f"{k}={readable(v)}" for k, v in run.overrides.items())
    note = f"(partial: {run.progress_note()})" if run.partial else ""
    return " ".join(p for p in (f"{run.scenario.get('name', '')} · {run.name}", where, note) if p)


def plot_phases(
    run: RunInfo,
    quantity: str,
    curves: dict[str, dict[int, float]],
    levels: dict[str, float],
    path: Path,
) -> bool:
    """One quantity of one run per round: a line per phase, once-logged phases dashed."""
    plt = _pyplot()
    if plt is None or not curves:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, (phase, series) in enumerate(curves.items()):
        marker = "o" if len(series) <= MARKER_ROUNDS else None
        # past ten lines the colours repeat, so the line style tells them apart
        style = ("-", ":", "-.")[i // 10 % 3]
        ax.plot(list(series), list(series.values()), color=f"C{i % 10}", marker=marker,
                markersize=4, linestyle=style, label=phase)
    for j, (phase, value) in enumerate(levels.items(), start=len(curves)):
        ax.axhline(value, linestyle="--", color=f"C{j % 10}", label=phase)
    title = f"{_run_title(run)}\n{quantity} per round, by phase"
    _finish(ax, fig, path, title, quantity, outside=len(curves) + len(levels) > LEGEND_INSIDE)
    plt.close(fig)
    return True


def _finish(
    ax: Any, fig: Any, path: Path, title: str, metric: str, outside: bool = False
) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if outside:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
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
            groups.setdefault(readable_group(run, keys), []).append(found[1])
    return groups


def readable(value: Any) -> str:
    """A swept value as a legend shows it: a component block by its name and settings.

    Examples
    --------
    >>> readable({"name": "fedprox", "proximal_mu": 0.1, "fraction_evaluate": 0.0})
    'fedprox (proximal_mu=0.1, fraction_evaluate=0)'
    >>> readable({"name": "fedavg"}), readable([32, 16]), readable({"alpha": 0.5})
    ('fedavg', '[32, 16]', '(alpha=0.5)')
    """
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={readable(v)}" for k, v in value.items() if k != "name")
        if "name" in value:
            return f"{value['name']} ({inner})" if inner else str(value["name"])
        return f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(readable(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def readable_group(run: RunInfo, keys: Sequence[str]) -> str:
    """:func:`.tables.group_label` as a legend reads it: ``strategy=fedprox (proximal_mu=0.1)``."""
    return " ".join(f"{k}={readable(group_value(run, k))}" for k in keys) or "all"


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


def plot_bars(
    rows: Sequence[dict[str, Any]], metric: str, path: Path, names: dict[str, str] | None = None
) -> bool:
    """Plot final ``metric`` per group (x) and source (bars), with std error bars.

    ``names`` maps a row's ``group`` to the tick label shown (:func:`readable_group`).
    """
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
    # Wrapped so that neighbouring groups' labels do not run into each other.
    ticks = ["\n".join(textwrap.wrap((names or {}).get(g, g), 26)) for g in groups]
    ax.set_xticks(range(len(groups)), ticks, rotation=15 if len(groups) > 3 else 0, fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"final {metric} (mean ± std)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    below = 0.06 + 0.045 * max(t.count("\n") + 1 for t in ticks)  # under the tick labels
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -below), ncol=len(sources))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_clients(
    run: RunInfo,
    table: Sequence[dict[str, Any]],
    metric: str,
    lines: dict[str, float],
    path: Path,
) -> bool:
    """A local task's ``metric`` per client as bars, with labelled reference levels.

    ``table`` is :func:`~flowerbed.platform.report.tables.client_table`'s rows;
    ``lines`` maps a label (``mean over clients``, ``centralized``) to a level,
    as :func:`~flowerbed.platform.report.tables.client_lines` computes them.
    """
    plt = _pyplot()
    points = [(int(r["client"]), float(r[metric])) for r in table if metric in r]
    if plt is None or not points:
        return False
    ids, values = [c for c, _ in points], [v for _, v in points]
    fig, ax = plt.subplots(figsize=(min(14.0, max(6.5, 3 + 0.16 * len(ids))), 4.4))
    ax.bar(ids, values, width=0.8, color="C0", alpha=0.85, label=f"clients (n={len(ids)})")
    for i, (label, level) in enumerate(lines.items(), start=1):
        ax.axhline(level, color=f"C{i}", linestyle="-" if i == 1 else "--", linewidth=1.6,
                   label=f"{label} = {level:.4g}")
    _client_ticks(ax, ids)
    _headroom(ax, [*values, *lines.values()])
    ax.set_xlabel("client")
    ax.set_ylabel(metric)
    ax.set_title(f"{_run_title(run)}\n{metric} per client (local task)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    # below the axes: a legend inside would sit on top of some client's bar
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=len(lines) + 1)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def _client_ticks(ax: Any, ids: Sequence[int]) -> None:
    """Every client id for a few clients; for many, about a dozen integer ticks."""
    from matplotlib.ticker import MaxNLocator

    if len(ids) <= CLIENT_TICKS:
        ax.set_xticks(ids, [str(c) for c in ids], fontsize=8)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
        ax.tick_params(axis="x", labelsize=8)
    ax.set_xlim(min(ids) - 0.7, max(ids) + 0.7)


def _headroom(ax: Any, values: Sequence[float]) -> None:
    """Widen the y range so that no bar top or reference line sits on the frame."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return
    lo, hi = ax.get_ylim()
    pad = 0.06 * ((max(hi, *finite) - min(lo, *finite)) or 1.0)
    ax.set_ylim(min(lo, min(finite) - pad) if min(finite) < 0 else lo, max(hi, max(finite) + pad))


#: Forest-plot colour of each verdict.
VERDICT_COLOURS = {"a better": "C2", "b better": "C3", "no difference shown": "C7"}


def plot_forest(entries: Sequence[dict[str, Any]], field: str, metric: str, path: Path) -> bool:
    """One row per comparison: mean paired difference (positive = a better) ± its 95 % CI.

    A vertical line marks 0; a row's colour is its verdict. ``entries`` are
    :func:`~flowerbed.platform.report.compare.comparisons`' entries of one metric.
    """
    plt = _pyplot()
    if plt is None or not entries:
        return False
    fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.42 * len(entries)))
    for i, e in enumerate(reversed(entries)):
        low, high = e["mean_diff"] - e["ci_low"], e["ci_high"] - e["mean_diff"]
        ax.errorbar(e["mean_diff"], i, xerr=[[low], [high]], fmt="o", capsize=4,
                    color=VERDICT_COLOURS.get(e["verdict"], "C0"))
    ax.set_yticks(range(len(entries)))
    ax.set_yticklabels([f"{e['a']} vs {e['b']} (n={e['n']})" for e in reversed(entries)],
                       fontsize=8)
    ax.axvline(0.0, color="black", linewidth=0.8)
    way = entries[0]["direction"]
    diff = "a - b" if way == "higher" else "b - a"
    ax.set_xlabel(f"{diff} in {metric} ({way} is better; right of 0: a better)", fontsize=9)
    ax.set_title(f"paired comparisons of {field}: mean difference and 95 % CI", fontsize=10)
    handles = [plt.Line2D([], [], color=c, marker="o", linestyle="", label=v)
               for v, c in VERDICT_COLOURS.items()
               if any(e["verdict"] == v for e in entries)]
    ax.legend(handles=handles, fontsize=8, loc="best")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
