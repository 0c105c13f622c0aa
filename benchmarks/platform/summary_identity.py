"""Run the quickstart and one scenario of every method inline; compare their results.

A refactor that moves code (files, imports, module names) must not move a
number. This script runs a fixed list of small scenarios on the ``inline``
engine, each in its own ``flowerbed run`` process, and records the
``results`` and ``digest`` of every ``summary.json``. ``--record`` writes
them as the reference; the default compares a fresh run with the reference
and exits 1 on any difference (exact equality: the same code on the same
machine gives the same floats).

Usage::

    python benchmarks/platform/summary_identity.py --record   # before the change
    python benchmarks/platform/summary_identity.py            # after it: compare
    python benchmarks/platform/summary_identity.py --only fqr xtransfer
    python benchmarks/platform/summary_identity.py --set engine.clients=virtual

``--set`` adds overrides to every case: the same reference then shows that a
setting which must not move a number (virtual clients) does not.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "benchmarks" / "results" / "platform" / "summary_identity.json"

#: Metric names left out of the comparison: those that measure time, and BM3D's
#: (the third-party library gives results that differ in the 8th digit between
#: two calls on the same picture, within one run).
VOLATILE = re.compile(r"seconds|wall_time|elapsed|(^|/)time/|_s(?=$|[._@])|bm3d")
#: A case that runs longer than this is recorded as failed.
CASE_TIMEOUT_S = 600

_DIGITS = "scenarios/baselines/strategies_digits.yaml"
_PERSONAL = "scenarios/baselines/personalized_digits.yaml"
_DRIFT = ["rounds=3", "learner.name=sgd_drift"]

#: label -> (scenario, overrides). One small scenario per method, budgets cut so
#: the whole list runs in minutes on two cores.
CASES: dict[str, tuple[str, list[str]]] = {
    "quickstart": ("scenarios/quickstart.yaml", ["rounds=3"]),
    "fqr": ("scenarios/fqr/synthetic.yaml", []),
    "slot_align": ("scenarios/slot_align/synthetic.yaml", []),
    "fedspa": ("scenarios/fedspa/synthetic.yaml", ["rounds=2"]),
    "self_distill": ("scenarios/self_distill/synthetic.yaml", []),
    "frontier": ("scenarios/frontier/digits.yaml", []),
    "compute_reduction": ("scenarios/compute_reduction/fmnist_early_exit.yaml", ["rounds=1"]),
    "infoatlas": ("scenarios/infoatlas/synthetic.yaml", []),
    "hipe": ("scenarios/hipe/data_efficiency.yaml", ["rounds=2", "model.pos_emb=hipe"]),
    "reaugment": ("scenarios/reaugment/local.yaml", [
        "baselines=[]", "learner.arms=[none, jitter, vmae, reaugment]",
        "learner.train.steps=50", "learner.vmae.pretrain_steps=30", "learner.rl.iterations=10",
        "metrics.summary=[mse@none, mse@vmae, mse@reaugment]",
    ]),
    "lottery_prior": ("scenarios/lottery_prior/restore.yaml", []),
    "coreset_icl": ("scenarios/coreset_icl/antonym_synonym_local.yaml", []),
    "function_vectors": ("scenarios/function_vectors/toy_local.yaml", []),
    "dna": ("scenarios/dna/fmnist_fakes.yaml", [
        "rounds=1", "num_clients=3", "baselines=[]", "dataset.unseen=[pca]",
        "dataset.train_per_class=20", "dataset.test_per_class=40",
    ]),
    "xtransfer": ("scenarios/xtransfer/watch.yaml", [
        "baselines=[]", "strategy={name: local, fraction: 0.2}",
        "learner.sources=[fmnist_cnn, signal_cnn]", "learner.search_depth=1",
        "learner.break_depth=3", "learner.episodes=10", "learner.finetune_steps=10",
        "learner.baselines=[stats_logreg]",
        "metrics.summary=[xtransfer_macro_f1, stats_logreg_macro_f1]",
    ]),
    "imdm": ("scenarios/imdm/synthetic_local.yaml", []),
    "manipt": ("scenarios/manipt/few_shot.yaml", []),
    "hfm": ("scenarios/hfm/local.yaml", []),
    "token_intervention": ("scenarios/token_intervention/toy_local.yaml", []),
    "sparsessm": ("scenarios/sparsessm/prune.yaml", []),
    "scaffold": (_DIGITS, [*_DRIFT, "strategy={name: scaffold}", "learner.momentum=0.0"]),
    "feddyn": (_DIGITS, [*_DRIFT, "strategy={name: feddyn, alpha: 0.01}"]),
    "moon": (_DIGITS, [*_DRIFT, "strategy={name: moon, mu: 1.0}"]),
    "personalized": (_PERSONAL, ["rounds=3", "strategy={name: ditto}"]),
    "personalized_fedbn": (_PERSONAL, ["rounds=3", "strategy={name: fedbn}"]),
}


def run_case(scenario: str, overrides: list[str], out: Path) -> dict[str, Any]:
    """``flowerbed run`` one scenario inline into ``out``; its summary's results."""
    sets = [arg for o in ["engine=inline", f"output_dir={out}", *overrides] for arg in ("--set", o)]
    cmd = [sys.executable, "-m", "flowerbed.platform.cli", "run", scenario, *sets]
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, check=False, timeout=CASE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return {"error": f"over {CASE_TIMEOUT_S} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)}
    (summary,) = out.rglob("summary.json")
    data = json.loads(summary.read_text(encoding="utf-8"))
    return {"digest": data["digest"], "results": _without_volatile(data["results"])}


def _without_volatile(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` less the metrics in :data:`VOLATILE`."""
    return {
        source: {k: v for k, v in metrics.items() if not VOLATILE.search(k)}
        if isinstance(metrics, dict) else metrics
        for source, metrics in results.items()
    }


def run_all(labels: list[str], extra: list[str] | None = None) -> dict[str, Any]:
    """Every case in ``labels``, in order, each in a fresh output folder (``extra`` overrides)."""
    found: dict[str, Any] = {}
    for label in labels:
        scenario, overrides = CASES[label]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            found[label] = run_case(scenario, [*overrides, *(extra or [])], Path(tmp))
        status = "error" if "error" in found[label] else "ok"
        print(f"{label:20s} {status:5s} {time.perf_counter() - start:6.1f} s", flush=True)
    return found


def differences(reference: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """One line per case whose fresh results differ from the reference (or failed)."""
    lines = []
    for label, got in fresh.items():
        want = reference.get(label)
        if want is not None and "results" in want:
            want = {**want, "results": _without_volatile(want["results"])}
        if want is None:
            lines.append(f"{label}: not in the reference")
        elif "error" in got:
            lines.append(f"{label}: failed: {got['error']}")
        elif got != want:
            lines.append(f"{label}: results differ:\n  reference {want}\n  now       {got}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the reference")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="run only these cases")
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="an override added to every case (repeatable)")
    args = parser.parse_args(argv)
    labels = args.only or list(CASES)
    if args.record and args.sets:
        parser.error("--record writes the reference: run it without --set")
    fresh = run_all(labels, args.sets)
    if args.record:
        old = json.loads(args.reference.read_text()) if args.reference.exists() else {}
        args.reference.parent.mkdir(parents=True, exist_ok=True)
        args.reference.write_text(json.dumps({**old, **fresh}, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(fresh)} cases in {args.reference}")
        return 1 if any("error" in v for v in fresh.values()) else 0
    diff = differences(json.loads(args.reference.read_text(encoding="utf-8")), fresh)
    print("\n".join(diff) if diff else f"all {len(fresh)} cases identical to the reference")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
