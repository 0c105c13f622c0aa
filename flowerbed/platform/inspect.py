"""``flowerbed inspect``: per-client data statistics as a table and a PNG, without training."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from flowerbed.core.scenario import Scenario
from flowerbed.data.base import ClientData, DataSourceError, MissingExtraError
from flowerbed.data.federated import FederatedData, federated_data

BARS = " ▁▂▃▄▅▆▇█"
TARGET_BINS = 10
#: What a byte-level language-model client's tokens are counted in: its domain signature.
BYTE_CLASSES = ("letter", "digit", "space", "punct", "non-ascii")


def _byte_class_counts(x: np.ndarray) -> np.ndarray:
    """Target tokens (``x[:, 1:]``, byte ids) per :data:`BYTE_CLASSES`."""
    table = np.full(256, 4)
    for b in range(128):
        c = chr(b)
        table[b] = 0 if c.isalpha() else 1 if c.isdigit() else 2 if c.isspace() else 3
    return np.bincount(table[x[:, 1:].ravel()], minlength=len(BYTE_CLASSES))


def label_bins(data: FederatedData) -> tuple[list[str], Any]:
    """Bin names and a ``y -> bin`` function: classes, or target deciles for regression.

    For ``language_modeling`` the function takes ``x`` instead: byte classes of
    the target tokens for a 256-token (byte) vocabulary, else one token count.
    """
    meta = data.dataset.meta
    if meta.task == "language_modeling":
        if meta.num_classes == 256:
            return list(BYTE_CLASSES), _byte_class_counts
        return ["tokens"], lambda x: np.array([x[:, 1:].size])
    if meta.task == "classification":
        names = list(meta.class_names) or [str(c) for c in range(meta.num_classes)]
        return names, lambda y: np.bincount(y, minlength=meta.num_classes)
    edges = np.quantile(data.dataset.y_train, np.linspace(0, 1, TARGET_BINS + 1)[1:-1])
    names = [f"q{i + 1}" for i in range(TARGET_BINS)]
    return names, lambda y: np.bincount(np.searchsorted(edges, y), minlength=TARGET_BINS)


def text_stat(client: ClientData) -> str:
    """Target tokens of a language-model client, mean characters of a text client, else ``-``."""
    if client.meta.task == "language_modeling":
        return f"{client.x_train[:, 1:].size:,} tok"
    if client.text_train:
        return f"avg {sum(map(len, client.text_train)) / len(client.text_train):.0f} ch"
    return "-"


def client_stats(data: FederatedData) -> list[dict[str, Any]]:
    """One row per client: sizes, label (or target-decile) counts, domain, features, text."""
    names, count = label_bins(data)
    lm = data.dataset.meta.task == "language_modeling"
    rows = []
    for pid in range(len(data.local_train)):
        client = data.client(pid)
        counts = count(client.x_train if lm else client.y_train)
        rows.append({
            "partition_id": pid,
            "num_train": int(client.num_train),
            "num_test": len(client.y_test),
            "counts": counts,
            "bins": names,
            "domain": str(client.extra.get("domain", "-")),
            "features": int(client.x_train.shape[1]),
            "text": text_stat(client),
        })
    return rows


def spark(counts: np.ndarray) -> str:
    """Counts as a one-character-per-bin bar string, scaled to the largest bin."""
    top = counts.max()
    if top == 0:
        return " " * len(counts)
    levels = np.ceil(counts / top * (len(BARS) - 1)).astype(int)
    return "".join(BARS[level] for level in levels)


def stats_table(scenario: Scenario, rows: list[dict[str, Any]], data: FederatedData) -> Table:
    """The rich per-client table printed by ``flowerbed inspect``."""
    meta = data.dataset.meta
    kind = {"classification": "labels", "language_modeling": "token"}.get(
        meta.task, "target deciles")
    text = meta.task == "language_modeling" or data.dataset.text_train is not None
    title = (f"{scenario.name}: {meta.name} x {scenario.component('partition').name} "  # type: ignore[attr-defined]
             f"({len(rows)} clients, {len(data.dataset.y_test)} global test examples)")
    table = Table("client", "train", "test", f"{kind} histogram", "top", "domain",
                  "features", *(["text"] if text else []), title=title)
    for row in rows:
        counts = row["counts"]
        share = counts / max(1, counts.sum())
        top = np.argsort(-counts, kind="stable")[:2]
        top_text = ", ".join(f"{row['bins'][i]} {share[i]:.0%}" for i in top if counts[i])
        table.add_row(
            str(row["partition_id"]), str(row["num_train"]), str(row["num_test"]),
            spark(counts), top_text, row["domain"], f"{row['features']}/{meta.num_features}",
            *([row["text"]] if text else []),
        )
    return table


def plot_partition(rows: list[dict[str, Any]], title: str, path: Path) -> Path:
    """Heatmap of per-client label shares plus a bar chart of client sizes, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = np.stack([r["counts"] for r in rows]).astype(float)
    shares = counts / np.maximum(1, counts.sum(axis=1, keepdims=True))
    bins, n = rows[0]["bins"], len(rows)
    fig, (ax_heat, ax_size) = plt.subplots(
        1, 2, figsize=(4 + 0.45 * len(bins) + 3, 1.5 + 0.3 * n),
        gridspec_kw={"width_ratios": [max(2, len(bins)), 6]}, sharey=True,
    )
    image = ax_heat.imshow(shares, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax_heat.set_xticks(range(len(bins)), bins, rotation=60, ha="right", fontsize=8)
    ticks = [f"{r['partition_id']}" + ("" if r["domain"] == "-" else f"  {r['domain']}")
             for r in rows]
    ax_heat.set_yticks(range(n), ticks, fontsize=8)
    ax_heat.set_xlabel("label share per client")
    ax_heat.set_ylabel("client")
    fig.colorbar(image, ax=ax_heat, fraction=0.05, pad=0.02)
    train = [r["num_train"] for r in rows]
    test = [r["num_test"] for r in rows]
    ax_size.barh(range(n), train, color="tab:blue", label="train")
    ax_size.barh(range(n), test, left=train, color="tab:orange", label="local test")
    ax_size.set_xlabel("examples")
    ax_size.legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def inspect_scenario(scenario: Scenario, out_dir: str | Path) -> Path:
    """Print the per-client table of ``scenario``'s data and write its PNG; return the PNG path."""
    data = federated_data(scenario)
    rows = client_stats(data)
    table = stats_table(scenario, rows, data)
    Console().print(table)
    png = Path(out_dir) / f"{scenario.name}-clients.png"
    return plot_partition(rows, str(table.title), png)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Materialise a scenario's federated data and show per-client statistics."""
    from flowerbed.core.scenario import load_scenario
    from flowerbed.platform.results import check_output_dir

    scenario = load_scenario(args.file, args.overrides)
    root = args.output_dir or scenario.output_dir
    check_output_dir(root, create=False)  # before the data is built: bad input, exit 2
    out_dir = Path(root) / scenario.name / "inspect"
    try:
        png = inspect_scenario(scenario, out_dir)
    except (DataSourceError, MissingExtraError, ValueError) as exc:
        print(f"inspect failed: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {png}")
    return 0


def add_commands(subparsers: Any, commands: dict[str, Any]) -> None:
    """Add ``flowerbed inspect SCENARIO [--set k=v] [--output-dir D]``."""
    from flowerbed.platform.cli import add_set_option

    p = subparsers.add_parser(
        "inspect",
        help="per-client data statistics (table + PNG)",
        description="Build a scenario's federated data without training and show one row "
        "per client: train and test sizes, a histogram of its labels (target deciles for "
        "regression, token classes for language models), its most common labels, domain "
        "and feature count. A PNG of label shares and client sizes is written to "
        "<output root>/<scenario>/inspect/. Exit status: 0 done, 1 the data could not be "
        "built, 2 bad input.",
    )
    p.add_argument("file")
    add_set_option(p)
    p.add_argument("--output-dir", default=None,
                   help="root folder; the PNG goes to <root>/<scenario>/inspect/")
    commands["inspect"] = cmd_inspect
