"""The ``--compare`` table, drawn like the report's summary (:mod:`.summary_table`)."""

from __future__ import annotations

from typing import Any

from flowerbed.platform.report.compare import COLUMNS, Comparisons
from flowerbed.platform.report.summary_table import SummaryGrid, format_number, render

#: Columns of the printed table after the labels ``a``, ``b``, ``metric``.
SHOWN = ("n", "mean diff", "95% CI", "p", "p Holm", "test", "verdict", "detectable")


def _ci(entry: dict[str, Any]) -> str:
    return f"[{format_number(entry['ci_low'])}, {format_number(entry['ci_high'])}]"


def _cells(entry: dict[str, Any]) -> list[str]:
    return [
        str(entry["n"]), format_number(entry["mean_diff"]), _ci(entry),
        format_number(entry["p_value"]), format_number(entry["p_adjusted"]), entry["test"],
        entry["verdict"], format_number(entry["detectable_diff"]),
    ]


def comparison_grid(result: Comparisons) -> SummaryGrid:
    """The comparisons as a :class:`SummaryGrid` (one row per comparison and metric)."""
    entries = result.entries
    methods = sorted({e["ci_method"] for e in entries})
    return SummaryGrid(
        title=f"paired comparisons of {result.field} (a vs b)",
        label_names=["a", "b", "metric"],
        columns=list(SHOWN),
        labels=[[str(e["a"]), str(e["b"]), e["metric"]] for e in entries],
        cells=[_cells(e) for e in entries],
        records=[{k: e[k] for k in COLUMNS} for e in entries],
        legend=[
            "mean diff: a - b where higher is better, b - a where lower is better "
            "(positive: a better); verdict: whether this row's 95% CI excludes 0",
            f"95% CI: {'; '.join(methods)}; p Holm: p adjusted over every row of the "
            "report (Holm), for reading several rows at once",
            "detectable: the smallest true difference these pairs find with 80% power "
            "(paired t, alpha 0.05)",
        ],
    )


def render_comparisons(result: Comparisons, fmt: str = "table") -> str:
    """The comparisons in ``fmt`` (``table``, ``json``, ``csv``, ``markdown``)."""
    return render(comparison_grid(result), fmt)
