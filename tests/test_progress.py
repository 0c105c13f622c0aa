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


def test_a_console_that_is_no_terminal_gets_plain_lines_while_the_run_goes_on(monkeypatch):
    """Sent to a log file, the progress shows before the run ends, one line per change."""
    from flowerbed.platform import progress

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False)
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    with LiveProgress("demo", 2, ("accuracy",), console=console) as display:
        for at, text in [
            (1.0, "starting Ray"),
            (2.0, "waiting for 3 replies (train, round 1): 1 in"),
            (3.0, "waiting for 3 replies (train, round 1): 2 in"),  # same stem, 1 s later
            (40.0, "waiting for 3 replies (train, round 1): 3 in"),  # 38 s later
        ]:
            now[0] = at
            progress.activity(text)
        now[0] = 41.0
        display({"round": 1, "phase": "train", "event": "replies", "ok": 2, "failed": 1,
                 "missing": 0})
        now[0] = 42.0
        display({"round": 1, "phase": "fedavg", "fedavg/test/accuracy": 0.5})
        during = buffer.getvalue().splitlines()
    assert during == [
        "[1 s] starting Ray",
        "[2 s] waiting for 3 replies (train, round 1): 1 in",
        "[40 s] waiting for 3 replies (train, round 1): 3 in",
        "[41 s] round 1/2 train: replies 2 ok, 1 failed, 0 missing",
        "[42 s] round 1/2: fedavg/test/accuracy 0.5000",
    ]
    assert "flowerbed · demo" in buffer.getvalue()  # the table once, at the end
    assert len(buffer.getvalue().splitlines()) > len(during)
