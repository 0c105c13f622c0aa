"""The live display keeps the metrics the scenario's summary names."""

from __future__ import annotations

import io

from rich.console import Console

from flowerbed.platform.progress import LiveProgress


def test_live_display_keeps_bare_and_split_qualified_summary_names():
    console = Console(file=io.StringIO(), force_terminal=False)
    shown = ("accuracy", "screen/mae_vs_true")
    with LiveProgress("demo", 2, shown, console=console) as display:
        display({
            "round": 1,
            "phase": "fedavg",
            "fedavg/test/accuracy": 0.5,
            "fedavg/test/loss": 1.0,
            "infoatlas_screening/screen/mae_vs_true": 0.03,
            "infoatlas_screening/screen/informative_recall": 0.6,
        })
    assert display.latest == {
        "fedavg/test/accuracy": 0.5,
        "infoatlas_screening/screen/mae_vs_true": 0.03,
    }
    assert display.round == 1
