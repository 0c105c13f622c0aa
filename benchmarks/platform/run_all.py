"""Run every platform benchmark (each in its own process) and print all targets.

``python benchmarks/platform/run_all.py --quick`` is the smoke run; without ``--quick``
each benchmark runs in its full mode. Every benchmark writes
``benchmarks/results/platform/<name>[_quick].json``; this script reads them
back and prints each ratio with its target and PASS/FAIL.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _common import RESULTS_DIR, load_avg, print_table

BENCHMARKS = ("core_fixes", "message_overhead", "overhead", "scale")
#: Wall-time budget of ``--quick`` (the issue: under 10 minutes on 2 cores).
QUICK_BUDGET_S = 600.0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks in sequence; exit status 1 if any target failed or any run broke."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke versions")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    rows, broken = [], []
    begin = time.perf_counter()
    for name in args.only:
        cmd = [sys.executable, str(here / f"{name}.py"), *(["--quick"] if args.quick else [])]
        start, load = time.perf_counter(), load_avg()
        code = subprocess.call(cmd)
        took = time.perf_counter() - start
        print(f"{name}: exit {code} in {took:.0f} s (load at start {load})")
        path = RESULTS_DIR / f"{name}{'_quick' if args.quick else ''}.json"
        if code != 0 or not path.exists():
            broken.append(name)
            rows.append([name, "run failed", "-", "-", "FAIL"])
            continue
        for check in json.loads(path.read_text())["checks"]:
            op = ">=" if check["higher_is_better"] else "<="
            rows.append(
                [
                    name,
                    check["name"],
                    f"{check['value']:.3g} {check['unit']}",
                    f"{op} {check['target']:g} {check['unit']}",
                    "PASS" if check["passed"] else "FAIL",
                ]
            )
    total = time.perf_counter() - begin
    if args.quick and set(args.only) == set(BENCHMARKS):
        ok = total <= QUICK_BUDGET_S
        rows.append(
            ["run_all", "--quick wall time", f"{total:.0f} s", f"<= {QUICK_BUDGET_S:g} s",
             "PASS" if ok else "FAIL"]
        )
    print(f"total {total:.0f} s; load at end {load_avg()}")
    print_table("all targets", ["benchmark", "check", "value", "target", "result"], rows)
    return 1 if broken or any(r[-1] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
