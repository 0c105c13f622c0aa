"""Live progress of a run: rounds, replies received/failed, latest metrics."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


class LiveProgress:
    """A rich table refreshed from the recorder's rows (``Recorder.listeners``)."""

    def __init__(
        self,
        scenario_name: str,
        rounds: int,
        shown: tuple[str, ...] = ("accuracy", "loss"),
        console: Console | None = None,
    ) -> None:
        self.scenario_name = scenario_name
        self.shown = shown
        self.rounds = rounds
        self.console = console or Console(stderr=True)
        self.round = 0
        self.phase = "starting"
        self.replies: dict[str, Any] = {}
        self.latest: dict[str, float] = {}
        self.failures = 0
        self.live = Live(
            self._render(), console=self.console, refresh_per_second=4, transient=False
        )

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._render())
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, row: dict[str, Any]) -> None:
        """Take one recorder row and refresh the display."""
        if "round" in row:
            self.round = max(self.round, int(row["round"]))
        if row.get("event") == "replies":
            self.phase = str(row["phase"])
            self.replies = {k: row[k] for k in ("ok", "failed", "missing")}
            self.failures += int(row["failed"]) + int(row["missing"])
        elif "event" in row:
            self.phase = str(row["event"])
        else:
            self.phase = str(row.get("phase", self.phase))
            self.latest.update(
                {
                    k: v
                    for k, v in row.items()
                    # a summary name is a bare metric or "split/metric"
                    if k.count("/") == 2
                    and (k.rsplit("/", 1)[1] in self.shown or k.split("/", 1)[1] in self.shown)
                }
            )
        self.live.update(self._render())

    def _render(self) -> Table:
        table = Table(title=f"flowerbed · {self.scenario_name}", show_header=False, expand=False)
        table.add_column(style="bold cyan")
        table.add_column()
        table.add_row("round", f"{self.round}/{self.rounds}")
        table.add_row("phase", self.phase)
        if self.replies:
            r = self.replies
            table.add_row(
                "replies", f"{r['ok']} ok · {r['failed']} failed · {r['missing']} missing"
            )
        table.add_row("failed/missing so far", str(self.failures))
        for key, value in sorted(self.latest.items())[:12]:
            table.add_row(key, f"{value:.4f}")
        return table
