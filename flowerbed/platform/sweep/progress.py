"""Console progress of a running sweep: one rich line per point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowerbed.core.scenario import Scenario
from flowerbed.platform.sweep.plan import SweepPoint, label

if TYPE_CHECKING:
    from rich.console import Console

    from flowerbed.platform.sweep.execute import PointResult

class SweepProgress:
    """One rich line per point (``i/N``, status, key metric), a spinner while it runs."""

    def __init__(self, total: int, console: Console | None = None) -> None:
        from rich.console import Console

        self.total = total
        self.console = console or Console(stderr=True)
        self._status: Any = None
        self._text = ""

    def start(self, point: SweepPoint) -> Callable[[dict[str, Any]], None]:
        """Show the running point; returns a recorder listener that shows its round."""
        from rich.markup import escape

        self._text = escape(f"point {point.index + 1}/{self.total} [{label(point.overrides)}]")
        self._status = self.console.status(f"{self._text} starting")
        self._status.start()
        rounds = point.scenario.rounds

        def listener(row: dict[str, Any]) -> None:
            if "round" in row and self._status is not None:
                self._status.update(f"{self._text} round {row['round']}/{rounds}")

        return listener

    def done(self, result: PointResult) -> None:
        """Print the point's final line."""
        if self._status is not None:
            self._status.stop()
            self._status = None
        from rich.markup import escape

        p = result.point
        style = {"ok": "green", "skipped": "dim", "failed": "bold red"}[result.status]
        head = f"point {p.index + 1}/{self.total} {result.folder.name} [{label(p.overrides)}] "
        text = escape(head)
        text += f"[{style}]{result.status}[/{style}]"
        if result.status == "failed":
            text += escape(f": {result.error}")
        elif result.summary:
            text += escape(f" {_headline(result.summary, p.scenario, result.folder)}")
        if result.status == "ok":
            text += f" ({result.wall_s:.1f} s)"
        self.console.print(text, highlight=False)


def _headline(summary: dict[str, Any], scenario: Scenario, folder: Path | None = None) -> str:
    """``accuracy=0.9312 loss=0.2100``: the federated metrics the scenario summarises.

    A summary name only ``metrics.jsonl`` in ``folder`` has (``train/upload_bytes``)
    is its last round there, as in ``flowerbed run``'s table.
    """
    from flowerbed.platform.report.summary_table import format_number

    federated = dict(summary.get("results", {}).get("federated", {}))
    keys = scenario.metrics.summary_keys()
    missing = [m for m in keys.values() if m not in federated]
    if missing and folder is not None:
        from flowerbed.platform.report.runs import latest_metrics, metrics_rows

        logged = latest_metrics(metrics_rows(folder))
        federated.update({m: logged[m] for m in missing if m in logged})
    return " ".join(f"{k}={format_number(federated[m])}" for k, m in keys.items() if m in federated)
