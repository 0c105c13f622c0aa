"""Whole-process wall time of the light CLI commands: ``validate``, ``list``, ``--help``.

Building the scenario schema imports every plugin module; none of them may pull
in torch, scikit-learn, scipy or Ray at import, so these commands start fast.
Each command runs as its own ``flowerbed`` process (the console script of this
virtual environment), the three in alternation: one untimed warm-up round, then
``--runs`` timed rounds. The figure is the median per command.

Usage::

    .venv/bin/python benchmarks/platform/startup.py             # 5 timed runs per command
    .venv/bin/python benchmarks/platform/startup.py --runs 9

The target is a median under 1.5 s for ``validate`` and ``list`` (``--help`` is
reported, not checked). Exit status 1 when a target is missed or a command fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, Check, load_avg, median, print_checks, print_table, save

REPO = BENCH_DIR.parent
#: Command name -> arguments of the ``flowerbed`` console script.
COMMANDS: dict[str, list[str]] = {
    "validate": ["validate", "scenarios/quickstart.yaml"],
    "list": ["list"],
    "help": ["--help"],
}
#: Commands whose median wall time is checked against :data:`TARGET_S`.
CHECKED = ("validate", "list")
TARGET_S = 1.5


def console_script() -> Path:
    """The ``flowerbed`` entry point installed next to this interpreter."""
    return Path(sys.executable).with_name("flowerbed")


def time_command(args: list[str]) -> float:
    """Wall seconds of one ``flowerbed`` process, start to exit; raises if it fails."""
    cmd = [str(console_script()), *args]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr}")
    return wall


def measure(runs: int) -> dict[str, list[float]]:
    """One warm-up round, then ``runs`` rounds of every command in turn."""
    for args in COMMANDS.values():
        time_command(args)
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for i in range(runs):
        for name, args in COMMANDS.items():
            walls[name].append(time_command(args))
        print(f"  round {i + 1}/{runs}: "
              + ", ".join(f"{n} {w[-1]:.2f} s" for n, w in walls.items())
              + f" (load {load_avg()})", flush=True)
    return walls


def main(argv: list[str] | None = None) -> int:
    """Time the commands, print the table and the targets, write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command")
    args = parser.parse_args(argv)

    load_start = load_avg()
    print(f"{args.runs} runs per command after 1 warm-up; load average {load_start}")
    walls = measure(args.runs)
    load_end = load_avg()
    medians = {name: median(w) for name, w in walls.items()}
    rows = [[name, medians[name], min(w), max(w)] for name, w in walls.items()]
    print(f"load average {load_start} at start, {load_end} at end")
    print_table("wall s per process", ["command", "median", "min", "max"], rows)
    checks = [Check(f"flowerbed {name} wall (median)", medians[name], TARGET_S, "s")
              for name in CHECKED]
    print_checks(checks)
    payload: dict[str, Any] = {
        "runs": args.runs,
        "commands": {name: " ".join(["flowerbed", *a]) for name, a in COMMANDS.items()},
        "walls_s": {name: [round(v, 3) for v in w] for name, w in walls.items()},
        "median_s": {name: round(v, 3) for name, v in medians.items()},
        "load_start": load_start,
        "load_end": load_end,
    }
    save("startup", False, payload, checks)
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
